"""The fused Elman layer equals autodiff of the plain scan, with and without lengths and reverse."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import fused
from rnnjax import recurrence
from rnnjax import regularizers

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


def test_the_loops_run_to_the_longest_length_not_the_padded_one():
  """Lengths up to 60 padded to T = 199: the forward and the backward loop each step 60
  times (counted by a callable activation's callback: once a forward step, once a backward
  step through ``jax.vjp`` of it), and states and gradients equal those of the batch cut to
  60 steps, the padded steps' states zero."""
  steps = []

  def counted_tanh(a):
    jax.debug.callback(lambda: steps.append(1))
    return jnp.tanh(a)

  keys = jax.random.split(jax.random.key(7), 3)
  params = cells.init_elman(keys[0], 3, 16, 'orthogonal', radius=1.0)
  inputs = jax.random.normal(keys[1], (4, 199, 3))
  lengths = jnp.array([60, 17, 59, 1])

  def loss(params, inputs, activation):
    states, last = fused.elman_layer(params, inputs, lengths=lengths, activation=activation)
    return jnp.sum(jnp.sin(states)) + jnp.sum(last ** 2), states

  (_, states), grads = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=2)(
      params, inputs, counted_tanh)
  jax.effects_barrier()
  assert len(steps) == 2 * 60  # not 2 * 199
  (_, cut_states), cut_grads = jax.value_and_grad(loss, has_aux=True)(
      params, inputs[:, :60], 'tanh')
  np.testing.assert_allclose(states[:, :60], cut_states, rtol=1e-6, atol=1e-6)
  assert not np.any(states[:, 60:])
  for got, expected in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(cut_grads)):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)  # sums of 60 or 199 rows
  (_, named_states), named_grads = jax.value_and_grad(loss, has_aux=True)(
      params, inputs, 'tanh')  # the named activation's loops: the same bound
  np.testing.assert_allclose(named_states, states, rtol=1e-6, atol=1e-6)
  loops = _loops(jax.make_jaxpr(jax.grad(lambda p: loss(p, inputs, 'tanh')[0]))(params).jaxpr)
  assert loops.count('while') == 2 and 'scan 199' not in loops  # forward and backward


def _loops(jaxpr) -> list[str]:
  """The loops of a jaxpr and of those inside it: 'while', or 'scan <length>'."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in ('while', 'scan'):
      found.append('while' if eqn.primitive.name == 'while' else f"scan {eqn.params['length']}")
    for value in eqn.params.values():
      for inner in value if isinstance(value, (tuple, list)) else [value]:
        inner = getattr(inner, 'jaxpr', inner)
        if hasattr(inner, 'eqns'):
          found += _loops(inner)
  return found


def test_omegas_state_gradients_loop_to_the_longest_length_with_the_layers_states():
  """A training gradient with Omega (omega_penalty given the layer's states, as the temporal
  order and PTB losses call it) runs three loops, each to the longest length: the layer's
  forward and backward and the state gradients' (fused.state_gradients_from_states), none
  over the padded T = 199 (a scan of the recurrence run again, as before, would be one);
  the state gradients are 0 past the length."""
  keys = jax.random.split(jax.random.key(8), 3)
  params = cells.init_elman(keys[0], 6, 16, 'gaussian', radius=0.9)
  inputs = jax.random.normal(keys[1], (4, 199, 6))
  lengths = jnp.array([60, 60, 60, 60])
  initial = jnp.zeros((4, 16))

  def loss(params):
    states, last = fused.elman_layer(params, inputs, initial, lengths)
    last_loss = lambda s: jnp.sum(jnp.sin(s[:, 59]))
    omega = regularizers.omega_penalty(params, inputs, initial, last_loss, 'tanh', lengths,
                                       states)
    return jnp.sum(jnp.sin(last)) + 4.0 * omega

  loops = _loops(jax.make_jaxpr(jax.grad(loss))(params).jaxpr)
  assert loops == ['while'] * 3, loops
  states, _ = fused.elman_layer(params, inputs, initial, lengths)
  totals = fused.state_gradients_from_states(params['W_hh'], states, jnp.ones_like(states), lengths)
  assert np.all(np.any(totals[:, :60] != 0, axis=-1)) and not np.any(totals[:, 60:])


@pytest.mark.parametrize('activation', ['tanh', 'relu', 'linear'])
def test_the_forward_loop_copies_no_whole_buffer(activation):
  """The compiled forward holds no copy of a [B, T, H] buffer, whatever the activation (a loop
  that reads and writes one buffer in place, with a cheap activation, makes XLA copy it whole
  twice a step)."""
  params = cells.init_elman(jax.random.key(0), 2, 8, 'gaussian', radius=0.9)
  layer = jax.jit(lambda p, x: fused.elman_layer(p, x, activation=activation)[1])
  text = layer.lower(params, jnp.ones((3, 40, 2))).compile().as_text()
  assert not re.findall(r'f32\[3,40,8\]\{[^}]*\} copy\(', text)
