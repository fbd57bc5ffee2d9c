"""A sequence-to-sequence model (encoder-decoder, GRU or Elman) on digit reversal.

Trains with teacher forcing on a fixed training set drawn from the seed,
then decodes a test set drawn with another key, greedily and by sampling at
``sample_temperature``, until <eos> or ``max_decode_length`` tokens. The
report: greedy exact match, per-token accuracy, sampled exact match, exact
match on test strings not seen in training and by number of digits, the
teacher-forced test loss and a few decoded examples.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import language_tasks as tasks
from rnnjax import combinators
from rnnjax import diagnostics
from rnnjax import seq2seq
from rnnjax.data import synthetic
from rnnjax.train import devices
from rnnjax.train import experiment
from rnnjax.train import trainer

EXAMPLES = 5  # test examples written to the summary


def check(config) -> None:
  """The rules between fields: digits, decoding length, batch and the memory of the data.

  Raises:
    ValueError: naming ``config.<field>``, with the expected and the given value.
  """
  if config.min_digits > config.max_digits:
    raise ValueError(f'config.min_digits: expected at most max_digits = {config.max_digits}, '
                     f'got {config.min_digits}')
  if config.max_decode_length < config.max_digits + 1:
    raise ValueError(f'config.max_decode_length: expected at least max_digits + 1 = '
                     f'{config.max_digits + 1} (the longest target, <eos> included), got '
                     f'{config.max_decode_length}')
  if config.batch_size > config.train_size:
    raise ValueError(f'config.batch_size: expected at most train_size = {config.train_size}, '
                     f'got {config.batch_size}')
  data_bytes = 4 * (config.train_size + config.test_size) * (2 * config.max_digits + 1)
  memory = devices.memory_bytes()
  if 3 * data_bytes > memory:  # the draw's temporaries besides the sets
    raise ValueError(f'config.max_digits, config.train_size: {config.train_size} + '
                     f'{config.test_size} sequences of up to {config.max_digits} digits take '
                     f'{data_bytes / 2**30:.3g} GiB, more than a third of the '
                     f'{memory / 2**30:.3g} GiB of memory here; expected fewer')


def digits_text(ids) -> str:
  """The digits of a reversal sequence as text, stopping at <eos> or PAD."""
  text = ''
  for token in np.asarray(ids).tolist():
    if token < synthetic.REVERSAL_FIRST_DIGIT:
      break
    text += str(token - synthetic.REVERSAL_FIRST_DIGIT)
  return text


def evaluate(config, params, sources, targets, seen, key) -> dict:
  """Greedy and sampled exact match, per-token accuracy and loss on a test set.

  Args:
    config: the run's config.
    params: trained ``seq2seq.init`` params.
    sources: ``<int32>[N, S]`` test sources.
    targets: ``<int32>[N, T]`` their targets.
    seen: ``<bool>[N]``, whether each source is also in the training set.
    key: ``jax.random`` key for the sampled decoding.

  Returns:
    A dict: exact_match (greedy), token_accuracy (greedy, over real target
    tokens), sampled_exact_match (at sample_temperature), test_loss (nats
    per target token, teacher-forced), exact_match_unseen (greedy, on the
    sources not in the training set; NaN if none), exact_match_by_digits
    ({L: rate}) and a few examples.
  """
  decode = jax.jit(seq2seq.decode, static_argnames=('cell', 'max_length', 'temperature'))
  greedy = decode(config.cell, params, sources, config.max_decode_length)
  sampled = decode(config.cell, params, sources, config.max_decode_length,
                   config.sample_temperature, key)
  exact, token_accuracy = seq2seq.accuracies(greedy, targets)
  sampled_exact, _ = seq2seq.accuracies(sampled, targets)
  exact = np.asarray(exact)
  digits = np.asarray(seq2seq.lengths_of(sources))
  return {
      'exact_match': float(exact.mean()),
      'token_accuracy': float(token_accuracy),
      'sampled_exact_match': float(np.mean(sampled_exact)),
      'test_loss': float(jax.jit(seq2seq.loss, static_argnums=0)(config.cell, params, sources,
                                                                  targets)),
      'exact_match_unseen': float(exact[~seen].mean()) if (~seen).any() else math.nan,
      'exact_match_by_digits': {str(int(length)): float(exact[digits == length].mean())
                                for length in np.unique(digits)},
      'examples': [{'source': digits_text(sources[i]), 'target': digits_text(targets[i]),
                    'greedy': digits_text(greedy[i]), 'sampled': digits_text(sampled[i])}
                   for i in range(min(EXAMPLES, len(sources)))],
  }


def task(config) -> trainer.Task:
  """Draws the training and test sets from the seed and builds the task."""
  key_data = jax.random.split(jax.random.key(config.seed), 4)[0]
  key_train, key_test = jax.random.split(key_data)
  draw = jax.jit(synthetic.reverse_digits, static_argnums=(1, 2, 3))  # one program, not op by op
  train_sources, train_targets = jax.device_get(draw(key_train, config.train_size,
                                                     config.max_digits, config.min_digits))
  test_sources, test_targets = jax.device_get(draw(key_test, config.test_size, config.max_digits,
                                                   config.min_digits))
  seen = {row.tobytes() for row in train_sources}
  test_seen = np.array([row.tobytes() in seen for row in test_sources])
  cell = config.cell

  def init(run_config, key):
    return seq2seq.init(key, cell, synthetic.REVERSAL_VOCAB_SIZE, run_config.embedding_size,
                        run_config.hidden_size)

  def loss(params, carry, batch, key):
    del key
    return seq2seq.loss(cell, params, batch['sources'], batch['targets']), carry

  def batch(step):
    rows = tasks.batch_indices(config.train_size, config.batch_size, config.seed, step)
    return {'sources': train_sources[rows], 'targets': train_targets[rows]}

  def probe(params, carry, batch):
    """The decoder's loss as a function of the encoder's states (through the state
    after each source's last digit)."""
    del carry
    sources, targets = batch['sources'], batch['targets']
    lengths = seq2seq.lengths_of(sources)

    def decoder_loss(states):
      last = jnp.take_along_axis(states, (lengths - 1)[:, None, None], axis=1)[:, 0]
      outputs, _ = combinators.layer_for(cell)(
          params['decoder'], params['embedding'][seq2seq.decoder_inputs(targets)], last)
      logits = outputs @ params['W_out'] + params['b_out']
      real = (targets != seq2seq.PAD).astype(jnp.float32)
      nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
      return jnp.sum(nll * real) / jnp.maximum(jnp.sum(real), 1.0)

    return diagnostics.Probe(seq2seq.step_function(cell), params['encoder'],
                             params['embedding'][sources],
                             jnp.zeros((sources.shape[0], params['W_out'].shape[0])),
                             decoder_loss, lengths)

  def report(run_config, params) -> dict:
    sample_key = jax.random.split(jax.random.key(run_config.seed), 4)[3]
    return dict(evaluate(run_config, params, test_sources, test_targets, test_seen, sample_key),
                test_seen_in_training_fraction=float(test_seen.mean()))

  return trainer.Task(init=init, loss=loss, batch=batch, probe=probe,
                      recurrent_weight=lambda params: diagnostics.recurrent_matrix(
                          params['encoder']), report=report)


def _temperature(value) -> bool:
  return isinstance(value, (int, float)) and value >= 0


Field, Check = experiment.Field, experiment.Check
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, check=check,
    fields={
        'seed': experiment.TRAINER_FIELDS['seed']._replace(
            help='params, training data and batch order; the test set uses another key'),
        'cell': Field('gru', experiment.one_of(seq2seq.CELLS),
                      'gru | elman, encoder and decoder both'),
        'min_digits': Field(1, experiment.integer(1)),
        'max_digits': Field(8, experiment.integer(1)),
        'train_size': Field(100_000, experiment.integer(1),
                            'a fixed training set, shuffled per epoch'),
        'test_size': Field(2000, experiment.integer(1)),
        'max_decode_length': Field(9, experiment.integer(1),
                                   'decoding stops at <eos> or after this many tokens (the '
                                   'longest target is max_digits + 1)'),
        'embedding_size': Field(32, experiment.integer(1)),
        'hidden_size': Field(128, experiment.integer(1)),
        'batch_size': Field(128, experiment.integer(1)),
        'sample_temperature': Field(1.0, Check('a value >= 0 (0: greedy)', _temperature),
                                    'sampled decoding is reported beside greedy'),
    },
    report=('exact_match', 'token_accuracy', 'sampled_exact_match', 'exact_match_unseen',
            'train_loss_nats'),
    vmappable=())  # none: the seed draws the training set, which a group shares
