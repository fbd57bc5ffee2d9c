"""The fused Elman layer equals autodiff of the plain scan, with and without lengths and reverse."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import fused
from rnnjax import recurrence

B, T, D, H = 4, 11, 3, 6
LENGTHS = np.array([11, 5, 0, 8], np.int32)
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture
def problem(key):
  k1, k2, k3, k4 = jax.random.split(key, 4)
  params = cells.init_elman(k1, D, H, 'gaussian', radius=1.1)
  params['b'] = 0.1 * jax.random.normal(k4, (H,))
  inputs = jax.random.normal(k2, (B, T, D))
  initial = 0.5 * jax.random.normal(k3, (B, H))
  weights = jax.random.normal(jax.random.key(5), (B, T, H))
  return params, inputs, initial, weights


@pytest.mark.parametrize('activation', ['tanh', 'relu'])
@pytest.mark.parametrize('use_lengths', [False, True])
@pytest.mark.parametrize('reverse', [False, True])
def test_fused_equals_plain_scan(problem, activation, use_lengths, reverse):
  params, inputs, initial, weights = problem
  lengths = jnp.asarray(LENGTHS) if use_lengths else None

  def loss(layer, params, inputs, initial):
    states, final = layer(params, inputs, initial)
    return jnp.sum(jnp.sin(states) * weights) + jnp.sum(final ** 3), (states, final)

  plain = lambda p, x, h: recurrence.scan(cells.elman(activation), p, x, h, lengths, reverse)
  fast = lambda p, x, h: fused.elman_layer(p, x, h, lengths, reverse, activation)
  expected_grads, (expected_states, expected_final) = jax.grad(
      lambda *a: loss(plain, *a), argnums=(0, 1, 2), has_aux=True)(params, inputs, initial)
  grads, (states, final) = jax.jit(jax.grad(
      lambda *a: loss(fast, *a), argnums=(0, 1, 2), has_aux=True))(params, inputs, initial)
  np.testing.assert_allclose(states, expected_states, rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(final, expected_final, rtol=RTOL, atol=ATOL)
  for name in params:
    np.testing.assert_allclose(grads[0][name], expected_grads[0][name], rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(grads[1], expected_grads[1], rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(grads[2], expected_grads[2], rtol=RTOL, atol=ATOL)


def test_time_major_and_unroll(problem):
  params, inputs, initial, _ = problem
  expected, expected_final = fused.elman_layer(params, inputs, initial)
  states, final = fused.elman_layer(params, jnp.swapaxes(inputs, 0, 1), initial,
                                    time_major=True, unroll=4)
  # Another matmul layout rounds differently: float32 rounding near zero needs an atol.
  np.testing.assert_allclose(jnp.swapaxes(states, 0, 1), expected, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(final, expected_final, rtol=1e-6, atol=1e-6)


def test_second_bias_and_vmap(problem):
  params, inputs, initial, _ = problem
  two = dict(params, b=params['b'] / 2, b_hh=params['b'] / 2)
  np.testing.assert_allclose(fused.elman_layer(two, inputs, initial)[0],
                             fused.elman_layer(params, inputs, initial)[0], rtol=1e-6)
  stacked = jax.tree_util.tree_map(lambda p: jnp.stack([p, 0.5 * p]), params)
  grads = jax.vmap(jax.grad(lambda p: fused.elman_layer(p, inputs, initial)[1].sum()))(stacked)
  alone = jax.grad(lambda p: fused.elman_layer(p, inputs, initial)[1].sum())(
      jax.tree_util.tree_map(lambda p: 0.5 * p, params))
  np.testing.assert_allclose(grads['W_hh'][1], alone['W_hh'], rtol=1e-5, atol=1e-7)


def test_bad_input_is_named(problem):
  params, inputs, initial, _ = problem
  with pytest.raises(ValueError, match=r'inputs: expected rank 3'):
    fused.elman_layer(params, inputs[0], initial)
  with pytest.raises(ValueError, match=r'inputs: expected last axis d = 3'):
    fused.elman_layer(params, inputs[..., :2], initial)
  with pytest.raises(ValueError, match=r'lengths: expected values in \[0, T\] = \[0, 11\]'):
    fused.elman_layer(params, inputs, initial, lengths=np.array([1, 2, 3, 12], np.int32))
  with pytest.raises(ValueError, match="activation: expected one of"):
    fused.elman_layer(params, inputs, initial, activation='gelu')
  with pytest.raises(ValueError, match=r"initial_state: expected a floating \[B, H\] array "
                                       r"\(cast to the params' float32\), got int32"):
    fused.elman_layer(params, inputs, initial.astype(jnp.int32))  # the loop's TypeError before
  with pytest.raises(ValueError, match='unroll: expected an int >= 1, got 2.5'):
    fused.elman_layer(params, inputs, initial, unroll=2.5)


def test_checkpointed_layer_equals_fused_and_saves_memory(key):
  k1, k2 = jax.random.split(key)
  batch, steps, hidden = 8, 256, 32
  params = cells.init_elman(k1, 4, hidden, 'orthogonal', radius=1.0)
  inputs = jax.random.normal(k2, (batch, steps, 4))
  initial = jnp.zeros((batch, hidden))
  weights = jax.random.normal(jax.random.key(3), (batch, steps, hidden))
  loss = lambda layer: lambda p: jnp.sum(layer(p)[0] * weights) + jnp.sum(jnp.sin(layer(p)[1]))
  full = lambda p: fused.elman_layer(p, inputs, initial)
  segmented = lambda p: fused.checkpointed_elman_layer(p, inputs, initial, segment_length=16)
  np.testing.assert_allclose(segmented(params)[0], full(params)[0], rtol=1e-6, atol=1e-7)
  expected = jax.grad(loss(full))(params)
  grads = jax.grad(loss(segmented))(params)
  for name in params:  # sums over 256 steps of entries up to ~60: atol 1e-4 is float32 rounding
    np.testing.assert_allclose(grads[name], expected[name], rtol=1e-5, atol=1e-4)
  memory = lambda f: jax.jit(jax.grad(loss(f))).lower(params).compile().memory_analysis(
      ).temp_size_in_bytes
  states_bytes = batch * steps * hidden * 4
  # O(T) saved states for the fused layer; about T/s + s of them when checkpointed.
  assert memory(full) >= states_bytes
  assert memory(segmented) < 0.5 * memory(full)
  with pytest.raises(ValueError, match='segment_length: expected an int s >= 1 dividing T = 256, got 10'):
    fused.checkpointed_elman_layer(params, inputs, initial, segment_length=10)
