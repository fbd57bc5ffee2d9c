"""The language model, its training loop (metrics, divergence, checkpoints) and sampling."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from rnnjax import models
from rnnjax import sampling
from rnnjax.data import text
from rnnjax.train import language_model
from rnnjax.train import optimizers

V, H = 11, 16


@pytest.fixture
def setup(key):
  ids = np.asarray(jax.random.randint(key, (2000,), 0, V), np.int32)
  inputs, targets = text.stream_windows(ids, batch_size=4, truncation=8)
  model = models.LanguageModel(vocab_size=V, hidden_size=H, embedding_size=5)
  params = model.init(key, inputs[0], model.initial_state(4))['params']
  return model, params, inputs, targets


def test_metrics_and_checkpoint(setup, tmp_path):
  model, params, inputs, targets = setup
  settings = language_model.LoopSettings(steps=20, clipping='global_norm',
                                         log_every=10)
  optimizer = optimizers.make_optimizer('adam', 1e-2, 'global_norm', 0.5)
  final, record = language_model.train(model, params, optimizer, inputs, targets, settings,
                                       tmp_path)
  lines = [json.loads(l) for l in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
  assert [l['step'] for l in lines] == [1, 10, 20]
  first = lines[0]
  assert set(first) >= {'loss', 'bits_per_char', 'grad_norm', 'clipped', 'spectral_radius',
                        'profile', 'steps_per_second'}
  assert first['bits_per_char'] == pytest.approx(first['loss'] / math.log(2))
  assert list(first['profile']) == ['1', '2', '5']  # k < tau = 8
  assert first['profile'] == record['first_profile']
  assert first['clipped'] == (first['grad_norm'] > 0.5)
  # Step 1's spectral radius and profile are measured at initialization (default: rho = 1).
  assert first['spectral_radius'] == pytest.approx(1.0, abs=1e-4)
  assert record['final_spectral_radius'] == lines[-1]['spectral_radius']
  assert 0 <= record['clipped_fraction'] <= 1 and record['steps_done'] == 20
  # The checkpoint holds the final params.
  manager = ocp.CheckpointManager((tmp_path / 'checkpoint').absolute())
  assert manager.latest_step() == 20
  restored = manager.restore(20)
  np.testing.assert_array_equal(restored['params']['recurrence']['cell']['W_hh'],
                                final['recurrence']['cell']['W_hh'])


def test_divergence_stops_and_says_so(setup, tmp_path):
  model, params, inputs, targets = setup
  # An infinite learning rate (make_optimizer refuses one, so it is set in the state): the
  # params of step 2 are inf or NaN, and so is its loss.
  sgd = optimizers.make_optimizer('sgd', 1.0)
  def init(params):
    state = sgd.init(params)
    return state._replace(hyperparams=dict(state.hyperparams, learning_rate=jnp.float32(jnp.inf)))
  optimizer = optax.GradientTransformation(init, sgd.update)
  settings = language_model.LoopSettings(steps=40, log_every=10)
  _, record = language_model.train(model, params, optimizer, inputs, targets, settings, tmp_path)
  assert record['diverged'] and record['diverged_step'] == 2
  assert record['steps_done'] == 1  # the logged step 1; nothing after the divergence
  lines = (tmp_path / 'metrics.jsonl').read_text().splitlines()
  assert len(lines) == 1


def test_evaluate_equals_mean_window_loss(setup):
  model, params, inputs, targets = setup
  carry, losses = model.initial_state(4), []
  for window in range(inputs.shape[0]):
    logits, carry = model.apply({'params': params}, inputs[window], carry)
    losses.append(float(language_model.cross_entropy(logits, targets[window])))
  assert language_model.evaluate(model, params, inputs, targets) == pytest.approx(
      np.mean(losses), rel=1e-5)
  # An untrained model is close to chance, ln V nats.
  assert np.mean(losses) == pytest.approx(math.log(V), rel=0.1)


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


@pytest.mark.parametrize('kwargs, message', [
    (dict(steps=0), 'steps: expected an int >= 1, got 0'),
    (dict(steps=10, log_every=10, checkpoint_every=15), 'checkpoint_every: expected 0 or a multiple of log_every=10, got 15'),
    (dict(steps=10, on_divergence='ignore'), "on_divergence: expected one of .* got 'ignore'"),
])
def test_loop_settings_bad_input(kwargs, message):
  with pytest.raises(ValueError, match=message):
    language_model.LoopSettings(**kwargs)


def test_step_compiles_once_across_radius_learning_rate_and_threshold(setup):
  model, _, inputs, targets = setup
  settings = language_model.LoopSettings(steps=3, clipping='global_norm', log_every=3)
  runs = [(0.5, 1e-3, 0.5), (1.5, 3e-2, 2.0), (1.0, 1e-2, 100.0)]
  optimizers_ = []
  for i, (radius, learning_rate, threshold) in enumerate(runs):
    params = models.LanguageModel(vocab_size=V, hidden_size=H, embedding_size=5,
                                      radius=radius).init(jax.random.key(i), inputs[0],
                                                          model.initial_state(4))['params']
    optimizer = optimizers.make_optimizer('adam', learning_rate, 'global_norm', threshold)
    optimizers_.append(optimizer)
    language_model.train(model, params, optimizer, inputs, targets, settings)
  _, group_step = language_model.step_functions(model, optimizers_[0].update, 'global_norm')
  assert group_step._cache_size() == 1  # one compilation for the three runs


def test_group_equals_solo_runs(setup):
  model, _, inputs, targets = setup
  settings = language_model.LoopSettings(steps=30, clipping='global_norm', log_every=10)
  params = [models.LanguageModel(vocab_size=V, hidden_size=H, embedding_size=5,
                                     radius=r).init(jax.random.key(i), inputs[0],
                                                    model.initial_state(4))['params']
            for i, r in enumerate((0.5, 1.0, 1.5))]
  optimizers_ = [optimizers.make_optimizer('adam', lr, clipping, 1.0)
                 for lr, clipping in ((1e-2, 'none'), (3e-2, 'global_norm'), (1e-3, 'none'))]
  group_params, group_records = language_model.train_group(model, params, optimizers_, inputs,
                                                            targets, settings)
  for p, o, gp, gr in zip(params, optimizers_, group_params, group_records):
    solo_params, solo_record = language_model.train(model, p, o, inputs, targets, settings)
    assert gr['final_train_loss'] == pytest.approx(solo_record['final_train_loss'], rel=1e-5)
    assert gr['clipped_fraction'] == solo_record['clipped_fraction']
    np.testing.assert_allclose(gp['head']['kernel'], solo_params['head']['kernel'], rtol=1e-4,
                               atol=1e-6)
  assert group_records[0]['clipped_fraction'] == 0.0  # no clipping: an infinite threshold


def test_group_rejects_mixed_optimizers(setup):
  model, params, inputs, targets = setup
  with pytest.raises(ValueError, match='optimizers_: expected runs that share one optimizer'):
    language_model.train_group(model, [params, params],
                               [optimizers.make_optimizer('adam', 1e-3),
                                optimizers.make_optimizer('sgd', 1e-3)],
                               inputs, targets, language_model.LoopSettings(steps=1))


def test_streaming_evaluation_equals_windows_with_constant_memory(setup):
  model, params, _, _ = setup
  ids = np.asarray(jax.random.randint(jax.random.key(3), (4, 401), 0, V), np.int32)
  # evaluate() on the same 4 streams, as windows of 8 carried across: 50 windows.
  inputs = ids[:, :-1].reshape(4, 50, 8).transpose(1, 0, 2)
  targets = ids[:, 1:].reshape(4, 50, 8).transpose(1, 0, 2)
  assert language_model.evaluate_streaming(model, params, ids) == pytest.approx(
      language_model.evaluate(model, params, inputs, targets), rel=1e-5)
  run = language_model._streaming_evaluation(model)
  memory = lambda n: run.lower(params, jnp.zeros((4, n), jnp.int32)).compile().memory_analysis(
      ).temp_size_in_bytes
  assert memory(16_001) == memory(1_001)  # O(1) in the stream length


def test_skip_ends_a_run_that_cannot_recover(setup, tmp_path):
  model, params, inputs, targets = setup
  sgd = optimizers.make_optimizer('sgd', 1.0, on_divergence='skip')
  def init(params):
    state = sgd.init(params)
    return state._replace(hyperparams=dict(state.hyperparams, learning_rate=jnp.float32(jnp.inf)))
  settings = language_model.LoopSettings(steps=40, log_every=10, on_divergence='skip')
  _, record = language_model.train(model, params, optax.GradientTransformation(init, sgd.update),
                                   inputs, targets, settings)
  assert record['diverged'] and record['diverged_step'] == 2
  assert record['skipped_steps'] == 9  # steps 2..10, all non-finite


@pytest.mark.parametrize('field, value, message', [
    ('hidden_size', -3, 'config.hidden_size: expected an int >= 1, got -3'),
    ('embedding_size', -1, 'config.embedding_size: expected an int >= 0, got -1'),
    ('sample_temperature', -1.0, r'config.sample_temperature: expected a value >= 0 \(0: greedy\), got -1.0'),
    ('sample_prompt', '', 'config.sample_prompt: expected at least one character'),
])
def test_char_lm_config_is_checked_before_training(field, value, message):
  from experiments import char_lm
  from experiments.configs import char_lm as configs
  config = configs.get_config()
  config[field] = value
  with pytest.raises(ValueError, match=message):
    char_lm.check_config(config)


def test_prompt_outside_the_vocabulary_is_named(setup):
  model, params, _, _ = setup
  with pytest.raises(ValueError, match=r'prompt: expected ids in \[0, V\) = \[0, 11\), got min 0 and max 11'):
    sampling.sample(model, params, jnp.array([0, 11]), 3, jax.random.key(0))
