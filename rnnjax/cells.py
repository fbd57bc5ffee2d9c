"""Recurrent cells: pure functions ``cell(params, carry, x) -> (carry, y)``.

The argument order is ``jax.lax.scan``'s own, so a cell with its params bound
(``functools.partial(elman_cell, params)``) scans with no adapter. Params are
plain dicts of arrays in the row-vector layout of d2l (seed note 002):

  h_t = phi(x_t W_xh + h_{t-1} W_hh + b)          (Elman 1990, "SRN")

Shapes: ``x <float32>[B, d]``, ``carry = h <float32>[B, H]``,
``W_xh [d, H]``, ``W_hh [H, H]``, ``b [H]``.
"""

import functools

import jax
import jax.numpy as jnp

from rnnjax import initializers

ACTIVATIONS = {'tanh': jnp.tanh, 'relu': jax.nn.relu, 'linear': lambda a: a}

RECURRENT_INITS = ('gaussian', 'orthogonal', 'identity', 'uniform')


def elman_cell(params, carry, x, activation: str = 'tanh'):
  """One step of the Elman network.

  Args:
    params: ``{'W_xh': [d, H], 'W_hh': [H, H], 'b': [H]}``.
    carry: ``h_{t-1} <float32>[B, H]`` (or ``[H]``).
    x: ``x_t <float32>[B, d]`` (or ``[d]``).
    activation: 'tanh', 'relu' or 'linear' (the last for closed-form tests).

  Returns:
    ``(h_t, h_t)``: the new state, once as carry and once as output.

  Raises:
    ValueError: if the last axis of ``x`` is not d or that of ``carry`` not H.

  References:
    Elman (1990), "Finding Structure in Time"; seed notes 000 to 002.
  """
  input_size, hidden_size = params['W_xh'].shape
  if x.shape[-1] != input_size:
    raise ValueError(f'inputs: expected last axis d = {input_size} (W_xh is '
                     f'[{input_size}, {hidden_size}]), got shape {x.shape} per step')
  if carry.shape[-1] != hidden_size:
    raise ValueError(f'initial_state: expected last axis H = {hidden_size}, got shape {carry.shape}')
  h = ACTIVATIONS[activation](x @ params['W_xh'] + carry @ params['W_hh'] + params['b'])
  return h, h


def elman(activation: str = 'tanh'):
  """``elman_cell`` with its activation bound, ready to scan.

  Raises:
    ValueError: if ``activation`` is not one of ``ACTIVATIONS``.
  """
  if activation not in ACTIVATIONS:
    raise ValueError(f'activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}')
  return functools.partial(elman_cell, activation=activation)


def init_elman(key, input_size: int, hidden_size: int, recurrent_init: str = 'gaussian',
               radius: float = 1.0, input_scale: float | None = None):
  """Parameters of an Elman cell.

  Args:
    key: a ``jax.random`` key.
    input_size: d.
    hidden_size: H.
    recurrent_init: how W_hh is drawn: 'gaussian' (rescaled to spectral radius
      ``radius``), 'orthogonal' (orthogonal times ``radius``), 'identity'
      (``radius`` times I, IRNN) or 'uniform' (PyTorch's U(+-1/sqrt(H)),
      ``radius`` ignored).
    radius: spectral radius of W_hh (the gain for 'identity').
    input_scale: W_xh ~ N(0, input_scale^2); default 1/sqrt(d). With
      'uniform' W_xh is PyTorch's uniform too.

  Returns:
    ``{'W_xh': <float32>[d, H], 'W_hh': <float32>[H, H], 'b': <float32>[H]}``,
    b = 0 (uniform: U(+-1/sqrt(H)), the sum of PyTorch's two biases is not
    uniform, so one draw stands for both).

  Raises:
    ValueError: for a size < 1, a negative radius or an unknown init name.
  """
  for name, size in (('input_size', input_size), ('hidden_size', hidden_size)):
    if not isinstance(size, int) or size < 1:
      raise ValueError(f'{name}: expected a positive int, got {size!r}')
  key_x, key_h, key_b = jax.random.split(key, 3)
  if recurrent_init == 'uniform':
    return {
        'W_xh': initializers.pytorch_uniform(key_x, (input_size, hidden_size), hidden_size),
        'W_hh': initializers.pytorch_uniform(key_h, (hidden_size, hidden_size), hidden_size),
        'b': initializers.pytorch_uniform(key_b, (hidden_size,), hidden_size),
    }
  if recurrent_init == 'gaussian':
    w_hh = initializers.gaussian_at_radius(key_h, hidden_size, radius)
  elif recurrent_init == 'orthogonal':
    w_hh = initializers.orthogonal_at_radius(key_h, hidden_size, radius)
  elif recurrent_init == 'identity':
    w_hh = initializers.identity(hidden_size, radius)
  else:
    raise ValueError(f'recurrent_init: expected one of {RECURRENT_INITS}, got {recurrent_init!r}')
  scale = input_size ** -0.5 if input_scale is None else input_scale
  return {
      'W_xh': scale * jax.random.normal(key_x, (input_size, hidden_size), jnp.float32),
      'W_hh': w_hh,
      'b': jnp.zeros((hidden_size,), jnp.float32),
  }
