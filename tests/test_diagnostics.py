"""dL/dh_t in one backward pass equals per-step vjps; closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import initializers
from rnnjax import recurrence

B, T, D, H = 2, 12, 3, 8


def per_step_vjp(cell, params, inputs, initial, loss_fn):
  """dL/dh_t for each t by a separate vjp: rerun the sequence from h_t."""
  states, _ = recurrence.scan(cell, params, inputs, initial)
  grads = []
  for t in range(T):
    def loss_from_state(h_t, t=t):
      later, _ = recurrence.scan(cell, params, inputs[:, t + 1:], h_t) if t + 1 < T else (
          jnp.zeros((B, 0, H)), h_t)
      return loss_fn(jnp.concatenate([states[:, :t], h_t[:, None], later], axis=1))
    _, vjp = jax.vjp(loss_from_state, states[:, t])
    grads.append(vjp(jnp.float32(1.0))[0])
  return jnp.stack(grads, axis=1)


@pytest.mark.parametrize('loss_name', ['last_step', 'all_steps'])
def test_state_gradients_equal_per_step_vjp(key, loss_name):
  k1, k2 = jax.random.split(key)
  params = cells.init_elman(k1, D, H, 'gaussian', radius=1.2)
  inputs = jax.random.normal(k2, (B, T, D))
  initial = jnp.zeros((B, H))
  readout = jax.random.normal(jax.random.key(7), (H,))
  if loss_name == 'last_step':
    loss_fn = lambda states: jnp.sum(jnp.tanh(states[:, -1] @ readout))
  else:
    loss_fn = lambda states: jnp.sum(jnp.sin(states @ readout))
  cell = cells.elman('tanh')
  _, fast = diagnostics.state_gradients(cell, params, inputs, initial, loss_fn)
  slow = per_step_vjp(cell, params, inputs, initial, loss_fn)
  np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-7)
  distances = diagnostics.profile_distances(T)
  assert distances == (1, 2, 5, 10)
  slow_norms = np.linalg.norm(np.asarray(slow), axis=(0, 2))
  expected = [slow_norms[T - 1 - k] / slow_norms[T - 1] for k in distances]
  np.testing.assert_allclose(diagnostics.gradient_norm_profile(fast, distances), expected,
                             rtol=1e-5)


@pytest.mark.parametrize('rho', [0.5, 1.0, 1.3])
def test_linear_orthogonal_profile_is_rho_to_the_k(key, rho):
  # With a linear activation and W_hh = rho Q (Q orthogonal), dL/dh_{T-k} = dL/dh_T (W_hh^T)^k,
  # whose norm is exactly rho^k times that of dL/dh_T.
  params = {'W_xh': jnp.zeros((D, H)), 'W_hh': initializers.orthogonal_at_radius(key, H, rho),
            'b': jnp.zeros((H,))}
  readout = jax.random.normal(jax.random.key(3), (B, H))
  _, grads = diagnostics.state_gradients(
      cells.elman('linear'), params, jnp.zeros((B, T, D)), jnp.ones((B, H)),
      lambda states: jnp.sum(states[:, -1] * readout))
  distances = (1, 2, 5, 10)
  np.testing.assert_allclose(diagnostics.gradient_norm_profile(grads, distances),
                             [rho ** k for k in distances], rtol=1e-5)


def orthogonal_float64(seed, size):
  q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(size, size)))
  return q * np.sign(np.diag(r))


@pytest.mark.parametrize('rho', [0.5, 0.9, 1.0, 1.3])
def test_linear_orthogonal_norms_are_rho_to_the_k_for_any_start(rho):
  # Closed form: with phi linear and W_hh = rho Q, ||delta W_hh^k|| = rho^k ||delta|| for every delta.
  with jax.enable_x64(True):
    w_hh = jnp.asarray(rho * orthogonal_float64(0, H))
    params = {'W_xh': jnp.zeros((D, H)), 'W_hh': w_hh, 'b': jnp.zeros((H,))}
    distances = (1, 2, 5, 10, 11)
    for start in range(5):  # five random starting vectors dL/dh_T
      readout = jnp.asarray(np.random.default_rng(start + 1).normal(size=(1, H)))
      _, grads = diagnostics.state_gradients(
          cells.elman('linear'), params, jnp.zeros((1, T, D)), jnp.ones((1, H)),
          lambda states: jnp.sum(states[:, -1] * readout))
      np.testing.assert_allclose(diagnostics.gradient_norm_profile(grads, distances),
                                 [rho ** k for k in distances], rtol=1e-6)
    states = jnp.asarray(np.random.default_rng(9).normal(size=(3, T, H)))
    norms, bounds = diagnostics.jacobian_product_norms(states, w_hh, distances, 'linear')
    np.testing.assert_allclose(norms, np.tile([rho ** k for k in distances], (3, 1)), rtol=1e-6)
    np.testing.assert_allclose(bounds, [rho ** k for k in distances], rtol=1e-6)


@pytest.mark.parametrize('rho', [0.8, 1.5])
def test_tanh_products_are_bounded_by_sigma_max_to_the_k(key, rho):
  k1, k2 = jax.random.split(key)
  params = cells.init_elman(k1, D, H, 'gaussian', radius=rho)
  states, _ = recurrence.scan(cells.elman('tanh'), params, jax.random.normal(k2, (4, T, D)),
                              jnp.zeros((4, H)))
  distances = tuple(range(1, T))
  norms, bounds = diagnostics.jacobian_product_norms(states, params['W_hh'], distances)
  sigma = float(np.linalg.norm(np.asarray(params['W_hh']), 2))
  np.testing.assert_allclose(bounds, [sigma ** k for k in distances], rtol=1e-5)
  assert np.all(np.asarray(norms) <= np.asarray(bounds)[None] * (1 + 1e-5))
  assert np.all(np.asarray(norms)[:, -1] < np.asarray(bounds)[-1])  # tanh' < 1 bites


def test_jacobian_product_matches_autodiff(key):
  # ||dh_t/dh_{t-n}|| from the stored states equals the spectral norm of jax.jacobian.
  k1, k2 = jax.random.split(key)
  params = cells.init_elman(k1, D, H, 'gaussian', radius=1.2)
  inputs = jax.random.normal(k2, (1, T, D))
  states, _ = recurrence.scan(cells.elman('tanh'), params, inputs, jnp.zeros((1, H)))
  n = 4
  def last_from(h):  # run steps T-n .. T-1 from h = h_{T-1-n}
    _, final = recurrence.scan(cells.elman('tanh'), params, inputs[:, T - n:], h[None])
    return final[0]
  jacobian = jax.jacobian(last_from)(states[0, T - 1 - n])
  norms, _ = diagnostics.jacobian_product_norms(states, params['W_hh'], (n,))
  assert float(norms[0, 0]) == pytest.approx(float(np.linalg.norm(np.asarray(jacobian), 2)),
                                             rel=1e-5)


def test_growth_rate():
  rates = diagnostics.growth_rate(jnp.asarray([0.5 ** 2, 0.5 ** 10]), (2, 10))
  np.testing.assert_allclose(rates, [0.5, 0.5], rtol=1e-6)


def test_distances_outside_the_sequence_are_named(key):
  with pytest.raises(ValueError, match=r'distances: expected values in \[1, T - 1\] = \[1, 11\]'):
    diagnostics.jacobian_product_norms(jnp.zeros((1, T, H)), jnp.eye(H), (12,))


def test_profile_distances_must_fit():
  grads = jnp.ones((1, 5, 2))
  with pytest.raises(ValueError, match=r'distances: expected values in \[1, T - 1\] = \[1, 4\], got \(5,\)'):
    diagnostics.gradient_norm_profile(grads, (5,))
  assert diagnostics.gradient_norm_profile(grads, ()).shape == (0,)  # tau = 1: nothing to profile


def test_nan_in_padding_reaches_no_profile_of_the_real_steps(key):
  """The probe's padding is zeroed before the recurrence: NaN inputs past a sequence's
  length leave its profile as it is with finite padding (not NaN)."""
  params = cells.init_elman(key, D, H, 'gaussian', radius=0.9)
  inputs = jax.random.normal(jax.random.fold_in(key, 1), (B, T, D))
  lengths = jnp.array([T, 5])
  last = lambda states: jnp.sum(jnp.take_along_axis(states, (lengths - 1)[:, None, None], 1) ** 2)
  probe = lambda x: diagnostics.Probe(cells.elman('tanh'), params, x, jnp.zeros((B, H)), last,
                                      lengths)
  clean = diagnostics.profile(probe(inputs), (1, 2, 4))
  padded_with_nan = diagnostics.profile(probe(inputs.at[1, 5:].set(jnp.nan)), (1, 2, 4))
  assert np.all(np.isfinite(clean))
  np.testing.assert_array_equal(padded_with_nan, clean)


def test_profile_and_table_arguments_are_checked(key):
  grads = jax.random.normal(key, (2, 6, 4))
  with pytest.raises(ValueError, match=r'lengths: expected values in \[0, T\] = \[0, 6\], got '
                                       r'min 3 and max 9'):
    diagnostics.gradient_norm_profile(grads, (1, 2), lengths=[9, 3])
  with pytest.raises(ValueError, match=r'lengths: expected values in \[1, T\] = \[1, 6\], got '
                                       r'min 0'):
    diagnostics.gradient_norm_profile(grads, (1, 2), lengths=[0, 3])
  with pytest.raises(ValueError, match='lengths: expected integers, got dtype float'):
    diagnostics.gradient_norm_profile(grads, (1, 2), lengths=[6.0, 3.0])
  with pytest.raises(ValueError, match='distances: expected a sequence of ints, got 2'):
    diagnostics.gradient_norm_profile(grads, 2)
  with pytest.raises(ValueError, match=r'distances: expected a sequence of ints, got \(1.5,\)'):
    diagnostics.gradient_norm_profile(grads, (1.5,))
  np.testing.assert_array_equal(diagnostics.gradient_norm_profile(grads, jnp.array([1, 2])),
                                diagnostics.gradient_norm_profile(grads, (1, 2)))
  with pytest.raises(ValueError, match='distances: expected at least one distance, got none'):
    diagnostics.jacobian_product_norms(grads, jnp.eye(4), ())
  with pytest.raises(ValueError, match=r'w_hh: expected shape \[H, H\] = \(4, 4\), got \(4, 5\)'):
    diagnostics.jacobian_product_norms(grads, jnp.zeros((4, 5)), (1,))
  with pytest.raises(ValueError, match=r'initial_state: expected one \[B, H\] array'):
    diagnostics.state_gradients(cells.elman('tanh'), cells.init_elman(key, 3, 4), jnp.zeros(
        (2, 6, 3)), jnp.zeros((4,)), jnp.sum)


def test_small_arguments_of_the_diagnostics_are_checked():
  with pytest.raises(ValueError, match='truncation: expected an int tau >= 1, got 0'):
    diagnostics.profile_distances(0)
  with pytest.raises(ValueError, match=r'distances: expected ints >= 1, got \(0, 2\)'):
    diagnostics.growth_rate(jnp.ones(2), (0, 2))
  with pytest.raises(ValueError, match=r'ratios: expected a last axis of len\(distances\) = 3'):
    diagnostics.growth_rate(jnp.ones(2), (1, 2, 3))
  with pytest.raises(ValueError, match=r'matrix: expected a square \[H, H\] array, H >= 1, got '
                                       r'shape \(3,\)'):
    diagnostics.largest_singular_value(jnp.ones(3))
  with pytest.raises(ValueError, match=r'matrix: expected a square \[H, H\] array, H >= 1, got '
                                       r'shape \(0, 0\)'):
    initializers.spectral_radius(jnp.zeros((0, 0)))


def test_norms_of_huge_gradients_and_long_products_do_not_overflow():
  """The profile of dL/dh_t does not depend on its scale (at 1e25 the sums of squares passed
  float32's range: inf / inf); ||W^n|| = 1.5^n for a linear W = 1.5 Q up to n = 218 (2.5e38)
  and inf past float32's range; sigma_max of an orthogonal Q scaled to 2e38 is 2e38."""
  rng = np.random.default_rng(3)
  grads = jnp.asarray(rng.normal(size=(2, T, H)), jnp.float32)
  distances = (1, 2, 5, 10)
  lengths = jnp.asarray([T, 7])
  for scale in (1e25, 1e-25):
    np.testing.assert_allclose(diagnostics.gradient_norm_profile(grads * scale, distances),
                               diagnostics.gradient_norm_profile(grads, distances), rtol=1e-5)
    np.testing.assert_allclose(
        diagnostics.gradient_norm_profile(grads * scale, distances, lengths),
        diagnostics.gradient_norm_profile(grads, distances, lengths), rtol=1e-5)
  w_hh = jnp.asarray(1.5 * orthogonal_float64(0, H), jnp.float32)
  distances = (100, 200, 218, 240)
  norms, bounds = jax.jit(diagnostics.jacobian_product_norms, static_argnums=(2, 3))(
      jnp.zeros((1, 241, H)), w_hh, distances, 'linear')
  np.testing.assert_allclose(norms[0, :3], [1.5 ** n for n in distances[:3]], rtol=1e-4)
  assert float(norms[0, 3]) == np.inf and float(bounds[3]) == np.inf
  np.testing.assert_allclose(diagnostics.largest_singular_value(w_hh * 2e38 / 1.5), 2e38,
                             rtol=1e-5)
