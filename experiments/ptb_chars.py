"""Character-level Penn Treebank with MSGD, MSGD-C and MSGD-CR (Pascanu et al. 2013, Table 1).

The word-level files (``ptb.train``, ``ptb.valid``, ``ptb.test``) read as
characters with the word boundaries kept: each line becomes its words joined
by one space and ended by a newline (the per-line leading and trailing
spaces of the files dropped), so a space marks a word boundary and '\\n' a
sentence end, as the '_' and the line ends of Mikolov's ptb.char files; the
vocabulary is the training text's characters (50). ``<unk>`` stays five
characters, N the number token one.

The model: one-hot characters -> an Elman layer of tanh units -> softmax
(``models.LanguageModel``, embedding_size 0), trained by truncated BPTT over
B parallel streams (``tasks.truncated_bptt``) with SGD, by one of the methods
of ``experiments.pascanu`` (MSGD, MSGD-C, MSGD-CR); MSGD-CR adds omega_weight
times Omega's gradient of each window (``regularizers.omega_penalty`` with
dE/dh_t of the window's cross-entropy, held constant; ``with_omega``),
with the same steps, data order and initialization for the three (equal
budget in updates; the seconds each took are in timing.json). The loss
logged is the cross-entropy alone (the Omega term adds its gradient, not its
value). The report: validation and test bits per character, each split
scored as one stream from a zero state (``evaluation.evaluate_streaming``),
beside the paper's test figure for the method (Table 1: 1.50, 1.42, 1.41).

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks", section 5.2 and Table 1.
  Mikolov et al. (2012), "Subword language modeling with neural networks"
  (the character-level PTB).
"""

import math

import jax
import numpy as np

from experiments import language_tasks as tasks
from experiments import pascanu
from rnnjax import cells
from rnnjax import evaluation
from rnnjax import models
from rnnjax import regularizers
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import experiment
from rnnjax.train import trainer

PAPER_TEST_BITS = {'MSGD': 1.50, 'MSGD-C': 1.42, 'MSGD-CR': 1.41}  # Table 1, Penn Treebank
SPLITS = ('ptb.train', 'ptb.valid', 'ptb.test')


def work(config) -> float:
  """A step's cost, relative: B tau H (H + V), V about 50, times 3 with Omega."""
  return (config.batch_size * config.truncation * config.hidden_size *
          (config.hidden_size + 50) * (3 if config.omega_weight > 0 else 1))


def read_chars(name: str, data_dir=None) -> str:
  """A PTB split as characters: each line's words joined by single spaces, then '\\n'.

  Raises:
    corpora.CorpusError: the file is missing or corrupt.
  """
  lines = corpora.read_text(name, data_dir or None).splitlines()
  return ''.join(' '.join(line.split()) + '\n' for line in lines)


def model_for(config, vocab_size: int) -> models.LanguageModel:
  return models.LanguageModel(vocab_size=vocab_size, hidden_size=config.hidden_size,
                              embedding_size=0, activation='tanh',
                              recurrent_init=config.recurrent_init,
                              radius=config.spectral_radius)


def with_omega(model, task: trainer.Task, omega_weight: float,
               decay_steps: int = 0) -> trainer.Task:
  """A ``tasks.truncated_bptt`` task whose loss gradient adds ``omega_weight`` times
  Omega's of each window (``regularizers.omega_penalty``); the loss value is unchanged.
  With ``decay_steps`` the weight at step t is omega_weight d / (d + t): the 1/t schedule
  Pascanu et al. (2013, section 4.2) found that natural problems need.

  The window's initial state is the carry (zero at the start of a pass, as
  ``truncated_bptt``), its inputs the one-hot (or embedded) characters
  (``model.embed``), E the window's mean cross-entropy.
  """
  if not omega_weight:
    return task

  def loss(params, carry, batch, key):
    value, new_carry = task.loss(params, carry, batch, key)
    variables = {'params': params}
    initial = jax.numpy.where(batch['reset'], jax.numpy.zeros_like(carry), carry)
    inputs = model.apply(variables, batch['inputs'], method=model.embed)

    def window_loss(states):
      return evaluation.cross_entropy(model.apply(variables, states, method=model.logits),
                                      batch['targets'])

    omega = regularizers.omega_penalty(params['recurrence']['cell'], inputs, initial,
                                       window_loss, model.activation)
    weight = omega_weight * (decay_steps / (decay_steps + batch['step']) if decay_steps else 1.0)
    return value + weight * (omega - jax.lax.stop_gradient(omega)), new_carry

  return task._replace(loss=loss)


def task(config) -> trainer.Task:
  """Reads the three splits and builds the task.

  Raises:
    ValueError: for a stream too short for one window, or validation or test
      characters outside the training vocabulary.
    corpora.CorpusError: a corpus file is missing or corrupt.
  """
  train, valid, test = (read_chars(name, config.data_dir) for name in SPLITS)
  vocabulary = text.char_vocabulary(train)
  train_ids = text.encode(train, vocabulary)
  try:
    held_out = {name: text.encode(split, vocabulary) for name, split in
                (('validation', valid), ('test', test))}
  except ValueError as error:
    raise ValueError(f'ptb.valid, ptb.test: {error}') from None
  if config.max_eval_chars:
    held_out = {name: ids[:config.max_eval_chars] for name, ids in held_out.items()}
  try:
    windows = text.stream_windows(train_ids, config.batch_size, config.truncation)
  except ValueError as error:
    raise ValueError(f'config.batch_size, config.truncation: {error}') from None
  model = model_for(config, len(vocabulary))

  def init(run_config, key):
    return tasks.init_language_model(model_for(run_config, len(vocabulary)), key)

  def report(run_config, params) -> dict:
    summary = {'vocab_size': len(vocabulary), 'train_chars': len(train_ids),
               'chars_seen': run_config.steps * run_config.batch_size * run_config.truncation,
               'paper_test_bits_per_char': PAPER_TEST_BITS[run_config.method]}
    for name, ids in held_out.items():
      nats = evaluation.evaluate_streaming(model, params, np.asarray(ids)[None, :])
      summary[f'{name}_bits_per_char'] = nats / math.log(2)
      summary[f'{name}_chars'] = len(ids)
    return summary

  base = tasks.truncated_bptt(model, *windows, init, report)._replace(
      validate=tasks.streamed_validation(model, held_out['validation'], config.batch_size))
  return with_omega(model, base, float(config.omega_weight), config.omega_decay_steps)


Field = experiment.Field
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, work=work, check=pascanu.check_method,
    fields={
        **pascanu.FIELDS,
        'data_dir': Field('', None, 'empty: $RNNJAX_DATA_DIR, else ./data'),
        'max_eval_chars': Field(0, experiment.integer(0)._replace(
            expected='an int >= 0 (0: whole splits)'),
                                'score only the first N characters of valid and test (0: all)'),
        'hidden_size': Field(256, experiment.integer(1)),
        'recurrent_init': Field('gaussian', experiment.one_of(cells.RECURRENT_INITS)),
        'spectral_radius': Field(0.95, experiment.number(0), 'of W_hh at init'),
        'batch_size': Field(32, experiment.integer(1), 'parallel streams'),
        'truncation': Field(50, experiment.integer(1), 'tau, the BPTT window in characters'),
        'omega_decay_steps': Field(0, experiment.integer(0), "Omega's weight at step t is "
                                   'omega_weight d / (d + t) (0: constant)'),
    },
    report=('test_bits_per_char', 'paper_test_bits_per_char', 'validation_bits_per_char',
            'train_loss_bits', 'clipped_fraction', 'max_grad_norm', 'final_measured_spectral_radius'),
    vmappable=('seed', 'spectral_radius'),  # the data does not depend on the seed
    plots=(('profile', 'method'), ('curve', 'bits')))
