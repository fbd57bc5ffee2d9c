"""The language model: evaluation over windows and streams, sampling, the char_lm config."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import models
from rnnjax import sampling
from rnnjax.data import text
from rnnjax import evaluation

V, H = 11, 16


@pytest.fixture
def setup(key):
  ids = np.asarray(jax.random.randint(key, (2000,), 0, V), np.int32)
  inputs, targets = text.stream_windows(ids, batch_size=4, truncation=8)
  model = models.LanguageModel(vocab_size=V, hidden_size=H, embedding_size=5)
  params = model.init(key, inputs[0], model.initial_state(4))['params']
  return model, params, inputs, targets


def test_evaluate_equals_mean_window_loss(setup):
  model, params, inputs, targets = setup
  carry, losses = model.initial_state(4), []
  for window in range(inputs.shape[0]):
    logits, carry = model.apply({'params': params}, inputs[window], carry)
    losses.append(float(evaluation.cross_entropy(logits, targets[window])))
  assert evaluation.evaluate(model, params, inputs, targets) == pytest.approx(
      np.mean(losses), rel=1e-5)
  # An untrained model is close to chance, ln V nats.
  assert np.mean(losses) == pytest.approx(math.log(V), rel=0.1)


def test_scoring_refuses_ids_and_targets_that_do_not_fit(setup):
  """Out-of-range ids and mismatched targets would give a plausible score: every entry
  point names what does not fit."""
  model, params, inputs, targets = setup
  with pytest.raises(ValueError, match=r'inputs: expected ids in \[0, V\) = \[0, 11\), got min 11'):
    evaluation.evaluate(model, params, inputs + V, targets)
  with pytest.raises(ValueError, match=r'targets: expected ids in \[0, V\) = \[0, 11\), got min -1'):
    evaluation.evaluate(model, params, inputs, targets - 1)
  with pytest.raises(ValueError, match=r'targets: expected the shape of inputs \(\d+, 4, 8\), got '
                                       r'\(\d+, 4, 1\)'):
    evaluation.evaluate(model, params, inputs, targets[:, :, :1])
  with pytest.raises(ValueError, match=r'inputs: expected token ids of shape \[W >= 1, B >= 1, '
                                       r'tau >= 1\], got \(0, 4, 8\)'):
    evaluation.evaluate(model, params, inputs[:0], targets[:0])
  with pytest.raises(ValueError, match=r'ids: expected ids in \[0, V\) = \[0, 11\), got min -1'):
    evaluation.evaluate_streaming(model, params, np.full((2, 9), -1, np.int32))
  logits = jnp.zeros((2, 3, 5))
  with pytest.raises(ValueError, match=r'targets: expected ids in \[0, V\) = \[0, 5\), got min 0 '
                                       r'and max 99'):
    evaluation.cross_entropy(logits, jnp.array([[0, 1, 99], [0, 0, 0]]))
  with pytest.raises(ValueError, match=r'targets: expected shape \(2, 3\) = the leading axes of '
                                       r'logits \(2, 3, 5\), got \(2, 2\)'):
    evaluation.cross_entropy(logits, jnp.zeros((2, 2), jnp.int32))
  with pytest.raises(ValueError, match=r'targets: expected at least one target, got shape \(0, 3\)'):
    evaluation.cross_entropy(jnp.zeros((0, 3, 5)), jnp.zeros((0, 3), jnp.int32))
  assert float(evaluation.cross_entropy(logits, jnp.zeros((2, 3), jnp.int32))) == pytest.approx(
      math.log(5), rel=1e-6)


def test_greedy_sampling_is_argmax_of_the_model(setup):
  model, params, _, _ = setup
  prompt = jnp.array([3, 1, 4], jnp.int32)
  generated = sampling.sample(model, params, prompt, 6, jax.random.key(0), temperature=0.0)
  sequence = list(np.asarray(prompt))
  for _ in range(6):
    logits, _ = model.apply({'params': params}, jnp.asarray(sequence)[None], model.initial_state(1))
    sequence.append(int(jnp.argmax(logits[0, -1])))
  np.testing.assert_array_equal(generated, sequence[3:])


def test_temperature_sampling_stays_in_vocabulary(setup):
  model, params, _, _ = setup
  generated = sampling.sample(model, params, jnp.array([0]), 200, jax.random.key(1), 2.0)
  assert generated.shape == (200,) and generated.dtype == jnp.int32
  assert int(generated.min()) >= 0 and int(generated.max()) < V
  assert len(set(np.asarray(generated).tolist())) > 3  # a high temperature is not greedy
  assert sampling.sample(model, params, jnp.array([0]), 0, jax.random.key(1)).shape == (0,)
  np.testing.assert_array_equal(  # a 0-d JAX temperature is a number (refused before)
      sampling.sample(model, params, jnp.array([0]), 50, jax.random.key(1), jnp.float32(2.0)),
      sampling.sample(model, params, jnp.array([0]), 50, jax.random.key(1), 2.0))


@pytest.mark.parametrize('kwargs, message', [
    (dict(prompt=jnp.zeros((0,), jnp.int32)), r'prompt: expected a non-empty 1-D array of ids, got shape \(0,\)'),
    (dict(length=-1), 'length: expected an int >= 0, got -1'),
    (dict(temperature=-0.5), r'temperature: expected a finite value >= 0 \(0: greedy\), got -0.5'),
    (dict(temperature=float('inf')), 'temperature: expected a finite value >= 0 .* got inf'),
    (dict(temperature='1.0'), "temperature: expected a finite value >= 0 .* got '1.0'"),
    (dict(length=2.5), 'length: expected an int >= 0, got 2.5'),
    (dict(prompt=jnp.array([1.7, 2.9])), 'prompt: expected int ids, got dtype float32'),
])
def test_sampling_bad_input(setup, kwargs, message):
  model, params, _, _ = setup
  arguments = dict(prompt=jnp.array([1]), length=5, key=jax.random.key(0), temperature=1.0)
  arguments.update(kwargs)
  with pytest.raises(ValueError, match=message):
    sampling.sample(model, params, **arguments)


def test_streaming_evaluation_equals_windows_with_constant_memory(setup):
  model, params, _, _ = setup
  ids = np.asarray(jax.random.randint(jax.random.key(3), (4, 401), 0, V), np.int32)
  # evaluate() on the same 4 streams, as windows of 8 carried across: 50 windows.
  inputs = ids[:, :-1].reshape(4, 50, 8).transpose(1, 0, 2)
  targets = ids[:, 1:].reshape(4, 50, 8).transpose(1, 0, 2)
  assert evaluation.evaluate_streaming(model, params, ids) == pytest.approx(
      evaluation.evaluate(model, params, inputs, targets), rel=1e-5)
  memory = lambda n: evaluation._streaming_total.lower(
      model, params, jnp.zeros((4, n), jnp.int32)).compile().memory_analysis().temp_size_in_bytes
  assert memory(16_001) == memory(1_001)  # O(1) in the stream length


@pytest.mark.parametrize('streams, steps', [(1, 100_000), (10, 100_000), (30, 100_000)])
def test_streaming_sums_millions_of_tokens_exactly(streams, steps):
  # Zero head weights: uniform logits over V = 65, every token's NLL is ln 65 = 4.174387.
  model = models.LanguageModel(vocab_size=65, hidden_size=4, embedding_size=2)
  params = model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32),
                      model.initial_state(1))['params']
  params = jax.tree_util.tree_map(jnp.zeros_like, params)
  ids = np.zeros((streams, steps + 1), np.int32)  # 1e5 .. 3e6 predicted tokens
  assert evaluation.evaluate_streaming(model, params, ids) == pytest.approx(
      4.174387, rel=1e-6)  # a float32 running sum gave 4.1782 (1e5), 4.2012 (1e6), 4.0671 (3e6)


@pytest.mark.parametrize('field, value, message', [
    ('hidden_size', -3, 'config.hidden_size: expected an int >= 1, got -3'),
    ('embedding_size', -1, 'config.embedding_size: expected an int >= 0, got -1'),
    ('sample_temperature', -1.0, r'config.sample_temperature: expected a value >= 0 \(0: greedy\), got -1.0'),
    ('sample_prompt', '', 'config.sample_prompt: expected at least one character'),
    ('corpus', 'foo', r"config.corpus: expected one of \[.*'tinyshakespeare'.*\], got 'foo'"),
    # a config of another experiment is refused, not trained as this one
    ('experiment', 'experiments.ptb_chars', "config.experiment: expected 'experiments.char_lm' "
                                           "\\(the experiment this group runs\\), got "
                                           "'experiments.ptb_chars'"),
])
def test_char_lm_config_is_checked_before_training(field, value, message):
  from experiments import char_lm
  from experiments.configs import char_lm as configs
  from rnnjax.train import experiment
  config = configs.get_config()
  experiment.check(char_lm.EXPERIMENT, config)  # the default passes
  config[field] = value
  with pytest.raises(ValueError, match=message):
    experiment.check(char_lm.EXPERIMENT, config)


def test_prompt_outside_the_vocabulary_is_named(setup):
  model, params, _, _ = setup
  with pytest.raises(ValueError, match=r'prompt: expected ids in \[0, V\) = \[0, 11\), got min 0 and max 11'):
    sampling.sample(model, params, jnp.array([0, 11]), 3, jax.random.key(0))


def test_readout_has_the_values_and_gradients_of_dot_general(key):
  """``models.readout_dot_general``, the head's contraction with its own kernel gradient:
  the values and gradients of ``lax.dot_general``, alone and under ``vmap`` (a group)."""
  k1, k2, k3 = jax.random.split(key, 3)
  states = jax.random.normal(k1, (3, 4, 6, H))  # [R, B, T, H]
  kernel = jax.random.normal(k2, (3, H, V))
  weights = jax.random.normal(k3, (3, 4, 6, V))
  numbers = (((3 - 1,), (0,)), ((), ()))

  def loss(contract, s, w, g):
    return jnp.sum(jnp.tanh(contract(s, w, numbers)) * g)

  ours = jax.vmap(jax.value_and_grad(lambda *a: loss(models.readout_dot_general, *a),
                                     argnums=(0, 1)))(states, kernel, weights)
  reference = jax.vmap(jax.value_and_grad(lambda *a: loss(jax.lax.dot_general, *a),
                                          argnums=(0, 1)))(states, kernel, weights)
  for got, expected in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(reference)):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
  # the model's head: the same logits as a plain nn.Dense on the same params
  model = models.LanguageModel(vocab_size=V, hidden_size=H)
  head = {'kernel': kernel[0], 'bias': jnp.arange(V, dtype=jnp.float32)}
  np.testing.assert_allclose(
      model.apply({'params': {'head': head}}, states[0], method=model.logits),
      states[0] @ head['kernel'] + head['bias'], rtol=1e-6)


def test_readout_refuses_other_contractions():
  with pytest.raises(ValueError, match=r'readout_dot_general: expected \[\.\.\., H\] x \[H, V\]'):
    models.readout_dot_general(jnp.ones((2, 3)), jnp.ones((2, 4)), (((0,), (0,)), ((), ())))
