"""Sampling: greedy against the model fed by hand, top-k draws and their arguments."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import models
from rnnjax import sampling

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
