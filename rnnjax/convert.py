"""Converters between PyTorch ``nn.RNN`` / ``nn.GRU`` / ``nn.LSTM`` state_dicts
and rnnjax params.

PyTorch stores column-vector weights and two biases per layer:
``weight_ih_l0 [G H, d]``, ``weight_hh_l0 [G H, H]``, ``bias_ih_l0 [G H]``,
``bias_hh_l0 [G H]`` (G = 1, 3, 4 blocks). rnnjax stores the row-vector layout:
Elman ``W_xh = weight_ih.T``, ``W_hh = weight_hh.T``, ``b = bias_ih +
bias_hh`` (one bias: they only ever appear summed); GRU and LSTM ``W_x``,
``W_h``, ``b = bias_ih``, ``b_hh = bias_hh`` (the GRU's reset gate multiplies
the hidden bias, so both are kept).

Stacks (``rnnjax.combinators``): entry ``{name}_l{l}`` is ``params[l][0]``
and ``{name}_l{l}_reverse`` is ``params[l][1]`` (``stack_from_torch``,
``stack_to_torch``). States need no function: PyTorch's ``h_0`` / ``h_n``
(and the LSTM's ``c_0`` / ``c_n``) ``[layers * directions, B, H]`` are
ordered layer by layer, so ``h_n.reshape(layers, directions, B, H)`` is the
combinators' ``[layers, directions, B, H]`` and ``h.reshape(-1, B, H)``
goes back.

A module built with ``bias=False`` has no bias entries and converts to
cell params without biases (``cells.init_elman(..., biases=0)``), and back.

Every converter returns float32, whatever the dtype it is given (a module
moved to bfloat16 or float16, float64 arrays): bfloat16 and float16 values
convert exactly, float64 ones round to nearest. Tensors are converted with
``Tensor.float()`` first, since numpy has no bfloat16 of its own. Params may
be any ``Mapping`` (flax's ``FrozenDict`` included).

References:
  PyTorch's ``nn.RNN``, ``nn.GRU`` and ``nn.LSTM`` documentation (the
  layouts and gate orders).
"""

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ['elman_from_torch', 'elman_to_torch', 'gated_from_torch', 'gated_to_torch',
           'stack_from_torch', 'stack_to_torch']

StateDict = Mapping[str, Any]
"""Names to tensors or arrays, as ``module.state_dict()`` gives them."""


def _float32(value: Any) -> np.ndarray:
  """A tensor (any float dtype, bfloat16 included, any device) or an array as a float32
  numpy array."""
  if hasattr(value, 'detach'):  # a torch.Tensor: numpy() has no bfloat16
    return value.detach().cpu().float().numpy()
  return np.asarray(value, np.float32)


def _getter(state_dict: StateDict, layer: int, suffix: str) -> Callable[[str], np.ndarray]:
  def get(name: str) -> np.ndarray:
    key = f'{name}_l{layer}{suffix}'
    if key not in state_dict:
      raise KeyError(f'state_dict: no entry {key!r}; it has {sorted(state_dict)}')
    return _float32(state_dict[key])
  return get


def elman_from_torch(state_dict: StateDict, layer: int = 0, suffix: str = ''
                     ) -> dict[str, jax.Array]:
  """rnnjax params of layer ``layer`` of an ``nn.RNN`` state_dict.

  Args:
    state_dict: mapping of names to tensors or arrays (``module.state_dict()``)
      of any float dtype (bfloat16 included).
    layer: the layer index l in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'W_xh': <float32>[d, H], 'W_hh': <float32>[H, H], 'b': <float32>[H]}``
    with ``b`` the sum of the biases present; no ``b`` for a module without
    biases (``bias=False``).

  Raises:
    KeyError: naming the missing entry.
  """
  get = _getter(state_dict, layer, suffix)
  w_hh = get('weight_hh')  # first: a missing layer is named by its recurrent weight
  params = {'W_xh': jnp.asarray(get('weight_ih').T), 'W_hh': jnp.asarray(w_hh.T)}
  biases = [get(name) for name in ('bias_ih', 'bias_hh')
            if f'{name}_l{layer}{suffix}' in state_dict]
  if biases:
    params['b'] = jnp.asarray(sum(biases, np.zeros(params['W_hh'].shape[0], np.float32)))
  return params


def _biases_to_torch(params: Mapping[str, np.ndarray], layer: int, suffix: str
                     ) -> dict[str, np.ndarray]:
  """``bias_ih`` = b and ``bias_hh`` = b_hh (zero where one is missing); none for params
  without biases (a module with ``bias=False``)."""
  if 'b' not in params and 'b_hh' not in params:
    return {}
  zeros = np.zeros_like(params['b'] if 'b' in params else params['b_hh'])
  return {f'bias_ih_l{layer}{suffix}': params.get('b', zeros).copy(),
          f'bias_hh_l{layer}{suffix}': params.get('b_hh', zeros).copy()}


def elman_to_torch(params: Mapping[str, Any], layer: int = 0, suffix: str = ''
                   ) -> dict[str, np.ndarray]:
  """A state_dict fragment (numpy arrays) for ``nn.RNN`` holding ``params``.

  ``b`` goes to ``bias_ih``; ``bias_hh`` is ``b_hh`` where the params have
  one, else zero, so their sum is the cell's bias. Params without biases give
  no bias entries (load them into ``nn.RNN(..., bias=False)``). Load it with
  ``module.load_state_dict({k: torch.from_numpy(v) ...})``.

  Args:
    params: Elman params (``cells.init_elman``), any float dtype.
    layer: the layer index l in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'weight_ih_l{l}{suffix}': <float32>[H, d], 'weight_hh_l{l}{suffix}':
    <float32>[H, H], 'bias_ih_l{l}{suffix}': <float32>[H],
    'bias_hh_l{l}{suffix}': <float32>[H]}`` (no biases for params without).
  """
  params = {k: _float32(v) for k, v in params.items()}
  return {f'weight_ih_l{layer}{suffix}': params['W_xh'].T.copy(),
          f'weight_hh_l{layer}{suffix}': params['W_hh'].T.copy(),
          **_biases_to_torch(params, layer, suffix)}


def gated_from_torch(state_dict: StateDict, layer: int = 0, suffix: str = ''
                     ) -> dict[str, jax.Array]:
  """GRU or LSTM params of one layer of an ``nn.GRU`` / ``nn.LSTM`` state_dict.

  Args:
    state_dict: mapping of names to tensors or arrays of any float dtype
      (bfloat16 included).
    layer: the layer index l in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'W_x': <float32>[d, G H], 'W_h': <float32>[H, G H], 'b': <float32>[G H],
    'b_hh': <float32>[G H]}`` (each bias only where the state_dict has it).

  Raises:
    KeyError: naming the missing entry.
  """
  get = _getter(state_dict, layer, suffix)
  params = {'W_x': jnp.asarray(get('weight_ih').T), 'W_h': jnp.asarray(get('weight_hh').T)}
  for name, entry in (('b', 'bias_ih'), ('b_hh', 'bias_hh')):
    if f'{entry}_l{layer}{suffix}' in state_dict:
      params[name] = jnp.asarray(get(entry))
  return params


def gated_to_torch(params: Mapping[str, Any], layer: int = 0, suffix: str = ''
                   ) -> dict[str, np.ndarray]:
  """A state_dict fragment (numpy arrays) for ``nn.GRU`` / ``nn.LSTM`` holding ``params``.

  Args:
    params: ``{'W_x': [d, G H], 'W_h': [H, G H], 'b': [G H]}`` (+ ``'b_hh': [G H]``),
      any float dtype.
    layer: the layer index l in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'weight_ih_l{l}{suffix}': <float32>[G H, d], 'weight_hh_l{l}{suffix}':
    <float32>[G H, H], 'bias_ih_l{l}{suffix}': <float32>[G H],
    'bias_hh_l{l}{suffix}': <float32>[G H]}``; a bias is zero where the
    params have only the other, and both are left out for params without
    biases.
  """
  params = {k: _float32(v) for k, v in params.items()}
  return {f'weight_ih_l{layer}{suffix}': params['W_x'].T.copy(),
          f'weight_hh_l{layer}{suffix}': params['W_h'].T.copy(),
          **_biases_to_torch(params, layer, suffix)}


BLOCKS = {'elman': 1, 'gru': 3, 'lstm': 4}
SUFFIXES = ('', '_reverse')


def _shape(state_dict: StateDict, key: str) -> tuple[int, ...]:
  if key not in state_dict:
    raise KeyError(f'state_dict: no entry {key!r}; it has {sorted(state_dict)}')
  return tuple(np.shape(state_dict[key]))


def _check_cell(cell: str) -> None:
  if cell not in BLOCKS:
    raise ValueError(f'cell: expected one of {tuple(BLOCKS)}, got {cell!r}')


def stack_from_torch(state_dict: StateDict, cell: str, num_layers: int, bidirectional: bool
                     ) -> list[list[dict[str, jax.Array]]]:
  """``[layers][directions]`` params (``rnnjax.combinators``) of a PyTorch stack.

  The state_dict is that of ``nn.RNN`` (cell 'elman'), ``nn.GRU`` ('gru') or
  ``nn.LSTM`` ('lstm') built with ``num_layers`` and ``bidirectional``
  (bias=True, or bias=False: cell params without biases). Every entry must be used: one more
  layer, a backward direction or an LSTM projection (``weight_hr``) that the
  arguments do not account for is an error, not silently dropped.

  Args:
    state_dict: mapping of names to tensors or arrays (``module.state_dict()``)
      of any float dtype (a module moved to bfloat16 too); values are
      converted to float32 numpy arrays.
    cell: 'elman', 'gru' or 'lstm'.
    num_layers: L >= 1.
    bidirectional: two directions per layer (entries ``*_reverse``).

  Returns:
    ``params[l][k]`` for l < L and k < (2 if bidirectional else 1): Elman
    ``{'W_xh': <float32>[d_l, H], 'W_hh': [H, H], 'b': [H]}`` (``b`` the sum
    of the two PyTorch biases), GRU / LSTM ``{'W_x': <float32>[d_l, G H],
    'W_h': [H, G H], 'b': [G H], 'b_hh': [G H]}`` with G = 3 / 4; d_0 = d and
    d_l = directions * H for l >= 1.

  Raises:
    KeyError: naming a missing entry.
    ValueError: for an unknown cell, L < 1, an entry of another shape (the
      state_dict of another cell: the expected shape is named) or entries
      that L and ``bidirectional`` leave unused.
  """
  _check_cell(cell)
  if not isinstance(num_layers, int) or num_layers < 1:
    raise ValueError(f'num_layers: expected an int >= 1, got {num_layers!r}')
  suffixes = SUFFIXES[:2 if bidirectional else 1]
  expected_names = {f'{name}_l{layer}{suffix}' for layer in range(num_layers)
                    for suffix in suffixes
                    for name in ('weight_ih', 'weight_hh', 'bias_ih', 'bias_hh')}
  unused = sorted(set(state_dict) - expected_names)
  if unused:
    raise ValueError(f'state_dict: entries {unused} are not part of a {cell} stack with '
                     f'num_layers={num_layers}, bidirectional={bidirectional}')
  hidden = _shape(state_dict, 'weight_hh_l0')[-1]
  blocks = BLOCKS[cell]
  for layer in range(num_layers):
    for suffix in suffixes:
      input_size = len(suffixes) * hidden if layer else _shape(state_dict, 'weight_ih_l0')[-1]
      shapes = {'weight_ih': (blocks * hidden, input_size),
                'weight_hh': (blocks * hidden, hidden),
                'bias_ih': (blocks * hidden,), 'bias_hh': (blocks * hidden,)}
      for name, shape in shapes.items():
        key = f'{name}_l{layer}{suffix}'
        if key in state_dict and _shape(state_dict, key) != shape:
          raise ValueError(f'state_dict: {key!r} expected shape {list(shape)} for a {cell} '
                           f'stack with H = {hidden} (G = {blocks} blocks), got '
                           f'{list(_shape(state_dict, key))}')
  from_torch = elman_from_torch if cell == 'elman' else gated_from_torch
  return [[from_torch(state_dict, layer, suffix) for suffix in suffixes]
          for layer in range(num_layers)]


def stack_to_torch(params: list[list[Mapping[str, Any]]], cell: str) -> dict[str, np.ndarray]:
  """A state_dict (numpy arrays) of a PyTorch stack holding ``[layers][directions]`` params.

  Load it into ``nn.RNN`` / ``nn.GRU`` / ``nn.LSTM(d, H, num_layers=L,
  bidirectional=directions == 2, batch_first=True)`` with
  ``module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})``.
  Elman params with one bias give ``bias_ih = b`` and ``bias_hh = 0``, so an
  ``nn.RNN`` state_dict comes back from ``stack_from_torch`` with its two
  biases summed into ``bias_ih``; GRU and LSTM state_dicts come back equal.

  Args:
    params: ``params[l][k]`` (``stack_from_torch``, ``combinators.init_stack``),
      any float dtype.
    cell: 'elman', 'gru' or 'lstm'.

  Returns:
    ``{'weight_ih_l{l}{suffix}': <float32>[G H, d_l], 'weight_hh_l{l}{suffix}':
    <float32>[G H, H], 'bias_ih_l{l}{suffix}': <float32>[G H],
    'bias_hh_l{l}{suffix}': <float32>[G H]}`` for every layer l, suffix ''
    (k = 0) and '_reverse' (k = 1).

  Raises:
    ValueError: for an unknown cell, params that are not a non-empty list of
      lists of 1 or 2 directions (all layers alike), or cell params of another
      cell (the expected entries or recurrent-weight shape are named).
  """
  _check_cell(cell)
  directions = {len(layer_params) for layer_params in params}
  if not params or len(directions) != 1 or directions - {1, 2}:
    raise ValueError(f'params: expected a non-empty list over layers of lists of 1 or 2 '
                     f'directions, got directions {[len(p) for p in params]}')
  weights, recurrent = (('W_xh', 'W_hh'), 'W_hh') if cell == 'elman' else (
      ('W_x', 'W_h'), 'W_h')
  to_torch = elman_to_torch if cell == 'elman' else gated_to_torch
  state_dict = {}
  for layer, layer_params in enumerate(params):
    for direction, cell_params in enumerate(layer_params):
      where = f'params[{layer}][{direction}]'
      missing = [name for name in weights if name not in cell_params]
      if missing:
        raise ValueError(f'{where}: expected {cell} entries {[*weights, "b"]}, missing '
                         f'{missing} (has {sorted(cell_params)}; the biases are optional)')
      given = tuple(np.shape(cell_params[recurrent]))
      shape = (given[0], BLOCKS[cell] * given[0])
      if given != shape:
        raise ValueError(f'{where}[{recurrent!r}]: expected shape [H, G H] = {list(shape)} '
                         f'for a {cell} cell, got {list(given)}')
      state_dict.update(to_torch(cell_params, layer, SUFFIXES[direction]))
  return state_dict
