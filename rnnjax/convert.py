"""Converters between PyTorch ``nn.RNN`` state_dicts and rnnjax Elman params.

PyTorch stores column-vector weights and two biases per layer:
``weight_ih_l0 [H, d]``, ``weight_hh_l0 [H, H]``, ``bias_ih_l0 [H]``,
``bias_hh_l0 [H]``. rnnjax stores the row-vector layout and one bias:
``W_xh = weight_ih.T``, ``W_hh = weight_hh.T``, ``b = bias_ih + bias_hh``.
"""

import numpy as np
import jax.numpy as jnp


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
  def get(name):
    key = f'{name}_l{layer}{suffix}'
    if key not in state_dict:
      raise KeyError(f'state_dict: no entry {key!r}; it has {sorted(state_dict)}')
    value = state_dict[key]
    value = value.detach().cpu().numpy() if hasattr(value, 'detach') else np.asarray(value)
    return value.astype(np.float32)

  bias = np.zeros(get('weight_hh').shape[0], np.float32)
  for name in ('bias_ih', 'bias_hh'):
    if f'{name}_l{layer}{suffix}' in state_dict:
      bias = bias + get(name)
  return {'W_xh': jnp.asarray(get('weight_ih').T), 'W_hh': jnp.asarray(get('weight_hh').T),
          'b': jnp.asarray(bias)}


def elman_to_torch(params, layer: int = 0, suffix: str = ''):
  """A state_dict fragment (numpy arrays) for ``nn.RNN`` holding ``params``.

  The single bias goes to ``bias_ih``; ``bias_hh`` is zero, so their sum is
  ``b``. Load it with ``module.load_state_dict({k: torch.from_numpy(v) ...})``.
  """
  params = {k: np.asarray(v, np.float32) for k, v in params.items()}
  return {f'weight_ih_l{layer}{suffix}': params['W_xh'].T.copy(),
          f'weight_hh_l{layer}{suffix}': params['W_hh'].T.copy(),
          f'bias_ih_l{layer}{suffix}': params['b'].copy(),
          f'bias_hh_l{layer}{suffix}': np.zeros_like(params['b'])}
