"""Word-level and BPE Elman language models on Penn Treebank and WikiText-2.

Word mode (default): the training text as one stream of words with <eos>
at each line end, cut into B parallel streams and truncated-BPTT windows of
tau steps (the state carries over from window to window). Validation and test
are scored as one stream each, one word at a time from a zero state
(``evaluation.evaluate_streaming``), as in the published word-level results.

BPE mode (``--config.tokens=bpe``): a sentencepiece BPE model trained on the
training split (kept in the run folder as bpe.model); each line is one
sequence <bos> pieces <eos>, training sequences cut to max_length; inputs
s[:-1], targets s[1:], batches padded with id 0 and padding excluded from
the loss (``tasks.padded_sequences``). Test perplexity per BPE token, and per word: the
same summed NLL divided by the number of words plus one <eos> per line,
which makes it comparable with word-level perplexities.

Perplexity = exp(token-weighted mean NLL), inf above 20 nats per token.
"""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from experiments import language_tasks as tasks
from rnnjax import cells
from rnnjax import evaluation
from rnnjax import models
from rnnjax import sampling
from rnnjax.data import batching
from rnnjax.data import corpora
from rnnjax.data import subwords
from rnnjax.data import text
from rnnjax.train import experiment
from rnnjax.train import report
from rnnjax.train import trainer

CORPORA = ('ptb', 'wikitext-2')
TOKENS = ('word', 'bpe')
EVALUATION_BATCH = 64


def read_lines(config, split: str) -> list[str]:
  return corpora.read_text(f'{config.corpus}.{split}', config.data_dir or None).splitlines()


def model_for(config, vocab_size: int) -> models.LanguageModel:
  return models.LanguageModel(
      vocab_size=vocab_size, hidden_size=config.hidden_size,
      embedding_size=config.embedding_size, activation=config.activation,
      recurrent_init=config.recurrent_init, radius=config.spectral_radius,
      dropout_rate=config.dropout_rate)


def sequence_scorer(model: models.LanguageModel) -> Callable:
  """The scorer of whole sequences under ``model``, with its own compiled program (one
  a padded shape, dropped with the scorer).

  ``scores(params, sequences, batch_size=EVALUATION_BATCH) -> (nll_sum, tokens)``:
  the summed NLL (nats) and the number of predicted tokens (Python floats; tokens
  = sum of (n_i - 1)) of ``sequences``, a list of ``<int32>[n_i]`` id arrays, each
  <bos> ... <eos>. Sequences are sorted by length and padded per batch of
  ``batch_size`` to a multiple of 16 (padding is excluded, so it changes nothing
  but speed).
  """
  @jax.jit
  def nll(params, ids):
    logits, _ = model.apply({'params': params}, ids[:, :-1], model.initial_state(ids.shape[0]))
    return evaluation.masked_nll(logits, ids[:, 1:], ids[:, 1:] != subwords.PAD)

  def scores(params, sequences, batch_size: int = EVALUATION_BATCH) -> tuple[float, float]:
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    total, count = 0.0, 0.0
    for start in range(0, len(order), batch_size):
      ids, _ = batching.pad_sequences([sequences[i] for i in order[start:start + batch_size]],
                                      subwords.PAD, multiple=16)
      batch_total, batch_count = nll(params, jnp.asarray(ids))
      total += float(batch_total)
      count += float(batch_count)
    return total, count

  return scores


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

  return tasks.truncated_bptt(model, *windows, init, report)._replace(
      validate=tasks.streamed_validation(model, evaluation_ids['valid'], config.batch_size))


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
  sequence_scores = sequence_scorer(model)

  def init(run_config, key):
    return tasks.init_language_model(model_for(run_config, processor.vocab_size()), key)

  def report(run_config, params) -> dict:
    scores = {}
    for split, lines in evaluation_lines.items():
      total, tokens = sequence_scores(params, subwords.encode_lines(processor, lines))
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


PERPLEXITIES = ('valid_perplexity', 'test_perplexity', 'test_word_perplexity')


def perplexity_over_seeds(runs, keys, folder, heading) -> None:
  """``perplexity_over_seeds.md`` / ``.csv`` of a sweep over seeds: per setting (the swept
  fields but the seed, in the sweep's order) the seeds that finished, those that did not
  (diverged, failed or still to train), and each perplexity's mean and sample standard
  deviation (n - 1) over the finished seeds, beside its lowest and highest. No table where no
  run finished."""
  if 'seed' not in keys:
    return
  settings: dict[tuple, list[dict]] = {}
  for run in runs:
    settings.setdefault(tuple(run['values'].get(k) for k in keys if k != 'seed'), []).append(run)
  rows = []
  for setting, members in settings.items():
    summaries = [run['summary'] for run in members
                 if run['status'] == 'finished' and run['summary']]
    if not summaries:
      continue
    row = {**dict(zip([k for k in keys if k != 'seed'], setting)), 'seeds': len(summaries),
           'not finished': len(members) - len(summaries)}
    for name in PERPLEXITIES:
      values = np.array([s.get(name, np.nan) for s in summaries], dtype=np.float64)
      row.update({f'{name} mean': float(values.mean()),
                  f'{name} standard deviation': float(values.std(ddof=1))
                  if len(values) > 1 else None,
                  f'{name} lowest': float(values.min()), f'{name} highest': float(values.max())})
    rows.append(row)
  if not rows:
    return
  report.table(rows, '\n\n'.join(filter(None, [
      heading, 'One setting a row: the mean, the sample standard deviation (n - 1), the '
      'lowest and the highest over its seeds of each perplexity (per token; test per word).'])),
      folder, 'perplexity_over_seeds')


def _words(value) -> bool:
  return isinstance(value, str) and bool(value.strip())


def _temperature(value) -> bool:
  return isinstance(value, (int, float)) and value >= 0


Field, Check = experiment.Field, experiment.Check
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task,
    fields={
        'seed': experiment.TRAINER_FIELDS['seed']._replace(
            help='init, dropout and (bpe mode) the batch order'),
        'corpus': Field('ptb', experiment.one_of(CORPORA), 'ptb | wikitext-2'),
        'data_dir': Field('', None, 'empty: $RNNJAX_DATA_DIR, else ./data'),
        'tokens': Field('word', experiment.one_of(TOKENS),
                        "word: the corpus's own vocabulary with <eos>; bpe: sentencepiece"),
        'truncation': Field(35, experiment.integer(1),
                            'tau, the BPTT window in steps (word mode: one stream, cut into B '
                            'parallel streams and windows of tau steps)'),
        'vocab_size': Field(4000, experiment.integer(1),
                            'BPE vocabulary V including the special pieces (bpe mode)'),
        'max_length': Field(128, experiment.integer(1),
                            'training sequences are cut to this many inputs (bpe mode: one '
                            'sequence per line, <bos> ... <eos>)'),
        'embedding_size': Field(256, experiment.integer(1)),
        'hidden_size': Field(256, experiment.integer(1)),
        'activation': Field('tanh', experiment.one_of(sorted(cells.ACTIVATIONS))),
        'recurrent_init': Field('gaussian', experiment.one_of(cells.RECURRENT_INITS)),
        'spectral_radius': Field(1.0, experiment.number(0), 'of W_hh at init'),
        'dropout_rate': Field(0.3, experiment.number(0, high=1),
                              'on the embeddings and the states fed to the softmax'),
        'batch_size': Field(32, experiment.integer(1)),
        'sample_prompt': Field('the company said', Check('at least one word', _words)),
        'sample_length': Field(30, experiment.integer(0)),
        'sample_temperature': Field(0.8, Check('a value >= 0 (0: greedy)', _temperature)),
        'sample_top_k': Field(40, experiment.integer(0)._replace(
            expected='an int >= 0 (0: no top-k)'), '0: no top-k; at most V'),
    },
    report=('valid_perplexity', 'test_perplexity', 'test_word_perplexity', 'train_loss_nats',
            'final_measured_spectral_radius', 'steps_done', 'converged_step',
            'final_learning_rate'),
    vmappable=('spectral_radius', 'recurrent_init'),
    plots=(('curve', 'loss'), ('curve', 'validation_loss')),
    analyses=(perplexity_over_seeds,))
