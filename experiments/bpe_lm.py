"""Word-level and BPE Elman language models on Penn Treebank and WikiText-2.

  python -m launch.run --config=experiments/configs/bpe_lm.py --workdir=results/ptb_word

Word mode (default): the training text as one stream of words with <eos>
at each line end, cut into B parallel streams and truncated-BPTT windows of
tau steps (the state carries over from window to window). Validation and test
are scored as one stream each, one word at a time from a zero state
(``evaluation.evaluate_streaming``), as in the published word-level results.

BPE mode (``--config.tokens=bpe``): a sentencepiece BPE model trained on the
training split (kept in the run folder as bpe.model); each line is one
sequence <bos> pieces <eos>, training sequences cut to max_length; inputs
s[:-1], targets s[1:], batches padded with id 0 and padding excluded from
the loss (seed note 000). Test perplexity per BPE token, and per word: the
same summed NLL divided by the number of words plus one <eos> per line,
which makes it comparable with word-level perplexities.

Perplexity = exp(token-weighted mean NLL), inf above 20 nats per token.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import evaluation
from rnnjax import models
from rnnjax import sampling
from rnnjax.data import batching
from rnnjax.data import corpora
from rnnjax.data import subwords
from rnnjax.data import text
from rnnjax.train import tasks
from rnnjax.train import trainer

VMAPPABLE = ('spectral_radius', 'recurrent_init')
REPORT = ('valid_perplexity', 'test_perplexity', 'test_word_perplexity', 'final_train_loss',
          'final_spectral_radius')
CORPORA = ('ptb', 'wikitext-2')
TOKENS = ('word', 'bpe')
EVALUATION_BATCH = 64


def check_config(config) -> None:
  """Raises ValueError naming ``config.<field>``, with the expected and the given value."""
  if config.corpus not in CORPORA:
    raise ValueError(f'config.corpus: expected one of {CORPORA}, got {config.corpus!r}')
  if config.tokens not in TOKENS:
    raise ValueError(f'config.tokens: expected one of {TOKENS}, got {config.tokens!r}')
  for name in ('embedding_size', 'hidden_size', 'batch_size', 'truncation', 'max_length',
               'vocab_size'):
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f'config.{name}: expected an int >= 1, got {value!r}')
  if not config.sample_prompt.strip():
    raise ValueError(f'config.sample_prompt: expected at least one word, got '
                     f'{config.sample_prompt!r}')
  if not isinstance(config.sample_length, int) or config.sample_length < 0:
    raise ValueError(f'config.sample_length: expected an int >= 0, got {config.sample_length!r}')
  if config.activation not in cells.ACTIVATIONS:
    raise ValueError(f'config.activation: expected one of {sorted(cells.ACTIVATIONS)}, got '
                     f'{config.activation!r}')
  if config.recurrent_init not in cells.RECURRENT_INITS:
    raise ValueError(f'config.recurrent_init: expected one of {cells.RECURRENT_INITS}, got '
                     f'{config.recurrent_init!r}')
  if not (isinstance(config.spectral_radius, (int, float)) and
          0 <= config.spectral_radius < math.inf):
    raise ValueError(f'config.spectral_radius: expected a finite value >= 0, got '
                     f'{config.spectral_radius!r}')
  if not isinstance(config.sample_top_k, int) or config.sample_top_k < 0:
    raise ValueError(f'config.sample_top_k: expected an int >= 0 (0: no top-k), got '
                     f'{config.sample_top_k!r}')
  if not 0 <= config.dropout_rate < 1:
    raise ValueError(f'config.dropout_rate: expected a value in [0, 1), got '
                     f'{config.dropout_rate!r}')
  if not config.sample_temperature >= 0:
    raise ValueError(f'config.sample_temperature: expected a value >= 0 (0: greedy), got '
                     f'{config.sample_temperature!r}')


def read_lines(config, split: str) -> list[str]:
  return corpora.read_text(f'{config.corpus}.{split}', config.data_dir or None).splitlines()


def model_for(config, vocab_size: int) -> models.LanguageModel:
  return models.LanguageModel(
      vocab_size=vocab_size, hidden_size=config.hidden_size,
      embedding_size=config.embedding_size, activation=config.activation,
      recurrent_init=config.recurrent_init, radius=config.spectral_radius,
      dropout_rate=config.dropout_rate)


@functools.lru_cache(maxsize=None)
def _sequence_nll(model):
  @jax.jit
  def nll(params, ids):
    logits, _ = model.apply({'params': params}, ids[:, :-1], model.initial_state(ids.shape[0]))
    return evaluation.masked_nll(logits, ids[:, 1:], ids[:, 1:] != subwords.PAD)
  return nll


def sequence_scores(model, params, sequences, batch_size: int = EVALUATION_BATCH):
  """Summed NLL (nats) and the number of predicted tokens over whole sequences.

  Sequences are sorted by length and padded per batch to a multiple of 16
  (padding is excluded, so it changes nothing but speed).

  Args:
    model: a ``models.LanguageModel``.
    params: its params.
    sequences: list of ``<int32>[n_i]`` id arrays, each <bos> ... <eos>.
    batch_size: sequences per evaluation batch.

  Returns:
    ``(nll_sum, tokens)``: Python floats; tokens = sum of (n_i - 1).
  """
  order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
  total, count = 0.0, 0.0
  for start in range(0, len(order), batch_size):
    ids, _ = batching.pad_sequences([sequences[i] for i in order[start:start + batch_size]],
                                    subwords.PAD, multiple=16)
    batch_total, batch_count = _sequence_nll(model)(params, jnp.asarray(ids))
    total += float(batch_total)
    count += float(batch_count)
  return total, count


def scores_summary(scores: dict) -> dict:
  """Loss and perplexities per split from ``{split: (nll_sum, tokens, words)}``."""
  summary = {}
  for split, (total, tokens, words) in scores.items():
    summary[f'{split}_tokens'] = tokens
    summary[f'{split}_words'] = words
    summary[f'{split}_loss'] = total / tokens
    summary[f'{split}_perplexity'] = evaluation.perplexity(total, tokens)
    summary[f'{split}_word_perplexity'] = evaluation.perplexity(total, words)
  return summary


def samples(config, model, params, prompt, decode) -> dict:
  """A greedy and a temperature (top-k) sample after the prompt."""
  key = jax.random.fold_in(jax.random.key(config.seed), 2)
  out = {}
  for name, temperature in (('greedy', 0.0), ('temperature', config.sample_temperature)):
    ids = sampling.sample(model, params, prompt, config.sample_length, key, temperature,
                          min(config.sample_top_k, model.vocab_size) or None)
    out[f'sample_{name}'] = f'{config.sample_prompt} | {decode(np.asarray(ids))}'
  return out


def word_task(config) -> trainer.Task:
  """Word mode: truncated BPTT over the training stream; validation and test streamed."""
  train_words = text.words_with_eos(read_lines(config, 'train'))
  vocabulary = text.word_vocabulary(train_words)
  try:
    windows = text.stream_windows(text.encode_words(train_words, vocabulary),
                                  config.batch_size, config.truncation)
  except ValueError as error:
    raise ValueError(f'config.batch_size, config.truncation: {error}') from None
  try:
    prompt = text.encode_words(config.sample_prompt.split(), vocabulary)
  except ValueError as error:
    raise ValueError(f'config.sample_prompt: {error}') from None
  evaluation_ids = {split: text.encode_words(text.words_with_eos(read_lines(config, split)),
                                             vocabulary) for split in ('valid', 'test')}
  model = model_for(config, len(vocabulary))

  def init(run_config, key):
    return tasks.init_language_model(model_for(run_config, len(vocabulary)), key)

  def report(run_config, params) -> dict:
    scores = {}
    for split, ids in evaluation_ids.items():
      predicted = len(ids) - 1
      mean = evaluation.evaluate_streaming(model, params, ids[None, :])
      scores[split] = (mean * predicted, predicted, predicted)
    return dict(scores_summary(scores), vocab_size=len(vocabulary), **samples(
        run_config, model, params, prompt, lambda ids: ' '.join(vocabulary[int(i)] for i in ids)))

  return tasks.truncated_bptt(model, *windows, init, report)


def subword_task(config) -> trainer.Task:
  """BPE mode: padded sentence batches, masked loss; whole validation and test lines scored.

  Raises:
    ValueError: for a vocabulary size the training text cannot fill, or a
      batch larger than the number of training sequences.
  """
  train_lines = read_lines(config, 'train')
  try:
    processor, proto = subwords.train_bpe(train_lines, config.vocab_size)
  except ValueError as error:
    raise ValueError(f'config.{error}') from None
  sequences = subwords.encode_lines(processor, train_lines)
  if config.batch_size > len(sequences):
    raise ValueError(f'config.batch_size: expected at most the {len(sequences)} training '
                     f'sequences, got {config.batch_size}')
  prompt = np.array([subwords.BOS] + processor.encode(config.sample_prompt), np.int32)
  evaluation_lines = {split: [line for line in read_lines(config, split) if line.strip()]
                      for split in ('valid', 'test')}
  model = model_for(config, processor.vocab_size())

  def init(run_config, key):
    return tasks.init_language_model(model_for(run_config, processor.vocab_size()), key)

  def report(run_config, params) -> dict:
    scores = {}
    for split, lines in evaluation_lines.items():
      total, tokens = sequence_scores(model, params, subwords.encode_lines(processor, lines))
      scores[split] = (total, tokens, len(text.words_with_eos(lines)))
    return dict(scores_summary(scores), vocab_size=processor.vocab_size(), **samples(
        run_config, model, params, prompt, lambda ids: processor.decode([int(i) for i in ids])))

  task = tasks.padded_sequences(model, sequences, config.batch_size, config.max_length,
                                subwords.PAD, config.seed, init, report)
  return task._replace(artifacts={'bpe.model': proto})


def task(config) -> trainer.Task:
  """The word or BPE task; reads the corpus and checks the prompt and the sizes first.

  Raises:
    ValueError: naming the field (prompt words outside the vocabulary, sizes).
    corpora.CorpusError: a corpus file is missing or corrupt.
  """
  return word_task(config) if config.tokens == 'word' else subword_task(config)
