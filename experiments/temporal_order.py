"""Pascanu, Mikolov & Bengio (2013): the temporal order problem, MSGD, MSGD-C and MSGD-CR.

  python -m launch.sweep --config=experiments/configs/temporal_order.py \
      --workdir=results/temporal_order

The task as the reference code draws it (``synthetic.temporal_order_pascanu``:
six one-hot symbols, A or B at a step in [T/10, 2T/10) and another in
[5T/10, 6T/10), distractors elsewhere; four classes read from the last
state) and the network of the paper: an Elman layer of 50 tanh units, a
softmax readout of the last state, trained by SGD without momentum (lr
0.01, batch 20) as

  MSGD      clipping 'none', omega_weight 0
  MSGD-C    clipping 'pascanu' (global norm at 1, the reference fallback for a
            non-finite or > 1e10 norm: update 0.02 W_hh, 0 elsewhere)
  MSGD-CR   as MSGD-C, plus omega_weight (alpha) times the gradient of Omega
            (``regularizers.omega_penalty``: eq. 10, dE/dh_t and the states
            held constant, W_hh only), added before clipping (RNN.py 217)

with the 'basic_tanh' (W_xh, W_hh, W_out ~ N(0, 0.1^2)) or 'smart_tanh'
(W_xh, W_out ~ N(0, 0.01^2), W_hh ``initializers.sparse_at_radius``: 15
non-zeros per row, spectral radius 0.95) initialization of RNN.py lines
115-140; biases 0.

Mode 'fixed' trains every batch at T = ``length`` (Figure 7: success rate
against T); mode 'range' draws one length per batch in [min_length,
max_length) as RNN.py line 321 (the generalization experiment). Each step
draws a fresh batch from the run's key (runs of one seed see the same data).
The training loss logged is the cross-entropy alone (nats): the Omega term
enters the loss as alpha (Omega - stop_gradient(Omega)), which adds its
gradient and not its value.

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

import functools
import math

import jax
import jax.numpy as jnp
import optax

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import fused
from rnnjax import initializers
from rnnjax import regularizers
from rnnjax.data import synthetic
from rnnjax.train import trainer

VMAPPABLE = ('seed', 'init')  # both inits are tanh networks of the same shapes
REPORT = ('test_error', 'success', 'final_train_loss', 'clipped_fraction', 'max_grad_norm',
          'final_spectral_radius')
PLOTS = (('heatmap', 'success', 'length', ('init',)), ('profile', 'method'))
MODES = ('fixed', 'range')
INITS = ('basic_tanh', 'smart_tanh')
# method -> (clipping, whether omega_weight > 0)
METHODS = {'MSGD': ('none', False), 'MSGD-C': ('pascanu', False), 'MSGD-CR': ('pascanu', True)}
BASIC_SCALE = 0.1  # RNN.py lines 116-121: W_uh, W_hh, W_hy ~ N(0, 0.1^2)
SMART_SCALE = 0.01  # RNN.py lines 126-137: W_uh, W_hy ~ N(0, 0.01^2)
SMART_NONZEROS = 15  # RNN.py line 132: non-zeros per row of W_hh (at most H)
SMART_RADIUS = 0.95  # RNN.py line 134
PROBE_SEQUENCES = 100
PROBE_KEY = 0
TEST_KEY_FOLD = 3


def _int_at_least(config, name: str, low: int) -> None:
  value = config[name]
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    raise ValueError(f'config.{name}: expected an int >= {low}, got {value!r}')


def check_config(config) -> None:
  """Raises ValueError naming ``config.<field>``, with the expected and the given value."""
  if config.mode not in MODES:
    raise ValueError(f'config.mode: expected one of {MODES}, got {config.mode!r}')
  for name in ('length', 'min_length'):
    _int_at_least(config, name, 10)
  _int_at_least(config, 'max_length', config.min_length)
  for name in ('hidden_size', 'batch_size', 'test_size', 'test_chunk'):
    _int_at_least(config, name, 1)
  if config.init not in INITS:
    raise ValueError(f'config.init: expected one of {INITS}, got {config.init!r}')
  if config.optimizer != 'sgd':
    raise ValueError(f"config.optimizer: expected 'sgd' (MSGD without momentum, as the "
                     f"paper), got {config.optimizer!r}")
  check_method(config)
  if config.test_size % config.test_chunk:
    raise ValueError(f'config.test_size: expected a multiple of config.test_chunk = '
                     f'{config.test_chunk}, got {config.test_size!r}')
  lengths = config.test_lengths
  if not isinstance(lengths, tuple) or not all(
      isinstance(n, int) and not isinstance(n, bool) and n >= 10 for n in lengths):
    raise ValueError(f'config.test_lengths: expected a tuple of ints >= 10, got {lengths!r}')
  if not 0 < config.success_threshold <= 1:
    raise ValueError(f'config.success_threshold: expected an error rate in (0, 1], got '
                     f'{config.success_threshold!r}')


def check_method(config) -> None:
  """Checks ``config.method`` against ``config.clipping`` and ``config.omega_weight``
  (``METHODS``). Raises ValueError naming ``config.<field>``."""
  if config.clipping not in ('none', 'pascanu'):
    raise ValueError(f"config.clipping: expected 'none' or 'pascanu', got {config.clipping!r}")
  weight = config.omega_weight
  if isinstance(weight, bool) or not (isinstance(weight, (int, float)) and
                                      0 <= weight < math.inf):
    raise ValueError(f'config.omega_weight: expected a finite value >= 0, got {weight!r}')
  if config.method not in METHODS:
    raise ValueError(f'config.method: expected one of {sorted(METHODS)}, got {config.method!r}')
  clipping, regularized = METHODS[config.method]
  if config.clipping != clipping or (weight > 0) != regularized:
    raise ValueError(f'config.method: {config.method!r} expects clipping {clipping!r} and '
                     f'omega_weight {"> 0" if regularized else "0"}, got clipping '
                     f'{config.clipping!r} and omega_weight {weight!r}')


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


def init_params(config, key) -> dict:
  """The params of one run: ``{'cell': {'W_xh': [6, H], 'W_hh': [H, H], 'b': [H]},
  'W_out': [H, 4], 'b_out': [4]}`` of ``config.init`` (the module docstring)."""
  return _init_params(key, config.init, config.hidden_size)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _init_params(key, init: str, hidden: int) -> dict:
  """``init_params``, one compiled program per (init, H) (eager ops compile one by one)."""
  symbols, classes = synthetic.TEMPORAL_ORDER_SYMBOLS, synthetic.TEMPORAL_ORDER_CLASSES
  key_x, key_h, key_out = jax.random.split(key, 3)
  scale = BASIC_SCALE if init == 'basic_tanh' else SMART_SCALE
  if init == 'basic_tanh':
    w_hh = BASIC_SCALE * jax.random.normal(key_h, (hidden, hidden), jnp.float32)
  else:
    w_hh = initializers.sparse_at_radius(key_h, hidden, min(SMART_NONZEROS, hidden),
                                         SMART_RADIUS)
  return {'cell': {'W_xh': scale * jax.random.normal(key_x, (symbols, hidden), jnp.float32),
                   'W_hh': w_hh, 'b': jnp.zeros((hidden,), jnp.float32)},
          'W_out': scale * jax.random.normal(key_out, (hidden, classes), jnp.float32),
          'b_out': jnp.zeros((classes,), jnp.float32)}


def draw(config, key, batch_size: int):
  """A training batch: ``(inputs <float32>[B, T, 6], targets <int32>[B], lengths)``;
  mode fixed: every sequence at T = length and lengths None, mode range: lengths
  ``<int32>[B]`` (all equal, one drawn per batch) and T = max_length - 1."""
  if config.mode == 'fixed':
    return (*synthetic.temporal_order_pascanu(key, batch_size, config.length), None)
  return synthetic.temporal_order_pascanu_range(key, batch_size, config.min_length,
                                                config.max_length)


def last_states(states, lengths):
  """The state at each sequence's last step: ``[B, T, H], <int32>[B] or None -> [B, H]``."""
  if lengths is None:
    return states[:, -1]
  return jnp.take_along_axis(states, (lengths - 1)[:, None, None], axis=1)[:, 0]


def readout_loss(params, last, targets):
  """Mean cross-entropy in nats of the softmax readout of the last states."""
  logits = last @ params['W_out'] + params['b_out']
  return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def loss_fn(params, inputs, targets, lengths, omega_weight: float):
  """The training loss of a batch: ``(value, gradient source)`` in one scalar.

  The value is the cross-entropy (nats); with omega_weight > 0 the gradient
  adds omega_weight times Omega's (``regularizers.omega_penalty`` with dE/dh_t
  of this cross-entropy), the value does not (alpha (Omega -
  stop_gradient(Omega))).
  """
  hidden = params['cell']['W_hh'].shape[0]
  initial = jnp.zeros((inputs.shape[0], hidden), jnp.float32)
  states, last = fused.elman_layer(params['cell'], inputs, initial, lengths)
  loss = readout_loss(params, last, targets)
  if omega_weight:
    omega = regularizers.omega_penalty(
        params['cell'], inputs, initial,
        lambda s: readout_loss(params, last_states(s, lengths), targets), 'tanh', lengths,
        states)
    loss = loss + omega_weight * (omega - jax.lax.stop_gradient(omega))
  return loss


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _test_errors(params, key, chunk: int, min_length: int, max_length: int):
  """Errors (a count, float32) on ``chunk`` fresh sequences drawn as
  ``temporal_order_pascanu_range(key, chunk, min_length, max_length)``; forward only,
  one state kept (any length fits in memory)."""
  inputs, targets, lengths = synthetic.temporal_order_pascanu_range(key, chunk, min_length,
                                                                    max_length)
  cell = params['cell']
  time_major = jnp.swapaxes(inputs, 0, 1)

  def step(h, x_and_t):
    x, t = x_and_t
    new = jnp.tanh(x @ cell['W_xh'] + h @ cell['W_hh'] + cell['b'])
    return jnp.where(t < lengths[:, None], new, h), None

  initial = jnp.zeros((chunk, cell['W_hh'].shape[0]), jnp.float32)
  last, _ = jax.lax.scan(step, initial, (time_major, jnp.arange(time_major.shape[0])))
  logits = last @ params['W_out'] + params['b_out']
  return jnp.sum(jnp.argmax(logits, -1) != targets).astype(jnp.float32)


def test_error(params, key, size: int, chunk: int, min_length: int, max_length: int) -> float:
  """The error rate on ``size`` fresh sequences, ``chunk`` at a time, chunk i from
  fold_in(key, i), each chunk at one length in [min_length, max_length) (min_length
  = max_length: that length)."""
  errors = [_test_errors(params, jax.random.fold_in(key, i), chunk, min_length, max_length)
            for i in range(size // chunk)]
  return float(sum(float(e) for e in jax.device_get(errors))) / size


def task(config) -> trainer.Task:
  """The task's generator, the network and its loss, probe and report."""
  omega_weight = float(config.omega_weight)
  probe_inputs, probe_targets = jax.jit(synthetic.temporal_order_pascanu, static_argnums=(1, 2))(
      jax.random.key(PROBE_KEY), PROBE_SEQUENCES, steps_of(config))

  def loss(params, carry, batch, key):
    del batch
    return loss_fn(params, *draw(config, key, config.batch_size), omega_weight), carry

  def probe(params, carry, batch):
    """The loss of the last state's prediction, as a function of the states."""
    del carry, batch
    return diagnostics.Probe(
        cells.elman('tanh'), params['cell'], probe_inputs,
        jnp.zeros((PROBE_SEQUENCES, params['cell']['W_hh'].shape[0])),
        lambda states: readout_loss(params, states[:, -1], probe_targets))

  def report(run_config, params) -> dict:
    key = jax.random.fold_in(jax.random.key(run_config.seed), TEST_KEY_FOLD)
    size, chunk = run_config.test_size, run_config.test_chunk
    if run_config.mode == 'fixed':
      error = test_error(params, key, size, chunk, run_config.length, run_config.length)
    else:
      error = test_error(params, key, size, chunk, run_config.min_length, run_config.max_length)
    summary = {'test_error': error,
               'success': bool(math.isfinite(error) and error < run_config.success_threshold)}
    if run_config.test_lengths:
      summary['test_error_by_length'] = {
          str(n): test_error(params, jax.random.fold_in(key, n), size, chunk, n, n)
          for n in run_config.test_lengths}
    return summary

  return trainer.Task(init=init_params, loss=loss, batch=lambda step: {}, probe=probe,
                      recurrent_weight=lambda params: params['cell']['W_hh'], report=report)
