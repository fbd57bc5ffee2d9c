"""Recurrent cells: pure functions ``cell(params, carry, x) -> (carry, y)``.

The argument order is ``jax.lax.scan``'s own, so a cell with its params bound
(``functools.partial(elman_cell, params)``) scans with no adapter. Params are
any ``Mapping`` of arrays (a dict, flax's ``FrozenDict``) in the row-vector
layout of d2l:

  h_t = phi(x_t W_xh + h_{t-1} W_hh + b)          (Elman 1990, "SRN")

Shapes: ``x [B, d]``, ``carry = h [B, H]`` (float32 by default; ``[H]``
is broadcast over the batch), ``W_xh [d, H]``, ``W_hh [H, H]``, ``b [H]``.
phi is 'tanh', 'relu', 'linear' or any callable ``[B, H] -> [B, H]`` applied
per step (``jax.nn.gelu``). GRU and LSTM cells keep the same signature and
PyTorch's gate order. Every ``init_*`` takes ``biases``: 0 (no bias, as
PyTorch's ``bias=False``), 1 (one bias per block, d2l's count h(d + h + 1))
or 2 (PyTorch's input and hidden biases, h(d + h + 2) per block); a cell
reads whichever of ``b`` and ``b_hh`` its params hold.

Every cell computes in its params' floating dtype: ``x`` and the carry are
cast to it and the new carry comes back in it (the rule of every path,
``dtypes.in_params_dtype``); every ``init_*`` takes the params'
``dtype``. Each cell has a ``zero_state(params, batch_size)`` attribute, the
zero carry in the params' dtype, which the recurrences use where no initial
state is given (``recurrence.zero_state``). ``elman(activation)`` is a
value: equal (and hashing equal) for equal activations, so a ``jax.jit``
that takes the cell as a static argument compiles once for it. Each cell
checks, before any work, that ``x`` is a floating array of d features and
that the carry is the kind it carries (Elman, GRU: one array; LSTM: an
``(h, c)`` pair) with the batch axes of ``x`` (or none) and H units, and
raises a ValueError naming ``inputs`` or ``initial_state`` otherwise.

References:
  Elman (1990), "Finding structure in time", Cognitive Science 14(2),
  eq. 1-2 (the simple recurrent network). Zhang, Lipton, Li & Smola, "Dive
  into Deep Learning", sections 9.4 (the row-vector layout and its parameter
  count), 10.1 (LSTM) and 10.2 (GRU). The worked examples these cells
  reproduce: ``docs/reference_numbers.md``, "The Elman recurrence".
"""

from collections.abc import Callable, Mapping
import dataclasses
import math
import numbers
from typing import Any, TypeVar

import jax
from jax.typing import ArrayLike, DTypeLike
import jax.numpy as jnp
import numpy as np

from rnnjax import checks
from rnnjax import dtypes
from rnnjax import initializers

__all__ = [
    'ACTIVATIONS', 'Activation', 'ElmanCell', 'Params', 'RECURRENT_INITS',
    'activation_derivative', 'activation_function', 'bias', 'elman', 'elman_cell', 'gru_cell',
    'init_elman', 'init_gru', 'init_lstm', 'lstm_cell',
]

Params = Mapping[str, Any]
"""A cell's params: any ``Mapping`` (dict, ``FrozenDict``) of names to arrays."""

Activation = str | Callable[[jax.Array], jax.Array]
"""phi: a name of ``ACTIVATIONS`` or a callable applied to each step's pre-activation."""

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    'tanh': jnp.tanh, 'relu': jax.nn.relu, 'linear': lambda a: a}

RECURRENT_INITS = ('gaussian', 'orthogonal', 'identity', 'uniform')

_GATES = {'elman': 1, 'gru': 3, 'lstm': 4}  # blocks of H in the weights' second axis
_BIASES = ('b', 'b_hh')

_Cell = TypeVar('_Cell', bound=Callable[..., Any])


def _zeros(params: Params, batch_size: int, weight: str) -> jax.Array:
  """``[B, H]`` zeros in the params' dtype (float32 for params without a float), H the rows
  of ``params[weight]``."""
  dtype = dtypes.compute_dtype(params) or jnp.dtype(jnp.float32)
  return jnp.zeros((batch_size, jnp.shape(params[weight])[0]), dtype)


def _carrying(zero_state: Callable[[Params, int], Any]) -> Callable[[_Cell], _Cell]:
  """Gives a cell function its ``zero_state(params, batch_size) -> carry``
  (``recurrence.zero_state``)."""
  def attach(cell: _Cell) -> _Cell:
    setattr(cell, 'zero_state', zero_state)
    return cell
  return attach


def activation_function(activation: Activation) -> Callable[[jax.Array], jax.Array]:
  """phi for ``activation``: the function of a name in ``ACTIVATIONS``, or the callable.

  Args:
    activation: 'tanh', 'relu', 'linear', or a callable ``[..., H] -> [..., H]``
      (e.g. ``jax.nn.gelu``) applied to each step's pre-activation a_t.

  Returns:
    phi, a function of an array.

  Raises:
    ValueError: naming ``activation`` for an unknown name or a value that is
      neither a name nor callable.
  """
  if isinstance(activation, str):
    if activation in ACTIVATIONS:
      return ACTIVATIONS[activation]
  elif callable(activation):
    return activation
  raise ValueError(f'activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r} '
                   '(or a callable phi, e.g. jax.nn.gelu)')


def _shapes(carry: Any) -> str:
  """The kind and shape(s) of a carry, for messages."""
  if isinstance(carry, (tuple, list)):
    return f'a {type(carry).__name__} of {len(carry)}: {[getattr(c, "shape", c) for c in carry]}'
  return f'one array of shape {carry.shape}' if hasattr(carry, 'shape') else repr(carry)


def check_step(name: str, params: Params, carry: Any, x_shape: tuple[int, ...],
               weights: tuple[str, str], pair: bool = False) -> None:
  """Checks one step's input shape and carry against a cell's params, before any work.

  Args:
    name: the cell, for messages ('elman', 'gru', 'lstm').
    params: the cell's params, any ``Mapping``; biases ``b`` and ``b_hh`` are
      optional.
    carry: one ``[..., H]`` array, or with ``pair`` an ``(h, c)`` pair of them,
      of the batch axes of the input or of none (``[H]``, broadcast).
    x_shape: the shape of one step's input, ``[..., d]``.
    weights: the names of the input and the recurrent weight (``[d, G H]``,
      ``[H, G H]``).
    pair: the cell carries an ``(h, c)`` pair (LSTM).

  Raises:
    ValueError: naming ``params`` (not a Mapping holding the cell's weights,
      weights written as nested lists (``checks.arrays``), or shapes that do not fit together: ``[d, G H]``, ``[H, G H]`` and
      biases ``[G H]``, G = 1, 3, 4 for Elman, GRU, LSTM), ``inputs`` (last
      axis not d) or ``initial_state`` (not the cell's kind, last axis not H,
      or batch axes other than those of the input), with the expected and the
      given shape.
  """
  gates = _GATES[name]
  checks.arrays('params', params)
  shapes = ({key: tuple(jnp.shape(value)) for key, value in params.items()}
            if isinstance(params, Mapping) else None)
  if shapes is None or any(w not in shapes for w in weights):
    raise ValueError(f'params: expected the {name} cell\'s {[*weights, "b"]} (b and b_hh '
                     f'optional; as init_{name} makes them), got '
                     f'{shapes if shapes is not None else type(params).__name__}')
  hidden = shapes[weights[1]][0] if len(shapes[weights[1]]) == 2 else None
  width = None if hidden is None else gates * hidden
  if (hidden is None or shapes[weights[1]] != (hidden, width) or len(shapes[weights[0]]) != 2
      or shapes[weights[0]][1] != width or
      any(shapes[key] != (width,) for key in _BIASES if key in shapes)):
    blocks = 'H' if gates == 1 else f'{gates} H'
    raise ValueError(f'params: expected {weights[0]} [d, {blocks}], {weights[1]} [H, {blocks}] '
                     f'and biases [{blocks}] of one H for the {name} cell, got {shapes}')
  x_shape = tuple(x_shape)
  input_size, hidden_size = shapes[weights[0]][0], shapes[weights[1]][0]
  if x_shape[-1:] != (input_size,):
    raise ValueError(f'inputs: expected last axis d = {input_size} ({weights[0]} is '
                     f'{list(shapes[weights[0]])}), got shape {x_shape} per step')
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
    if state.shape[:-1] not in (x_shape[:-1], ()):
      raise ValueError(f'initial_state: expected shape {x_shape[:-1] + (hidden_size,)} (the '
                       f'batch axes of the inputs, then H; or [H], broadcast), got shape '
                       f'{state.shape}')


def _in_params_dtype(params: Params, x: ArrayLike, carry: Any) -> tuple[jax.Array, Any]:
  """``(x, carry)`` cast to the params' dtype (``dtypes.in_params_dtype``), after
  checking that ``x`` is floating."""
  dtypes.check_floating('inputs', x)
  return dtypes.in_params_dtype(params, (x, carry))


@_carrying(lambda params, batch_size: _zeros(params, batch_size, 'W_hh'))
def elman_cell(params: Params, carry: ArrayLike, x: ArrayLike,
               activation: Activation = 'tanh') -> tuple[jax.Array, jax.Array]:
  """One step of the Elman network, in the params' dtype.

    h_t = phi(x_t W_xh + h_{t-1} W_hh + b)

  Args:
    params: ``{'W_xh': [d, H], 'W_hh': [H, H], 'b': [H]}`` (``b`` optional,
      ``b_hh [H]`` added where present), any ``Mapping``.
    carry: ``h_{t-1} <float>[B, H]`` (or ``[H]``, broadcast over the batch).
    x: ``x_t <float>[B, d]`` (or ``[d]``).
    activation: phi: 'tanh', 'relu', 'linear' (the last for closed-form
      tests) or a callable such as ``jax.nn.gelu``.

  Returns:
    ``(h_t, h_t)``: the new state ``[B, H]``, once as carry and once as
    output, in the params' dtype.

  Raises:
    ValueError: as ``check_step``: params that are not Elman weights of one
      H, the last axis of ``x`` not d, a carry that is not one array, of last
      axis other than H or batch axes other than those of ``x``; ``x`` not
      floating (naming ``inputs`` and its dtype); params of two floating
      dtypes; an unknown activation.

  References:
    Elman (1990), "Finding structure in time", eq. 1-2; worked examples:
    ``docs/reference_numbers.md``, "The Elman recurrence".
  """
  phi = activation_function(activation)
  check_step('elman', params, carry, jnp.shape(x), ('W_xh', 'W_hh'))
  x, carry = _in_params_dtype(params, x, carry)
  if jnp.ndim(carry) < jnp.ndim(x):  # an [H] state, broadcast first: the [B, H] state's
    carry = jnp.broadcast_to(carry, jnp.shape(x)[:-1] + jnp.shape(carry))  # product, bit for bit
  h = phi(x @ params['W_xh'] + carry @ params['W_hh'] + bias(params))
  return h, h


def activation_derivative(states: jax.Array, activation: str = 'tanh') -> jax.Array:
  """phi'(a_t) from the states h_t = phi(a_t): 1 - h^2 (tanh), [h > 0] (relu), 1 (linear).

  Args:
    states: ``h = phi(a)``, any shape.
    activation: a name of ``ACTIVATIONS`` (a callable's derivative cannot be
      read from its values; ``rnnjax.fused`` takes it by autodiff).

  Returns:
    phi'(a), of the shape and dtype of ``states``.

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


def bias(params: Params) -> jax.Array:
  """The summed bias of an Elman cell: ``b``, plus PyTorch's second bias ``b_hh`` where present.

  Args:
    params: Elman params (``elman_cell``).

  Returns:
    ``[H]``: ``b + b_hh``, the one present, or zeros of the dtype of ``W_hh``
    for a cell without bias.
  """
  present = [params[key] for key in _BIASES if key in params]
  if not present:
    return jnp.zeros(jnp.shape(params['W_hh'])[-1:], jnp.result_type(params['W_hh']))
  return present[0] + present[1] if len(present) == 2 else present[0]


@dataclasses.dataclass(frozen=True)
class ElmanCell:
  """``elman_cell`` with its activation bound: ``cell(params, carry [B, H], x [B, d]) ->
  (h_t, h_t)``, each ``[B, H]`` in the params' dtype.

  A frozen value: two cells of the same activation are equal and hash equal, so the cell
  can be a static argument of ``jax.jit`` (one compile for all calls that pass an equal
  cell). Make one with ``elman(activation)``, which checks the activation.
  """
  activation: Activation = 'tanh'

  def __call__(self, params: Params, carry: ArrayLike, x: ArrayLike
               ) -> tuple[jax.Array, jax.Array]:
    return elman_cell(params, carry, x, self.activation)

  def zero_state(self, params: Params, batch_size: int) -> jax.Array:
    """``<float>[B, H]`` zeros in the params' dtype, the carry at step 0."""
    return _zeros(params, batch_size, 'W_hh')


def elman(activation: Activation = 'tanh') -> ElmanCell:
  """``elman_cell`` with its activation bound, ready to scan.

  Args:
    activation: as ``elman_cell``.

  Returns:
    ``cell(params, carry <float>[..., H], x <float>[..., d]) -> (h_t, h_t)``,
    h_t ``<float>[..., H]`` in the params' dtype (``elman_cell``): an
    ``ElmanCell``, equal and hashing equal for equal activations (a static
    argument of ``jax.jit`` compiles once).

  Raises:
    ValueError: if ``activation`` is neither a name of ``ACTIVATIONS`` nor callable.
  """
  activation_function(activation)
  return ElmanCell(activation)




# The argument of ``init_elman`` that scales each weight, for the overflow message.
_SCALED_BY = {'W_hh': 'radius', 'W_xh': 'input_scale'}


def _cast(params: dict[str, jax.Array], dtype: np.dtype,
          scales: dict[str, Any] | None = None) -> dict[str, jax.Array]:
  """Each of ``params`` (drawn in float32) in ``dtype``, checked to fit: a weight finite in
  float32 and not in ``dtype`` (float16's largest value is 65504) is a ValueError naming the
  argument that scaled it (``scales``: its name to its value) and the dtype. Concrete
  weights only: under ``vmap`` over the radius the values are not known."""
  cast = {name: value.astype(dtype) for name, value in params.items()}
  for name, value in params.items():
    if isinstance(value, jax.core.Tracer) or isinstance(cast[name], jax.core.Tracer):
      continue
    if bool(jnp.all(jnp.isfinite(value))) and not bool(jnp.all(jnp.isfinite(cast[name]))):
      argument = _SCALED_BY.get(name, 'dtype')
      given = f'{argument}={checks.shown((scales or {}).get(argument))}, ' if argument in (
          scales or {}) else ''
      raise ValueError(f'{argument}: expected weights that fit in {dtype} (largest '
                       f'{float(jnp.finfo(dtype).max):g}), got {given}{name} up to '
                       f'{float(jnp.max(jnp.abs(value))):.3g}; use a smaller {argument} or '
                       f'dtype=jnp.float32')
  return cast


def _check_sizes(input_size: Any, hidden_size: Any, biases: Any) -> None:
  for name, size in (('input_size', input_size), ('hidden_size', hidden_size)):
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or size < 1:
      raise ValueError(f'{name}: expected a positive int, got {size!r}')
  if isinstance(biases, (bool, np.bool_)) or biases not in (0, 1, 2):
    raise ValueError(f'biases: expected 0, 1 or 2, got {biases!r}')


def init_elman(key: jax.Array, input_size: int, hidden_size: int,
               recurrent_init: str = 'gaussian', radius: ArrayLike = 1.0,
               input_scale: float | None = None, biases: int = 1,
               dtype: DTypeLike = jnp.float32) -> dict[str, jax.Array]:
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
    biases: 0 (no bias, PyTorch's ``bias=False``), 1 (``b``) or 2 (``b`` and
      ``b_hh``, as PyTorch; they are summed).
    dtype: the params' floating dtype (float32; float64 with x64 on;
      bfloat16, float16), the dtype every path computes in with them. Drawn
      in float32 and cast, so every dtype holds the same draw, rounded.

  Returns:
    ``{'W_xh': <dtype>[d, H], 'W_hh': <dtype>[H, H], 'b': <dtype>[H]}``
    (no ``'b'`` with biases=0, and ``'b_hh': [H]`` with biases=2); biases
    are 0 (uniform: U(+-1/sqrt(H)) each).

  Raises:
    ValueError: for a size that is not an int >= 1, biases not 0, 1 or 2, a
      radius or input_scale that is not a finite value >= 0 or whose weights
      overflow ``dtype`` (float16 holds at most 65504: a radius of 1e5 is
      refused, naming radius and the dtype; drawn in float32, so the check
      sees the true values), an unknown init name, or a dtype that is not
      floating (or float64 without x64).

  References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training
    recurrent neural networks", section 2.1 (the spectral radius of W_hh);
    the initializers: ``rnnjax.initializers``.
  """
  _check_sizes(input_size, hidden_size, biases)
  dtype = dtypes.floating_dtype(dtype)
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
    }
    for name, bias_key in list(zip(_BIASES, (key_b, key_b2)))[:biases]:
      params[name] = initializers.pytorch_uniform(bias_key, (hidden_size,), hidden_size)
    return _cast(params, dtype)
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
  }
  for name in _BIASES[:biases]:
    params[name] = jnp.zeros((hidden_size,), jnp.float32)
  return _cast(params, dtype, {'radius': radius, 'input_scale': input_scale})


def _gate_preactivations(params: Params, x: jax.Array, h: jax.Array
                         ) -> tuple[jax.Array, jax.Array]:
  """``x W_x (+ b)`` and ``h W_h (+ b_hh)``, each ``[B, blocks * H]``."""
  from_input = x @ params['W_x']
  if 'b' in params:
    from_input = from_input + params['b']
  from_state = h @ params['W_h']
  if 'b_hh' in params:
    from_state = from_state + params['b_hh']
  return from_input, from_state


@_carrying(lambda params, batch_size: _zeros(params, batch_size, 'W_h'))
def gru_cell(params: Params, carry: ArrayLike, x: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """One GRU step, PyTorch's equations and gate order (r, z, n), in the params' dtype.

    r = sigmoid(x W_xr + b_r + h W_hr + b_hr)       reset gate
    z = sigmoid(x W_xz + b_z + h W_hz + b_hz)       update gate
    n = tanh(x W_xn + b_n + r * (h W_hn + b_hn))    candidate
    h' = (1 - z) * n + z * h                        z = 1 keeps the old state

  Args:
    params: ``{'W_x': [d, 3H], 'W_h': [H, 3H], 'b': [3H]}`` (+ ``'b_hh': [3H]``;
      biases optional), any ``Mapping``.
    carry: ``h <float>[B, H]`` (or ``[H]``, broadcast over the batch).
    x: ``<float>[B, d]``.

  Returns:
    ``(h', h')``, ``[B, H]`` in the params' dtype.

  Raises:
    ValueError: as ``check_step`` (x not of d features; a carry that is not
      one array of the batch axes of x and H units); ``x`` not floating;
      params of two floating dtypes.

  References:
    Cho et al. (2014), "Learning phrase representations using RNN
    encoder-decoder for statistical machine translation", eq. 5-8; d2l 10.2;
    torch.nn.GRU's documentation (the placement of b_hn).
  """
  check_step('gru', params, carry, jnp.shape(x), ('W_x', 'W_h'))
  x, h = _in_params_dtype(params, x, carry)
  from_input, from_state = _gate_preactivations(params, x, h)
  input_r, input_z, input_n = jnp.split(from_input, 3, axis=-1)
  state_r, state_z, state_n = jnp.split(from_state, 3, axis=-1)
  r = jax.nn.sigmoid(input_r + state_r)
  z = jax.nn.sigmoid(input_z + state_z)
  n = jnp.tanh(input_n + r * state_n)
  new = (1 - z) * n + z * h
  return new, new


@_carrying(lambda params, batch_size: (_zeros(params, batch_size, 'W_h'),) * 2)
def lstm_cell(params: Params, carry: tuple[ArrayLike, ArrayLike], x: ArrayLike
              ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
  """One LSTM step, PyTorch's gate order (i, f, g, o); carry ``(h, c)``; in the params' dtype.

    i, f, o = sigmoid(.), g = tanh(.)  of  x W_x + b + h W_h (+ b_hh)
    c' = f * c + i * g,   h' = o * tanh(c')

  Args:
    params: ``{'W_x': [d, 4H], 'W_h': [H, 4H], 'b': [4H]}`` (+ ``'b_hh': [4H]``;
      biases optional), any ``Mapping``.
    carry: ``(h, c)``, each ``<float>[B, H]`` (or ``[H]``, broadcast).
    x: ``<float>[B, d]``.

  Returns:
    ``((h', c'), h')``, each ``[B, H]`` in the params' dtype.

  Raises:
    ValueError: as ``check_step`` (x not of d features; a carry that is not an
      (h, c) pair of arrays of the batch axes of x and H units); ``x`` not
      floating; params of two floating dtypes.

  References:
    Hochreiter & Schmidhuber (1997), "Long short-term memory"; Gers,
    Schmidhuber & Cummins (2000) (the forget gate); d2l 10.1.
  """
  check_step('lstm', params, carry, jnp.shape(x), ('W_x', 'W_h'), pair=True)
  x, (h, c) = _in_params_dtype(params, x, carry)
  from_input, from_state = _gate_preactivations(params, x, h)
  i, f, g, o = jnp.split(from_input + from_state, 4, axis=-1)
  c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
  h = jax.nn.sigmoid(o) * jnp.tanh(c)
  return (h, c), h


def _init_gated(key: jax.Array, input_size: int, hidden_size: int, blocks: int, biases: int,
                dtype: DTypeLike) -> dict[str, jax.Array]:
  _check_sizes(input_size, hidden_size, biases)
  dtype = dtypes.floating_dtype(dtype)
  keys = jax.random.split(key, 4)
  uniform = lambda k, shape: initializers.pytorch_uniform(k, shape, hidden_size)
  params = {'W_x': uniform(keys[0], (input_size, blocks * hidden_size)),
            'W_h': uniform(keys[1], (hidden_size, blocks * hidden_size))}
  for name, bias_key in list(zip(_BIASES, keys[2:]))[:biases]:
    params[name] = uniform(bias_key, (blocks * hidden_size,))
  return _cast(params, dtype)


def init_gru(key: jax.Array, input_size: int, hidden_size: int, biases: int = 2,
             dtype: DTypeLike = jnp.float32) -> dict[str, jax.Array]:
  """GRU params, PyTorch's init U(+-1/sqrt(H)).

  Args:
    key: a ``jax.random`` key.
    input_size: d.
    hidden_size: H.
    biases: 0 (none), 1 (``b``) or 2 (``b`` and ``b_hh``, PyTorch's layout).
    dtype: the params' floating dtype, as ``init_elman`` (drawn in float32, cast).

  Returns:
    ``{'W_x': <dtype>[d, 3H], 'W_h': <dtype>[H, 3H], 'b': <dtype>[3H],
    'b_hh': <dtype>[3H]}`` (the biases as ``biases`` asks).

  Raises:
    ValueError: for a size < 1, biases not in (0, 1, 2), or a dtype that is not floating
      (or float64 without x64).
  """
  return _init_gated(key, input_size, hidden_size, 3, biases, dtype)


def init_lstm(key: jax.Array, input_size: int, hidden_size: int, biases: int = 2,
              dtype: DTypeLike = jnp.float32) -> dict[str, jax.Array]:
  """LSTM params, PyTorch's init U(+-1/sqrt(H)).

  Args:
    key: a ``jax.random`` key.
    input_size: d.
    hidden_size: H.
    biases: 0 (none), 1 (``b``) or 2 (``b`` and ``b_hh``, PyTorch's layout).
    dtype: the params' floating dtype, as ``init_elman`` (drawn in float32, cast).

  Returns:
    ``{'W_x': <dtype>[d, 4H], 'W_h': <dtype>[H, 4H], 'b': <dtype>[4H],
    'b_hh': <dtype>[4H]}`` (the biases as ``biases`` asks).

  Raises:
    ValueError: for a size < 1, biases not in (0, 1, 2), or a dtype that is not floating
      (or float64 without x64).
  """
  return _init_gated(key, input_size, hidden_size, 4, biases, dtype)
