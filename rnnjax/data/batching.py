"""Padded batches of variable-length sequences, shuffled per epoch; the id range check.

Ids index an embedding (or a one-hot) of V rows, so every id must be in
[0, V): a negative id would read row V - 1 (Python's and JAX's negative
indexing) and one >= V a clipped or NaN row, both silently. The functions of
``rnnjax.data`` that take ids from their caller (``pad_sequences``,
``text.stream_windows``, ``text.decode``) check them with ``check_ids``;
without a known V (an optional ``vocab_size``) the bound is int32's, the
dtype ids are stored in, and a negative id or pad is always an error. The
others make ids from a vocabulary, in range by construction.
"""

from collections.abc import Sequence
from typing import Any

import jax
from jax.typing import ArrayLike
import numpy as np

from rnnjax import checks

__all__ = ['check_ids', 'check_vocab_size', 'pad_sequences']

INT32_END = 2 ** 31  # ids are stored as int32: every id is below this


def _id_range(vocab_size: int | None) -> tuple[int, str]:
  """The end of the id range and its text for messages."""
  if vocab_size is None:
    return INT32_END, '[0, 2**31) (int32; no vocab_size given)'
  return vocab_size, f'[0, V) = [0, {vocab_size})'


def check_ids(name: str, ids: Any, vocab_size: int | None = None) -> None:
  """Checks that ``ids`` are ints in [0, vocab_size) (values only when concrete, not
  under ``jit``).

  Args:
    name: the argument, for the message.
    ids: an array or nested list of ids, any shape.
    vocab_size: V; None bounds the ids by int32's range, [0, 2**31).

  Raises:
    ValueError: naming ``name``: a dtype that is not an integer one, or ids
      outside the range (the range, the smallest and the largest id given).
  """
  dtype = ids.dtype if hasattr(ids, 'dtype') else np.asarray(ids).dtype
  if np.size(ids) and not np.issubdtype(dtype, np.integer):
    raise ValueError(f'{name}: expected int ids, got dtype {dtype}')
  if isinstance(ids, jax.core.Tracer) or not np.size(ids):
    return
  values = np.asarray(ids)
  end, bound = _id_range(vocab_size)
  if values.min() < 0 or values.max() >= end:
    raise ValueError(f'{name}: expected ids in {bound}, got min {values.min()} and max '
                     f'{values.max()}')


def check_vocab_size(vocab_size: Any) -> None:
  """Raises ValueError naming ``vocab_size`` unless it is None or an int >= 1."""
  if vocab_size is not None and (isinstance(vocab_size, bool) or
                                 not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1):
    raise ValueError(f'vocab_size: expected None or an int >= 1, got {vocab_size!r}')


def pad_sequences(sequences: Sequence[ArrayLike], pad_id: int = 0, multiple: int = 1,
                  max_length: int | None = None, vocab_size: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
  """Stacks sequences of ids into one right-padded array.

  Args:
    sequences: N lists or arrays of int ids, each in [0, vocab_size).
    pad_id: the id written after each sequence's end, in [0, vocab_size).
    multiple: the padded length T is rounded up to a multiple of this, so
      that batches of similar lengths share a shape (and a compiled step).
    max_length: sequences longer than this are cut to it (None: no cut).
    vocab_size: V, the number of ids (the embedding's rows); None: ids and
      pad_id only need to be in int32's range [0, 2**31).

  Returns:
    ``(ids <int32>[N, T], lengths <int32>[N])`` with ``T`` the longest
    (cut) length rounded up to ``multiple`` (at least ``multiple``).

  Raises:
    ValueError: for no sequences, a sequence that is not 1-D int ids or
      holds an id outside [0, vocab_size), a pad_id that is not an int in
      [0, vocab_size) (a negative one always), multiple < 1, max_length < 1
      or vocab_size < 1.
  """
  if not len(sequences):
    raise ValueError('sequences: expected at least one sequence, got none')
  multiple = checks.integer('multiple', multiple, 1)
  if max_length is not None and max_length < 1:
    raise ValueError(f'max_length: expected None or an int >= 1, got {max_length!r}')
  check_vocab_size(vocab_size)
  end, bound = _id_range(vocab_size)
  if (isinstance(pad_id, bool) or not isinstance(pad_id, (int, np.integer))
      or not 0 <= pad_id < end):
    raise ValueError(f'pad_id: expected an int id in {bound}, got {pad_id!r}')
  arrays = [np.asarray(s) for s in sequences]
  for number, array in enumerate(arrays):
    if array.ndim != 1 or (array.size and array.dtype.kind not in 'iu'):
      raise ValueError(f'sequences: expected 1-D sequences of int ids, sequence {number} has '
                       f'shape {array.shape} and dtype {array.dtype}')
    check_ids(f'sequences[{number}]', array, vocab_size)
  cut = [array.astype(np.int32)[:max_length] for array in arrays]
  lengths = np.array([len(s) for s in cut], np.int32)
  steps = max(multiple, -(-int(lengths.max()) // multiple) * multiple)
  ids = np.full((len(cut), steps), pad_id, np.int32)
  for row, sequence in zip(ids, cut):
    row[:len(sequence)] = sequence
  return ids, lengths
