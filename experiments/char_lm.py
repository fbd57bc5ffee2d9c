"""Character language model on Tiny Shakespeare: an Elman network, truncated BPTT.

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

from experiments import language_tasks as tasks
from rnnjax import cells
from rnnjax import evaluation
from rnnjax import models
from rnnjax import sampling
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import experiment
from rnnjax.train import trainer


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


Field, Check = experiment.Field, experiment.Check
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, work=work,
    fields={
        'corpus': Field('tinyshakespeare', experiment.one_of(sorted(corpora.CORPORA))),
        'data_dir': Field('', None, 'empty: $RNNJAX_DATA_DIR, else ./data'),
        'validation_fraction': Field(0.1, Check('a value in (0, 1)', lambda v: 0 < v < 1),
                                     'the last part of the text, held out'),
        'embedding_size': Field(64, experiment.integer(0), '0: one-hot inputs'),
        'hidden_size': Field(256, experiment.integer(1)),
        'activation': Field('tanh', experiment.one_of(sorted(cells.ACTIVATIONS))),
        'recurrent_init': Field('gaussian', experiment.one_of(cells.RECURRENT_INITS)),
        'spectral_radius': Field(1.0, experiment.number(0.0),
                                 'of W_hh at init (the gain for identity)'),
        'dropout_rate': Field(0.0, Check('a value in [0, 1)', lambda v: 0 <= v < 1),
                              "on the recurrence's inputs and outputs, never the recurrent path"),
        'batch_size': Field(64, experiment.integer(1), 'parallel streams'),
        'truncation': Field(64, experiment.integer(1), 'tau, the BPTT window in steps'),
        'sample_prompt': Field('ROMEO:', Check('at least one character', bool)),
        'sample_length': Field(300, experiment.integer(0)),
        'sample_temperature': Field(0.8, Check('a value >= 0 (0: greedy)', lambda v: v >= 0)),
    },
    report=('train_loss_bits', 'validation_bits_per_char', 'clipped_fraction', 'max_grad_norm',
            'final_measured_spectral_radius', 'first_largest_lyapunov_exponent',
            'final_largest_lyapunov_exponent'),
    vmappable=('seed', 'spectral_radius', 'recurrent_init'),  # the data does not depend on the seed
    plots=(('profile', 'spectral_radius'),
           ('points', 'final_largest_lyapunov_exponent', 'spectral_radius', 'clipping',
            'truncation')))
