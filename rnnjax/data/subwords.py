"""Byte-pair-encoding (BPE) subwords with sentencepiece, trained on a training split.

Special ids: ``<pad>`` is 0 and ``<unk>`` is 1 (the convention of the
word-level models, ``docs/reference_numbers.md``, "Language models");
``<bos>`` is 2 and ``<eos>`` is 3. Their pieces are bracketed (``[PAD]`` ...) so that
the literal word ``<unk>`` of PTB and WikiText-2 is an ordinary piece of
its own (a user-defined symbol), never confused with the unknown id.

References:
  Sennrich, Haddow & Birch (2016), "Neural machine translation of rare words
  with subword units"; Kudo & Richardson (2018), sentencepiece.

Needs the [data] extra (``pip install 'rnnjax[data]'``).
"""

from collections.abc import Iterable, Sequence
import io

import numpy as np

from rnnjax import extras

extras.require('data', 'rnnjax.data.subwords')

import sentencepiece  # noqa: E402 -- after the check, which names the extra to install

__all__ = ['BOS', 'EOS', 'PAD', 'UNK', 'encode_lines', 'train_bpe']

PAD, UNK, BOS, EOS = 0, 1, 2, 3
DEFAULT_MAX_SENTENCE_BYTES = 4192  # sentencepiece's default max_sentence_length


def train_bpe(lines: Iterable[str], vocab_size: int, literal_symbols: Sequence[str] = ('<unk>',)
              ) -> tuple[sentencepiece.SentencePieceProcessor, bytes]:
  """Trains a BPE model on ``lines`` (the training split only).

  Every non-empty line is trained on, however long: sentencepiece skips
  lines longer than its ``max_sentence_length`` (4,192 bytes by default)
  without an error, so it is raised to the longest line, in UTF-8 bytes.

  Args:
    lines: iterable of str, one sentence or paragraph each (empty ones are
      skipped).
    vocab_size: V, including the four special pieces and the literal
      symbols.
    literal_symbols: strings kept whole as single pieces.

  Returns:
    ``(processor, model_proto)``: a ``sentencepiece.SentencePieceProcessor``
    with ``pad_id() == 0``, ``unk_id() == 1``, ``bos_id() == 2``,
    ``eos_id() == 3`` and ``vocab_size() == V``, and the serialized model
    (bytes, to save beside a run).

  Raises:
    ValueError: for ``lines`` that are a single str or hold no text, or V
      too small for the special pieces and the corpus's characters, or too
      large for the corpus (sentencepiece's bound is quoted).
  """
  minimum = 4 + len(literal_symbols) + 1
  if (not isinstance(vocab_size, (int, np.integer)) or isinstance(vocab_size, bool) or
      vocab_size < minimum):
    raise ValueError(f'vocab_size: expected an int >= {minimum} (4 special pieces, '
                     f'{len(literal_symbols)} literal symbols and one more), got {vocab_size!r}')
  kept = _non_empty(lines)
  longest = max(len(line.encode('utf-8')) for line in kept)  # bytes, as sentencepiece counts
  model = io.BytesIO()
  try:
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(kept), model_writer=model,
        model_type='bpe', vocab_size=int(vocab_size), character_coverage=1.0,
        pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS, pad_piece='[PAD]',
        unk_piece='[UNK]', bos_piece='[BOS]', eos_piece='[EOS]',
        user_defined_symbols=list(literal_symbols), hard_vocab_limit=True,
        max_sentence_length=max(DEFAULT_MAX_SENTENCE_BYTES, longest), num_threads=2,
        minloglevel=2)
  except RuntimeError as error:
    size = 'small' if 'smaller than required_chars' in str(error) else 'large'
    raise ValueError(f'vocab_size: {vocab_size} is too {size} for this training text '
                     f'(sentencepiece: {error})') from error
  proto = model.getvalue()
  return sentencepiece.SentencePieceProcessor(model_proto=proto), proto


def encode_lines(processor: sentencepiece.SentencePieceProcessor, lines: Iterable[str]
                 ) -> list[np.ndarray]:
  """Each non-empty line as ``<int32>[n + 2]`` ids: ``<bos>``, its pieces, ``<eos>``.

  Returns:
    a list of arrays, one per non-empty line, every id in [0, V) and none
    of the pieces equal to pad (0).
  """
  return [np.array([BOS] + ids + [EOS], np.int32)
          for ids in processor.encode(_non_empty(lines, allow_none=True))]


def _non_empty(lines: Iterable[str], allow_none: bool = False) -> list[str]:
  """The non-empty lines as a list; a single str is an error (not a list of characters)."""
  if isinstance(lines, (str, bytes)):
    raise ValueError(f'lines: expected an iterable of str lines, got a single {type(lines).__name__} '
                     f'{lines[:40]!r}')
  kept = [line for line in lines if line.strip()]
  if not kept and not allow_none:
    raise ValueError('lines: expected at least one non-empty line, got none')
  return kept
