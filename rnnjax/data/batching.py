"""Padded batches of variable-length sequences, shuffled per epoch."""

import numpy as np


def pad_sequences(sequences, pad_id: int = 0, multiple: int = 1, max_length: int | None = None):
  """Stacks sequences of ids into one right-padded array.

  Args:
    sequences: N lists or arrays of int ids.
    pad_id: the id written after each sequence's end.
    multiple: the padded length T is rounded up to a multiple of this, so
      that batches of similar lengths share a shape (and a compiled step).
    max_length: sequences longer than this are cut to it (None: no cut).

  Returns:
    ``(ids <int32>[N, T], lengths <int32>[N])`` with ``T`` the longest
    (cut) length rounded up to ``multiple`` (at least ``multiple``).

  Raises:
    ValueError: for no sequences, a sequence that is not 1-D int ids, a
      pad_id that is not an int, multiple < 1 or max_length < 1.
  """
  if not len(sequences):
    raise ValueError('sequences: expected at least one sequence, got none')
  if not isinstance(multiple, int) or multiple < 1:
    raise ValueError(f'multiple: expected an int >= 1, got {multiple!r}')
  if max_length is not None and max_length < 1:
    raise ValueError(f'max_length: expected None or an int >= 1, got {max_length!r}')
  if isinstance(pad_id, bool) or not isinstance(pad_id, (int, np.integer)):
    raise ValueError(f'pad_id: expected an int id, got {pad_id!r}')
  arrays = [np.asarray(s) for s in sequences]
  for number, array in enumerate(arrays):
    if array.ndim != 1 or (array.size and array.dtype.kind not in 'iu'):
      raise ValueError(f'sequences: expected 1-D sequences of int ids, sequence {number} has '
                       f'shape {array.shape} and dtype {array.dtype}')
  cut = [array.astype(np.int32)[:max_length] for array in arrays]
  lengths = np.array([len(s) for s in cut], np.int32)
  steps = max(multiple, -(-int(lengths.max()) // multiple) * multiple)
  ids = np.full((len(cut), steps), pad_id, np.int32)
  for row, sequence in zip(ids, cut):
    row[:len(sequence)] = sequence
  return ids, lengths


def epoch_batches(num_examples: int, batch_size: int, seed: int):
  """Endless index batches: each epoch a fresh permutation cut into batches.

  The last partial batch of an epoch is dropped, so every batch has exactly
  ``batch_size`` indices (one shape, one compiled step).

  Args:
    num_examples: N.
    batch_size: B in [1, N].
    seed: of the shuffling (``numpy.random.default_rng``).

  Returns:
    an endless iterator of ``<int64>[B]`` indices into the N examples.

  Raises:
    ValueError: for B outside [1, N], at the call (not at the first batch).
  """
  if not isinstance(batch_size, int) or not 1 <= batch_size <= num_examples:
    raise ValueError(f'batch_size: expected an int in [1, {num_examples}] (the number of '
                     f'examples), got {batch_size!r}')
  return _shuffled_batches(num_examples, batch_size, np.random.default_rng(seed))


def _shuffled_batches(num_examples, batch_size, rng):
  while True:
    order = rng.permutation(num_examples)
    for start in range(0, num_examples - batch_size + 1, batch_size):
      yield order[start:start + batch_size]
