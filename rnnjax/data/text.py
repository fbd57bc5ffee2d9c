"""Character vocabularies and token streams cut for truncated BPTT.

Ids are checked to lie in [0, V) (``batching.check_ids``): a negative id
would silently read the last character or row.

References:
  Mikolov, Karafiat, Burget, Cernocky & Khudanpur (2010), "Recurrent neural
  network based language model" (the PTB setup, ``<eos>`` a word); Williams
  & Peng (1990) (truncated BPTT over consecutive windows of one stream).
"""

from collections.abc import Iterable, Sequence

from jax.typing import ArrayLike
import numpy as np

from rnnjax.data import batching

__all__ = ['EOS', 'char_vocabulary', 'decode', 'encode', 'encode_words', 'split_train_validation',
           'stream_windows', 'word_vocabulary', 'words_with_eos']


def char_vocabulary(text: str) -> str:
  """The sorted distinct characters of ``text``; id i is character i."""
  return ''.join(sorted(set(text)))


def encode(text: str, vocabulary: str) -> np.ndarray:
  """``<int32>[len(text)]`` ids of each character.

  Raises:
    ValueError: if ``text`` holds a character outside ``vocabulary``.
  """
  index = {c: i for i, c in enumerate(vocabulary)}
  missing = set(text) - index.keys()
  if missing:
    raise ValueError(f'text: characters {sorted(missing)!r} are not in the vocabulary')
  return np.fromiter((index[c] for c in text), np.int32, len(text))


def decode(ids: ArrayLike, vocabulary: str) -> str:
  """The characters of ``<int>[N]`` ids.

  Raises:
    ValueError: for ids outside [0, len(vocabulary)) (-1 is not the last character).
  """
  batching.check_ids('ids', ids, len(vocabulary))
  return ''.join(vocabulary[int(i)] for i in np.asarray(ids).ravel())


def split_train_validation(ids: np.ndarray, validation_fraction: float
                           ) -> tuple[np.ndarray, np.ndarray]:
  """The first (1 - f) of a stream for training, the last f held out.

  Args:
    ids: ``<int>[N]`` a token stream.
    validation_fraction: f in (0, 1).

  Returns:
    ``(ids[:cut], ids[cut:])`` with cut = round(N (1 - f)).

  Raises:
    ValueError: for f outside (0, 1).
  """
  if not 0 < validation_fraction < 1:
    raise ValueError(f'validation_fraction: expected a value in (0, 1), got {validation_fraction!r}')
  cut = int(round(len(ids) * (1 - validation_fraction)))
  return ids[:cut], ids[cut:]


def stream_windows(ids: ArrayLike, batch_size: int, truncation: int,
                   vocab_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Cuts a token stream into B parallel streams and windows of tau steps.

  Stream b is the contiguous slice ``ids[b L : (b + 1) L + 1]`` with
  ``L = (len(ids) - 1) // B``; window w of it holds inputs at positions
  ``[w tau, (w + 1) tau)`` and targets one step later (teacher forcing). The
  state after window w is the right initial state for window w + 1. Steps
  that do not fill a whole window are dropped.

  Args:
    ids: ``<int>[N]`` token stream, ids in [0, vocab_size).
    batch_size: B >= 1.
    truncation: tau >= 1.
    vocab_size: V, the number of ids; None: ids need only be in int32's
      range [0, 2**31).

  Returns:
    ``(inputs, targets)``, each ``<int32>[W, B, tau]`` with
    ``W = L // tau`` windows.

  Raises:
    ValueError: for B < 1, tau < 1, ids that are not a 1-D int stream in
      [0, vocab_size) (a negative id always), vocab_size < 1, or a stream
      too short for one window.
  """
  if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
    raise ValueError(f'batch_size: expected an int >= 1, got {batch_size!r}')
  if not isinstance(truncation, (int, np.integer)) or truncation < 1:
    raise ValueError(f'truncation: expected an int tau >= 1, got {truncation!r}')
  batching.check_vocab_size(vocab_size)
  if np.ndim(ids) != 1:
    raise ValueError(f'ids: expected a 1-D token stream, got shape {np.shape(ids)}')
  batching.check_ids('ids', ids, vocab_size)
  ids = np.asarray(ids)
  length = (len(ids) - 1) // batch_size
  windows = length // truncation
  if windows < 1:
    raise ValueError(f'ids: a stream of {len(ids)} tokens gives {length} steps per stream for '
                     f'batch_size={batch_size}, fewer than truncation={truncation}')
  used = windows * truncation
  streams = np.stack([ids[b * length:b * length + used + 1] for b in range(batch_size)])
  inputs = streams[:, :-1].reshape(batch_size, windows, truncation).transpose(1, 0, 2)
  targets = streams[:, 1:].reshape(batch_size, windows, truncation).transpose(1, 0, 2)
  return inputs.astype(np.int32), targets.astype(np.int32)


EOS = '<eos>'


def words_with_eos(lines: Iterable[str]) -> list[str]:
  """Whitespace words of each line followed by ``<eos>``, as in Mikolov's PTB
  setup (the published word-level perplexities count ``<eos>`` as a word)."""
  return [word for line in lines for word in line.split() + [EOS]]


def word_vocabulary(words: Iterable[str]) -> list[str]:
  """The distinct words, most frequent first (ties alphabetical); id i is word i."""
  counts: dict[str, int] = {}
  for word in words:
    counts[word] = counts.get(word, 0) + 1
  return sorted(counts, key=lambda word: (-counts[word], word))


def encode_words(words: Sequence[str], vocabulary: Sequence[str]) -> np.ndarray:
  """``<int32>[len(words)]`` ids of each word in ``vocabulary``.

  PTB and WikiText-2 are closed-vocabulary corpora (rare words are already
  the literal token ``<unk>``), so every word of their validation and test
  splits is in the training vocabulary.

  Raises:
    ValueError: naming up to five words missing from the vocabulary.
  """
  index = {word: i for i, word in enumerate(vocabulary)}
  missing = sorted({word for word in words if word not in index})
  if missing:
    raise ValueError(f'words: {len(missing)} words are not in the vocabulary, e.g. '
                     f'{missing[:5]!r}')
  return np.fromiter((index[word] for word in words), np.int32, len(words))
