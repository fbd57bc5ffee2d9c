"""Initializers for the recurrent weight W_hh, named for what they control.

Each returns a float32 matrix ``<float32>[H, H]`` in rnnjax's row-vector
layout (``h_t = phi(x_t W_xh + h_{t-1} W_hh + b)``); the spectral radius of a
matrix is the same in either layout.

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks": the spectral radius rho(W_hh) decides whether gradients
  vanish (rho < 1) or can explode (rho > 1).
  Le, Jaitly & Hinton (2015), "A simple way to initialize recurrent networks
  of rectified linear units" (IRNN: identity W_hh with relu).
  Saxe, McClelland & Ganguli (2014): orthogonal initialization.
"""

from collections.abc import Sequence
import math
import numbers
from typing import Any

import jax
from jax.typing import ArrayLike
import jax.numpy as jnp
import numpy as np

__all__ = ['gaussian_at_radius', 'identity', 'orthogonal_at_radius', 'pytorch_uniform',
           'sparse_at_radius', 'spectral_radius']


def _check_size(hidden_size: Any) -> None:
  if not isinstance(hidden_size, (int, np.integer)) or hidden_size < 1:
    raise ValueError(f'hidden_size: expected a positive int, got {hidden_size!r}')


def check_radius(name: str, value: Any) -> None:
  """Raises ValueError naming ``name`` unless ``value`` is a real number (not a bool) in
  [0, inf): a spectral radius, a gain, a scale. A 0-d numpy or JAX array of a real
  dtype counts as its number; a traced one (under ``jit`` or ``vmap``) passes
  unchecked, as its value is not known until it runs."""
  if isinstance(value, jax.core.Tracer):
    real = jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer)
    if jnp.shape(value) or not real:
      raise ValueError(f'{name}: expected a real 0-d value, got a traced '
                       f'{value.dtype}{list(jnp.shape(value))}')
    return
  if isinstance(value, (np.ndarray, jax.Array)) and value.shape == () and (
      np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)):
    value = value.item()
  if (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or
      not 0 <= float(value) < math.inf):
    raise ValueError(f'{name}: expected a finite value >= 0, got {value!r}')


def host_spectral_radius(matrix: ArrayLike) -> np.float32:
  """rho(matrix) = max |eigenvalue| of a host ``[H, H]`` matrix, solved in float64
  numpy, as a float32; NaN for a matrix with a NaN or an infinity. (One
  module-level function, so that JAX caches ``spectral_radius``'s callback.)"""
  matrix = np.asarray(matrix, np.float64)
  if not np.isfinite(matrix).all():
    return np.float32(np.nan)
  return np.float32(np.max(np.abs(np.linalg.eigvals(matrix))))


def spectral_radius(matrix: ArrayLike) -> jax.Array:
  """Largest absolute eigenvalue of a square matrix, computed on the host.

  The eigenvalue solve runs in numpy (float64): on a concrete matrix directly, on a traced
  one (under ``jit``, ``vmap``) through ``jax.pure_callback``, so it works on any backend.
  (Called eagerly, the callback's program can wait on its own argument's buffer, a
  deadlock; the direct path runs no program.)

  Args:
    matrix: ``[H, H]`` array.

  Returns:
    float32 scalar rho(matrix) = max_i |lambda_i|; NaN if the matrix holds a
    NaN or an infinity (a diverged run).

  Raises:
    ValueError: if ``matrix`` is not square or is empty.
  """
  shape = jnp.shape(matrix)
  if len(shape) != 2 or shape[0] != shape[1] or not shape[0]:
    raise ValueError(f'matrix: expected a square [H, H] array, H >= 1, got shape {shape}')

  if not isinstance(matrix, jax.core.Tracer):  # a concrete matrix: solved here, no callback
    return jnp.asarray(host_spectral_radius(np.asarray(matrix)), jnp.float32)
  return jax.pure_callback(host_spectral_radius, jax.ShapeDtypeStruct((), jnp.float32), matrix,
                           vmap_method='sequential')


def gaussian_at_radius(key: jax.Array, hidden_size: int, radius: ArrayLike) -> jax.Array:
  """Gaussian W_hh rescaled so that its spectral radius is exactly ``radius``.

  W ~ N(0, 1) elementwise, then W <- W * radius / rho(W); the eigenvalue
  solve runs once on the host (``spectral_radius``).

  Args:
    key: a ``jax.random`` key.
    hidden_size: H.
    radius: the requested spectral radius rho >= 0 (a number, or a 0-d
      array, traced under ``vmap``).

  Returns:
    ``<float32>[H, H]`` with rho(W) = radius (to float32 rounding).

  Raises:
    ValueError: if ``radius`` < 0 or not finite, or ``hidden_size`` < 1.
  """
  _check_size(hidden_size)
  check_radius('radius', radius)
  w = jax.random.normal(key, (hidden_size, hidden_size), jnp.float32)
  return w * (radius / spectral_radius(w))


def orthogonal_at_radius(key: jax.Array, hidden_size: int, radius: ArrayLike) -> jax.Array:
  """A random orthogonal matrix times ``radius``.

  Every eigenvalue of an orthogonal matrix has modulus 1, so the result has
  spectral radius (and every singular value) exactly ``radius``.

  Args:
    key: a ``jax.random`` key.
    hidden_size: H.
    radius: the requested spectral radius (the gain) >= 0.

  Returns:
    ``<float32>[H, H]``.

  Raises:
    ValueError: if ``radius`` < 0 or not finite, or ``hidden_size`` < 1.
  """
  _check_size(hidden_size)
  check_radius('radius', radius)
  q = jax.nn.initializers.orthogonal()(key, (hidden_size, hidden_size), jnp.float32)
  return jnp.multiply(radius, q)


def identity(hidden_size: int, gain: ArrayLike = 1.0) -> jax.Array:
  """``gain`` times the identity: the IRNN initialization (Le et al. 2015).

  Args:
    hidden_size: H.
    gain: the diagonal value >= 0, a number or a 0-d array.

  Returns:
    ``<float32>[H, H]`` with spectral radius ``gain``.

  Raises:
    ValueError: if ``gain`` < 0 or not finite, or ``hidden_size`` < 1.
  """
  _check_size(hidden_size)
  check_radius('gain', gain)
  return jnp.multiply(gain, jnp.eye(hidden_size, dtype=jnp.float32))


def pytorch_uniform(key: jax.Array, shape: Sequence[int], hidden_size: int) -> jax.Array:
  """PyTorch's default RNN init: U(-1/sqrt(H), 1/sqrt(H)) for every weight.

  Args:
    key: a ``jax.random`` key.
    shape: shape of the array to draw.
    hidden_size: H, which sets the bound 1/sqrt(H).

  Returns:
    ``<float32>[*shape]``.

  Raises:
    ValueError: if ``hidden_size`` is not an int >= 1.

  References:
    PyTorch's ``nn.RNN`` documentation ("Variables": every weight and bias
    is U(-sqrt(k), sqrt(k)), k = 1 / hidden_size).
  """
  _check_size(hidden_size)
  bound = 1.0 / np.sqrt(hidden_size)
  return jax.random.uniform(key, shape, jnp.float32, -bound, bound)


def sparse_at_radius(key: jax.Array, hidden_size: int, nonzeros: int = 15,
                     radius: ArrayLike = 0.95) -> jax.Array:
  """Sparse Gaussian W_hh, ``nonzeros`` entries per row, at spectral radius ``radius``.

  The "smart tanh" W_hh of Pascanu et al.: W ~ N(0, 1) elementwise, then in
  each row i all but ``nonzeros`` entries, chosen uniformly (the first
  ``nonzeros`` of a random permutation of the columns, the argsort of
  uniform draws, as the reference's ``rng.permutation``), are set to 0, and
  W <- W * radius / rho(W) (``spectral_radius``, once on the host). The
  reference code draws N(0, 0.01^2); that scale cancels in the rescaling.

  Rows hold the non-zeros: the reference code computes ``dot(h_tm1, W_hh)``,
  the row layout of rnnjax, and zeroes ``W_hh[dx][spng[15:]]`` in each row
  dx, so unit i feeds exactly ``nonzeros`` units at the next step (its
  outgoing weights W[i, :]) while the number feeding each unit varies.

  Args:
    key: a ``jax.random`` key.
    hidden_size: H.
    nonzeros: non-zero entries per row, in [1, H] (15 in the reference).
    radius: the requested spectral radius rho >= 0 (0.95 in the reference).

  Returns:
    ``<float32>[H, H]`` with exactly ``nonzeros`` non-zeros in every row
    (with probability 1) and rho(W) = radius (to float32 rounding).

  Raises:
    ValueError: if ``hidden_size`` < 1, ``nonzeros`` is not an int in
      [1, H], or ``radius`` is negative or not finite.

  References:
    Pascanu, Mikolov & Bengio (2013), the "smart tanh" initialization of
    the synthetic problems; github.com/pascanur/trainingRNNs, RNN.py lines
    125-134.
  """
  _check_size(hidden_size)
  if not isinstance(nonzeros, (int, np.integer)) or not 1 <= nonzeros <= hidden_size:
    raise ValueError(f'nonzeros: expected an int in [1, H] = [1, {hidden_size}], '
                     f'got {nonzeros!r}')
  check_radius('radius', radius)
  key_values, key_columns = jax.random.split(key)
  w = jax.random.normal(key_values, (hidden_size, hidden_size), jnp.float32)
  order = jnp.argsort(jax.random.uniform(key_columns, (hidden_size, hidden_size)), axis=1)
  columns = order[:, :nonzeros]  # [H, nonzeros], distinct within each row
  mask = jnp.sum(jax.nn.one_hot(columns, hidden_size, dtype=jnp.float32), axis=1)
  w = w * mask
  return w * (radius / spectral_radius(w))
