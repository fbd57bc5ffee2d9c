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

Every converter returns float32, whatever the dtype it is given (a module
moved to bfloat16 or float16, float64 arrays): bfloat16 and float16 values
convert exactly, float64 ones round to nearest. Tensors are converted with
``Tensor.float()`` first, since numpy has no bfloat16 of its own.
"""

import numpy as np
import jax.numpy as jnp


def _float32(value):
  """A tensor (any float dtype, bfloat16 included, any device) or an array as a float32
  numpy array."""
  if hasattr(value, 'detach'):  # a torch.Tensor: numpy() has no bfloat16
    return value.detach().cpu().float().numpy()
  return np.asarray(value, np.float32)


def _getter(state_dict, layer, suffix):
  def get(name):
    key = f'{name}_l{layer}{suffix}'
    if key not in state_dict:
      raise KeyError(f'state_dict: no entry {key!r}; it has {sorted(state_dict)}')
    return _float32(state_dict[key])
  return get


def elman_from_torch(state_dict, layer: int = 0, suffix: str = ''):
  """rnnjax params of layer ``layer`` of an ``nn.RNN`` state_dict.

  Args:
    state_dict: mapping of names to tensors or arrays (``module.state_dict()``)
      of any float dtype (bfloat16 included).
    layer: the layer index l in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'W_xh': <float32>[d, H], 'W_hh': <float32>[H, H], 'b': <float32>[H]}``.

  Raises:
    KeyError: naming the missing entry.
  """
  get = _getter(state_dict, layer, suffix)
  bias = np.zeros(get('weight_hh').shape[0], np.float32)
  for name in ('bias_ih', 'bias_hh'):
    if f'{name}_l{layer}{suffix}' in state_dict:
      bias = bias + get(name)
  return {'W_xh': jnp.asarray(get('weight_ih').T), 'W_hh': jnp.asarray(get('weight_hh').T),
          'b': jnp.asarray(bias)}


def elman_to_torch(params, layer: int = 0, suffix: str = ''):
  """A state_dict fragment (numpy arrays) for ``nn.RNN`` holding ``params``.

  ``b`` goes to ``bias_ih``; ``bias_hh`` is ``b_hh`` where the params have
  one, else zero, so their sum is the cell's bias. Load it with
  ``module.load_state_dict({k: torch.from_numpy(v) ...})``. Params of any
  float dtype give float32 arrays.
  """
  params = {k: _float32(v) for k, v in params.items()}
  return {f'weight_ih_l{layer}{suffix}': params['W_xh'].T.copy(),
          f'weight_hh_l{layer}{suffix}': params['W_hh'].T.copy(),
          f'bias_ih_l{layer}{suffix}': params['b'].copy(),
          f'bias_hh_l{layer}{suffix}': params.get('b_hh', np.zeros_like(params['b'])).copy()}


def gated_from_torch(state_dict, layer: int = 0, suffix: str = ''):
  """GRU or LSTM params of one layer of an ``nn.GRU`` / ``nn.LSTM`` state_dict
  (tensors or arrays of any float dtype, bfloat16 included).

  Returns:
    ``{'W_x': [d, G H], 'W_h': [H, G H], 'b': [G H], 'b_hh': [G H]}``.

  Raises:
    KeyError: naming the missing entry.
  """
  get = _getter(state_dict, layer, suffix)
  return {'W_x': jnp.asarray(get('weight_ih').T), 'W_h': jnp.asarray(get('weight_hh').T),
          'b': jnp.asarray(get('bias_ih')), 'b_hh': jnp.asarray(get('bias_hh'))}


def gated_to_torch(params, layer: int = 0, suffix: str = ''):
  """A state_dict fragment (numpy arrays) for ``nn.GRU`` / ``nn.LSTM`` holding ``params``.

  Args:
    params: ``{'W_x': [d, G H], 'W_h': [H, G H], 'b': [G H]}`` (+ ``'b_hh': [G H]``),
      any float dtype.
    layer: the layer index l in ``weight_ih_l{l}``.
    suffix: '' for the forward direction, '_reverse' for the backward one.

  Returns:
    ``{'weight_ih_l{l}{suffix}': <float32>[G H, d], 'weight_hh_l{l}{suffix}':
    <float32>[G H, H], 'bias_ih_l{l}{suffix}': <float32>[G H],
    'bias_hh_l{l}{suffix}': <float32>[G H]}``; ``bias_hh`` is zero where the
    params have no ``b_hh``.
  """
  params = {k: _float32(v) for k, v in params.items()}
  return {f'weight_ih_l{layer}{suffix}': params['W_x'].T.copy(),
          f'weight_hh_l{layer}{suffix}': params['W_h'].T.copy(),
          f'bias_ih_l{layer}{suffix}': params['b'].copy(),
          f'bias_hh_l{layer}{suffix}': params.get('b_hh', np.zeros_like(params['b'])).copy()}


BLOCKS = {'elman': 1, 'gru': 3, 'lstm': 4}
SUFFIXES = ('', '_reverse')


def _shape(state_dict, key):
  if key not in state_dict:
    raise KeyError(f'state_dict: no entry {key!r}; it has {sorted(state_dict)}')
  return tuple(np.shape(state_dict[key]))


def _check_cell(cell):
  if cell not in BLOCKS:
    raise ValueError(f'cell: expected one of {tuple(BLOCKS)}, got {cell!r}')


def stack_from_torch(state_dict, cell: str, num_layers: int, bidirectional: bool):
  """``[layers][directions]`` params (``rnnjax.combinators``) of a PyTorch stack.

  The state_dict is that of ``nn.RNN`` (cell 'elman'), ``nn.GRU`` ('gru') or
  ``nn.LSTM`` ('lstm') built with ``num_layers`` and ``bidirectional``
  (bias=True; ``nn.RNN`` also bias=False). Every entry must be used: one more
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


def stack_to_torch(params, cell: str):
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
  names, recurrent = (('W_xh', 'W_hh', 'b'), 'W_hh') if cell == 'elman' else (
      ('W_x', 'W_h', 'b'), 'W_h')
  to_torch = elman_to_torch if cell == 'elman' else gated_to_torch
  state_dict = {}
  for layer, layer_params in enumerate(params):
    for direction, cell_params in enumerate(layer_params):
      where = f'params[{layer}][{direction}]'
      missing = [name for name in names if name not in cell_params]
      if missing:
        raise ValueError(f'{where}: expected {cell} entries {list(names)}, missing {missing} '
                         f'(has {sorted(cell_params)})')
      given = tuple(np.shape(cell_params[recurrent]))
      shape = (given[0], BLOCKS[cell] * given[0])
      if given != shape:
        raise ValueError(f'{where}[{recurrent!r}]: expected shape [H, G H] = {list(shape)} '
                         f'for a {cell} cell, got {list(given)}')
      state_dict.update(to_torch(cell_params, layer, SUFFIXES[direction]))
  return state_dict
