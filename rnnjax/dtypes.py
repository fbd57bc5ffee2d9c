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

__all__ = ['compute_dtype']

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


def check_floating(name: str, value: ArrayLike) -> None:
  """Raises a ValueError naming ``name`` and its dtype unless ``value`` is floating.

  Token ids (ints) or booleans on a float path would otherwise be cast without a word.
  """
  dtype = jnp.result_type(value)
  if not jnp.issubdtype(dtype, jnp.inexact):
    raise ValueError(f'{name}: expected a floating dtype (token ids need an embedding or '
                     f'jax.nn.one_hot first), got {dtype}')
