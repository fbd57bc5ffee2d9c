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

Every entry is read through one rule (``_entry``): its shape is checked against the
layout above before it is used, and an entry that is missing or of another shape (a bias of
shape [1], a GRU's [3 H, H] read as an Elman layer's, a non-square ``weight_hh``) is one
ValueError line naming the entry, the shape expected and the shape given.

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

from rnnjax import checks

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


BLOCKS = {'elman': 1, 'gru': 3, 'lstm': 4}
SUFFIXES = ('', '_reverse')
GATED = (3, 4)  # G of a GRU and of an LSTM


def _entry(entries: Mapping[str, Any], where: str, key: str, dims: tuple[str, ...],
           sizes: dict[str, int], blocks: tuple[int, ...] = GATED, note: str = '',
           hint: str = '') -> np.ndarray:
  """``entries[key]`` as a float32 numpy array of shape ``dims``: the rule of every converter.

  Each dim is a name ('H', 'G H', 'd'): a name in ``sizes`` must have that size, any other
  is bound in ``sizes`` to the size it first has (so ``('H', 'H')`` is a square matrix);
  'G H' must be G times H for a G of ``blocks``. ``note`` follows the expected shape (' for
  a gru stack'), ``hint`` the given one where it does not fit.

  Raises:
    ValueError: in one line, ``where[key]: expected shape [H] = [4], got [1]`` (the sizes
      known so far put in), or ``where: no entry key (expected shape ...); it has [...]``.
  """
  def expected() -> str:
    text = '[' + ', '.join(dims) + ']'
    if any(dim in sizes for dim in dims):
      text += ' = [' + ', '.join(str(sizes.get(dim, dim)) for dim in dims) + ']'
    if 'G H' in dims and 'G H' not in sizes:
      text += f' with G = {blocks[0]}' if len(blocks) == 1 else f' with G in {blocks}'
    return text + note

  if not isinstance(entries, Mapping):
    raise ValueError(f'{where}: expected a mapping of names to arrays, got '
                     f'{type(entries).__name__}')
  if key not in entries:
    raise ValueError(f'{where}: no entry {key!r} (expected shape {expected()}); it has '
                     f'{sorted(entries)}')
  value = entries[key]
  shape = tuple(value.shape) if hasattr(value, 'shape') else np.shape(value)
  bound = dict(sizes)
  fits = len(shape) == len(dims)
  for dim, size in zip(dims, shape) if fits else ():
    fits = fits and bound.setdefault(dim, size) == size
  if fits and 'G H' in dims and 'H' in bound:
    fits = any(bound['G H'] == g * bound['H'] for g in blocks)
  if not fits:
    raise ValueError(f'{where}[{key!r}]: expected shape {expected()}, got {list(shape)}{hint}')
  sizes.update(bound)
  return _float32(value)


def _check_place(layer: Any, suffix: Any) -> None:
  checks.integer('layer', layer, 0)
  checks.one_of('suffix', suffix, SUFFIXES)


def _from_torch(state_dict: StateDict, layer: int, suffix: str, gated: bool,
                sizes: dict[str, int], blocks: tuple[int, ...] = GATED, note: str = ''
                ) -> dict[str, jax.Array]:
  """One layer's params from a state_dict; every entry through ``_entry``."""
  def get(name: str, dims: tuple[str, ...], hint: str = '') -> np.ndarray:
    return _entry(state_dict, 'state_dict', f'{name}_l{layer}{suffix}', dims, sizes, blocks,
                  note, hint)
  rows = 'G H' if gated else 'H'
  square = '' if gated else (' (a GRU or an LSTM layer, [G H, H], converts with '
                             'gated_from_torch)')
  w_hh = get('weight_hh', (rows, 'H'), square)  # first: a missing layer is named by it
  w_ih = get('weight_ih', (rows, 'd'))
  biases = {name: get(name, (rows,)) for name in ('bias_ih', 'bias_hh')
            if f'{name}_l{layer}{suffix}' in state_dict}
  if gated:
    params = {'W_x': jnp.asarray(w_ih.T), 'W_h': jnp.asarray(w_hh.T)}
    for name, entry in (('b', 'bias_ih'), ('b_hh', 'bias_hh')):
      if entry in biases:
        params[name] = jnp.asarray(biases[entry])
    return params
  params = {'W_xh': jnp.asarray(w_ih.T), 'W_hh': jnp.asarray(w_hh.T)}
  if biases:
    params['b'] = jnp.asarray(sum(biases.values(), np.zeros(w_hh.shape[0], np.float32)))
  return params


def _to_torch(params: Mapping[str, Any], layer: int, suffix: str, gated: bool,
              sizes: dict[str, int], where: str = 'params', blocks: tuple[int, ...] = GATED
              ) -> dict[str, np.ndarray]:
  """One layer's state_dict fragment from its params; every entry through ``_entry``."""
  names = ('W_x', 'W_h') if gated else ('W_xh', 'W_hh')
  columns = 'G H' if gated else 'H'
  w_h = _entry(params, where, names[1], ('H', columns), sizes, blocks)
  w_x = _entry(params, where, names[0], ('d', columns), sizes, blocks)
  biases = {name: _entry(params, where, name, (columns,), sizes, blocks)
            for name in ('b', 'b_hh') if name in params}
  return {f'weight_ih_l{layer}{suffix}': w_x.T.copy(),
          f'weight_hh_l{layer}{suffix}': w_h.T.copy(),
          **_biases_to_torch(biases, layer, suffix)}


def elman_from_torch(state_dict: StateDict, layer: int = 0, suffix: str = ''
                     ) -> dict[str, jax.Array]:
  """rnnjax params of layer ``layer`` of an ``nn.RNN`` state_dict.

  Args:
    state_dict: mapping of names to tensors or arrays (``module.state_dict()``)
      of any float dtype (bfloat16 included): ``weight_ih_l{l}{suffix}`` ``[H, d]``,
      ``weight_hh_l{l}{suffix}`` ``[H, H]``, biases ``[H]`` (optional).
    layer: the layer index l >= 0 in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'W_xh': <float32>[d, H], 'W_hh': <float32>[H, H], 'b': <float32>[H]}``
    with ``b`` the sum of the biases present; no ``b`` for a module without
    biases (``bias=False``).

  Raises:
    ValueError: in one line naming the entry, for a missing weight or an entry of
      another shape (a GRU's state_dict, a bias of shape [1]), or a bad layer or suffix.
  """
  _check_place(layer, suffix)
  return _from_torch(state_dict, layer, suffix, False, {})


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
    params: Elman params (``cells.init_elman``: ``W_xh [d, H]``, ``W_hh [H, H]``, ``b [H]``
      and ``b_hh [H]`` optional), any float dtype.
    layer: the layer index l >= 0 in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'weight_ih_l{l}{suffix}': <float32>[H, d], 'weight_hh_l{l}{suffix}':
    <float32>[H, H], 'bias_ih_l{l}{suffix}': <float32>[H],
    'bias_hh_l{l}{suffix}': <float32>[H]}`` (no biases for params without).

  Raises:
    ValueError: in one line naming the entry, for a missing weight or an entry of
      another shape, or a bad layer or suffix.
  """
  _check_place(layer, suffix)
  return _to_torch(params, layer, suffix, False, {})


def gated_from_torch(state_dict: StateDict, layer: int = 0, suffix: str = ''
                     ) -> dict[str, jax.Array]:
  """GRU or LSTM params of one layer of an ``nn.GRU`` / ``nn.LSTM`` state_dict.

  Args:
    state_dict: mapping of names to tensors or arrays of any float dtype
      (bfloat16 included): ``weight_ih_l{l}{suffix}`` ``[G H, d]``,
      ``weight_hh_l{l}{suffix}`` ``[G H, H]`` (G = 3 or 4), biases ``[G H]`` (optional).
    layer: the layer index l >= 0 in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'W_x': <float32>[d, G H], 'W_h': <float32>[H, G H], 'b': <float32>[G H],
    'b_hh': <float32>[G H]}`` (each bias only where the state_dict has it).

  Raises:
    ValueError: in one line naming the entry, for a missing weight or an entry of
      another shape, or a bad layer or suffix.
  """
  _check_place(layer, suffix)
  return _from_torch(state_dict, layer, suffix, True, {})


def gated_to_torch(params: Mapping[str, Any], layer: int = 0, suffix: str = ''
                   ) -> dict[str, np.ndarray]:
  """A state_dict fragment (numpy arrays) for ``nn.GRU`` / ``nn.LSTM`` holding ``params``.

  Args:
    params: ``{'W_x': [d, G H], 'W_h': [H, G H], 'b': [G H]}`` (+ ``'b_hh': [G H]``),
      G = 3 or 4, any float dtype.
    layer: the layer index l >= 0 in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'weight_ih_l{l}{suffix}': <float32>[G H, d], 'weight_hh_l{l}{suffix}':
    <float32>[G H, H], 'bias_ih_l{l}{suffix}': <float32>[G H],
    'bias_hh_l{l}{suffix}': <float32>[G H]}``; a bias is zero where the
    params have only the other, and both are left out for params without
    biases.

  Raises:
    ValueError: in one line naming the entry, for a missing weight or an entry of
      another shape, or a bad layer or suffix.
  """
  _check_place(layer, suffix)
  return _to_torch(params, layer, suffix, True, {})


def _check_cell(cell: str) -> None:
  checks.one_of('cell', cell, tuple(BLOCKS))


def _layer_sizes(first: dict[str, int], layer: int, directions: int) -> dict[str, int]:
  """The sizes every entry of ``layer`` of a stack must have, from layer 0's: the same H
  and G H, and d = directions * H above layer 0."""
  if not layer:
    return dict(first)
  return {**first, 'd': directions * first['H']}


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
    ValueError: for an unknown cell, L < 1, a missing entry or one of another shape (the
      state_dict of another cell: the expected shape is named), or entries that L and
      ``bidirectional`` leave unused.
  """
  _check_cell(cell)
  num_layers = checks.integer('num_layers', num_layers, 1)
  suffixes = SUFFIXES[:2 if bidirectional else 1]
  expected_names = {f'{name}_l{layer}{suffix}' for layer in range(num_layers)
                    for suffix in suffixes
                    for name in ('weight_ih', 'weight_hh', 'bias_ih', 'bias_hh')}
  unused = sorted(set(state_dict) - expected_names)
  if unused:
    raise ValueError(f'state_dict: entries {unused} are not part of a {cell} stack with '
                     f'num_layers={num_layers}, bidirectional={bidirectional}')
  first: dict[str, int] = {}
  params: list[list[dict[str, jax.Array]]] = []
  for layer in range(num_layers):
    params.append([])
    for suffix in suffixes:
      sizes = _layer_sizes(first, layer, len(suffixes))
      params[-1].append(_from_torch(state_dict, layer, suffix, cell != 'elman', sizes,
                                    (BLOCKS[cell],), f' for a {cell} stack'))
      first = first or sizes
  return params


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
      cell or shape (the entry, its expected shape and the given one are named).
  """
  _check_cell(cell)
  directions = {len(layer_params) for layer_params in params}
  if not params or len(directions) != 1 or directions - {1, 2}:
    raise ValueError(f'params: expected a non-empty list over layers of lists of 1 or 2 '
                     f'directions, got directions {[len(p) for p in params]}')
  state_dict = {}
  first: dict[str, int] = {}
  for layer, layer_params in enumerate(params):
    for direction, cell_params in enumerate(layer_params):
      sizes = _layer_sizes(first, layer, len(layer_params))
      state_dict.update(_to_torch(cell_params, layer, SUFFIXES[direction], cell != 'elman',
                                  sizes, f'params[{layer}][{direction}]', (BLOCKS[cell],)))
      first = first or sizes
  return state_dict
