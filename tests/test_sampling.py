"""Sampling: greedy against the model fed by hand, top-k draws and their arguments, and the
temperature rule that every path which draws a token shares."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import models
from rnnjax import sampling
from rnnjax import seq2seq

V, H, E = 13, 16, 6
PROMPT = jnp.array([3, 1, 4, 1, 5], jnp.int32)


@pytest.fixture(scope='module')
def setup():
  model = models.LanguageModel(vocab_size=V, hidden_size=H, embedding_size=E)
  params = model.init(jax.random.key(0), PROMPT[None], model.initial_state(1))['params']
  # A larger head spreads the logits, so the k best of a step are well apart from the rest.
  params = {**params, 'head': {**params['head'], 'kernel': 4.0 * params['head']['kernel']}}
  return model, params, jax.jit(model.apply)


def _fed_by_hand(model, params, apply, tokens, choose=None):
  """The logits ``[n, V]`` of each of ``n`` steps after the prompt, feeding the prompt and
  then one token per step through ``model.apply``: ``tokens[i]`` after step i, or
  ``choose(logits)`` with ``tokens`` the number of steps."""
  variables = {'params': params}
  logits, state = apply(variables, PROMPT[None], model.initial_state(1))
  step_logits, chosen = [logits[0, -1]], []
  steps = tokens if choose else len(tokens)
  for i in range(steps):
    token = int(choose(step_logits[-1])) if choose else int(tokens[i])
    chosen.append(token)
    if i + 1 < steps:
      logits, state = apply(variables, jnp.array([[token]], jnp.int32), state)
      step_logits.append(logits[0, 0])
  return np.stack(step_logits), np.array(chosen, np.int32)


def test_temperature_zero_and_top_1_are_greedy(setup):
  model, params, apply = setup
  _, greedy = _fed_by_hand(model, params, apply, 25, choose=jnp.argmax)
  assert len(set(greedy.tolist())) > 1  # not a constant sequence: the test can tell orders apart
  for temperature, top_k, key in [(0.0, None, 0), (0.0, 3, 1), (0.5, 1, 2), (1.0, 1, 3),
                                  (50.0, 1, 4)]:
    ids = sampling.sample(model, params, PROMPT, 25, jax.random.key(key), temperature, top_k)
    np.testing.assert_array_equal(ids, greedy, err_msg=f't={temperature}, top_k={top_k}')


@pytest.mark.parametrize('top_k', [2, 4, V])
def test_top_k_draws_are_among_the_k_best(setup, top_k):
  model, params, apply = setup
  length = 150
  ids = np.asarray(sampling.sample(model, params, PROMPT, length, jax.random.key(top_k), 5.0,
                                   top_k))
  assert ids.shape == (length,) and ids.dtype == np.int32
  assert ids.min() >= 0 and ids.max() < V
  logits, _ = _fed_by_hand(model, params, apply, ids)
  ranks = np.sum(logits > logits[np.arange(length), ids][:, None], axis=1)  # 0: the best
  counts = np.bincount(ranks, minlength=V)  # k = V: 24, 23, 13, ..., 5 draws of ranks 0 to 12
  assert np.all(counts[top_k:] == 0)
  assert np.all(counts[:top_k] > 0)  # at t = 5 each of the k best is drawn, none dominates


@pytest.mark.parametrize('top_k', [0, -1, V + 1, 2.0, True, '3'])
def test_bad_top_k_is_named(setup, top_k):
  model, params, _ = setup
  with pytest.raises(ValueError, match=rf'top_k: expected None or an int in \[1, V\] = '
                                       rf'\[1, {V}\], got {top_k!r}'):
    sampling.sample(model, params, PROMPT, 5, jax.random.key(0), 1.0, top_k)


def test_top_k_accepts_numpy_ints(setup):
  model, params, _ = setup
  ids = sampling.sample(model, params, PROMPT, 5, jax.random.key(0), 1.0, np.int64(1))
  np.testing.assert_array_equal(
      ids, sampling.sample(model, params, PROMPT, 5, jax.random.key(0), 0.0))


# The temperature rule every path shares (sampling.draw): no temperature overflows float32.

TINY = [1e-38, 1e-45]  # logits / t alone is inf for any |logit| > 3.4e38 t: here, all of them


def test_draw_at_tiny_temperatures_is_argmax():
  logits = 20.0 * jax.random.normal(jax.random.key(0), (64, V))
  greedy = np.argmax(np.asarray(logits), axis=-1)
  assert len(set(greedy.tolist())) > 3
  traced = jax.jit(sampling.draw, static_argnames='top_k')
  for temperature in TINY:
    for top_k in (None, 4):
      for key in range(3):
        np.testing.assert_array_equal(
            sampling.draw(jax.random.key(key), logits, temperature, top_k), greedy)
        np.testing.assert_array_equal(  # traced: a float32 denormal, or flushed to 0
            traced(jax.random.key(key), logits, jnp.float32(temperature), top_k), greedy)
  np.testing.assert_array_equal(traced(jax.random.key(0), logits, jnp.float32(0.0)), greedy)
  np.testing.assert_array_equal(sampling.draw(None, logits, 0), greedy)


def test_draw_samples_the_softmax_at_the_temperature():
  """p ~ exp(logits / t): logits (0, ln 2, ln 4) at t = 2 give p = (1, 2^0.5, 2) / 4.414."""
  logits = jnp.array([0.0, math.log(2), math.log(4)])
  draws = np.asarray(sampling.draw(jax.random.key(3), jnp.tile(logits, (40_000, 1)), 2.0))
  expected = np.array([1.0, 2 ** 0.5, 2.0]) / (3 + 2 ** 0.5)
  counts = np.bincount(draws, minlength=3)
  assert counts.sum() == 40_000
  np.testing.assert_allclose(counts / 40_000, expected, atol=4 * np.sqrt(0.25 / 40_000))


def test_draw_of_non_finite_rows_is_invalid():
  logits = jnp.array([[0.0, 1.0, 60.0], [0.0, jnp.nan, 1.0], [jnp.inf, 0.0, 0.0]])
  for temperature, key in ((0.0, None), (1.0, jax.random.key(0)), (1e-45, jax.random.key(0))):
    np.testing.assert_array_equal(sampling.draw(key, logits, temperature),
                                  [2, sampling.INVALID, sampling.INVALID])
  with pytest.raises(ValueError, match='key: expected a jax.random key to draw at temperature'):
    sampling.draw(None, logits, 0.5)
  with pytest.raises(ValueError, match=r'top_k: expected None or an int in \[1, V\] = \[1, 3\]'):
    sampling.draw(jax.random.key(0), logits, 1.0, 4)


@pytest.mark.parametrize('temperature', TINY)
def test_sample_at_tiny_temperatures_is_greedy(setup, temperature):
  model, params, apply = setup
  _, greedy = _fed_by_hand(model, params, apply, 25, choose=jnp.argmax)
  for top_k, key in ((None, 5), (3, 6)):
    np.testing.assert_array_equal(
        sampling.sample(model, params, PROMPT, 25, jax.random.key(key), temperature, top_k),
        greedy)


@pytest.mark.parametrize('temperature', TINY)
def test_decode_at_tiny_temperatures_is_greedy(temperature):
  """seq2seq.decode divided logits by the temperature: inf at 1e-38, the first inf drawn."""
  params = seq2seq.init(jax.random.key(0), 'elman', 13, 6, 16)
  params['W_out'] = 8.0 * params['W_out']  # logits far from 0: each is inf / t at 1e-38
  sources = jnp.array([[3, 4, 5, 6], [7, 8, 0, 0], [9, 10, 11, 0]], jnp.int32)
  greedy = np.asarray(seq2seq.decode('elman', params, sources, 6))
  assert len(set(greedy.ravel().tolist())) > 2
  for key in range(3):
    np.testing.assert_array_equal(
        seq2seq.decode('elman', params, sources, 6, temperature, jax.random.key(key)), greedy)
    decode = jax.jit(seq2seq.decode, static_argnames=('cell', 'max_length', 'temperature'))
    np.testing.assert_array_equal(
        decode('elman', params, sources, 6, temperature, jax.random.key(key)), greedy)


@pytest.mark.parametrize('temperature', [-1e-45, float('nan'), float('inf'), '0.5', True])
def test_every_path_refuses_the_same_bad_temperatures(setup, temperature):
  model, params, _ = setup
  message = r'temperature: expected a finite value >= 0 \(0: greedy\), got '
  with pytest.raises(ValueError, match=message):
    sampling.sample(model, params, PROMPT, 5, jax.random.key(0), temperature)
  with pytest.raises(ValueError, match=message):
    seq2seq.decode('elman', seq2seq.init(jax.random.key(0), 'elman', 13, 6, 16),
                   jnp.array([[3, 4]], jnp.int32), 3, temperature, jax.random.key(0))
