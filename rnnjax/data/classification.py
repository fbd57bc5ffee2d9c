"""Text classification corpora: AG News and SST-2, words, a vocabulary, a stratified split.

AG News (``ag_news/test.csv``, 7,600 rows, 1,900 per class) is split here
into train and test, stratified, with a fixed seed; SST-2 comes as
``sst2/train.tsv`` (67,349 phrases) and ``sst2/dev.tsv`` (872 sentences,
the usual test set). Ids: 0 is the pad, 1 the unknown word, words from 2 on
(the convention of ``subwords`` too).

References:
  Zhang, Zhao & LeCun (2015), "Character-level convolutional networks for
  text classification" (AG News); Socher et al. (2013), "Recursive deep
  models for semantic compositionality over a sentiment treebank" (SST);
  Wang et al. (2019), "GLUE" (the SST-2 splits).
"""

import collections
import csv
import os
import re
import typing

from jax.typing import ArrayLike
import numpy as np

from rnnjax import checks
from rnnjax.data import corpora

__all__ = ['CLASS_NAMES', 'DATASETS', 'PAD_ID', 'RESERVED', 'Splits', 'UNKNOWN_ID',
           'WORD_PATTERN', 'build_vocabulary', 'encode', 'load_splits', 'read_ag_news',
           'read_sst2', 'stratified_split', 'tokenize']

DATASETS = ('ag_news', 'sst2')
CLASS_NAMES = {'ag_news': ('World', 'Sports', 'Business', 'Sci/Tech'),
               'sst2': ('negative', 'positive')}
PAD_ID = 0
UNKNOWN_ID = 1
RESERVED = ('<pad>', '<unk>')  # the words of ids 0 and 1

# A run of letters and digits, or one other visible character; AG News writes
# a line break as a backslash, which is dropped like a space.
WORD_PATTERN = re.compile(r"[a-z0-9]+|[^a-z0-9\s\\]")


class Splits(typing.NamedTuple):
  """Texts and labels of one dataset: ``*_labels`` are ``<int32>[N]`` in [0, K)."""
  train_texts: list[str]
  train_labels: np.ndarray
  test_texts: list[str]
  test_labels: np.ndarray
  class_names: tuple[str, ...]


def tokenize(text: str) -> list[str]:
  """The words of ``text``, lower-cased: runs of [a-z0-9] and single punctuation marks.

  >>> tokenize("Fears for T N pension -- it's 'ok'")
  ['fears', 'for', 't', 'n', 'pension', '-', '-', 'it', "'", 's', "'", 'ok', "'"]
  """
  return WORD_PATTERN.findall(text.lower())


def build_vocabulary(texts: list[list[str]], min_count: int, max_size: int) -> dict[str, int]:
  """Word -> id for the words of tokenized training texts.

  Words seen at least ``min_count`` times get ids 2, 3, ... from the most to
  the least frequent (ties alphabetically), keeping at most ``max_size``
  entries in all; ``'<pad>'`` is 0 and ``'<unk>'`` is 1.

  Args:
    texts: the training texts, each a list of words (``tokenize``).
    min_count: the fewest occurrences a word needs, >= 1.
    max_size: the largest vocabulary, pad and unknown included, >= 2.

  Returns:
    a dict of ``len <= max_size`` entries with ids ``0 .. len - 1``.

  Raises:
    ValueError: for min_count < 1 or max_size < 2.
  """
  min_count = checks.integer('min_count', min_count, 1)
  max_size = checks.integer('max_size', max_size, len(RESERVED))  # pad and unknown
  counts = collections.Counter(word for words in texts for word in words)
  frequent = sorted((word for word, count in counts.items() if count >= min_count),
                    key=lambda word: (-counts[word], word))
  words = list(RESERVED) + frequent[:max_size - len(RESERVED)]
  return {word: number for number, word in enumerate(words)}


def encode(words: list[str], vocabulary: dict[str, int]) -> np.ndarray:
  """``<int32>[len(words)]`` ids; a word outside the vocabulary is ``UNKNOWN_ID`` (1)."""
  return np.array([vocabulary.get(word, UNKNOWN_ID) for word in words], np.int32)


def stratified_split(labels: ArrayLike, test_size: int, seed: int
                     ) -> tuple[np.ndarray, np.ndarray]:
  """Splits examples into train and test with every class in the same proportion.

  Class k, with n_k of the N examples, gives ``test_size * n_k / N`` of them,
  drawn at random, to the test part (this must be a whole number for every
  class, so that both parts keep the exact proportions of the whole).

  Args:
    labels: ``<int>[N]`` class labels.
    test_size: examples in the test part, in [1, N).
    seed: of the draw (``numpy.random.default_rng``): the same seed gives
      the same split.

  Returns:
    ``(train_indices, test_indices)``, ``<int64>`` sorted, disjoint, together
    ``0 .. N - 1``.

  Raises:
    ValueError: for a test size outside [1, N) or one that does not give
      every class a whole number of test examples.
  """
  labels = np.asarray(labels)
  test_size = checks.integer('test_size', test_size, 1, len(labels) - 1)  # < N examples
  rng = np.random.default_rng(seed)
  test_parts = []
  for label in np.unique(labels):
    members = np.flatnonzero(labels == label)
    share, remainder = divmod(test_size * len(members), len(labels))
    if remainder:
      raise ValueError(f'test_size: {test_size} of {len(labels)} examples gives class {label} '
                       f'({len(members)} examples) {test_size * len(members) / len(labels):g} '
                       f'test examples; expected a whole number for every class')
    test_parts.append(rng.permutation(members)[:share])
  test = np.sort(np.concatenate(test_parts))
  return np.setdiff1d(np.arange(len(labels)), test), test


def read_ag_news(folder: str | os.PathLike | None = None, download: bool = True
                 ) -> tuple[list[str], np.ndarray]:
  """AG News' 7,600 rows: ``(texts, labels <int32>[7600])``.

  A text is the title, a space and the description; labels 1..4 of the file
  become 0..3 (``CLASS_NAMES['ag_news']``).

  Raises:
    corpora.CorpusError: the file is missing (naming ``ag_news/test.csv``
      and where to put it) or corrupt.
  """
  path = corpora.corpus_path('ag_news.test', folder, download)
  with open(path, encoding='utf-8', newline='') as f:
    rows = list(csv.reader(f))
  return ([f'{title} {description}' for _, title, description in rows],
          np.array([int(label) - 1 for label, _, _ in rows], np.int32))


def read_sst2(split: str, folder: str | os.PathLike | None = None, download: bool = True
              ) -> tuple[list[str], np.ndarray]:
  """SST-2 ``split`` ('train' or 'dev'): ``(texts, labels <int32>[N])``, 0 negative.

  Raises:
    ValueError: for another split.
    corpora.CorpusError: the file is missing (naming ``sst2/<split>.tsv`` and
      where to put it) or corrupt.
  """
  if split not in ('train', 'dev'):
    raise ValueError(f"split: expected 'train' or 'dev', got {split!r}")
  path = corpora.corpus_path(f'sst2.{split}', folder, download)
  with open(path, encoding='utf-8', newline='') as f:
    rows = list(csv.reader(f, delimiter='\t', quoting=csv.QUOTE_NONE))[1:]  # header
  return [text for text, _ in rows], np.array([int(label) for _, label in rows], np.int32)


def load_splits(dataset: str, folder: str | os.PathLike | None = None, download: bool = True,
                test_size: int = 1600, seed: int = 0) -> Splits:
  """The train and test parts of ``dataset``.

  Args:
    dataset: 'ag_news' (``test.csv`` split by ``stratified_split`` into
      ``7600 - test_size`` train and ``test_size`` test rows) or 'sst2'
      (train.tsv and dev.tsv; ``test_size`` and ``seed`` are not used).
    folder: the data folder (``corpora.data_dir``).
    download: fetch a missing file from its pinned URL.
    test_size: AG News rows held out, a multiple of 4.
    seed: of the AG News split.

  Returns:
    ``Splits``.

  Raises:
    ValueError: for an unknown dataset or, as ``stratified_split``, a bad
      test size.
    corpora.CorpusError: a file is missing or corrupt; the message names it.
  """
  if dataset == 'ag_news':
    texts, labels = read_ag_news(folder, download)
    train, test = stratified_split(labels, test_size, seed)
    return Splits([texts[i] for i in train], labels[train], [texts[i] for i in test],
                  labels[test], CLASS_NAMES[dataset])
  if dataset == 'sst2':
    train_texts, train_labels = read_sst2('train', folder, download)
    test_texts, test_labels = read_sst2('dev', folder, download)
    return Splits(train_texts, train_labels, test_texts, test_labels, CLASS_NAMES[dataset])
  raise ValueError(f'dataset: expected one of {DATASETS}, got {dataset!r}')
