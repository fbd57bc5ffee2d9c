"""Sequence to sequence: the reversal data, the teacher-forced loss, decoding, the experiment."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import seq2seq as seq2seq_experiment
from experiments.configs import seq2seq as configs
from rnnjax import combinators
from rnnjax import seq2seq
from rnnjax.data import synthetic
from rnnjax.train import experiment
from rnnjax.train import harness

SEQ2SEQ = seq2seq_experiment.EXPERIMENT

VOCAB = synthetic.REVERSAL_VOCAB_SIZE
# Jitted once per cell (and temperature), so that the tests compile each program once.
decode = jax.jit(seq2seq.decode, static_argnames=('cell', 'max_length', 'temperature'))
encode = jax.jit(seq2seq.encode, static_argnums=0)


loss = jax.jit(seq2seq.loss, static_argnums=0)


@functools.cache
def initial_params(cell):
  return jax.jit(seq2seq.init, static_argnums=(1, 2, 3, 4))(jax.random.key(1), cell, VOCAB, 8, 16)


def small_model(cell):
  """Untrained params, E = 8, H = 16: a fresh dict each call (tests change entries)."""
  return dict(initial_params(cell))


@functools.cache
def reversal_batch():
  """12 sources of 1 to 6 digits, ``[12, 6]``, and their targets, ``[12, 7]``."""
  return jax.jit(synthetic.reverse_digits, static_argnums=(1, 2))(jax.random.key(0), 12, 6)


def test_reversal_targets_are_the_reversed_digits(key):
  sources, targets = synthetic.reverse_digits(key, 128, max_digits=6, min_digits=2)
  sources, targets = np.asarray(sources), np.asarray(targets)
  assert sources.shape == (128, 6) and targets.shape == (128, 7)
  assert sources.dtype == targets.dtype == np.int32
  lengths = (sources != seq2seq.PAD).sum(axis=1)
  assert set(lengths.tolist()) == {2, 3, 4, 5, 6}
  for source, target, length in zip(sources, targets, lengths):
    digits = source[:length]
    assert digits.min() >= 3 and digits.max() <= 12  # never PAD 0, BOS 1 or EOS 2
    np.testing.assert_array_equal(source[length:], seq2seq.PAD)
    np.testing.assert_array_equal(target, np.concatenate(
        [digits[::-1], [seq2seq.EOS], np.zeros(6 - length, np.int32)]))
  assert seq2seq_experiment.digits_text(np.array([4, 3, 12, 2, 0])) == '109'
  assert (seq2seq.PAD, seq2seq.BOS, seq2seq.EOS, synthetic.REVERSAL_FIRST_DIGIT, VOCAB) == (
      0, 1, 2, 3, 13)
  assert (synthetic.REVERSAL_PAD, synthetic.REVERSAL_BOS, synthetic.REVERSAL_EOS) == (
      seq2seq.PAD, seq2seq.BOS, seq2seq.EOS)  # the data's ids are the model's


@pytest.mark.parametrize('arguments, message', [
    ({'max_digits': 0}, 'max_digits: expected an int >= 1, got 0'),
    ({'max_digits': 4, 'min_digits': 5}, r'min_digits: expected an int in \[1, 4\], got 5'),
    ({'max_digits': 4, 'batch_size': 0}, 'batch_size: expected an int >= 1, got 0'),
])
def test_reversal_sizes_are_named(arguments, message, key):
  with pytest.raises(ValueError, match=message):
    synthetic.reverse_digits(key, **{'batch_size': 2, **arguments})


def test_teacher_forced_inputs_are_bos_then_the_shifted_target():
  targets = jnp.array([[5, 6, 2, 0], [7, 2, 0, 0]], jnp.int32)
  np.testing.assert_array_equal(seq2seq.decoder_inputs(targets), [[1, 5, 6, 2], [1, 7, 2, 0]])


@pytest.mark.parametrize('cell', seq2seq.CELLS)
def test_padding_does_not_change_the_loss(cell):
  sources, targets = reversal_batch()
  params = small_model(cell)
  value = float(loss(cell, params, sources, targets))
  assert 1.0 < value < 5.0  # nats per token, untrained (ln 13 = 2.56)
  widen = lambda ids: jnp.pad(ids, ((0, 0), (0, 3)), constant_values=seq2seq.PAD)
  assert float(loss(cell, params, widen(sources), widen(targets))) == pytest.approx(value,
                                                                                     abs=1e-6)
  # The loss is the mean NLL over the real tokens (EOS included), by hand.
  logits = jax.jit(seq2seq.teacher_forced_logits, static_argnums=0)(cell, params, sources,
                                                                    targets)
  log_probabilities = np.asarray(jax.nn.log_softmax(logits))
  targets = np.asarray(targets)
  real = [(b, t) for b in range(12) for t in range(7) if targets[b, t] != seq2seq.PAD]
  by_hand = -np.mean([log_probabilities[b, t, targets[b, t]] for b, t in real])
  assert value == pytest.approx(by_hand, abs=1e-5)


@pytest.mark.parametrize('cell', seq2seq.CELLS)
def test_encoder_final_state_is_the_state_at_the_true_length(cell):
  sources = jnp.array([[5, 0, 0, 0, 0], [7, 3, 12, 0, 0], [4, 9, 8, 6, 11]], jnp.int32)
  params = small_model(cell)
  padded = seq2seq.encode(cell, params, sources)
  step = seq2seq.step_function(cell)
  for row, length in enumerate([1, 3, 5]):
    alone = seq2seq.encode(cell, params, sources[row:row + 1, :length])
    np.testing.assert_allclose(padded[row], alone[0], atol=1e-6)
    state = jnp.zeros((1, 16))
    for token in sources[row, :length]:
      state, _ = step(params['encoder'], state, params['embedding'][token][None])
    np.testing.assert_allclose(padded[row], state[0], atol=1e-5)
  ignoring_lengths = combinators.layer_for(cell)(
      params['encoder'], params['embedding'][sources], jnp.zeros((3, 16)))[1]
  assert not np.allclose(ignoring_lengths[0], padded[0], atol=1e-3)  # padding would move it


def stepwise_greedy(cell, params, sources, max_length):
  """Greedy decoding of each row on its own, one argmax at a time, in Python."""
  step = seq2seq.step_function(cell)
  rows = []
  for row in range(sources.shape[0]):
    state = encode(cell, params, sources[row:row + 1])
    token, tokens = seq2seq.BOS, []
    while len(tokens) < max_length and seq2seq.EOS not in tokens:
      state, output = step(params['decoder'], state, params['embedding'][token][None])
      token = int(jnp.argmax(output[0] @ params['W_out'] + params['b_out']))
      tokens.append(token)
    rows.append(tokens + [seq2seq.PAD] * (max_length - len(tokens)))
  return np.array(rows)


@pytest.mark.parametrize('cell', seq2seq.CELLS)
def test_greedy_decoding_is_stepwise_argmax_and_stops_at_eos(cell):
  sources, _ = reversal_batch()
  params = small_model(cell)
  # Sharper logits and a higher EOS bias: some rows stop early, some run to the maximum length.
  params['W_out'] = 3 * params['W_out']
  params['b_out'] = params['b_out'].at[seq2seq.EOS].add(0.5)
  decoded = np.asarray(decode(cell, params, sources, max_length=7))
  np.testing.assert_array_equal(decoded, stepwise_greedy(cell, params, sources, 7))
  ends = [list(row).index(seq2seq.EOS) if seq2seq.EOS in row else None for row in decoded]
  assert None in ends and len({e for e in ends if e is not None}) >= 2, ends
  for row, end in zip(decoded, ends):
    if end is not None:
      np.testing.assert_array_equal(row[end + 1:], seq2seq.PAD)


def test_sampled_decoding(key):
  sources, _ = reversal_batch()
  params = small_model('gru')
  greedy = decode('gru', params, sources, 7)
  sample = lambda temperature, seed: np.asarray(decode(
      'gru', params, sources, 7, temperature, jax.random.key(seed)))
  np.testing.assert_array_equal(sample(1e-4, 0), greedy)  # temperature -> 0 is greedy
  np.testing.assert_array_equal(sample(1.0, 0), sample(1.0, 0))
  assert (sample(1.0, 0) != sample(1.0, 1)).any()
  for row in sample(1.0, 2):
    if seq2seq.EOS in row:
      np.testing.assert_array_equal(row[list(row).index(seq2seq.EOS) + 1:], seq2seq.PAD)
  params['b_out'] = params['b_out'].at[seq2seq.EOS].set(100.0)  # EOS first: the rest is PAD
  np.testing.assert_array_equal(sample(1.0, 3), [[seq2seq.EOS] + [seq2seq.PAD] * 6] * 12)
  with pytest.raises(ValueError, match='key: expected a jax.random key to sample'):
    seq2seq.decode('gru', params, sources, 7, temperature=1.0)
  with pytest.raises(ValueError, match=r'temperature: expected a finite value >= 0 \(0: greedy\)'):
    seq2seq.decode('gru', params, sources, 7, temperature=-1.0, key=key)
  with pytest.raises(ValueError, match="cell: expected one of .* got 'lstm'"):
    seq2seq.decode('lstm', params, sources, 7)


def test_accuracies():
  targets = jnp.array([[5, 6, 2, 0], [7, 2, 0, 0], [8, 9, 4, 2]], jnp.int32)
  decoded = jnp.array([[5, 6, 2], [7, 2, 0], [8, 4, 4]], jnp.int32)  # the last never ends
  exact, token_accuracy = seq2seq.accuracies(decoded, targets)
  np.testing.assert_array_equal(exact, [True, True, False])
  assert float(token_accuracy) == pytest.approx(7 / 9)  # 3 + 2 + 2 of 9 real tokens
  longer = jnp.array([[5, 6, 2, 0, 0], [7, 2, 5, 0, 0], [8, 9, 4, 2, 0]], jnp.int32)
  np.testing.assert_array_equal(seq2seq.accuracies(longer, targets)[0], [True, False, True])


def test_short_training_run_learns_reversal(tmp_path):
  config = experiment.override(configs.get_config(), {
      'max_digits': 3, 'train_size': 4000, 'test_size': 500, 'embedding_size': 16,
      'hidden_size': 48, 'batch_size': 64, 'steps': 300, 'learning_rate': 1e-2,
      'log_every': 100})
  assert config.max_decode_length == 4  # follows max_digits
  summary, = harness.run_group(SEQ2SEQ, [config], [tmp_path])
  written = json.loads((tmp_path / 'summary.json').read_text())
  assert written['exact_match'] == summary['exact_match'] and written['status'] == 'finished'
  assert summary['steps_done'] == 300
  # Chance exact match averages (0.1 + 0.01 + 0.001) / 3 = 0.037 over 1 to 3 digits.
  assert summary['exact_match'] > 0.8, summary
  assert summary['token_accuracy'] > 0.9
  assert summary['sampled_exact_match'] > 0.5
  lines = [json.loads(line) for line in (tmp_path / 'metrics.jsonl').open()]
  losses = [line['loss'] for line in lines]
  assert len(losses) == 4  # steps 1, 100, 200, 300
  assert losses[0] > 2.0 and summary['test_loss'] < 0.5  # nats per token; ln 13 = 2.56
  # the encoder's recurrent weight and its gradient-norm profile, at every logged step
  assert all(0 < line['measured_spectral_radius'] < 10 for line in lines)
  assert set(lines[0]['profile']) == {'1', '2'}  # k < T = 3 digits
  assert all(0 < ratio < 10 for ratio in lines[-1]['profile'].values())


@pytest.mark.parametrize('field, value, message', [
    ('cell', 'lstm', "config.cell: expected one of \\('elman', 'gru'\\), got 'lstm'"),
    ('hidden_size', 0, 'config.hidden_size: expected an int >= 1, got 0'),
    ('min_digits', 9, 'config.min_digits: expected at most max_digits = 8, got 9'),
    ('max_decode_length', 8, r'config.max_decode_length: expected at least max_digits \+ 1 = 9'),
    ('batch_size', 200_000, 'config.batch_size: expected at most train_size = 100000'),
    ('sample_temperature', -1.0, r'config.sample_temperature: expected a value >= 0'),
    # refused before the draw, whose 40 GB would hang the process before training
    ('max_digits', 100_000, r'config.max_digits, config.train_size: 100000 \+ 2000 sequences of '
                            r'up to 100000 digits take 76 GiB, more than a third of the'),
    ('optimizer', 'rmsprop', "optimizer: expected one of .* got 'rmsprop'"),
])
def test_config_is_checked_before_training(field, value, message):
  config = configs.get_config()
  config[field] = value
  with pytest.raises(ValueError, match=message):
    experiment.check(SEQ2SEQ, config)
