"""Lyapunov spectra against closed forms and a second implementation; gradient flossing."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import lyapunov
from rnnjax import recurrence


def linear_cell(params, carry, x):
  """h_t = h_{t-1} W (the input is ignored): a linear recurrence with a closed-form spectrum."""
  del x
  carry = carry @ params['W']
  return carry, carry


def normal_matrix(seed: int) -> tuple[np.ndarray, np.ndarray]:
  """A real normal 7 x 7 matrix U blockdiag(...) U^T (two rotation-scalings, three reals) and
  the logs of its eigenvalues' moduli, sorted descending."""
  def rotation(radius, angle):
    return radius * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
  blocks = np.zeros((7, 7))
  blocks[:2, :2] = rotation(1.3, 0.7)
  blocks[2, 2] = -1.1
  blocks[3:5, 3:5] = rotation(0.8, 2.0)
  blocks[5, 5], blocks[6, 6] = 0.5, -0.2
  basis, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(7, 7)))
  matrix = basis @ blocks @ basis.T
  return matrix, np.sort(np.log(np.abs(np.linalg.eigvals(matrix))))[::-1]


def test_linear_recurrence_with_a_normal_matrix_has_the_log_moduli_of_its_eigenvalues():
  with jax.enable_x64(True):
    matrix, expected = normal_matrix(0)
    assert np.abs(matrix @ matrix.T - matrix.T @ matrix).max() < 1e-12  # normal
    params = {'W': jnp.asarray(matrix)}
    inputs, initial = jnp.zeros((2, 300, 1)), jnp.ones((2, 7))
    spectrum = jax.jit(lyapunov.lyapunov_spectrum, static_argnums=(0, 4, 5, 6))
    full = spectrum(linear_cell, params, inputs, initial, 7, 100, 1)
    assert full.shape == (2, 7) and full.dtype == jnp.float64
    np.testing.assert_allclose(full, np.tile(expected, (2, 1)), atol=1e-4)
    # the top 5 (whole pairs), re-orthonormalised every 7 steps: the same
    top = spectrum(linear_cell, params, inputs, initial, 5, 100, 7)
    np.testing.assert_allclose(top, np.tile(expected[:5], (2, 1)), atol=1e-4)


def growth_of_jacobian_products(params, inputs, initial, transient):
  """(1 / n) log ||J_{t0+1} ... J_T|| along the trajectory, in float64 numpy: J_t = W diag(1 -
  h_t^2) (row layout), the product renormalised each step (its scale summed in logs)."""
  w_xh, w_hh, b = (np.asarray(params[name], np.float64) for name in ('W_xh', 'W_hh', 'b'))
  rates = []
  for x, h in zip(np.asarray(inputs, np.float64), np.asarray(initial, np.float64)):
    product, log_scale = np.eye(len(h)), 0.0
    for t in range(x.shape[0]):
      h = np.tanh(x[t] @ w_xh + h @ w_hh + b)
      if t >= transient:
        product = product @ (w_hh * (1.0 - h ** 2)[None, :])
        frobenius = np.linalg.norm(product)
        product, log_scale = product / frobenius, log_scale + np.log(frobenius)
    rates.append((log_scale + np.log(np.linalg.norm(product, 2))) / (x.shape[0] - transient))
  return np.array(rates)


def test_largest_exponent_of_a_tanh_network_is_the_growth_of_its_jacobian_products():
  hidden, steps, transient = 16, 1500, 100
  params = cells.init_elman(jax.random.key(0), 2, hidden, 'gaussian', radius=1.5)
  params['b'] = jnp.full((hidden,), 0.05)
  rng = np.random.default_rng(1)
  inputs = jnp.asarray(0.5 * rng.normal(size=(2, steps, 2)), jnp.float32)
  initial = jnp.asarray(0.1 * rng.normal(size=(2, hidden)), jnp.float32)
  exponents = jax.jit(lyapunov.lyapunov_spectrum, static_argnums=(0, 4, 5))(
      cells.elman('tanh'), params, inputs, initial, 3, transient)
  expected = growth_of_jacobian_products(params, inputs, initial, transient)
  assert expected.min() < -0.05  # driven and contracting, away from 0
  np.testing.assert_allclose(exponents[:, 0], expected, atol=1e-2)
  assert np.all(np.diff(np.asarray(exponents), axis=1) <= 0)  # sorted descending


def test_lstm_carry_pair_equals_qr_of_explicit_jacobians():
  """A pytree carry ((h, c): n = 2H) against numpy's QR iteration on the Jacobians of the
  flattened step (jax.jacobian), all in float64."""
  with jax.enable_x64(True):
    hidden, steps, transient, k = 3, 60, 10, 4
    params = jax.tree.map(lambda p: jnp.asarray(p, jnp.float64),
                          cells.init_lstm(jax.random.key(2), 2, hidden))
    params['W_h'] = 3.0 * params['W_h']
    rng = np.random.default_rng(3)
    inputs = jnp.asarray(rng.normal(size=(2, steps, 2)))
    initial = (jnp.asarray(rng.normal(size=(2, hidden))), jnp.zeros((2, hidden)))
    key = jax.random.key(7)
    exponents = lyapunov.lyapunov_spectrum(cells.lstm_cell, params, inputs, initial, k,
                                           transient, key=key)
    start = np.asarray(lyapunov._orthonormal_start(key, 2 * hidden, k, jnp.float64))

    @jax.jit
    def flat_step(state, x):
      carry = (state[None, :hidden], state[None, hidden:])
      return jnp.concatenate(cells.lstm_cell(params, carry, x[None])[0], axis=-1)[0]

    step_jacobian = jax.jit(jax.jacobian(flat_step))

    for b in range(2):
      state = jnp.concatenate([initial[0][b], initial[1][b]])
      tangents, sums = start, np.zeros(k)
      for t in range(steps):
        jacobian = np.asarray(step_jacobian(state, inputs[b, t]))  # [n, n]
        state = flat_step(state, inputs[b, t])
        tangents, r = np.linalg.qr(jacobian @ tangents)
        if t >= transient:
          sums += np.log(np.abs(np.diag(r)))
      np.testing.assert_allclose(exponents[b], np.sort(sums / (steps - transient))[::-1],
                                 rtol=1e-9, atol=1e-12)


def test_vmap_over_params_equals_each_alone():
  radii = (0.8, 1.2, 1.6)
  stacked = jax.vmap(lambda key, radius: cells.init_elman(key, 2, 8, 'gaussian', radius=radius))(
      jax.random.split(jax.random.key(4), 3), jnp.asarray(radii))
  inputs = jax.random.normal(jax.random.key(5), (2, 80, 2))
  initial = jnp.full((2, 8), 0.2)
  spectrum = functools.partial(lyapunov.lyapunov_spectrum, cells.elman('tanh'), inputs=inputs,
                               initial_state=initial, k=3, transient=20)
  mapped = jax.jit(jax.vmap(spectrum))(stacked)
  for i in range(3):
    alone = jax.jit(spectrum)(jax.tree.map(lambda p: p[i], stacked))
    np.testing.assert_allclose(mapped[i], alone, rtol=1e-5, atol=1e-6)
  assert len({round(float(mapped[i, 0, 0]), 3) for i in range(3)}) == 3  # they differ


def test_lengths_leave_out_the_padding():
  params = cells.init_elman(jax.random.key(6), 2, 6, 'gaussian', radius=1.3)
  inputs = jax.random.normal(jax.random.key(7), (3, 50, 2))
  initial = jnp.full((3, 6), 0.1)
  lengths = jnp.asarray([50, 31, 5])
  spectrum = jax.jit(lyapunov.lyapunov_spectrum, static_argnums=(0, 4, 5, 6))
  cell = cells.elman('tanh')
  padded = spectrum(cell, params, inputs.at[1:, 31:].set(jnp.nan), initial, 2, 10, 3, lengths)
  for b, length in enumerate((50, 31)):
    alone = spectrum(cell, params, inputs[b:b + 1, :length], initial[b:b + 1], 2, 10, 3)
    np.testing.assert_allclose(padded[b], alone[0], rtol=1e-5, atol=1e-6)
  assert np.isnan(padded[2]).all()  # 5 steps, all in the transient


def test_bad_arguments_are_named():
  params = cells.init_elman(jax.random.key(8), 2, 4)
  inputs, initial = jnp.zeros((2, 10, 2)), jnp.zeros((2, 4))
  call = functools.partial(lyapunov.lyapunov_spectrum, cells.elman('tanh'), params)
  cases = [
      (lambda: call(inputs, initial, 0), r'k: expected an int in \[1, 4\], got 0'),
      (lambda: call(inputs, initial, 5), r'k: expected an int in \[1, 4\], got 5'),
      (lambda: call(inputs, initial, 2.0), r'k: expected an int in \[1, 4\], got 2.0'),
      (lambda: call(inputs, initial, 2, transient=10),
       r'transient: expected an int in \[0, 9\], got 10'),
      (lambda: call(inputs, initial, 2, reorthonormalize_every=0),
       r'reorthonormalize_every: expected an int >= 1, got 0'),
      (lambda: call(inputs[0], initial, 2), r'inputs: expected rank 3'),
      (lambda: call(inputs[:, :0], initial, 2), r'inputs: expected T >= 1 steps'),
      (lambda: call(inputs, initial[:, :3], 2), r'initial_state'),
      (lambda: call(inputs, initial, 2, lengths=[10, 11]), r'lengths: expected values in'),
  ]
  for bad_call, message in cases:
    with pytest.raises(ValueError, match=message):
      bad_call()


def test_flossing_pulls_the_largest_exponent_of_a_network_at_radius_15_to_zero():
  """Gradient descent on the flossing loss alone (k = 1, learning rate 0.02): the network at
  spectral radius 1.5, driven by weak inputs, sits on a stable state with lambda_1 near -0.34;
  40 steps bring it to -0.012 and -0.022 in the two sequences (measured on CPU)."""
  hidden, steps = 16, 200
  params = cells.init_elman(jax.random.key(0), 2, hidden, 'gaussian', radius=1.5)
  inputs = 0.05 * jax.random.normal(jax.random.key(1), (2, steps, 2))
  initial = jnp.full((2, hidden), 0.1)
  cell = cells.elman('tanh')
  largest = jax.jit(lambda p: lyapunov.lyapunov_spectrum(cell, p, inputs, initial, 1, 50)[:, 0])
  loss_and_grad = jax.jit(jax.value_and_grad(
      lambda p: lyapunov.flossing_loss(cell, p, inputs, initial, 1, transient=50)))
  before = np.asarray(largest(params))
  assert np.all(np.abs(before) > 0.3), before
  losses = []
  for _ in range(40):
    loss, grads = loss_and_grad(params)
    losses.append(float(loss))
    params = jax.tree.map(lambda p, g: p - 0.02 * g, params, grads)
  after = np.asarray(largest(params))
  assert np.all(np.abs(after) < 0.03), after
  np.testing.assert_allclose(losses[0], np.mean(before ** 2), rtol=1e-5)
  assert losses[-1] < 0.01 * losses[0]


def test_flossing_gradient_equals_central_differences():
  with jax.enable_x64(True):
    rng = np.random.default_rng(9)
    host = {'W_xh': rng.normal(size=(2, 3)), 'W_hh': 1.4 * rng.normal(size=(3, 3)) / np.sqrt(3),
            'b': 0.1 * rng.normal(size=3)}
    inputs = jnp.asarray(rng.normal(size=(2, 30, 2)))
    initial = jnp.asarray(0.3 * rng.normal(size=(2, 3)))
    loss = jax.jit(lambda p: lyapunov.flossing_loss(cells.elman('tanh'), p, inputs, initial, 2,
                                                    target=-0.1, transient=5,
                                                    reorthonormalize_every=2))
    value, grads = jax.value_and_grad(loss)(host)
    assert value.dtype == jnp.float64 and value > 1e-3
    step = 1e-6
    for name, array in host.items():
      numeric = np.zeros_like(array)
      for index in np.ndindex(array.shape):
        shifted = [array.copy(), array.copy()]
        shifted[0][index] += step
        shifted[1][index] -= step
        plus, minus = (float(loss(dict(host, **{name: a}))) for a in shifted)
        numeric[index] = (plus - minus) / (2 * step)
      np.testing.assert_allclose(grads[name], numeric, rtol=1e-6, atol=1e-9, err_msg=name)
      assert np.abs(numeric).max() > 1e-3


def _chaotic():
  """A 32-unit tanh network at spectral radius 3 (lambda_1 about +0.27 under weak inputs)."""
  return cells.init_elman(jax.random.key(0), 4, 32, 'gaussian', radius=3.0)


def test_from_a_chaotic_start_only_the_gradient_through_the_states_explodes():
  """The full flossing gradient grows like exp(lambda_1 T) with the window (measured: 967 at
  T = 30, 2e11 at 100, inf at 300); with the states held constant it stays bounded (0.29,
  0.47, 42.5), and the loss is the same either way."""
  params = _chaotic()
  for steps, full_at_least in ((100, 1e8), (300, np.inf)):
    inputs = 0.1 * jax.random.normal(jax.random.key(1), (16, steps, 4))
    norms, values = {}, {}
    for through in (True, False):
      value, grads = jax.value_and_grad(lambda p, t=through: lyapunov.flossing_loss(
          cells.elman(), p, inputs, k=1, transient=steps // 3, through_states=t))(params)
      norms[through] = float(jnp.sqrt(sum(jnp.sum(g ** 2) for g in jax.tree.leaves(grads))))
      values[through] = float(value)
    assert norms[True] >= full_at_least or not np.isfinite(norms[True]), (steps, norms)
    assert norms[False] < 100, (steps, norms)
    assert values[True] == values[False]


@pytest.mark.slow
def test_flossing_with_the_states_held_brings_a_chaotic_network_to_the_edge():
  """docs/diagnostics.md's settings: windows of 30 steps (10 transient), 16 sequences a step,
  Adam at 0.03 cosine-decayed to 0.003 over 300 steps, through_states=False. Measured (jax
  0.9.2, CPU): lambda_1 +0.27, -0.042 at step 50, -0.002 at step 300."""
  import optax
  optimizer = optax.adam(optax.cosine_decay_schedule(0.03, 300, 0.1))

  @jax.jit
  def step(params, opt_state, key):
    inputs = 0.1 * jax.random.normal(key, (16, 30, 4))
    grads = jax.grad(lambda p: lyapunov.flossing_loss(cells.elman(), p, inputs, k=1,
                                                      transient=10, through_states=False))(params)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state

  probe = 0.1 * jax.random.normal(jax.random.key(99), (4, 2000, 4))
  largest = jax.jit(lambda p: jnp.mean(lyapunov.lyapunov_spectrum(cells.elman(), p, probe,
                                                                  transient=200)))
  params = _chaotic()
  assert float(largest(params)) > 0.2
  opt_state, seen = optimizer.init(params), []
  for i in range(1, 301):
    params, opt_state = step(params, opt_state, jax.random.fold_in(jax.random.key(0), i))
    if i % 25 == 0:
      seen.append(float(largest(params)))
  assert min(abs(value) for value in seen) < 0.05, seen
