"""How gradient norms vanish or explode with distance, for W_hh at spectral radius rho.

A measurement (no training: ``steps`` 0): each run is one spectral radius, one
protocol, one size, one input scale and one seed of ``rnnjax.gradient_norm_table``,
and reports the ratio ||dL/dh_{T-k}|| / ||dL/dh_T|| at k = 1, 2, 5, 10, 20, 40, 60
(every k from 1 to 60 in its summary), the per-step rate fitted to it, the mean-field
rate (``gradient_tables.mean_field_rate``), W_hh's measured spectral radius and largest
singular value sigma_max. 'linearised' is the backward pass alone in the mild-activation
regime (tanh' near 1); 'network' a real Elman network driven at ``input_scale``, whose
saturating states make the gradient vanish faster. With ``trained_run`` (the folder of an
ended char_lm run) the 'network' protocol measures that run's trained cell instead of a
fresh one. The fitted rate is exp of the least-squares slope of log ratio against k over
k = ``FIT_FROM`` ... 60 (the first steps align dL/dh with W_hh's leading directions).

The sweep's ``gradient_theory.md`` / ``.csv`` (``theory``) set the measured rates over
the seeds (median and interquartile range) beside mean field's, with the radius where
each crosses 1, and ``gradient_theory.png`` draws them.

The table of ``docs/reference_numbers.md`` (rho 0.7: 8.05e-05, 1.40e-08,
2.28e-12 ...) draws the three radii from one random stream:
``rnnjax.gradient_norm_table(protocol='linearised')``; here each run draws its
own, from its seed.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import gradient_tables
from rnnjax import initializers
from rnnjax.train import checkpoints
from rnnjax.train import experiment
from rnnjax.train import trainer

DISTANCES = (1, 2, 5, 10, 20, 40, 60)
FIT_FROM = 10  # the first k of the fitted rate


def fitted_rate(profile: dict) -> float:
  """exp of the least-squares slope of log ratio against k over k >= ``FIT_FROM`` (profile:
  ``{k: ratio}``; ratios that are 0, not finite or not numbers are left out; NaN with fewer
  than 2 points)."""
  points = [(k, math.log(r)) for k, r in profile.items()
            if k >= FIT_FROM and isinstance(r, float) and math.isfinite(r) and r > 0]
  if len(points) < 2:
    return math.nan
  return float(math.exp(np.polyfit(*zip(*points), 1)[0]))


def cell_of(config):
  """The Elman cell a run measures, float64 host copies: the trained run's, or a fresh
  Gaussian W_hh at the run's radius with W_xh ~ N(0, input_scale^2 / H) (inputs of H
  features), drawn from ``jax.random.key(seed)``."""
  if config.trained_run:
    _, params = checkpoints.final_params(config.trained_run)
    return params['recurrence']['cell']
  key = jax.random.fold_in(jax.random.key(config.seed), config.hidden_size)
  return cells.init_elman(key, config.hidden_size, config.hidden_size, 'gaussian',
                          config.spectral_radius,
                          input_scale=config.input_scale / config.hidden_size ** 0.5)


def measure(config) -> dict:
  """One run's report (the module docstring)."""
  distances = tuple(range(1, max(DISTANCES) + 1))
  if config.protocol == 'linearised':
    (row,) = gradient_tables.gradient_norm_table(
        (config.spectral_radius,), distances, 'linearised', config.hidden_size,
        config.seed).values()
    variance = gradient_tables.LINEARISED_VARIANCE
    w_hh = np.random.default_rng(config.seed).normal(0, 1, (config.hidden_size,) * 2)
    w_hh *= config.spectral_radius / initializers.host_spectral_radius(w_hh)  # the protocol's
  else:
    host = {k: np.asarray(v, np.float64) for k, v in cell_of(config).items()}
    w_hh = host['W_hh']
    with jax.enable_x64(config.dtype == 'float64'):
      dtype = jnp.dtype(config.dtype)
      (row,) = gradient_tables.gradient_norm_table(
          (config.spectral_radius,), distances, 'network', config.hidden_size, config.seed,
          config.sequences,
          {k: jnp.asarray(v, dtype) for k, v in host.items()}, transient=config.transient,
          dtype=dtype).values()
    variance = gradient_tables.mean_field_variance(config.spectral_radius, config.input_scale)
  row = {k: float(v) for k, v in row.items()}
  return {'measured_spectral_radius': float(initializers.host_spectral_radius(w_hh)),
          'sigma_max': float(np.linalg.norm(w_hh, 2)),
          **{f'ratio_k{k}': row[k] for k in DISTANCES},
          'rate': fitted_rate(row),
          'mean_field_rate': (gradient_tables.mean_field_rate(config.spectral_radius, variance)
                              if not config.trained_run else math.nan),
          'profile': {str(k): v for k, v in row.items()}}


def task(config) -> trainer.Task:
  """The measurement as a task that trains nothing: its report is the table's row."""
  return trainer.Task(init=lambda config, key: {}, loss=None, batch=lambda step: {},
                      report=lambda run_config, params: measure(run_config))


def check(config) -> None:
  """Raises ValueError naming ``config.trained_run`` for a run with the 'linearised' protocol
  or a folder that holds no ended run (each run's own check: a sweep measures the others)."""
  if config.trained_run and config.protocol != 'network':
    raise ValueError(f"config.trained_run: expected '' for protocol {config.protocol!r} (a "
                     f"trained cell is measured with protocol 'network'), got "
                     f'{config.trained_run!r}')
  if config.trained_run:
    try:
      checkpoints.final_params(config.trained_run)
    except (OSError, checkpoints.CheckpointError) as error:
      raise ValueError(f'config.trained_run: {error}') from None


Field = experiment.Field
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, check=check,
    fields={
        'steps': Field(0, experiment.integer(0), 'a measurement: nothing is trained'),
        'protocol': Field('linearised', experiment.one_of(gradient_tables.PROTOCOLS),
                          'linearised (mild pre-activations) | network (a real Elman network)'),
        'spectral_radius': Field(1.0, experiment.number(0.0), 'of W_hh'),
        'hidden_size': Field(64, experiment.integer(1)),
        'input_scale': Field(1.0, experiment.number(0.0),
                             "network: sigma_in, the std of each unit's drive x_t W_xh"),
        'transient': Field(0, experiment.integer(0),
                           'network: steps run from the zero state before the measured ones'),
        'dtype': Field('float32', experiment.one_of(('float32', 'float64')),
                       "network: the cell's and the state gradients' (float64: with jax's "
                       'x64 on for the run)'),
        'sequences': Field(64, experiment.integer(1), 'network: the median is over these'),
        'trained_run': Field('', None, "network: an ended char_lm run's folder ('': a fresh "
                             'network)'),
    },
    report=('measured_spectral_radius', 'sigma_max', *(f'ratio_k{k}' for k in DISTANCES),
            'rate', 'mean_field_rate'),
    vmappable=('seed', 'spectral_radius', 'protocol', 'hidden_size', 'sequences',
               'input_scale', 'transient', 'dtype', 'trained_run'))
