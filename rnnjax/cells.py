"""Recurrent cells: pure functions ``cell(params, carry, x) -> (carry, y)``.

The argument order is ``jax.lax.scan``'s own, so a cell with its params bound
(``functools.partial(elman_cell, params)``) scans with no adapter. Params are
plain dicts of arrays in the row-vector layout of d2l (seed note 002):

  h_t = phi(x_t W_xh + h_{t-1} W_hh + b)          (Elman 1990, "SRN")

Shapes: ``x [B, d]``, ``carry = h [B, H]`` (float32 by default),
``W_xh [d, H]``, ``W_hh [H, H]``, ``b [H]``. GRU and LSTM cells keep the same
signature and PyTorch's gate order. Every ``init_*`` takes ``biases``: 1 (one
bias per block, d2l's count h(d + h + 1)) or 2 (PyTorch's input and hidden
biases, h(d + h + 2) per block; seed note 002, "Formulas").

Every cell computes in its params' floating dtype: ``x`` and the carry are
cast to it and the new carry comes back in it (the rule of every path,
``rnnjax.recurrence``). Each cell checks, before any work, that ``x`` has d
features and that the carry is the kind it carries (Elman, GRU: one array;
LSTM: an ``(h, c)`` pair) with the batch axes of ``x`` and H units, and raises
a ValueError naming ``inputs`` or ``initial_state`` otherwise.
"""

import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import initializers
from rnnjax import recurrence

ACTIVATIONS = {'tanh': jnp.tanh, 'relu': jax.nn.relu, 'linear': lambda a: a}

RECURRENT_INITS = ('gaussian', 'orthogonal', 'identity', 'uniform')


def _shapes(carry):
  """The kind and shape(s) of a carry, for messages."""
  if isinstance(carry, (tuple, list)):
    return f'a {type(carry).__name__} of {len(carry)}: {[getattr(c, "shape", c) for c in carry]}'
  return f'one array of shape {carry.shape}' if hasattr(carry, 'shape') else repr(carry)


def check_step(name, params, carry, x_shape, weights, pair=False):
  """Checks one step's input shape and carry against a cell's params, before any work.

  Args:
    name: the cell, for messages ('elman', 'gru', 'lstm').
    params: the cell's params.
    carry: one ``[..., H]`` array, or with ``pair`` an ``(h, c)`` pair of them.
    x_shape: the shape of one step's input, ``[..., d]``.
    weights: the names of the input and the recurrent weight (``[d, G H]``,
      ``[H, G H]``).
    pair: the cell carries an ``(h, c)`` pair (LSTM).

  Raises:
    ValueError: naming ``params`` (not the cell's weights, or shapes that do not
      fit together: ``[d, G H]``, ``[H, G H]`` and biases ``[G H]``, G = 1, 3,
      4 for Elman, GRU, LSTM), ``inputs`` (last axis not d) or
      ``initial_state`` (not the cell's kind, last axis not H, or batch axes
      other than those of the input), with the expected and the given shape.
  """
  gates = _GATES[name]
  shapes = ({key: tuple(getattr(value, 'shape', ())) for key, value in params.items()}
            if isinstance(params, dict) else None)
  if shapes is None or any(w not in shapes for w in weights) or 'b' not in shapes:
    raise ValueError(f'params: expected the {name} cell\'s {[*weights, "b"]} (as init_{name} '
                     f'makes them), got {shapes if shapes is not None else type(params).__name__}')
  hidden = shapes[weights[1]][0] if len(shapes[weights[1]]) == 2 else None
  width = None if hidden is None else gates * hidden
  if (hidden is None or shapes[weights[1]] != (hidden, width) or len(shapes[weights[0]]) != 2
      or shapes[weights[0]][1] != width or
      any(shapes[key] != (width,) for key in ('b', 'b_hh') if key in shapes)):
    blocks = 'H' if gates == 1 else f'{gates} H'
    raise ValueError(f'params: expected {weights[0]} [d, {blocks}], {weights[1]} [H, {blocks}] '
                     f'and biases [{blocks}] of one H for the {name} cell, got {shapes}')
  x_shape = tuple(x_shape)
  input_size, hidden_size = params[weights[0]].shape[0], params[weights[1]].shape[0]
  if x_shape[-1:] != (input_size,):
    raise ValueError(f'inputs: expected last axis d = {input_size} ({weights[0]} is '
                     f'{list(params[weights[0]].shape)}), got shape {x_shape} per step')
  is_pair = (isinstance(carry, (tuple, list)) and len(carry) == 2
             and all(hasattr(c, 'shape') for c in carry))
  if not (is_pair if pair else hasattr(carry, 'shape')):
    kind = 'an (h, c) pair of [B, H] arrays' if pair else 'one [B, H] array'
    raise ValueError(f'initial_state: expected {kind} for the {name} cell (H = {hidden_size}), '
                     f'got {_shapes(carry)}')
  for state in carry if pair else (carry,):
    if state.shape[-1:] != (hidden_size,):
      raise ValueError(f'initial_state: expected last axis H = {hidden_size}, '
                       f'got shape {state.shape}')
    if state.shape[:-1] != x_shape[:-1]:
      raise ValueError(f'initial_state: expected shape {x_shape[:-1] + (hidden_size,)} (the '
                       f'batch axes of the inputs, then H), got shape {state.shape}')


_GATES = {'elman': 1, 'gru': 3, 'lstm': 4}  # blocks of H in the weights' second axis


def _in_params_dtype(params, x, carry):
  """``(x, carry)`` cast to the params' dtype (``recurrence.compute_dtype``)."""
  return recurrence.cast_floating((x, carry), recurrence.compute_dtype(params))


def elman_cell(params, carry, x, activation: str = 'tanh'):
  """One step of the Elman network, in the params' dtype.

  Args:
    params: ``{'W_xh': [d, H], 'W_hh': [H, H], 'b': [H]}``.
    carry: ``h_{t-1} [B, H]`` (or ``[H]``).
    x: ``x_t [B, d]`` (or ``[d]``).
    activation: 'tanh', 'relu' or 'linear' (the last for closed-form tests).

  Returns:
    ``(h_t, h_t)``: the new state, once as carry and once as output, in the
    params' dtype.

  Raises:
    ValueError: as ``check_step``: params that are not Elman weights of one
      H, the last axis of ``x`` not d, a carry that is not one array, of last
      axis other than H or batch axes other than those of ``x``; params of two
      floating dtypes; an unknown activation.

  References:
    Elman (1990), "Finding Structure in Time"; seed notes 000 to 002.
  """
  if activation not in ACTIVATIONS:
    raise ValueError(f'activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}')
  check_step('elman', params, carry, jnp.shape(x), ('W_xh', 'W_hh'))
  x, carry = _in_params_dtype(params, x, carry)
  h = ACTIVATIONS[activation](x @ params['W_xh'] + carry @ params['W_hh'] + bias(params))
  return h, h


def activation_derivative(states, activation: str = 'tanh'):
  """phi'(a_t) from the states h_t = phi(a_t): 1 - h^2 (tanh), [h > 0] (relu), 1 (linear).

  Raises:
    ValueError: for another activation.
  """
  if activation == 'tanh':
    return 1.0 - states * states
  if activation == 'relu':
    return (states > 0).astype(states.dtype)
  if activation == 'linear':
    return jnp.ones_like(states)
  raise ValueError(f"activation: expected 'tanh', 'relu' or 'linear', got {activation!r}")


def bias(params):
  """The summed bias: ``b``, plus PyTorch's second bias ``b_hh`` where present."""
  return params['b'] + params['b_hh'] if 'b_hh' in params else params['b']


def elman(activation: str = 'tanh'):
  """``elman_cell`` with its activation bound, ready to scan.

  Raises:
    ValueError: if ``activation`` is not one of ``ACTIVATIONS``.
  """
  if activation not in ACTIVATIONS:
    raise ValueError(f'activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}')
  return functools.partial(elman_cell, activation=activation)


def _check_sizes(input_size, hidden_size, biases):
  for name, size in (('input_size', input_size), ('hidden_size', hidden_size)):
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or size < 1:
      raise ValueError(f'{name}: expected a positive int, got {size!r}')
  if biases not in (1, 2):
    raise ValueError(f'biases: expected 1 or 2, got {biases!r}')


def init_elman(key, input_size: int, hidden_size: int, recurrent_init: str = 'gaussian',
               radius: float = 1.0, input_scale: float | None = None, biases: int = 1):
  """Parameters of an Elman cell.

  Args:
    key: a ``jax.random`` key.
    input_size: d.
    hidden_size: H.
    recurrent_init: how W_hh is drawn: 'gaussian' (rescaled to spectral radius
      ``radius``), 'orthogonal' (orthogonal times ``radius``), 'identity'
      (``radius`` times I, IRNN) or 'uniform' (PyTorch's U(+-1/sqrt(H)),
      ``radius`` ignored).
    radius: spectral radius of W_hh (the gain for 'identity'): a number or a
      0-d array, traced under ``vmap`` for one init per radius.
    input_scale: W_xh ~ N(0, input_scale^2); default 1/sqrt(d). With
      'uniform' W_xh is PyTorch's uniform too.
    biases: 1 (``b``) or 2 (``b`` and ``b_hh``, as PyTorch; they are summed).

  Returns:
    ``{'W_xh': <float32>[d, H], 'W_hh': <float32>[H, H], 'b': <float32>[H]}``
    (and ``'b_hh': [H]`` with biases=2); biases are 0 (uniform:
    U(+-1/sqrt(H)) each).

  Raises:
    ValueError: for a size that is not an int >= 1, a radius or input_scale
      that is not a finite value >= 0, or an unknown init name.
  """
  _check_sizes(input_size, hidden_size, biases)
  input_size, hidden_size = int(input_size), int(hidden_size)
  initializers.check_radius('radius', radius)  # also for 'uniform', which ignores it
  if input_scale is not None and (isinstance(input_scale, (bool, np.bool_)) or not isinstance(
      input_scale, numbers.Real) or not 0 <= input_scale < math.inf):
    raise ValueError(f'input_scale: expected a finite value >= 0 (or None), got {input_scale!r}')
  key_x, key_h, key_b, key_b2 = jax.random.split(key, 4)
  if recurrent_init == 'uniform':
    params = {
        'W_xh': initializers.pytorch_uniform(key_x, (input_size, hidden_size), hidden_size),
        'W_hh': initializers.pytorch_uniform(key_h, (hidden_size, hidden_size), hidden_size),
        'b': initializers.pytorch_uniform(key_b, (hidden_size,), hidden_size),
    }
    if biases == 2:
      params['b_hh'] = initializers.pytorch_uniform(key_b2, (hidden_size,), hidden_size)
    return params
  if recurrent_init == 'gaussian':
    w_hh = initializers.gaussian_at_radius(key_h, hidden_size, radius)
  elif recurrent_init == 'orthogonal':
    w_hh = initializers.orthogonal_at_radius(key_h, hidden_size, radius)
  elif recurrent_init == 'identity':
    w_hh = initializers.identity(hidden_size, radius)
  else:
    raise ValueError(f'recurrent_init: expected one of {RECURRENT_INITS}, got {recurrent_init!r}')
  scale = input_size ** -0.5 if input_scale is None else input_scale
  params = {
      'W_xh': scale * jax.random.normal(key_x, (input_size, hidden_size), jnp.float32),
      'W_hh': w_hh,
      'b': jnp.zeros((hidden_size,), jnp.float32),
  }
  if biases == 2:
    params['b_hh'] = jnp.zeros((hidden_size,), jnp.float32)
  return params


def _gate_preactivations(params, x, h):
  """``x W_x + b`` and ``h W_h (+ b_hh)``, each ``[B, blocks * H]``."""
  from_input = x @ params['W_x'] + params['b']
  from_state = h @ params['W_h']
  if 'b_hh' in params:
    from_state = from_state + params['b_hh']
  return from_input, from_state


def gru_cell(params, carry, x):
  """One GRU step, PyTorch's equations and gate order (r, z, n), in the params' dtype.

    r = sigmoid(x W_xr + b_r + h W_hr + b_hr)       reset gate
    z = sigmoid(x W_xz + b_z + h W_hz + b_hz)       update gate
    n = tanh(x W_xn + b_n + r * (h W_hn + b_hn))    candidate
    h' = (1 - z) * n + z * h                        z = 1 keeps the old state

  Args:
    params: ``{'W_x': [d, 3H], 'W_h': [H, 3H], 'b': [3H]}`` (+ ``'b_hh': [3H]``).
    carry: ``h [B, H]``.
    x: ``[B, d]``.

  Returns:
    ``(h', h')`` in the params' dtype.

  Raises:
    ValueError: as ``check_step`` (x not of d features; a carry that is not
      one array of the batch axes of x and H units); params of two floating
      dtypes.

  References:
    Cho et al. (2014); d2l 10.2 (seed note 002); torch.nn.GRU's documentation.
  """
  check_step('gru', params, carry, x.shape, ('W_x', 'W_h'))
  x, carry = _in_params_dtype(params, x, carry)
  from_input, from_state = _gate_preactivations(params, x, carry)
  input_r, input_z, input_n = jnp.split(from_input, 3, axis=-1)
  state_r, state_z, state_n = jnp.split(from_state, 3, axis=-1)
  r = jax.nn.sigmoid(input_r + state_r)
  z = jax.nn.sigmoid(input_z + state_z)
  n = jnp.tanh(input_n + r * state_n)
  h = (1 - z) * n + z * carry
  return h, h


def lstm_cell(params, carry, x):
  """One LSTM step, PyTorch's gate order (i, f, g, o); carry ``(h, c)``; in the params' dtype.

    i, f, o = sigmoid(.), g = tanh(.)  of  x W_x + b + h W_h (+ b_hh)
    c' = f * c + i * g,   h' = o * tanh(c')

  Args:
    params: ``{'W_x': [d, 4H], 'W_h': [H, 4H], 'b': [4H]}`` (+ ``'b_hh': [4H]``).
    carry: ``(h, c)``, each ``[B, H]``.
    x: ``[B, d]``.

  Returns:
    ``((h', c'), h')`` in the params' dtype.

  Raises:
    ValueError: as ``check_step`` (x not of d features; a carry that is not an
      (h, c) pair of arrays of the batch axes of x and H units); params of two
      floating dtypes.

  References:
    Hochreiter & Schmidhuber (1997); d2l 10.1 (seed note 002).
  """
  check_step('lstm', params, carry, x.shape, ('W_x', 'W_h'), pair=True)
  x, (h, c) = _in_params_dtype(params, x, carry)
  from_input, from_state = _gate_preactivations(params, x, h)
  i, f, g, o = jnp.split(from_input + from_state, 4, axis=-1)
  c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
  h = jax.nn.sigmoid(o) * jnp.tanh(c)
  return (h, c), h


def _init_gated(key, input_size, hidden_size, blocks, biases):
  _check_sizes(input_size, hidden_size, biases)
  keys = jax.random.split(key, 4)
  uniform = lambda k, shape: initializers.pytorch_uniform(k, shape, hidden_size)
  params = {'W_x': uniform(keys[0], (input_size, blocks * hidden_size)),
            'W_h': uniform(keys[1], (hidden_size, blocks * hidden_size)),
            'b': uniform(keys[2], (blocks * hidden_size,))}
  if biases == 2:
    params['b_hh'] = uniform(keys[3], (blocks * hidden_size,))
  return params


def init_gru(key, input_size: int, hidden_size: int, biases: int = 2):
  """GRU params, PyTorch's init U(+-1/sqrt(H)): ``W_x [d, 3H]``, ``W_h [H, 3H]``,
  ``b [3H]`` (+ ``b_hh [3H]`` with biases=2, PyTorch's layout).

  Raises:
    ValueError: for a size < 1 or biases not in (1, 2).
  """
  return _init_gated(key, input_size, hidden_size, 3, biases)


def init_lstm(key, input_size: int, hidden_size: int, biases: int = 2):
  """LSTM params, PyTorch's init U(+-1/sqrt(H)): ``W_x [d, 4H]``, ``W_h [H, 4H]``,
  ``b [4H]`` (+ ``b_hh [4H]`` with biases=2).

  Raises:
    ValueError: for a size < 1 or biases not in (1, 2).
  """
  return _init_gated(key, input_size, hidden_size, 4, biases)
