"""Pascanu, Mikolov & Bengio (2013): the temporal order problem, MSGD, MSGD-C and MSGD-CR.

The task as the reference code draws it (``synthetic.temporal_order_pascanu``:
six one-hot symbols, A or B at a step in [T/10, 2T/10) and another in
[5T/10, 6T/10), distractors elsewhere; four classes read from the last
state) and the network of the paper (``models.init_pascanu``): an Elman
layer of 50 tanh units, a softmax readout of the last state, trained by SGD
without momentum (lr 0.01, batch 20) with one of the methods of
``experiments.pascanu`` (MSGD, MSGD-C, MSGD-CR), and the 'basic_tanh' or
'smart_tanh' initialization of RNN.py lines 115-140.

Mode 'fixed' trains every batch at T = ``length`` (Figure 7: success rate
against T); mode 'range' draws one length per batch in [min_length,
max_length) as RNN.py line 321 (the generalization experiment). Each step
draws a fresh batch from the run's key (runs of one seed see the same data).
The training loss logged is the cross-entropy alone (nats): the Omega term
enters the loss as alpha (Omega - stop_gradient(Omega)), which adds its
gradient and not its value (``models.pascanu_loss``).

The report: the error rate on ``test_size`` fresh sequences (key
fold_in(seed, 3); mode range: in chunks of ``test_chunk`` sequences, each
chunk at a length drawn as in training, as RNN.py lines 351-356), success
(error < ``success_threshold``, 1% in the paper), and the error at each of
``test_lengths`` (the generalization test). The gradient-norm profile
(``diagnostics.Probe``) is measured on 100 fixed sequences (key 0) at the
training length (range: at max_length - 1), the loss of the last state.

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks", section 5.1 and Figure 7; github.com/pascanur/trainingRNNs
  (RNN.py, tempOrder.py).
"""

import math

import jax
import jax.numpy as jnp

from experiments import pascanu
from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import models
from rnnjax.data import synthetic
from rnnjax.train import experiment
from rnnjax.train import trainer

MODES = ('fixed', 'range')
PROBE_SEQUENCES = 100
PROBE_KEY = 0
TEST_KEY_FOLD = 3


def steps_of(config) -> int:
  """The padded number of steps T of a training batch (``temporal_order_pascanu_range``)."""
  if config.mode == 'fixed':
    return config.length
  return max(config.min_length, config.max_length - 1)


def work(config) -> float:
  """A step's cost, relative (for a sweep's progress): B T H (H + 6) multiply-adds, times 3
  with Omega (the state gradients' forward and backward pass)."""
  return (config.batch_size * steps_of(config) * config.hidden_size *
          (config.hidden_size + synthetic.TEMPORAL_ORDER_SYMBOLS) *
          (3 if config.omega_weight > 0 else 1))


def draw(config, key, batch_size: int):
  """A training batch: ``(inputs <float32>[B, T, 6], targets <int32>[B], lengths)``;
  mode fixed: every sequence at T = length and lengths None, mode range: lengths
  ``<int32>[B]`` (all equal, one drawn per batch) and T = max_length - 1."""
  if config.mode == 'fixed':
    return (*synthetic.temporal_order_pascanu(key, batch_size, config.length), None)
  return synthetic.temporal_order_pascanu_range(key, batch_size, config.min_length,
                                                config.max_length)


def _test_errors(params, key, chunk: int, min_length: int, max_length: int):
  """Errors (a count, float32) on ``chunk`` fresh sequences drawn as
  ``temporal_order_pascanu_range(key, chunk, min_length, max_length)``."""
  return models.pascanu_errors(params, *synthetic.temporal_order_pascanu_range(
      key, chunk, min_length, max_length))


def task(config) -> trainer.Task:
  """The task's generator, the network and its loss, probe and report."""
  omega_weight = float(config.omega_weight)
  probe_inputs, probe_targets = jax.jit(synthetic.temporal_order_pascanu, static_argnums=(1, 2))(
      jax.random.key(PROBE_KEY), PROBE_SEQUENCES, steps_of(config))
  init_params = jax.jit(models.init_pascanu, static_argnums=(1, 2, 3, 4))
  test_errors = jax.jit(_test_errors, static_argnums=(2, 3, 4))

  def init(run_config, key):
    return init_params(key, run_config.init, synthetic.TEMPORAL_ORDER_SYMBOLS,
                       run_config.hidden_size, synthetic.TEMPORAL_ORDER_CLASSES)

  def loss(params, carry, batch, key):
    del batch
    return models.pascanu_loss(params, *draw(config, key, config.batch_size),
                               omega_weight), carry

  def probe(params, carry, batch):
    """The loss of the last state's prediction, as a function of the states."""
    del carry, batch
    return diagnostics.Probe(
        cells.elman('tanh'), params['cell'], probe_inputs,
        jnp.zeros((PROBE_SEQUENCES, params['cell']['W_hh'].shape[0])),
        lambda states: models.pascanu_readout_loss(params, states[:, -1], probe_targets))

  def test_error(params, key, size: int, chunk: int, min_length: int, max_length: int) -> float:
    """The error rate on ``size`` fresh sequences, ``chunk`` at a time, chunk i from
    fold_in(key, i), each chunk at one length in [min_length, max_length) (min_length
    = max_length: that length)."""
    errors = [test_errors(params, jax.random.fold_in(key, i), chunk, min_length, max_length)
              for i in range(size // chunk)]
    return float(sum(float(e) for e in jax.device_get(errors))) / size

  def trained_lengths(run_config) -> tuple[int, int]:
    if run_config.mode == 'fixed':
      return run_config.length, run_config.length
    return run_config.min_length, run_config.max_length

  def solved(run_config, params) -> bool:
    """Whether the run succeeded: its error on the test sequences (the report's) is
    below success_threshold; a screen of their first chunk comes first, and the whole
    test only where the screen's error is below twice the threshold."""
    key = jax.random.fold_in(jax.random.key(run_config.seed), TEST_KEY_FOLD)
    chunk, lengths = run_config.test_chunk, trained_lengths(run_config)
    if test_error(params, key, chunk, chunk, *lengths) >= 2 * run_config.success_threshold:
      return False
    return test_error(params, key, run_config.test_size, chunk, *lengths) < (
        run_config.success_threshold)

  def report(run_config, params) -> dict:
    key = jax.random.fold_in(jax.random.key(run_config.seed), TEST_KEY_FOLD)
    size, chunk = run_config.test_size, run_config.test_chunk
    error = test_error(params, key, size, chunk, *trained_lengths(run_config))
    summary = {'test_error': error,
               'success': bool(math.isfinite(error) and error < run_config.success_threshold)}
    if run_config.test_lengths:
      summary['test_error_by_length'] = {
          str(n): test_error(params, jax.random.fold_in(key, n), size, chunk, n, n)
          for n in run_config.test_lengths}
    return summary

  return trainer.Task(init=init, loss=loss, batch=lambda step: {}, probe=probe,
                      recurrent_weight=lambda params: params['cell']['W_hh'], report=report,
                      solved=solved, solved_every=config.solved_every)


def check(config) -> None:
  """The rules between fields: max_length >= min_length, test_size a multiple of
  test_chunk, the method's clipping and omega_weight (``pascanu.check_method``).

  Raises:
    ValueError: naming ``config.<field>``.
  """
  value = config.max_length
  if isinstance(value, bool) or not isinstance(value, int) or value < config.min_length:
    raise ValueError(f'config.max_length: expected an int >= {config.min_length}, got {value!r}')
  if config.test_size % config.test_chunk:
    raise ValueError(f'config.test_size: expected a multiple of config.test_chunk = '
                     f'{config.test_chunk}, got {config.test_size!r}')
  pascanu.check_method(config)


def _lengths(value) -> bool:
  return isinstance(value, tuple) and all(
      isinstance(n, int) and not isinstance(n, bool) and n >= 10 for n in value)


def _error_rate(value) -> bool:
  return isinstance(value, (int, float)) and 0 < value <= 1


Field, Check = experiment.Field, experiment.Check
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, work=work, check=check,
    fields={
        'seed': experiment.TRAINER_FIELDS['seed']._replace(
            help='init, every training batch and the test sequences'),
        **pascanu.FIELDS,
        'mode': Field('fixed', experiment.one_of(MODES),
                      'fixed: every batch at T = length (Figure 7) | range: as RNN.py'),
        'length': Field(50, experiment.integer(10), 'T (mode fixed)'),
        'min_length': Field(50, experiment.integer(10),
                            'mode range: each batch at a length in [min_length, max_length)'),
        'max_length': Field(200, None, 'mode range: an int >= min_length'),
        'hidden_size': Field(50, experiment.integer(1)),
        'init': Field('smart_tanh', experiment.one_of(models.PASCANU_INITS),
                      'smart_tanh (sparse W_hh, rho 0.95) | basic_tanh (N(0, 0.1^2))'),
        'batch_size': Field(20, experiment.integer(1)),
        'test_size': Field(10000, experiment.integer(1),
                           "fresh test sequences (RNN.py state['ebs'])"),
        'test_chunk': Field(1000, experiment.integer(1),
                            "of them at a time (RNN.py state['cbs'])"),
        'test_lengths': Field((), Check('a tuple of ints >= 10', _lengths),
                              'also test at these lengths (the generalization test)'),
        'success_threshold': Field(0.01, Check('an error rate in (0, 1]', _error_rate),
                                   'test error rate below which a run succeeded'),
        'solved_every': Field(0, experiment.integer(0),
                              'steps between success checks; a run that succeeded stops, '
                              'as the reference code (0: never checked)'),
    },
    report=('test_error', 'success', 'solved_step', 'steps_done', 'train_loss_nats',
            'clipped_fraction', 'max_grad_norm', 'final_measured_spectral_radius',
            'first_largest_lyapunov_exponent', 'final_largest_lyapunov_exponent'),
    vmappable=('seed', 'init'),  # both inits are tanh networks of the same shapes
    plots=(('heatmap', 'success', 'length', ('init',)), ('profile', 'method'),
           ('rate', 'solved_step', (10_000, 25_000, 50_000, 100_000, 200_000), 'length')))
