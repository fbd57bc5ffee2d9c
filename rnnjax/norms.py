"""Euclidean norms that do not overflow: the one way rnnjax computes them.

The plain sqrt(sum g^2) squares first, and a float32 square overflows for
|g| above about 1.8e19: the norm of [3e19, 4e19] comes out inf (and a ratio
of two such norms NaN), though the norm, 5e19, is a float32; below 1e-19 the
squares underflow to 0. Here every entry is scaled by the power of two 2^-e
just above the largest magnitude m = max |g| first,

  ||g|| = 2^e sqrt(sum (g 2^-e)^2),   2^(e-1) <= m < 2^e,

so each square lies in [0, 1) and the largest in [1/4, 1): the result
overflows only where the norm itself is beyond the dtype's range. A power of
two scales exactly (``jnp.ldexp``), where dividing by m would not: XLA on CPU
divides by multiplying with 1 / m, which is flushed to 0 for m above 8.5e37. An infinite entry
makes the norm inf, a NaN entry NaN; an empty or all-zero input has norm 0.

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

__all__ = ['global_norm', 'scale_exponent', 'vector_norm']


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


def scale_exponent(largest: jax.Array) -> jax.Array:
  """The int e with |x| 2^-e < 1 for every |x| <= ``largest`` (0 for 0, inf, NaN).

  Scaling by 2^-e (``jnp.ldexp``) is exact and has no reciprocal: XLA on CPU divides by
  multiplying with 1 / m, which flushes to 0 for m above 8.5e37 (3e38 / 3e38 comes out 0).
  """
  return jnp.frexp(largest)[1]


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _scaled_norm(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  """sqrt(sum x^2) over ``axes`` (keepdims), as 2^e sqrt(sum (x 2^-e)^2)."""
  exponent = scale_exponent(jnp.max(jnp.abs(x), axis=axes, keepdims=True, initial=0.0))
  return jnp.ldexp(jnp.sqrt(jnp.sum(jnp.square(jnp.ldexp(x, -exponent)), axis=axes,
                                    keepdims=True)), exponent)


@_scaled_norm.defjvp
def _norm_jvp(axes: tuple[int, ...], primals: tuple[jax.Array],
              tangents: tuple[jax.Array]) -> tuple[jax.Array, jax.Array]:
  """d||x|| = <x 2^-e, dx> / (||x|| 2^-e), and 0 where ||x|| = 0."""
  (x,), (dx,) = primals, tangents
  norm = _scaled_norm(x, axes)
  exponent = scale_exponent(jnp.max(jnp.abs(x), axis=axes, keepdims=True, initial=0.0))
  positive = norm > 0
  unit = jnp.ldexp(x, -exponent) / jnp.where(positive, jnp.ldexp(norm, -exponent), 1.0)
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
  squares = sum(jnp.sum(jnp.square(jnp.ldexp(leaf, -exponent))) for leaf in leaves)
  return jnp.ldexp(jnp.sqrt(squares), exponent)


@_tree_norm.defjvp
def _tree_norm_jvp(primals: tuple[list[jax.Array]], tangents: tuple[list[jax.Array]]
                   ) -> tuple[jax.Array, jax.Array]:
  """d||g|| = sum over leaves of <g 2^-e, dg> / (||g|| 2^-e), and 0 where ||g|| = 0."""
  (leaves,), (dleaves,) = primals, tangents
  norm = _tree_norm(leaves)
  exponent = scale_exponent(jnp.max(jnp.stack([jnp.max(jnp.abs(leaf)) for leaf in leaves])))
  positive = norm > 0
  denominator = jnp.where(positive, jnp.ldexp(norm, -exponent), 1.0)
  change = sum(jnp.sum(jnp.ldexp(leaf, -exponent) * dleaf) for leaf, dleaf in zip(leaves, dleaves))
  return norm, jnp.where(positive, change / denominator, 0.0)
