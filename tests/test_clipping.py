"""Clipping in the optimizer chain, tested as optax tests its own."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rnnjax import clipping as clipping_module
from rnnjax.train import optimizers


@pytest.fixture
def gradients(key):
  k1, k2 = jax.random.split(key)
  return {'W_hh': 3.0 * jax.random.normal(k1, (8, 8)), 'b': jax.random.normal(k2, (8,))}


def clip(gradients, clipping, threshold):
  """The clipped gradients and whether the chain's clipping step says it clipped."""
  transform = (clipping_module.clip(optimizers.family(clipping), threshold)
               if clipping != 'none' else clipping_module.clip('global_norm', float('inf')))
  clipped, state = transform.update(gradients, transform.init(gradients))
  return clipped, bool(state.clipped)


@pytest.mark.parametrize('threshold', [0.1, 1.0, 5.0])
def test_global_norm_above_threshold_equals_threshold(gradients, threshold):
  assert float(optax.tree.norm(gradients)) > threshold
  clipped, was_clipped = clip(gradients, 'global_norm', threshold)
  assert float(optax.tree.norm(clipped)) == pytest.approx(threshold, rel=1e-6)
  # Direction kept: every entry scaled by the same factor.
  factor = threshold / float(optax.tree.norm(gradients))
  for name in gradients:
    np.testing.assert_allclose(clipped[name], factor * gradients[name], rtol=1e-6)
  assert was_clipped


def test_global_norm_below_threshold_is_unchanged(gradients):
  huge = 1e6
  clipped, was_clipped = clip(gradients, 'global_norm', huge)
  for name in gradients:
    np.testing.assert_array_equal(clipped[name], gradients[name])
  assert not was_clipped


def test_clipping_twice_equals_once(gradients):
  once, _ = clip(gradients, 'global_norm', 1.0)
  twice, _ = clip(once, 'global_norm', 1.0)
  for name in gradients:
    np.testing.assert_allclose(twice[name], once[name], rtol=1e-6)


def test_elementwise_clamps_each_entry(gradients):
  clipped, was_clipped = clip(gradients, 'elementwise', 0.5)
  for name in gradients:
    np.testing.assert_array_equal(clipped[name], np.clip(gradients[name], -0.5, 0.5))
  assert was_clipped
  assert not clip(gradients, 'elementwise', 1e6)[1]


def test_no_clipping_is_identity(gradients):
  clipped, was_clipped = clip(gradients, 'none', 0.0)
  for name in gradients:
    np.testing.assert_array_equal(clipped[name], gradients[name])
  assert not was_clipped


def test_optimizer_chain_clips_before_the_update(gradients):
  params = jax.tree_util.tree_map(jnp.zeros_like, gradients)
  optimizer = optimizers.make_optimizer('sgd', 1.0, 'global_norm', 1.0)
  updates, state = optimizer.update(gradients, optimizer.init(params), params)
  assert float(optax.tree.norm(updates)) == pytest.approx(1.0, rel=1e-6)
  measured = optimizers.measurements(state)  # what the chain saw, from its own state
  assert float(measured['grad_norm']) == pytest.approx(float(optax.tree.norm(gradients)),
                                                       rel=1e-6)
  assert bool(measured['clipped'])
  assert float(measured['update_norm']) == pytest.approx(1.0, rel=1e-6)


def test_huge_finite_gradients_clip_to_the_threshold():
  params = {'w': jnp.zeros(2)}
  grads = {'w': jnp.array([3e19, 4e19], jnp.float32)}
  clipped = optimizers.make_optimizer('sgd', 1.0, 'global_norm', 1.0)
  updates, state = clipped.update(grads, clipped.init(params), params)
  np.testing.assert_allclose(updates['w'], [-0.6, -0.8], rtol=1e-6)  # optax's own: [-0, -0]
  assert float(optimizers.measurements(state)['grad_norm']) == pytest.approx(5e19, rel=1e-6)
  unclipped = optimizers.make_optimizer('sgd', 1.0, 'none')
  updates, _ = unclipped.update(grads, unclipped.init(params), params)
  np.testing.assert_allclose(updates['w'], [-3e19, -4e19], rtol=1e-6)  # optax's own: NaN


@pytest.mark.parametrize('kwargs, message', [
    (dict(name='rmsprop', learning_rate=0.1), "optimizer: expected one of .* got 'rmsprop'"),
    (dict(name='sgd', learning_rate=0.0), 'learning_rate: expected a finite value > 0, got 0.0'),
    (dict(name='sgd', learning_rate=float('inf')), 'learning_rate: expected a finite value > 0, got inf'),
    (dict(name='sgd', learning_rate=0.1, clipping='norm'), "clipping: expected one of .* got 'norm'"),
    (dict(name='sgd', learning_rate=0.1, clipping='global_norm', clip_threshold=-1.0),
     "clip_threshold: expected a finite value > 0 for clipping='global_norm', got -1.0"),
])
def test_bad_settings_are_named(kwargs, message):
  with pytest.raises(ValueError, match=message):
    optimizers.make_optimizer(**kwargs)


def test_hyperparameters_are_arrays_and_runs_share_one_update(gradients):
  params = jax.tree_util.tree_map(jnp.zeros_like, gradients)
  first = optimizers.make_optimizer('adam', 1e-3, 'global_norm', 1.0)
  second = optimizers.make_optimizer('adam', 3e-2, 'none')
  state = second.init(params)
  # one update function serves both chains' states (one compiled step for both runs)
  first_state = first.init(params)
  updates, _ = first.update(gradients, state, params)
  np.testing.assert_allclose(updates['b'], -3e-2 * np.sign(gradients['b']), rtol=1e-4)
  assert float(first_state.hyperparams['learning_rate']) == pytest.approx(1e-3)
  assert float(state.hyperparams['learning_rate']) == pytest.approx(3e-2)
  assert float(state.hyperparams['clip_threshold']) == float('inf')
  # With no clipping the update is Adam's own: the first step is -lr * sign(g).
  updates, _ = second.update(gradients, state, params)
  np.testing.assert_allclose(updates['b'], -3e-2 * np.sign(gradients['b']), rtol=1e-4)



def test_the_learning_rate_decays_by_a_staircase(gradients):
  """decay 0.25 every 3 steps after the first 2: SGD steps of lr at updates 1-5, 0.25 lr at
  6-8, 0.0625 lr at 9 (the updates of epochs 1 and 2 at the full rate, say, then a quarter
  at each epoch's end)."""
  params = jax.tree_util.tree_map(jnp.zeros_like, gradients)
  chain = optimizers.make_optimizer('sgd', 0.1, decay=0.25, decay_every=3, decay_begin=2)
  state = chain.init(params)
  sizes = []
  for _ in range(9):
    updates, state = chain.update(gradients, state, params)
    sizes.append(float(updates['b'][0] / (-0.1 * gradients['b'][0])))
  np.testing.assert_allclose(sizes, [1] * 5 + [0.25] * 3 + [0.0625], rtol=1e-6)
