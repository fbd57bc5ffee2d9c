"""Word-level and BPE Elman language models on Penn Treebank and WikiText-2.

  python -m experiments.bpe_lm --config=experiments/configs/bpe_lm.py --workdir=results/ptb_word

Word mode (default): the training text as one stream of words with <eos>
at each line end, cut into B parallel streams and truncated-BPTT windows of
tau steps (the state carries over from window to window), trained by
``rnnjax.train.language_model`` with its diagnostics (spectral radius,
gradient-norm profile). Validation and test are scored as one stream each,
one word at a time from a zero state (``evaluate_streaming``), as in the
published word-level results.

BPE mode (``--config.tokens=bpe``): a sentencepiece BPE model trained on the
training split; each line is one sequence <bos> pieces <eos>, training
sequences cut to max_length; inputs s[:-1], targets s[1:], batches padded
with id 0 and padding excluded from the loss (seed note 000). Test
perplexity per BPE token, and per word: the same summed NLL divided by the
number of words plus one <eos> per line, which makes it comparable with
word-level perplexities.

Perplexity = exp(token-weighted mean NLL), inf above 20 nats per token.
Writes config.json, metrics.jsonl, checkpoint/, bpe.model (bpe mode) and
summary.json (last, atomically) to the workdir.
"""

import functools
import pathlib
import time

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
from ml_collections import config_flags

from experiments.char_lm import write_json_atomically
from rnnjax import cells
from rnnjax import models
from rnnjax import sampling
from rnnjax.data import batching
from rnnjax.data import corpora
from rnnjax.data import subwords
from rnnjax.data import text
from rnnjax.train import language_model
from rnnjax.train import optimizers
from rnnjax.train import supervised

FLAGS = flags.FLAGS
CORPORA = ('ptb', 'wikitext-2')
TOKENS = ('word', 'bpe')
EVALUATION_BATCH = 64


def define_flags():
  """Defines the command-line flags (only when run as a program)."""
  config_flags.DEFINE_config_file(
      'config', None, 'Path to a config file with get_config(): experiments/configs/bpe_lm.py; '
      'override fields with --config.NAME=VALUE.')
  flags.DEFINE_string('workdir', None, 'Folder for this run.')
  flags.mark_flags_as_required(['config', 'workdir'])


def check_config(config) -> None:
  """Raises ValueError naming the field, with the expected and the given value."""
  if config.corpus not in CORPORA:
    raise ValueError(f'config.corpus: expected one of {CORPORA}, got {config.corpus!r}')
  if config.tokens not in TOKENS:
    raise ValueError(f'config.tokens: expected one of {TOKENS}, got {config.tokens!r}')
  for name in ('embedding_size', 'hidden_size', 'batch_size', 'steps', 'log_every',
               'truncation', 'max_length', 'vocab_size'):
    value = config[name]
    if not isinstance(value, int) or value < 1:
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
  if not config.spectral_radius >= 0:
    raise ValueError(f'config.spectral_radius: expected a value >= 0, got '
                     f'{config.spectral_radius!r}')
  try:  # the optimizer's own checks (name, learning rate, clipping, threshold, on_divergence)
    make_optimizer(config)
  except ValueError as error:
    raise ValueError(f'config.{error}') from None
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


def make_model(config, vocab_size: int):
  return models.LanguageModel(
      vocab_size=vocab_size, hidden_size=config.hidden_size,
      embedding_size=config.embedding_size, activation=config.activation,
      recurrent_init=config.recurrent_init, radius=config.spectral_radius,
      dropout_rate=config.dropout_rate)


def make_optimizer(config):
  return optimizers.make_optimizer(config.optimizer, config.learning_rate, config.clipping,
                                   config.clip_threshold, config.on_divergence)


def init_params(model, key):
  return model.init(key, jnp.zeros((1, 1), jnp.int32), model.initial_state(1))['params']


def prepare_words(config):
  """Word mode's vocabulary and training windows (``<int32>[W, B, tau]`` each)."""
  train_words_ = text.words_with_eos(read_lines(config, 'train'))
  vocabulary = text.word_vocabulary(train_words_)
  inputs, targets = text.stream_windows(text.encode_words(train_words_, vocabulary),
                                        config.batch_size, config.truncation)
  logging.info('word mode: %d words in training, vocabulary %d, %d windows of [B=%d, tau=%d]',
               len(train_words_), len(vocabulary), inputs.shape[0], config.batch_size,
               config.truncation)
  return vocabulary, inputs, targets


def train_words(config, workdir: pathlib.Path, key, vocabulary, inputs, targets):
  """Word mode: truncated BPTT over the training stream.

  Returns:
    ``(model, params, record, scores)`` with scores ``{split: (nll_sum,
    tokens, words)}`` for validation and test.
  """
  model = make_model(config, len(vocabulary))
  settings = language_model.LoopSettings(steps=config.steps, clipping=config.clipping,
                                         on_divergence=config.on_divergence,
                                         log_every=config.log_every)
  init_key, dropout_key = jax.random.split(key)
  params, record = language_model.train(model, init_params(model, init_key),
                                        make_optimizer(config), inputs, targets, settings,
                                        workdir, dropout_key)
  scores = {}
  if not record['diverged']:
    for split in ('valid', 'test'):
      ids = text.encode_words(text.words_with_eos(read_lines(config, split)), vocabulary)
      predicted = len(ids) - 1
      mean = language_model.evaluate_streaming(model, params, ids[None, :])
      scores[split] = (mean * predicted, predicted, predicted)
  return model, params, record, scores


@functools.lru_cache(maxsize=None)
def _sequence_nll(model):
  @jax.jit
  def nll(params, ids):
    logits, _ = model.apply({'params': params}, ids[:, :-1], model.initial_state(ids.shape[0]))
    return language_model.masked_nll(logits, ids[:, 1:], ids[:, 1:] != subwords.PAD)
  return nll


def sequence_scores(model, params, sequences, batch_size: int = EVALUATION_BATCH):
  """Summed NLL (nats) and the number of predicted tokens over whole sequences.

  Sequences are sorted by length and padded per batch to a multiple of 16
  (padding is excluded, so it changes nothing but speed).

  Args:
    sequences: list of ``<int32>[n_i]`` id arrays, each <bos> ... <eos>.

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


def prepare_subwords(config):
  """BPE mode's sentencepiece model and training sequences (``<int32>[n_i]`` each).

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
  logging.info('bpe mode: %d training sequences, %d BPE tokens, vocabulary %d', len(sequences),
               sum(len(s) - 1 for s in sequences), processor.vocab_size())
  return processor, proto, sequences


def train_subwords(config, workdir: pathlib.Path, key, processor, proto, sequences):
  """BPE mode: padded sentence batches, masked loss. Returns as ``train_words``."""
  (workdir / 'bpe.model').write_bytes(proto)
  model = make_model(config, processor.vocab_size())

  def batches():
    for indices in batching.epoch_batches(len(sequences), config.batch_size, config.seed):
      ids, _ = batching.pad_sequences([sequences[i] for i in indices], subwords.PAD,
                                      multiple=16, max_length=config.max_length + 1)
      yield jnp.asarray(ids)

  def loss_fn(params, ids, key):
    logits, _ = model.apply({'params': params}, ids[:, :-1], model.initial_state(ids.shape[0]),
                            deterministic=False, rngs={'dropout': key})
    total, count = language_model.masked_nll(logits, ids[:, 1:], ids[:, 1:] != subwords.PAD)
    return total / jnp.maximum(count, 1.0)

  init_key, fit_key = jax.random.split(key)
  params, record = supervised.fit(
      loss_fn, init_params(model, init_key), make_optimizer(config), batches(), config.steps,
      fit_key, clipping=config.clipping, on_divergence=config.on_divergence,
      log_every=config.log_every, workdir=workdir)
  scores = {}
  if not record['diverged']:
    for split in ('valid', 'test'):
      lines = [line for line in read_lines(config, split) if line.strip()]
      total, tokens = sequence_scores(model, params, subwords.encode_lines(processor, lines))
      scores[split] = (total, tokens, len(text.words_with_eos(lines)))
  return model, params, record, scores


def run(config, workdir: pathlib.Path) -> dict:
  """Trains, evaluates and samples one run; returns the summary it writes.

  Every check (config, vocabulary size, batch size, the sample prompt) runs
  before the workdir is touched, so a bad value never costs an earlier run.
  """
  started = time.perf_counter()
  check_config(config)
  if config.tokens == 'word':
    vocabulary, inputs, targets = prepare_words(config)
    try:
      prompt = text.encode_words(config.sample_prompt.split(), vocabulary)
    except ValueError as error:
      raise ValueError(f'config.sample_prompt: {error}') from None
    decode = lambda ids: ' '.join(vocabulary[int(i)] for i in ids)
  else:
    processor, proto, sequences = prepare_subwords(config)
    prompt = np.array([subwords.BOS] + processor.encode(config.sample_prompt), np.int32)
    decode = lambda ids: processor.decode([int(i) for i in ids])
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / 'summary.json').unlink(missing_ok=True)
  (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2) + '\n')
  init_key, sample_key = jax.random.split(jax.random.key(config.seed))
  if config.tokens == 'word':
    model, params, record, scores = train_words(config, workdir, init_key, vocabulary, inputs,
                                                targets)
  else:
    model, params, record, scores = train_subwords(config, workdir, init_key, processor, proto,
                                                   sequences)
  summary = dict(record, status='diverged' if record['diverged'] else 'finished',
                 corpus=config.corpus, tokens=config.tokens, vocab_size=model.vocab_size)
  for split, (total, tokens, words) in scores.items():
    summary[f'{split}_tokens'] = tokens
    summary[f'{split}_words'] = words
    summary[f'{split}_loss'] = total / tokens
    summary[f'{split}_perplexity'] = language_model.perplexity(total, tokens)
    summary[f'{split}_word_perplexity'] = language_model.perplexity(total, words)
  if not record['diverged']:
    for name, temperature in (('greedy', 0.0), ('temperature', config.sample_temperature)):
      ids = sampling.sample(model, params, prompt, config.sample_length, sample_key, temperature,
                            min(config.sample_top_k, model.vocab_size) or None)
      summary[f'sample_{name}'] = f'{config.sample_prompt} | {decode(np.asarray(ids))}'
  summary['elapsed_seconds'] = time.perf_counter() - started
  write_json_atomically(workdir / 'summary.json', summary)
  return summary


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.get_absl_handler().addFilter(lambda record: 'orbax' not in record.pathname)
  summary = run(FLAGS.config, pathlib.Path(FLAGS.workdir))
  if summary['status'] == 'diverged':
    print(f'diverged at step {summary["diverged_step"]} (non-finite loss); see '
          f'{FLAGS.workdir}/metrics.jsonl')
    return
  unit = 'word' if summary['tokens'] == 'word' else 'BPE token'
  for split in ('valid', 'test'):
    line = (f'{split}: perplexity {summary[f"{split}_perplexity"]:.1f} per {unit} '
            f'({summary[f"{split}_tokens"]:.0f} tokens)')
    if summary['tokens'] == 'bpe':
      line += (f', {summary[f"{split}_word_perplexity"]:.1f} per word '
               f'({summary[f"{split}_words"]} words with <eos>)')
    print(line)
  print(f'{summary["steps_done"]} steps, {summary["elapsed_seconds"]:.0f} s')
  print(f'greedy: {summary["sample_greedy"]}')
  print(f'temperature {FLAGS.config.sample_temperature}, top-k {FLAGS.config.sample_top_k}: '
        f'{summary["sample_temperature"]}')


if __name__ == '__main__':
  define_flags()
  app.run(main)
