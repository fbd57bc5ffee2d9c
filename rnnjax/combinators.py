"""Stacked and bidirectional recurrences for any cell.

A *layer* is a function ``layer(params, inputs, initial_state, lengths,
reverse) -> (outputs [B, T, H], final_state)`` with the contract of
``recurrence.scan`` (lengths respected, padded outputs zero, a reversed
layer's final state is the one after reading step 0). ``layer_for`` gives
one for each cell: the Elman layer is the fused one (``rnnjax.fused``),
GRU and LSTM run through ``recurrence.scan``.

Params of a stack are a list over layers of a list over directions
(``params[l][0]`` forward, ``params[l][1]`` backward), each a cell's params.
States (initial and final) are pytrees whose leaves are
``[layers, directions, B, H]`` (LSTM: the pair ``(h, c)``, each so).
This is PyTorch's ``h_n [layers * directions, B, H]`` reshaped. Leaves
``[layers, directions, H]`` are broadcast over the batch; an initial state
of None is zeros (each layer's own, in the params' dtype).

Inputs follow the rules of ``rnnjax.recurrence`` (its module docstring),
checked before any work: every layer computes in the params' one floating
dtype (inputs and initial state are cast to it; outputs and finals come back
in it), lengths may be a list, the inputs of padded steps are zeroed before
any cell reads them (NaN or inf in padding reaches no output or gradient),
inputs must be floating, and T = 0 or B = 0 are valid.

References:
  Schuster & Paliwal (1997), "Bidirectional recurrent neural networks";
  Graves, Mohamed & Hinton (2013), "Speech recognition with deep recurrent
  neural networks" (stacks); Zaremba, Sutskever & Vinyals (2014), "Recurrent
  neural network regularization" (dropout between layers only); PyTorch's
  ``nn.RNN`` documentation (the layouts).
"""

from collections.abc import Callable, Mapping, Sequence
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from rnnjax import cells
from rnnjax import checks
from rnnjax import dtypes
from rnnjax import fused
from rnnjax import recurrence

__all__ = ['CELLS', 'Layer', 'bidirectional', 'init_stack', 'layer_for', 'stack', 'zero_state']

CELLS = ('elman', 'gru', 'lstm')

Layer = Callable[..., tuple[Any, Any]]
"""``layer(params, inputs, initial_state, lengths, reverse) -> (outputs, final_state)``."""


def layer_for(cell: str, activation: cells.Activation = 'tanh') -> Layer:
  """The layer function of ``cell`` in CELLS.

  Args:
    cell: 'elman' (``fused.elman_layer``), 'gru' or 'lstm' (``recurrence.scan``
      of ``cells.gru_cell`` / ``cells.lstm_cell``).
    activation: the Elman cell's phi (a name or a callable; ``cells.elman_cell``);
      not used by the other cells.

  Returns:
    ``layer(params, inputs, initial_state, lengths=None, reverse=False) ->
    (outputs [B, T, H], final_state)``.

  Raises:
    ValueError: for an unknown cell, or an unknown Elman activation.
  """
  checks.one_of('cell', cell, CELLS)
  if cell == 'elman':
    cells.activation_function(activation)  # validates it
    return functools.partial(fused.elman_layer, activation=activation)
  return functools.partial(recurrence.scan, cells.gru_cell if cell == 'gru' else cells.lstm_cell)


def init_stack(key: jax.Array, cell: str, input_size: int, hidden_size: int, layers: int = 1,
               directions: int = 1, **init_kwargs: Any) -> list[list[dict[str, jax.Array]]]:
  """Params of a stack: ``[layers][directions]`` cell params.

  Args:
    key: a ``jax.random`` key, split over layers and directions.
    cell: 'elman', 'gru' or 'lstm'.
    input_size: d, the features layer 0 reads; later layers read
      ``directions * H``.
    hidden_size: H.
    layers: L >= 1.
    directions: 1, or 2 (bidirectional).
    **init_kwargs: to ``cells.init_elman`` / ``init_gru`` / ``init_lstm``
      (e.g. ``radius``, ``biases``).

  Returns:
    ``params[l][k]``, each the cell's params dict (``float32``).

  Raises:
    ValueError: for an unknown cell, layers < 1 or directions not 1 or 2.
  """
  checks.one_of('cell', cell, CELLS)
  layers = checks.integer('layers', layers, 1)
  directions = int(checks.one_of('directions', directions, (1, 2)))
  inits: dict[str, Callable[..., dict[str, jax.Array]]] = {
      'elman': cells.init_elman, 'gru': cells.init_gru, 'lstm': cells.init_lstm}
  init = inits[cell]
  keys = jax.random.split(key, layers * directions).reshape(layers, directions)
  return [[init(keys[l, k], input_size if l == 0 else directions * hidden_size, hidden_size,
                **init_kwargs) for k in range(directions)] for l in range(layers)]


def zero_state(cell: str, layers: int, directions: int, batch_size: int, hidden_size: int,
               dtype: DTypeLike = jnp.float32) -> jax.Array | tuple[jax.Array, jax.Array]:
  """The zero initial state of a stack, leaves ``<dtype>[layers, directions, B, H]``
  (LSTM: the pair ``(h, c)``); the stack's own default (``initial_state=None``).

  Args:
    cell: 'elman', 'gru' or 'lstm'.
    layers: L.
    directions: 1 or 2.
    batch_size: B.
    hidden_size: H.
    dtype: the params' dtype (float32 by default).

  Returns:
    ``<dtype>[L, directions, B, H]`` zeros, or a pair of them for LSTM.

  Raises:
    ValueError: for a cell not in CELLS.
  """
  checks.one_of('cell', cell, CELLS)
  zeros = jnp.zeros((layers, directions, batch_size, hidden_size), dtype)
  return (zeros, zeros) if cell == 'lstm' else zeros


def _hidden_size(cell_params: Any) -> int | None:
  """H of the cells of ``CELLS``: the rows of ``W_hh`` (Elman) or ``W_h`` (GRU, LSTM);
  None for the params of other layers."""
  for name in ('W_hh', 'W_h'):
    if isinstance(cell_params, Mapping) and name in cell_params:
      return jnp.shape(cell_params[name])[0]
  return None


def _input_size(cell_params: Any) -> int | None:
  """d of the cells of ``CELLS``: the rows of ``W_xh`` or ``W_x``; None otherwise."""
  for name in ('W_xh', 'W_x'):
    if isinstance(cell_params, Mapping) and name in cell_params:
      return jnp.shape(cell_params[name])[0]
  return None


def bidirectional(layer: Layer, params: Sequence[Any], inputs: jax.Array,
                  initial_state: Any = None, lengths: recurrence.Lengths = None
                  ) -> tuple[jax.Array, Any]:
  """One bidirectional layer: forward and length-aware reverse, concatenated.

  Args:
    layer: a layer function (``layer_for``).
    params: ``[forward_params, backward_params]``, one floating dtype, the
      dtype the layer computes in.
    inputs: ``<float>[B, T, d]``.
    initial_state: leaves ``[2, B, H]`` (direction first; ``[2, H]``: each
      direction's ``[H]`` broadcast over the batch by the layer); None
      (default): zeros.
    lengths: optional ``<int>[B]`` (an array or a list).

  Returns:
    ``(outputs [B, T, 2H], final)`` in the params' dtype: outputs hold the
    forward state then the backward state of each step (zero at padding);
    final leaves are ``[2, B, H]``: the forward state at ``lengths - 1`` and
    the backward state at t = 0.

  Raises:
    ValueError: for params that are not a list or tuple of two directions'
      params (one direction is the layer itself: ``layer(params, inputs)``),
      params of two floating dtypes, or as the layer (``recurrence.scan``,
      ``fused.elman_layer``).
  """
  if isinstance(params, Mapping) or not isinstance(params, Sequence) or len(params) != 2:
    given = (f'a {type(params).__name__} of {len(params)}' if isinstance(params, Sequence)
             else f'a {type(params).__name__}')
    raise ValueError(f'params: expected [forward_params, backward_params], one per direction, '
                     f'got {given}; for one direction call the layer itself')
  return _directions(layer, params, inputs, initial_state, lengths)


def _directions(layer: Layer, params: Sequence[Any], inputs: jax.Array, initial_state: Any,
                lengths: recurrence.Lengths) -> tuple[jax.Array, Any]:
  """``bidirectional`` of one or two directions (a stack's layer of either), unchecked."""
  dtypes.compute_dtype(params)  # both directions compute in one dtype
  outputs, finals = [], []
  for direction, direction_params in enumerate(params):
    state = jax.tree_util.tree_map(lambda s, k=direction: s[k], initial_state)
    out, final = layer(direction_params, inputs, state, lengths, reverse=direction == 1)
    outputs.append(out)
    finals.append(final)
  return (jnp.concatenate(outputs, axis=-1),
          jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *finals))


def stack(layer: Layer, params: Sequence[Sequence[Any]], inputs: jax.Array,
          initial_state: Any = None, lengths: recurrence.Lengths = None,
          dropout_rate: float = 0.0,
          key: jax.Array | None = None) -> tuple[jax.Array, Any]:
  """Stacked (and, with two directions per layer, bidirectional) recurrence.

  The outputs of layer l, after dropout, are the inputs of layer l + 1.
  Dropout (rate p, inverted: kept values are scaled by 1 / (1 - p)) acts
  between layers only, never on the recurrent connection, with a key split
  per layer and an independent mask at every step and batch entry.

  Args:
    layer: a layer function (``layer_for``).
    params: ``[layers][directions]`` cell params (``init_stack``), all of
      one floating dtype, the dtype the stack computes in.
    inputs: ``<float>[B, T, d]``, cast to the params' dtype.
    initial_state: leaves ``[layers, directions, B, H]`` (``zero_state``),
      cast to the params' dtype; leaves ``[layers, directions, H]`` are
      broadcast over the batch; None (default): zeros.
    lengths: optional ``<int>[B]`` (an array or a list), values in [0, T].
    dropout_rate: p in [0, 1); 0 (default) or key None: no dropout.
    key: ``jax.random`` key for dropout.

  Returns:
    ``(outputs [B, T, directions * H], final)`` in the params' dtype: the
    last layer's outputs (zero at padding) and final states with leaves
    ``[layers, directions, B, H]`` (backward direction: the state at t = 0).

  Raises:
    ValueError: for a dropout rate outside [0, 1), params written as nested
      lists of numbers (``checks.arrays``), params that are not
      ``[layers][directions]`` with one or two directions or not of one
      floating dtype, inputs not of rank 3, not floating (naming ``inputs``
      and its dtype) or not of the first layer's d, an
      initial state of another layout (an (h, c) pair for LSTM only; rank,
      layers, directions, B, or H where the cell's params give it), or
      lengths as ``recurrence.scan``.
  """
  checks.number('dropout_rate', dropout_rate, 0, 1, high_open=True)
  checks.arrays('params', params)
  directions = {len(p) for p in params}
  if not params or len(directions) != 1 or directions - {1, 2}:
    raise ValueError(f'params: expected a non-empty list over layers of lists of 1 or 2 '
                     f'directions, got directions {[len(p) for p in params]}')
  dtypes.compute_dtype(params)  # one floating dtype, or a ValueError naming params
  if jnp.ndim(inputs) != 3:
    raise ValueError(f'inputs: expected rank 3 [B, T, d], got shape {jnp.shape(inputs)}')
  dtypes.check_floating('inputs', inputs)
  if _input_size(params[0][0]) not in (None, inputs.shape[-1]):
    raise ValueError(f'inputs: expected d = {_input_size(params[0][0])} features (the first '
                     f'layer\'s input size), got shape {inputs.shape}')
  first = params[0][0]
  is_pair = isinstance(initial_state, tuple) and len(initial_state) == 2
  is_lstm = 'W_h' in first and first['W_h'].shape[1] == 4 * first['W_h'].shape[0]
  if initial_state is not None and _hidden_size(first) is not None and is_pair != is_lstm:
    raise ValueError('initial_state: expected an (h, c) pair for an LSTM stack and one array '
                     f'for the other cells, got {type(initial_state).__name__}')
  expected = (len(params), len(params[0]), inputs.shape[0], _hidden_size(params[0][0]))
  initial_state = jax.tree_util.tree_map(  # [layers, directions, H]: broadcast over the batch
      lambda leaf: jnp.broadcast_to(jnp.expand_dims(leaf, 2), leaf.shape[:2] + expected[2:3]
                                    + leaf.shape[2:]) if jnp.ndim(leaf) == 3 else leaf,
      initial_state)
  for leaf in jax.tree_util.tree_leaves(initial_state):
    if leaf.ndim != 4 or any(e is not None and e != n for e, n in zip(expected, leaf.shape)):
      raise ValueError(f'initial_state: expected leaves [layers, directions, B, H] = '
                       f'[{", ".join("H" if e is None else str(e) for e in expected)}], '
                       f'got {leaf.shape}')
  layer_keys = None if key is None else jax.random.split(key, len(params))
  finals = []
  for number, layer_params in enumerate(params):
    if number and dropout_rate and layer_keys is not None:
      keep = jax.random.bernoulli(layer_keys[number], 1 - dropout_rate, inputs.shape)
      inputs = jnp.where(keep, inputs / (1 - dropout_rate), 0.0)
    state = jax.tree_util.tree_map(lambda s, n=number: s[n], initial_state)
    inputs, final = _directions(layer, layer_params, inputs, state, lengths)
    finals.append(final)
  return inputs, jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *finals)
