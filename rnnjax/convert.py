"""Converters between PyTorch ``nn.RNN`` / ``nn.GRU`` / ``nn.LSTM`` state_dicts
and rnnjax params.

PyTorch stores column-vector weights and two biases per layer:
``weight_ih_l0 [G H, d]``, ``weight_hh_l0 [G H, H]``, ``bias_ih_l0 [G H]``,
``bias_hh_l0 [G H]`` (G = 1, 3, 4 blocks). rnnjax stores the row-vector layout:
Elman ``W_xh = weight_ih.T``, ``W_hh = weight_hh.T``, ``b = bias_ih +
bias_hh`` (one bias: they only ever appear summed); GRU and LSTM ``W_x``,
``W_h``, ``b = bias_ih``, ``b_hh = bias_hh`` (the GRU's reset gate multiplies
the hidden bias, so both are kept).
"""

import numpy as np
import jax.numpy as jnp


def _getter(state_dict, layer, suffix):
  def get(name):
    key = f'{name}_l{layer}{suffix}'
    if key not in state_dict:
      raise KeyError(f'state_dict: no entry {key!r}; it has {sorted(state_dict)}')
    value = state_dict[key]
    value = value.detach().cpu().numpy() if hasattr(value, 'detach') else np.asarray(value)
    return value.astype(np.float32)
  return get


def elman_from_torch(state_dict, layer: int = 0, suffix: str = ''):
  """rnnjax params of layer ``layer`` of an ``nn.RNN`` state_dict.

  Args:
    state_dict: mapping of names to tensors or arrays (``module.state_dict()``).
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
  one, else zero, so their sum is the cell's bias. Load it with ``module.load_state_dict({k: torch.from_numpy(v) ...})``.
  """
  params = {k: np.asarray(v, np.float32) for k, v in params.items()}
  return {f'weight_ih_l{layer}{suffix}': params['W_xh'].T.copy(),
          f'weight_hh_l{layer}{suffix}': params['W_hh'].T.copy(),
          f'bias_ih_l{layer}{suffix}': params['b'].copy(),
          f'bias_hh_l{layer}{suffix}': params.get('b_hh', np.zeros_like(params['b'])).copy()}


def gated_from_torch(state_dict, layer: int = 0, suffix: str = ''):
  """GRU or LSTM params of one layer of an ``nn.GRU`` / ``nn.LSTM`` state_dict.

  Returns:
    ``{'W_x': [d, G H], 'W_h': [H, G H], 'b': [G H], 'b_hh': [G H]}``.

  Raises:
    KeyError: naming the missing entry.
  """
  get = _getter(state_dict, layer, suffix)
  return {'W_x': jnp.asarray(get('weight_ih').T), 'W_h': jnp.asarray(get('weight_hh').T),
          'b': jnp.asarray(get('bias_ih')), 'b_hh': jnp.asarray(get('bias_hh'))}
