"""Scan against a Python loop, lengths, reverse, and truncated BPTT."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import recurrence

B, T, D, H = 4, 9, 3, 5
LENGTHS = np.array([9, 4, 0, 6], np.int32)


@pytest.fixture
def problem(key):
  k1, k2, k3 = jax.random.split(key, 3)
  params = cells.init_elman(k1, D, H, 'gaussian', radius=0.9)
  inputs = jax.random.normal(k2, (B, T, D))
  initial = 0.5 * jax.random.normal(k3, (B, H))
  return params, inputs, initial


def python_loop(cell, params, inputs, initial):
  h, outputs = initial, []
  for t in range(inputs.shape[1]):
    h, y = cell(params, h, inputs[:, t])
    outputs.append(y)
  return jnp.stack(outputs, axis=1), h


@pytest.mark.parametrize('activation', ['tanh', 'relu'])
def test_scan_equals_python_loop(problem, activation):
  params, inputs, initial = problem
  cell = cells.elman(activation)
  states, final = recurrence.scan(cell, params, inputs, initial)
  expected_states, expected_final = python_loop(cell, params, inputs, initial)
  np.testing.assert_allclose(states, expected_states, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(final, expected_final, rtol=1e-5, atol=1e-6)


def test_counting_cell_plumbing():
  # A cell with an exact answer: the carry counts the steps, the output is the input sum so far.
  def counter(params, carry, x):
    count, total = carry
    return (count + 1, total + x), total + x

  inputs = jnp.ones((2, 5, 1))
  outputs, (count, total) = recurrence.scan(
      counter, None, inputs, (jnp.zeros((2, 1)), jnp.zeros((2, 1))),
      lengths=jnp.array([5, 2], jnp.int32))
  np.testing.assert_array_equal(count[:, 0], [5, 2])
  np.testing.assert_array_equal(outputs[1, :, 0], [1, 2, 0, 0, 0])
  np.testing.assert_array_equal(outputs[0, :, 0], [1, 2, 3, 4, 5])


def test_padded_batch_equals_each_sequence_alone(problem):
  params, inputs, initial = problem
  cell = cells.elman('tanh')
  states, final = recurrence.scan(cell, params, inputs, initial, lengths=jnp.asarray(LENGTHS))
  for b, length in enumerate(LENGTHS):
    alone, alone_final = recurrence.scan(cell, params, inputs[b:b + 1, :length],
                                         initial[b:b + 1]) if length else (None, initial[b:b + 1])
    if length:
      np.testing.assert_allclose(states[b, :length], alone[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(states[b, length:], 0.0)
    np.testing.assert_allclose(final[b], alone_final[0], rtol=1e-6, atol=1e-7)


def test_length_zero_returns_initial_state(problem):
  params, inputs, initial = problem
  _, final = recurrence.scan(cells.elman('tanh'), params, inputs, initial,
                             lengths=jnp.zeros((B,), jnp.int32))
  np.testing.assert_array_equal(final, initial)


def test_reverse_within_lengths_equals_flipped_true_sequence(problem):
  params, inputs, initial = problem
  cell = cells.elman('tanh')
  states, final = recurrence.scan(cell, params, inputs, initial,
                                  lengths=jnp.asarray(LENGTHS), reverse=True)
  for b, length in enumerate(LENGTHS):
    if length == 0:
      np.testing.assert_array_equal(final[b], initial[b])
      continue
    flipped = inputs[b:b + 1, :length][:, ::-1]
    alone, alone_final = recurrence.scan(cell, params, flipped, initial[b:b + 1])
    np.testing.assert_allclose(states[b, :length], alone[0, ::-1], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(states[b, length:], 0.0)
    np.testing.assert_allclose(final[b], alone_final[0], rtol=1e-6, atol=1e-7)


def test_reverse_without_lengths_flips_time(problem):
  params, inputs, initial = problem
  cell = cells.elman('tanh')
  states, final = recurrence.scan(cell, params, inputs, initial, reverse=True)
  alone, alone_final = recurrence.scan(cell, params, inputs[:, ::-1], initial)
  np.testing.assert_allclose(states, alone[:, ::-1], rtol=1e-6)
  np.testing.assert_allclose(final, alone_final, rtol=1e-6)


def test_reverse_within_lengths_is_an_involution():
  x = jnp.arange(2 * 5, dtype=jnp.float32).reshape(2, 5)
  lengths = jnp.array([3, 5], jnp.int32)
  once = recurrence.reverse_within_lengths(x, lengths)
  np.testing.assert_array_equal(once, [[2, 1, 0, 3, 4], [9, 8, 7, 6, 5]])
  np.testing.assert_array_equal(recurrence.reverse_within_lengths(once, lengths), x)


def test_scan_works_under_jit_and_vmap(problem):
  params, inputs, initial = problem
  cell = cells.elman('tanh')
  jitted = jax.jit(lambda p, x, h: recurrence.scan(cell, p, x, h)[1])
  np.testing.assert_allclose(jitted(params, inputs, initial),
                             recurrence.scan(cell, params, inputs, initial)[1], rtol=1e-6)
  # vmap over a stack of 3 parameter sets, as a sweep does.
  stacked = jax.tree_util.tree_map(lambda p: jnp.stack([p, 2 * p, 0.5 * p]), params)
  finals = jax.vmap(lambda p: recurrence.scan(cell, p, inputs, initial)[1])(stacked)
  np.testing.assert_allclose(finals[1], recurrence.scan(
      cell, jax.tree_util.tree_map(lambda p: 2 * p, params), inputs, initial)[1], rtol=1e-5)


class TestTruncatedBPTT:

  def loss(self, outputs):
    return jnp.sum(jnp.sin(outputs))

  def test_full_window_equals_full_bptt(self, problem):
    params, inputs, initial = problem
    cell = cells.elman('tanh')
    full = jax.grad(lambda p: self.loss(recurrence.scan(cell, p, inputs, initial)[0]))(params)
    truncated = jax.grad(lambda p: self.loss(
        recurrence.truncated_scan(cell, p, inputs, initial, truncation=T)[0]))(params)
    for name in full:
      np.testing.assert_allclose(truncated[name], full[name], rtol=1e-6, atol=1e-7)

  @pytest.mark.parametrize('tau', [1, 2, 4])
  def test_forward_unchanged_and_gradient_cut(self, problem, tau):
    params, inputs, initial = problem
    cell = cells.elman('tanh')
    states, final = recurrence.truncated_scan(cell, params, inputs, initial, truncation=tau)
    full_states, full_final = recurrence.scan(cell, params, inputs, initial)
    np.testing.assert_allclose(states, full_states, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(final, full_final, rtol=1e-6, atol=1e-7)
    # The loss of the last window has exactly zero gradient with respect to earlier inputs.
    start = ((T - 1) // tau) * tau

    def last_window_loss(x):
      outputs, _ = recurrence.truncated_scan(cell, params, x, initial, truncation=tau)
      return self.loss(outputs[:, start:])

    gradient = jax.grad(last_window_loss)(inputs)
    np.testing.assert_array_equal(gradient[:, :start], 0.0)
    assert np.abs(gradient[:, start:]).min() > 0
    # ... while full BPTT does reach them.
    full_gradient = jax.grad(lambda x: self.loss(
        recurrence.scan(cell, params, x, initial)[0][:, start:]))(inputs)
    assert np.abs(full_gradient[:, :start]).max() > 1e-6


class TestBadInput:

  def test_wrong_rank(self, problem):
    params, inputs, initial = problem
    with pytest.raises(ValueError, match=r'inputs: expected rank 3 \[B, T, d\], got shape \(4, 9\)'):
      recurrence.scan(cells.elman(), params, inputs[..., 0], initial)

  def test_wrong_batch_of_initial_state(self, problem):
    params, inputs, initial = problem
    with pytest.raises(ValueError, match=r'initial_state: expected leading batch size 4 .* got shape \(3, 5\)'):
      recurrence.scan(cells.elman(), params, inputs, initial[:3])

  def test_wrong_input_size(self, problem):
    params, inputs, initial = problem
    with pytest.raises(ValueError, match=r'inputs: expected last axis d = 3 \(W_xh is \[3, 5\]\), got shape \(4, 2\)'):
      recurrence.scan(cells.elman(), params, inputs[..., :2], initial)
    with pytest.raises(ValueError, match=r'initial_state: expected last axis H = 5, got shape \(4, 6\)'):
      recurrence.scan(cells.elman(), params, inputs, jnp.zeros((4, 6)))

  @pytest.mark.parametrize('lengths, message', [
      (np.array([1, 2, 3, 10], np.int32), r'lengths: expected values in \[0, T\] = \[0, 9\], got min 1 and max 10'),
      (np.array([-1, 2, 3, 4], np.int32), r'lengths: expected values in \[0, T\] = \[0, 9\], got min -1 and max 4'),
      (np.array([1, 2, 3], np.int32), r'lengths: expected shape \[B\] = \(4,\), got \(3,\)'),
      (np.array([1.0, 2, 3, 4], np.float32), 'lengths: expected integers, got dtype float32'),
  ])
  def test_bad_lengths(self, problem, lengths, message):
    params, inputs, initial = problem
    with pytest.raises(ValueError, match=message):
      recurrence.scan(cells.elman(), params, inputs, initial, lengths=lengths)

  @pytest.mark.parametrize('tau', [0, -3, 2.5])
  def test_bad_truncation(self, problem, tau):
    params, inputs, initial = problem
    with pytest.raises(ValueError, match=f'truncation: expected an int tau >= 1, got {tau}'):
      recurrence.truncated_scan(cells.elman(), params, inputs, initial, truncation=tau)


def test_lengths_under_jit_are_clipped_to_the_sequence(problem):
  # Values cannot be checked under jit; out-of-range lengths act as 0 or T, never NaN.
  params, inputs, initial = problem
  cell = cells.elman('tanh')
  run = jax.jit(lambda lengths: recurrence.scan(cell, params, inputs, initial, lengths,
                                                reverse=True))
  states, final = run(jnp.array([15, -2, 4, 9], jnp.int32))
  expected, expected_final = recurrence.scan(cell, params, inputs, initial,
                                             jnp.array([9, 0, 4, 9], jnp.int32), reverse=True)
  np.testing.assert_allclose(states, expected, rtol=1e-6)
  np.testing.assert_allclose(final, expected_final, rtol=1e-6)
