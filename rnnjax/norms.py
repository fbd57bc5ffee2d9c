"""Norms that do not overflow: the one way rnnjax computes them.

  vector_norm    ||x|| along axes                    global_norm    ||g|| of a whole pytree
  scaled_norm    ||x|| as (m, e), ||x|| = m 2^e       norm_ratio     ||a|| / ||b||, from both
  spectral_norm  sigma_max of each matrix            scale_exponent the e of 2^e below
  ldexp          x 2^n, jnp.ldexp's values

Every norm of the library (the gradient-norm profile and table, clipping, Omega, the Jacobian
products) is one of these.

The plain sqrt(sum g^2) squares first, and a float32 square overflows for
|g| above about 1.8e19: the norm of [3e19, 4e19] comes out inf (and a ratio
of two such norms NaN), though the norm, 5e19, is a float32; below 1e-19 the
squares underflow to 0. Here every entry is scaled by the power of two 2^-e
just above the largest magnitude m = max |g| first,

  ||g|| = 2^e sqrt(sum (g 2^-e)^2),   2^(e-1) <= m < 2^e,

so each square lies in [0, 1) and the largest in [1/4, 1): the result
overflows only where the norm itself is beyond the dtype's range. A power of
two scales exactly (``ldexp``), where dividing by m would not: XLA on CPU
divides by multiplying with 1 / m, which is flushed to 0 for m above 8.5e37. An infinite entry
makes the norm inf, a NaN entry NaN; an empty or all-zero input has norm 0.
A ratio of two norms (``norm_ratio``) is formed from their scaled forms, so it is
finite wherever it is a number of the dtype, though a norm may be past its range.

The derivative is the norm's own, d||g|| = <g / ||g||, dg>, evaluated on the
scaled entries (g 2^-e and ||g|| 2^-e, so no product overflows either), and
taken as 0 at g = 0, where the norm has no derivative: a subgradient, so a
loss with a norm of a zero vector in it keeps a finite gradient (plain
autodiff of sqrt gives NaN there).

The result's dtype is the inputs' floating dtype, at least float32 (bfloat16
and float16 inputs are summed in float32; integer inputs are taken as
float32); a pytree of float32 and float64 leaves gives float64.

References:
  Blue (1978), "A portable Fortran program to find the Euclidean norm of a
  vector", ACM TOMS 4(1) (scaling against overflow and underflow);
  LAPACK's ``dnrm2``; ``numpy.linalg.norm`` and ``optax.tree.norm`` (which
  square unscaled).
"""

from collections.abc import Iterable
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ['global_norm', 'ldexp', 'norm_ratio', 'scale_exponent', 'scaled_norm',
           'spectral_norm', 'vector_norm']


def _floating(dtypes: Iterable[Any]) -> np.dtype[Any]:
  """The widest of ``dtypes`` that is float32 or float64 (float32 for none, ints, halves)."""
  return jnp.dtype(jnp.float64) if any(jnp.dtype(d) == jnp.float64 for d in dtypes) else \
      jnp.dtype(jnp.float32)


def _normalized_axes(axis: Any, ndim: int) -> tuple[int, ...]:
  axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
  if any(not isinstance(a, (int, np.integer)) or isinstance(a, bool) or not -ndim <= a < ndim
         for a in axes):
    raise ValueError(f'axis: expected ints in [-{ndim}, {ndim}) for an array of rank {ndim}, '
                     f'got {axis!r}')
  normalized = tuple(sorted(int(a) % ndim for a in axes))
  if len(set(normalized)) != len(normalized):
    raise ValueError(f'axis: expected distinct axes, got {axis!r}')
  return normalized


SMALLEST_NORMAL = np.float32(np.finfo(np.float32).tiny)  # 2^-126
LARGEST_SHIFT = 300  # |n| past which x 2^n is 0 or inf for every normal float32 x


def _power_of_two(exponent: jax.Array) -> jax.Array:
  """2^k as float32 for int32 k in [-126, 127], built from its bits."""
  return jax.lax.bitcast_convert_type((exponent + 127) << 23, jnp.float32)


def ldexp(x: jax.typing.ArrayLike, exponent: jax.typing.ArrayLike) -> jax.Array:
  """x 2^n with the values of ``jnp.ldexp``, bit for bit, without its per-entry work.

  ``jnp.ldexp`` splits every entry with ``frexp`` and raises 2 to a float power (a
  transcendental per entry). For float32, n is cut into three parts of its sign, each 2^k
  exact from its bits, and x is multiplied by them in turn: every product is exact while it
  stays a normal number, and where the result is below 2^-126 XLA:CPU flushes it to 0, as
  it flushes ``jnp.ldexp``'s power of two. Entries below 2^-126 (subnormal inputs, which
  ``jnp.ldexp`` returns unchanged), 0 and inf are returned as they are, NaN stays NaN.
  Equality with ``jnp.ldexp`` is tested for every n in [-300, 300] and past it, on values
  across float32's whole range (tests/test_norms.py); other dtypes use ``jnp.ldexp``
  itself.

  Args:
    x: a floating array ``[...]``.
    exponent: an int array broadcastable with ``x`` (any int32 value).

  Returns:
    ``x 2^exponent``, the broadcast shape, in x's dtype.
  """
  x = jnp.asarray(x)
  if x.dtype != jnp.float32:
    return jnp.ldexp(x, exponent)
  shift = jnp.clip(jnp.asarray(exponent, jnp.int32), -LARGEST_SHIFT, LARGEST_SHIFT)
  third = jax.lax.div(shift, jnp.int32(3))  # toward zero: all three parts of one sign
  power = _power_of_two(third)
  scaled = x * power * power * _power_of_two(shift - 2 * third)
  return jnp.where((jnp.abs(x) < SMALLEST_NORMAL) | jnp.isinf(x), x, scaled)


def scale_exponent(largest: jax.Array) -> jax.Array:
  """The int e with |x| 2^-e < 1 for every |x| <= ``largest`` (0 for 0, inf, NaN).

  Scaling by 2^-e (``ldexp``) is exact and has no reciprocal: XLA on CPU divides by
  multiplying with 1 / m, which flushes to 0 for m above 8.5e37 (3e38 / 3e38 comes out 0).
  """
  return jnp.frexp(largest)[1]


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _scaled_norm(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  """sqrt(sum x^2) over ``axes`` (keepdims), as 2^e sqrt(sum (x 2^-e)^2)."""
  exponent = scale_exponent(jnp.max(jnp.abs(x), axis=axes, keepdims=True, initial=0.0))
  return ldexp(jnp.sqrt(jnp.sum(jnp.square(ldexp(x, -exponent)), axis=axes, keepdims=True)),
               exponent)


@_scaled_norm.defjvp
def _norm_jvp(axes: tuple[int, ...], primals: tuple[jax.Array],
              tangents: tuple[jax.Array]) -> tuple[jax.Array, jax.Array]:
  """d||x|| = <x 2^-e, dx> / (||x|| 2^-e), and 0 where ||x|| = 0."""
  (x,), (dx,) = primals, tangents
  norm = _scaled_norm(x, axes)
  exponent = scale_exponent(jnp.max(jnp.abs(x), axis=axes, keepdims=True, initial=0.0))
  positive = norm > 0
  unit = ldexp(x, -exponent) / jnp.where(positive, ldexp(norm, -exponent), 1.0)
  return norm, jnp.where(positive, jnp.sum(unit * dx, axis=axes, keepdims=True), 0.0)


def vector_norm(x: jax.typing.ArrayLike, axis: int | tuple[int, ...] = -1,
                keepdims: bool = False) -> jax.Array:
  """The Euclidean norm of ``x`` along ``axis``, without overflow (module docstring).

  Args:
    x: an array ``[...]`` (real or complex; ints are taken as float32).
    axis: an axis or a tuple of axes to reduce.
    keepdims: keep the reduced axes with size 1, as ``jnp.linalg.norm``.

  Returns:
    ``x``'s shape without ``axis`` (or with size 1 there), in x's floating
    dtype, at least float32: >= 0, in x's units; inf where an entry is
    infinite, NaN where one is NaN, 0 along an empty or all-zero axis. Its
    gradient is g / ||g||, 0 where the norm is 0.

  Raises:
    ValueError: for an axis that is not an int or a tuple of distinct ints in
      [-rank, rank).

  References:
    Blue (1978); module docstring.
  """
  x = jnp.asarray(x)
  axes = _normalized_axes(axis, x.ndim)
  if jnp.iscomplexobj(x):
    x = jnp.abs(x)
  dtype = _floating([x.dtype])
  norm = _scaled_norm(x.astype(dtype), axes)
  return norm if keepdims else jnp.squeeze(norm, axis=axes)


def scaled_norm(x: jax.typing.ArrayLike, axis: int | tuple[int, ...] = -1
                ) -> tuple[jax.Array, jax.Array]:
  """The Euclidean norm of ``x`` along ``axis`` as a pair ``(m, e)`` with ||x|| = m 2^e.

  m = ||x 2^-e|| with 2^e just above the largest magnitude along the axis, so m lies in
  [1/2, sqrt(n)) (n the entries reduced) or is 0, inf or NaN: it is finite wherever x's
  entries are, though ||x|| itself may be past the dtype's range. Carry e to combine norms
  without forming them (``norm_ratio``).

  Args:
    x: an array ``[...]`` (real or complex; ints are taken as float32).
    axis: an axis or a tuple of axes to reduce.

  Returns:
    ``(m, e)``: x's shape without ``axis``, m in x's floating dtype (at least float32), e
    ``<int32>``.

  Raises:
    ValueError: as ``vector_norm``, for a bad axis.
  """
  x = jnp.asarray(x)
  axes = _normalized_axes(axis, x.ndim)
  if jnp.iscomplexobj(x):
    x = jnp.abs(x)
  x = x.astype(_floating([x.dtype]))
  exponent = scale_exponent(jnp.max(jnp.abs(x), axis=axes, keepdims=True, initial=0.0))
  mantissa = jnp.sqrt(jnp.sum(jnp.square(ldexp(x, -exponent)), axis=axes))
  return mantissa, jnp.squeeze(exponent, axis=axes)


def norm_ratio(numerator: jax.typing.ArrayLike, denominator: jax.typing.ArrayLike,
               axis: int | tuple[int, ...] = -1) -> jax.Array:
  """||numerator|| / ||denominator|| along ``axis``, finite wherever the ratio is a finite
  number of the dtype, though either norm may be past its range (or below it).

  Each norm is taken as m 2^e (``scaled_norm``) and the ratio is (m_1 / m_2) 2^(e_1 - e_2):
  a gradient of 1e38 in each of 64 units against one of 1 is 8e38 / 8 = 1e38, where the
  quotient of the two norms is inf / 8 = inf.

  Args:
    numerator, denominator: arrays of one shape ``[...]``.
    axis: an axis or a tuple of axes to reduce.

  Returns:
    the shape without ``axis``, in the inputs' floating dtype (at least float32); inf where
    the denominator is 0 and the numerator not, NaN for 0 / 0 and where an entry is NaN, as
    plain division.

  Raises:
    ValueError: for arrays of two shapes, or a bad axis.
  """
  if jnp.shape(numerator) != jnp.shape(denominator):
    raise ValueError(f'denominator: expected the shape of numerator {jnp.shape(numerator)}, '
                     f'got {jnp.shape(denominator)}')
  top, top_exponent = scaled_norm(numerator, axis)
  bottom, bottom_exponent = scaled_norm(denominator, axis)
  dtype = jnp.result_type(top, bottom)
  return ldexp((top / bottom).astype(dtype), top_exponent - bottom_exponent)


def spectral_norm(matrix: jax.typing.ArrayLike) -> jax.Array:
  """sigma_max, the largest singular value of each ``[..., M, N]`` matrix, without overflow:
  2^e ||matrix 2^-e||_2 with 2^e just above the matrix's largest magnitude, so the singular
  value decomposition sees entries below 1 and the result is inf only where sigma_max is
  past the dtype's range.

  Args:
    matrix: ``<float>[..., M, N]``, M, N >= 1 (ints taken as float32).

  Returns:
    ``[...]`` in the matrix's floating dtype (at least float32), >= 0; NaN where an entry
    is not finite.

  Raises:
    ValueError: for an array of rank < 2 or an empty matrix.
  """
  matrix = jnp.asarray(matrix)
  if matrix.ndim < 2 or not matrix.shape[-1] or not matrix.shape[-2]:
    raise ValueError(f'matrix: expected a [..., M, N] array, M, N >= 1, got shape '
                     f'{matrix.shape}')
  matrix = matrix.astype(_floating([matrix.dtype]))
  exponent = scale_exponent(jnp.max(jnp.abs(matrix), axis=(-2, -1)))
  return ldexp(jnp.linalg.norm(ldexp(matrix, -exponent[..., None, None]), ord=2,
                               axis=(-2, -1)), exponent)


def global_norm(tree: Any) -> jax.Array:
  """The Euclidean norm of all the entries of a pytree together, without overflow.

  ||g|| = 2^e sqrt(sum over leaves of sum (g 2^-e)^2) with 2^e just above the
  largest magnitude over all leaves (module docstring); the leaves are not
  concatenated.

  Args:
    tree: a pytree of arrays (e.g. a gradient shaped as the params).

  Returns:
    ``<float32>[]`` (``<float64>[]`` if a leaf is float64): >= 0; inf if an
    entry is infinite (and none is NaN), NaN if one is NaN, 0 for an empty
    or all-zero tree. Its gradient with respect to each leaf is g / ||g||, 0
    where the norm is 0.

  References:
    Blue (1978); module docstring.
  """
  leaves = [jnp.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]
  leaves = [jnp.abs(leaf) if jnp.iscomplexobj(leaf) else leaf for leaf in leaves]
  dtype = _floating([leaf.dtype for leaf in leaves])
  leaves = [jnp.ravel(leaf).astype(dtype) for leaf in leaves if leaf.size]
  if not leaves:
    return jnp.zeros((), dtype)
  return _tree_norm(leaves)


@jax.custom_jvp
def _tree_norm(leaves: list[jax.Array]) -> jax.Array:
  exponent = scale_exponent(jnp.max(jnp.stack([jnp.max(jnp.abs(leaf)) for leaf in leaves])))
  squares = sum(jnp.sum(jnp.square(ldexp(leaf, -exponent))) for leaf in leaves)
  return ldexp(jnp.sqrt(squares), exponent)


@_tree_norm.defjvp
def _tree_norm_jvp(primals: tuple[list[jax.Array]], tangents: tuple[list[jax.Array]]
                   ) -> tuple[jax.Array, jax.Array]:
  """d||g|| = sum over leaves of <g 2^-e, dg> / (||g|| 2^-e), and 0 where ||g|| = 0."""
  (leaves,), (dleaves,) = primals, tangents
  norm = _tree_norm(leaves)
  exponent = scale_exponent(jnp.max(jnp.stack([jnp.max(jnp.abs(leaf)) for leaf in leaves])))
  positive = norm > 0
  denominator = jnp.where(positive, ldexp(norm, -exponent), 1.0)
  change = sum(jnp.sum(ldexp(leaf, -exponent) * dleaf) for leaf, dleaf in zip(leaves, dleaves))
  return norm, jnp.where(positive, change / denominator, 0.0)
