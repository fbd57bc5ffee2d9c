"""Character language model on Tiny Shakespeare: an Elman network, truncated BPTT.

  python -m launch.run --config=experiments/configs/char_lm.py --workdir=results/char_lm

The training text is cut into B parallel streams and windows of tau steps
(``text.stream_windows``); the state passes from window to window as a value
(the gradient stops at the window boundary) and is reset to zero at the
start of every pass over the stream. The report: validation loss (nats and
bits per character, the state carried across the held-out text) and a
greedy and a temperature sample.
"""

import math

import jax
import numpy as np

from rnnjax import cells
from rnnjax import evaluation
from rnnjax import models
from rnnjax import sampling
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import tasks
from rnnjax.train import trainer

VMAPPABLE = ('seed', 'spectral_radius', 'recurrent_init')  # the data does not depend on the seed
REPORT = ('final_train_bits', 'validation_bits_per_char', 'clipped_fraction',
          'max_grad_norm', 'final_spectral_radius')
PLOTS = (('profile', 'spectral_radius'),)


def check_config(config) -> None:
  """Raises ValueError naming ``config.<field>``, with the expected and the given value."""
  for name in ('hidden_size', 'batch_size', 'truncation'):
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f'config.{name}: expected an int >= 1, got {value!r}')
  for name in ('embedding_size', 'sample_length'):
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      raise ValueError(f'config.{name}: expected an int >= 0, got {value!r}')
  if config.activation not in cells.ACTIVATIONS:
    raise ValueError(f'config.activation: expected one of {sorted(cells.ACTIVATIONS)}, got '
                     f'{config.activation!r}')
  if config.corpus not in corpora.CORPORA:
    raise ValueError(f'config.corpus: expected one of {sorted(corpora.CORPORA)}, got '
                     f'{config.corpus!r}')
  if config.recurrent_init not in cells.RECURRENT_INITS:
    raise ValueError(f'config.recurrent_init: expected one of {cells.RECURRENT_INITS}, got '
                     f'{config.recurrent_init!r}')
  if not (isinstance(config.spectral_radius, (int, float)) and
          0 <= config.spectral_radius < math.inf):
    raise ValueError(f'config.spectral_radius: expected a finite value >= 0, got '
                     f'{config.spectral_radius!r}')
  if not 0 <= config.dropout_rate < 1:
    raise ValueError(f'config.dropout_rate: expected a value in [0, 1), got '
                     f'{config.dropout_rate!r}')
  if not 0 < config.validation_fraction < 1:
    raise ValueError(f'config.validation_fraction: expected a value in (0, 1), got '
                     f'{config.validation_fraction!r}')
  if not config.sample_temperature >= 0:
    raise ValueError(f'config.sample_temperature: expected a value >= 0 (0: greedy), got '
                     f'{config.sample_temperature!r}')
  if not config.sample_prompt:
    raise ValueError('config.sample_prompt: expected at least one character, got an empty prompt')


def work(config) -> float:
  """A step's cost, relative (for a sweep's progress): the recurrence's and the
  head's multiply-adds, B tau H (d + H + 65 characters)."""
  return config.batch_size * config.truncation * config.hidden_size * (
      config.embedding_size + config.hidden_size + 65)


def model_for(config, vocab_size: int) -> models.LanguageModel:
  return models.LanguageModel(
      vocab_size=vocab_size, hidden_size=config.hidden_size,
      embedding_size=config.embedding_size, activation=config.activation,
      recurrent_init=config.recurrent_init, radius=config.spectral_radius,
      dropout_rate=config.dropout_rate)


def task(config) -> trainer.Task:
  """Reads the corpus and builds the task; checks the sample prompt against the vocabulary.

  Raises:
    ValueError: for a prompt with characters outside the corpus or a stream
      too short for one window.
    corpora.CorpusError: the corpus is missing or corrupt.
  """
  corpus = corpora.read_text(config.corpus, config.data_dir or None)
  vocabulary = text.char_vocabulary(corpus)
  train_ids, validation_ids = text.split_train_validation(text.encode(corpus, vocabulary),
                                                          config.validation_fraction)
  try:
    windows = text.stream_windows(train_ids, config.batch_size, config.truncation)
    validation = text.stream_windows(validation_ids, config.batch_size, config.truncation)
  except ValueError as error:
    raise ValueError(f'config.batch_size, config.truncation: {error}') from None
  try:
    prompt = text.encode(config.sample_prompt, vocabulary)
  except ValueError as error:
    raise ValueError(f'config.sample_prompt: {error}') from None
  model = model_for(config, len(vocabulary))

  def init(run_config, key):
    return tasks.init_language_model(model_for(run_config, len(vocabulary)), key)

  def report(run_config, params) -> dict:
    """Validation loss and two samples of a trained run."""
    loss = evaluation.evaluate(model, params, *validation)
    summary = {'validation_loss': loss,
               'validation_bits_per_char': loss / math.log(2), 'vocab_size': len(vocabulary),
               'chance_loss': math.log(len(vocabulary))}
    sample_key = jax.random.fold_in(jax.random.key(run_config.seed), 2)
    for name, temperature in (('greedy', 0.0), ('temperature', run_config.sample_temperature)):
      ids = sampling.sample(model, params, prompt, run_config.sample_length, sample_key,
                            temperature)
      summary[f'sample_{name}'] = run_config.sample_prompt + text.decode(np.asarray(ids),
                                                                         vocabulary)
    return summary

  return tasks.truncated_bptt(model, *windows, init, report)
