"""The dtype rule of every recurrent path: it computes in its params' one floating dtype.

Inputs must be floating (token ids passed by mistake are a ValueError, never cast) and are cast
to the params' dtype with the initial state (``rnnjax.recurrence`` states the whole rule). The
cells and the recurrences both check their arguments with these.
"""

from typing import Any

import jax
from jax.typing import ArrayLike
import jax.numpy as jnp
import numpy as np

__all__ = ['compute_dtype', 'in_params_dtype', 'precise_dtype', 'cast_floating', 'check_floating',
           'floating_dtype']

PyTree = Any  # a pytree of arrays


def compute_dtype(params: PyTree) -> np.dtype | None:
  """The floating dtype of ``params``, in which every path computes.

  Args:
    params: a pytree of arrays (a cell's params, a stack's, a model's).

  Returns:
    the one floating dtype of its leaves, or None when it has no floating leaf.

  Raises:
    ValueError: naming ``params`` if its floating leaves have different dtypes.
  """
  dtypes = {jnp.result_type(leaf) for leaf in jax.tree_util.tree_leaves(params)}
  floating = sorted({str(d) for d in dtypes if jnp.issubdtype(d, jnp.inexact)})
  if len(floating) > 1:
    raise ValueError(f'params: expected one floating dtype for all params (the dtype the '
                     f'recurrence computes in), got {floating}')
  return jnp.dtype(floating[0]) if floating else None


def cast_floating(tree: PyTree, dtype: Any) -> PyTree:
  """``tree`` with each floating leaf cast to ``dtype`` (None: ``tree`` unchanged)."""
  if dtype is None:
    return tree
  cast = lambda leaf: leaf.astype(dtype) if jnp.issubdtype(leaf.dtype, jnp.inexact) else leaf
  return jax.tree_util.tree_map(lambda leaf: cast(jnp.asarray(leaf)), tree)


def floating_dtype(dtype: Any, held_by_jax: bool = True) -> np.dtype:
  """``dtype`` as a numpy floating dtype; with ``held_by_jax`` one JAX holds as it is (float64
  needs x64 on).

  Raises:
    ValueError: naming ``dtype``, what is expected and the fix.
  """
  try:
    value = np.dtype(dtype)
  except TypeError:
    value = None
  if value is None or not jnp.issubdtype(value, jnp.floating):
    shown = repr(dtype) if isinstance(dtype, str) else str(dtype)
    raise ValueError(f'dtype: expected a floating dtype such as jnp.float32 (float32, float64, '
                     f'bfloat16, float16), got {shown}; pass dtype=jnp.float32')
  if held_by_jax and jax.dtypes.canonicalize_dtype(value) != value:  # float64 without x64
    raise ValueError(f'dtype: expected a dtype JAX holds ({value} needs x64: '
                     f'jax.config.update("jax_enable_x64", True), or `with '
                     f'jax.enable_x64(True):`), got {value}; or pass dtype=jnp.float32')
  return value


def check_floating(name: str, value: ArrayLike) -> None:
  """Raises a ValueError naming ``name`` and its dtype unless ``value`` is floating.

  Token ids (ints) or booleans on a float path would otherwise be cast without a word.
  """
  dtype = jnp.result_type(value)
  if not jnp.issubdtype(dtype, jnp.inexact):
    raise ValueError(f'{name}: expected a floating dtype (token ids need an embedding or '
                     f'jax.nn.one_hot first), got {dtype}')


def in_params_dtype(params: PyTree, tree: PyTree) -> PyTree:
  """``tree`` (inputs, a state, any pytree) with each floating leaf cast to the params' dtype:
  the dtype rule of every path (module docstring), in one place.

  Args:
    params: a pytree of arrays; their one floating dtype (``compute_dtype``) decides.
    tree: a pytree of arrays (or array-likes); integer and boolean leaves are kept.

  Returns:
    ``tree``, floating leaves in the params' dtype (unchanged if params hold no float).

  Raises:
    ValueError: naming ``params`` if its floating leaves have different dtypes.
  """
  return cast_floating(tree, compute_dtype(params))


def precise_dtype(dtype: Any) -> np.dtype:
  """The dtype a diagnostic computes in for params of ``dtype``: float32 for the half
  precisions (bfloat16, float16; XLA's QR and eigen solvers take none of them, and their
  8 or 11 bits cannot resolve a convergence test), ``dtype`` itself otherwise (float32,
  float64)."""
  dtype = jnp.dtype(dtype)
  return jnp.dtype(jnp.float32) if jnp.finfo(dtype).bits < 32 else dtype
