"""Clipping in the optimizer chain, tested as optax tests its own."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rnnjax.train import optimizers


@pytest.fixture
def gradients(key):
  k1, k2 = jax.random.split(key)
  return {'W_hh': 3.0 * jax.random.normal(k1, (8, 8)), 'b': jax.random.normal(k2, (8,))}


def clip(gradients, clipping, threshold):
  transform = optimizers.clipping_transform(clipping, threshold)
  return transform.update(gradients, transform.init(gradients))[0]


@pytest.mark.parametrize('threshold', [0.1, 1.0, 5.0])
def test_global_norm_above_threshold_equals_threshold(gradients, threshold):
  assert float(optax.tree.norm(gradients)) > threshold
  clipped = clip(gradients, 'global_norm', threshold)
  assert float(optax.tree.norm(clipped)) == pytest.approx(threshold, rel=1e-6)
  # Direction kept: every entry scaled by the same factor.
  factor = threshold / float(optax.tree.norm(gradients))
  for name in gradients:
    np.testing.assert_allclose(clipped[name], factor * gradients[name], rtol=1e-6)
  assert optimizers.was_clipped(gradients, 'global_norm', threshold)


def test_global_norm_below_threshold_is_unchanged(gradients):
  huge = 1e6
  clipped = clip(gradients, 'global_norm', huge)
  for name in gradients:
    np.testing.assert_array_equal(clipped[name], gradients[name])
  assert not optimizers.was_clipped(gradients, 'global_norm', huge)


def test_clipping_twice_equals_once(gradients):
  once = clip(gradients, 'global_norm', 1.0)
  twice = clip(once, 'global_norm', 1.0)
  for name in gradients:
    np.testing.assert_allclose(twice[name], once[name], rtol=1e-6)


def test_elementwise_clamps_each_entry(gradients):
  clipped = clip(gradients, 'elementwise', 0.5)
  for name in gradients:
    np.testing.assert_array_equal(clipped[name], np.clip(gradients[name], -0.5, 0.5))
  assert optimizers.was_clipped(gradients, 'elementwise', 0.5)
  assert not optimizers.was_clipped(gradients, 'elementwise', 1e6)


def test_no_clipping_is_identity(gradients):
  clipped = clip(gradients, 'none', 0.0)
  for name in gradients:
    np.testing.assert_array_equal(clipped[name], gradients[name])
  assert not optimizers.was_clipped(gradients, 'none', float('inf'))


def test_optimizer_chain_clips_before_the_update(gradients):
  params = jax.tree_util.tree_map(jnp.zeros_like, gradients)
  optimizer = optimizers.make_optimizer('sgd', 1.0, 'global_norm', 1.0)
  updates, _ = optimizer.update(gradients, optimizer.init(params), params)
  assert float(optax.tree.norm(updates)) == pytest.approx(1.0, rel=1e-6)


def test_skip_on_divergence_skips_non_finite_updates(gradients):
  params = jax.tree_util.tree_map(jnp.zeros_like, gradients)
  optimizer = optimizers.make_optimizer('sgd', 1.0, on_divergence='skip')
  bad = dict(gradients, b=gradients['b'].at[0].set(jnp.nan))
  updates, state = optimizer.update(bad, optimizer.init(params), params)
  for name in updates:
    np.testing.assert_array_equal(updates[name], 0.0)
  assert int(state.inner_state.total_notfinite) == 1


@pytest.mark.parametrize('kwargs, message', [
    (dict(name='rmsprop', learning_rate=0.1), "optimizer: expected one of .* got 'rmsprop'"),
    (dict(name='sgd', learning_rate=0.0), 'learning_rate: expected a finite value > 0, got 0.0'),
    (dict(name='sgd', learning_rate=float('inf')), 'learning_rate: expected a finite value > 0, got inf'),
    (dict(name='sgd', learning_rate=0.1, clipping='norm'), "clipping: expected one of .* got 'norm'"),
    (dict(name='sgd', learning_rate=0.1, clipping='global_norm', clip_threshold=-1.0),
     "clip_threshold: expected a value > 0 for clipping='global_norm', got -1.0"),
    (dict(name='sgd', learning_rate=0.1, on_divergence='retry'),
     "on_divergence: expected one of .* got 'retry'"),
])
def test_bad_settings_are_named(kwargs, message):
  with pytest.raises(ValueError, match=message):
    optimizers.make_optimizer(**kwargs)


def test_hyperparameters_are_arrays_and_runs_share_one_update(gradients):
  params = jax.tree_util.tree_map(jnp.zeros_like, gradients)
  first = optimizers.make_optimizer('adam', 1e-3, 'global_norm', 1.0)
  second = optimizers.make_optimizer('adam', 3e-2, 'none')
  assert first.update is second.update  # one compiled step serves both
  state = second.init(params)
  assert float(state.hyperparams['learning_rate']) == pytest.approx(3e-2)
  assert float(state.hyperparams['clip_threshold']) == float('inf')
  # With no clipping the update is Adam's own: the first step is -lr * sign(g).
  updates, _ = second.update(gradients, state, params)
  np.testing.assert_allclose(updates['b'], -3e-2 * np.sign(gradients['b']), rtol=1e-4)
  assert first.update is not optimizers.make_optimizer('sgd', 1e-3).update
