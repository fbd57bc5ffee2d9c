"""Counting: parameters of a model, entries of an n-gram table (seed notes 000, 002, 003)."""

import math

import jax


def count_parameters(params) -> int:
  """The number of scalars in a params pytree (arrays or ``jax.ShapeDtypeStruct``s,
  so ``jax.eval_shape(model.init, ...)`` counts a model without building it)."""
  return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params))


def ngram_table_entries(vocab_size: int, context: int) -> int:
  """Entries of a (k+1)-gram table: one count per context of k tokens and next
  token, |V|^(k+1) (an exact int). It grows by a factor |V| per context token,
  while an RNN's parameter count does not depend on k (seed note 003, exercise 4).

  Raises:
    ValueError: for |V| < 1 or k < 0.
  """
  if vocab_size < 1:
    raise ValueError(f'vocab_size: expected an int >= 1, got {vocab_size!r}')
  if context < 0:
    raise ValueError(f'context: expected an int k >= 0, got {context!r}')
  return vocab_size ** (context + 1)
