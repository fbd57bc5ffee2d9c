"""Counting, for the tests of the reference numbers: parameters of a model, entries of an
n-gram table.

References:
  Zhang, Lipton, Li & Smola, "Dive into Deep Learning", sections 9.3 (n-gram
  tables) and 9.4 (an RNN's parameters do not grow with the context); the
  worked counts: ``docs/reference_numbers.md``, "Counting".
"""

import math
from typing import Any

import jax

__all__ = ['count_parameters', 'ngram_table_entries']


def count_parameters(params: Any) -> int:
  """The number of scalars in a params pytree.

  Args:
    params: a pytree of arrays or ``jax.ShapeDtypeStruct``s (so
      ``jax.eval_shape(model.init, ...)`` counts a model without building it).

  Returns:
    the sum of the leaves' sizes (an exact int); an Elman cell of d inputs
    and H units with one bias has H d + H^2 + H.
  """
  return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params))


def ngram_table_entries(vocab_size: int, context: int) -> int:
  """Entries of a (k+1)-gram table: one count per context of k tokens and next token.

  It grows by a factor |V| per context token, while an RNN's parameter count
  does not depend on k.

  Args:
    vocab_size: |V| >= 1.
    context: k >= 0 tokens of context.

  Returns:
    |V|^(k+1), an exact int.

  Raises:
    ValueError: for |V| < 1 or k < 0.

  References:
    ``docs/reference_numbers.md``, "Counting" (the n-gram exercise).
  """
  if vocab_size < 1:
    raise ValueError(f'vocab_size: expected an int >= 1, got {vocab_size!r}')
  if context < 0:
    raise ValueError(f'context: expected an int k >= 0, got {context!r}')
  return vocab_size ** (context + 1)
