"""How gradient norms vanish or explode with distance, for W_hh at spectral radius rho.

A measurement (no training: ``steps`` 0): each run is one spectral radius, one
protocol and one seed of ``rnnjax.gradient_norm_table``, and reports the ratio
||dL/dh_{T-k}|| / ||dL/dh_T|| at k = 1, 2, 5, 10, 20, 40, 60. 'linearised'
is the backward pass alone in the mild-activation regime (tanh' near 1);
'network' a real Elman network, whose saturating states make the gradient
vanish faster. With ``trained_run`` (the folder of an ended char_lm run) the
'network' protocol measures that run's trained cell instead of a fresh one.
The sweep's ``results_over_seeds.md`` gives the median over seeds.

The table of ``docs/reference_numbers.md`` (rho 0.7: 8.05e-05, 1.40e-08,
2.28e-12 ...) draws the three radii from one random stream:
``rnnjax.gradient_norm_table(protocol='linearised')``; here each run draws its
own, from its seed.
"""

import jax
import jax.numpy as jnp

from rnnjax import gradient_tables
from rnnjax.train import checkpoints
from rnnjax.train import experiment
from rnnjax.train import trainer

DISTANCES = (1, 2, 5, 10, 20, 40, 60)


def task(config) -> trainer.Task:
  """The measurement as a task that trains nothing: its report is the table's row."""
  trained = None
  if config.trained_run:
    _, params = checkpoints.final_params(config.trained_run)
    trained = jax.tree_util.tree_map(jnp.asarray, params['recurrence']['cell'])

  def report(run_config, params) -> dict:
    del params
    rows = gradient_tables.gradient_norm_table(
        (run_config.spectral_radius,), DISTANCES, run_config.protocol, run_config.hidden_size,
        run_config.seed, run_config.sequences, trained)
    (measured_radius, row), = rows.items()
    return {'measured_spectral_radius': measured_radius,
            **{f'ratio_k{k}': ratio for k, ratio in row.items()}}

  return trainer.Task(init=lambda config, key: {}, loss=None, batch=lambda step: {},
                      report=report)


def check(config) -> None:
  """Raises ValueError naming ``config.trained_run`` for a run with the 'linearised' protocol."""
  if config.trained_run and config.protocol != 'network':
    raise ValueError(f"config.trained_run: expected '' for protocol {config.protocol!r} (a "
                     f"trained cell is measured with protocol 'network'), got "
                     f'{config.trained_run!r}')


Field = experiment.Field
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, check=check,
    fields={
        'steps': Field(0, experiment.integer(0), 'a measurement: nothing is trained'),
        'protocol': Field('linearised', experiment.one_of(gradient_tables.PROTOCOLS),
                          'linearised (mild pre-activations) | network (a real Elman network)'),
        'spectral_radius': Field(1.0, experiment.number(0.0), 'of W_hh'),
        'hidden_size': Field(64, experiment.integer(1)),
        'sequences': Field(64, experiment.integer(1), 'network: the median is over these'),
        'trained_run': Field('', None, "network: an ended char_lm run's folder ('': a fresh "
                             'network)'),
    },
    report=('measured_spectral_radius',) + tuple(f'ratio_k{k}' for k in DISTANCES),
    vmappable=('seed', 'spectral_radius', 'protocol', 'hidden_size', 'sequences'))
