"""Norms without overflow: values past the squares' range, the derivative, special values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import norms


def test_norms_past_the_range_of_the_squares():
  # 3e19^2 overflows float32 (the plain sum of squares gives inf); 3e-30^2 underflows to 0.
  for scale in (1e19, 1e37, 1e-30):
    entries = np.array([3.0, 4.0], np.float32) * np.float32(scale)
    expected = np.float32(5.0 * scale)
    np.testing.assert_allclose(norms.vector_norm(jnp.asarray(entries)), expected, rtol=1e-6)
    tree = {'a': jnp.asarray(entries[:1]), 'b': [jnp.asarray(entries[1:]).reshape(1, 1)]}
    np.testing.assert_allclose(norms.global_norm(tree), expected, rtol=1e-6)
  assert float(jnp.sqrt(jnp.sum(jnp.asarray([3e19, 4e19], jnp.float32) ** 2))) == np.inf
  # a norm past float32's range is inf, not a wrapped or NaN value
  assert float(norms.vector_norm(jnp.asarray([3e38, 3e38], jnp.float32))) == np.inf


def test_special_values():
  assert float(norms.vector_norm(jnp.asarray([1.0, np.inf, -2.0]))) == np.inf
  assert np.isnan(float(norms.vector_norm(jnp.asarray([np.nan, np.inf]))))
  assert np.isnan(float(norms.global_norm([jnp.ones(2), jnp.asarray([np.nan])])))
  assert float(norms.global_norm([jnp.ones(2), jnp.asarray([-np.inf])])) == np.inf
  assert float(norms.vector_norm(jnp.zeros((0,)))) == 0.0
  assert float(norms.vector_norm(jnp.zeros(3))) == 0.0
  assert float(norms.global_norm({})) == 0.0
  assert float(norms.global_norm({'empty': jnp.zeros((0, 3)), 'zero': jnp.zeros(2)})) == 0.0
  np.testing.assert_array_equal(norms.vector_norm(jnp.zeros((2, 0)), axis=-1), [0.0, 0.0])


def test_equal_to_numpy_along_axes_and_in_each_dtype():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(3, 4, 5)).astype(np.float32)
  for axis in (-1, 0, (0, 2), (0, 1, 2)):
    for keepdims in (False, True):
      got = norms.vector_norm(jnp.asarray(x), axis=axis, keepdims=keepdims)
      expected = np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=axis, keepdims=keepdims))
      assert got.shape == expected.shape and got.dtype == jnp.float32
      np.testing.assert_allclose(got, expected, rtol=1e-6)
  tree = {'w': x, 'b': x[0, 0], 'i': np.arange(3)}
  flat = np.concatenate([x.ravel(), x[0, 0], np.arange(3.0)])
  np.testing.assert_allclose(norms.global_norm(tree), np.linalg.norm(flat), rtol=1e-6)
  assert norms.vector_norm(jnp.asarray(x, jnp.bfloat16)).dtype == jnp.float32
  assert norms.vector_norm(jnp.arange(3)).dtype == jnp.float32
  np.testing.assert_allclose(norms.vector_norm(jnp.asarray([3 + 4j, 12j])), 13.0, rtol=1e-6)
  with jax.enable_x64(True):
    double = np.array([1.0, 1e-8])
    assert norms.vector_norm(jnp.asarray(double)).dtype == jnp.float64
    np.testing.assert_allclose(norms.vector_norm(jnp.asarray(double)), np.hypot(1.0, 1e-8),
                               rtol=1e-15)
    assert norms.global_norm([jnp.ones(2, jnp.float32), jnp.asarray(double)]).dtype == jnp.float64


def test_derivatives_equal_the_plain_norm_and_stay_finite_past_its_range():
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(4, 6)), jnp.float32)
  plain = lambda x: jnp.sum(jnp.sin(jnp.linalg.norm(x, axis=-1)))
  scaled = lambda x: jnp.sum(jnp.sin(norms.vector_norm(x)))
  np.testing.assert_allclose(jax.grad(scaled)(x), jax.grad(plain)(x), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(jax.jit(jax.hessian(lambda v: norms.vector_norm(v)))(x[0]),
                             jax.hessian(lambda v: jnp.linalg.norm(v))(x[0]), rtol=1e-4,
                             atol=1e-6)
  tree = {'a': x[:2], 'b': x[2:]}
  grads = jax.grad(norms.global_norm)(tree)
  np.testing.assert_allclose(jnp.concatenate([grads['a'], grads['b']]),
                             jax.grad(lambda x: jnp.linalg.norm(x))(x), rtol=1e-5)
  # past the squares' range: the unit vector g / ||g||
  huge = jnp.asarray([3e19, -4e19], jnp.float32)
  np.testing.assert_allclose(jax.grad(norms.vector_norm)(huge), [0.6, -0.8], rtol=1e-6)
  np.testing.assert_allclose(jax.grad(norms.global_norm)([huge])[0], [0.6, -0.8], rtol=1e-6)
  # at 0 the norm has no derivative: 0 (a subgradient), where the plain norm gives NaN
  np.testing.assert_array_equal(jax.grad(norms.vector_norm)(jnp.zeros(3)), 0.0)
  np.testing.assert_array_equal(jax.grad(norms.global_norm)({'z': jnp.zeros(2)})['z'], 0.0)
  rows = jnp.stack([jnp.zeros(3), jnp.asarray([1.0, 2.0, 2.0])])
  np.testing.assert_allclose(jax.grad(lambda r: jnp.sum(norms.vector_norm(r)))(rows),
                             [[0, 0, 0], [1 / 3, 2 / 3, 2 / 3]], rtol=1e-6)


def test_transforms_and_bad_axes():
  x = jnp.asarray(np.random.default_rng(2).normal(size=(5, 3)), jnp.float32)
  np.testing.assert_allclose(jax.vmap(norms.vector_norm)(x), norms.vector_norm(x), rtol=1e-6)
  np.testing.assert_allclose(jax.jit(norms.vector_norm, static_argnames='axis')(x, axis=0),
                             norms.vector_norm(x, axis=0), rtol=1e-6)
  for axis, message in ((2, r'axis: expected ints in \[-2, 2\) for an array of rank 2, got 2'),
                        ((0, -2), r'axis: expected distinct axes, got \(0, -2\)'),
                        (1.0, r'axis: expected ints')):
    with pytest.raises(ValueError, match=message):
      norms.vector_norm(x, axis=axis)


# Every norm of the library at rho = 3, where the gradient grows like 3^k and passes float32's
# largest value, 3.4e38, near k = 80: finite wherever the float64 value is below it.
F32_MAX = float(np.finfo(np.float32).max)


def _gaussian_at_three(hidden, seed=0):
  w = np.random.default_rng(seed).normal(0, 1, (hidden, hidden))
  return w * 3.0 / np.max(np.abs(np.linalg.eigvals(w)))


def _assert_as_float64(got, want, past_the_range=True):
  """``got`` equals ``want`` (float64) where ``want`` fits float32, and is inf (not NaN)
  where it is past float32's range (if ``past_the_range``)."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  inside = want < 0.99 * F32_MAX
  assert inside.sum() >= 40 and np.all(np.isfinite(got[inside]))
  np.testing.assert_allclose(got[inside], want[inside], rtol=1e-3)
  if past_the_range:
    assert np.all(np.isinf(got[want > 1.01 * F32_MAX]))


def test_the_linearised_table_at_rho_3_against_float64():
  from rnnjax import gradient_tables, initializers
  distances = (20, 40, 60, 80, 100)
  table = gradient_tables.gradient_norm_table((3.0,), distances, protocol='linearised')[3.0]
  rng = np.random.default_rng(1)  # the protocol's draws, in float64
  w = rng.normal(0, 1, (64, 64))
  w *= 3.0 / initializers.host_spectral_radius(w)
  delta = rng.normal(0, 1, 64)
  delta /= np.linalg.norm(delta)
  lengths = []
  for a in rng.normal(0, 0.3, (100, 64)):
    delta = w.T @ ((1 - np.tanh(a) ** 2) * delta)
    lengths.append(np.linalg.norm(delta))
  want = [lengths[k - 1] for k in distances]
  assert want[2] < F32_MAX < want[4]  # 1e26 at k = 60, 1e44 at 100: a float64 holds it
  np.testing.assert_allclose([table[k] for k in distances], want, rtol=1e-3)


def test_the_network_table_profile_and_jacobian_products_at_rho_3_against_float64():
  from rnnjax import cells, diagnostics, gradient_tables
  hidden, steps, batch = 16, 86, 4
  w = _gaussian_at_three(hidden)
  # W_xh = 0 and b = 0 keep every state at 0, tanh' = 1: dL/dh_{T-k} = dL/dh_T (W^T)^k.
  params = {'W_xh': jnp.zeros((hidden, hidden)), 'W_hh': jnp.asarray(w, jnp.float32),
            'b': jnp.zeros(hidden)}
  powers = [np.eye(hidden)]
  for _ in range(steps):
    powers.append(powers[-1] @ w)
  distances = tuple(range(1, steps))
  spectral = np.array([np.linalg.norm(powers[k], 2) for k in distances])
  assert spectral[59] < F32_MAX < spectral[-1]
  # the Jacobian products and their bound sigma_max^k
  states = jnp.zeros((2, steps, hidden))
  products, bounds = diagnostics.jacobian_product_norms(states, params['W_hh'], distances)
  _assert_as_float64(products[0], spectral)
  _assert_as_float64(bounds, np.linalg.norm(w, 2) ** np.array(distances))
  # the profile: a unit dL/dh_T in every sequence, so ||dL/dh_{T-k}|| over the batch is
  # twice the ratio, past float32's range before the ratio is (past the range the gradients
  # themselves are inf and NaN: autodiff in float32)
  direction = np.random.default_rng(1).normal(0, 1, hidden)
  direction /= np.linalg.norm(direction)
  _, gradients = diagnostics.state_gradients(
      cells.elman('tanh'), params, jnp.zeros((batch, steps, hidden)), jnp.zeros((batch, hidden)),
      lambda s: jnp.sum(s[:, -1] @ jnp.asarray(direction, jnp.float32)))
  want = np.array([np.linalg.norm(direction @ powers[k].T) for k in distances])
  _assert_as_float64(diagnostics.gradient_norm_profile(gradients, distances), want, False)
  # the network table of the same params: its own direction, so ratios of its own
  table = gradient_tables.gradient_norm_table(distances=(60, 80), params=params, sequences=2)
  (label, row), = table.items()
  key_loss = jax.random.split(jax.random.key(1), 3)[1]
  own = np.asarray(jax.random.normal(key_loss, (hidden,)), np.float64)
  want = [np.linalg.norm(own @ powers[k].T) / np.linalg.norm(own) for k in (60, 80)]
  assert want[1] < F32_MAX
  np.testing.assert_allclose([row[60], row[80]], want, rtol=1e-3)


def test_ldexp_equals_jnp_ldexp_bit_for_bit_over_float32s_range():
  """norms.ldexp's three exact products give jnp.ldexp's values (its flushes, its subnormal
  inputs returned unchanged, inf, NaN, signed zeros) for every n in [-300, 300] and past it."""
  rng = np.random.default_rng(0)
  values = (rng.standard_normal(20_000) * np.exp(rng.uniform(-87, 87, 20_000))).astype(np.float32)
  values[:200] = np.ldexp(rng.standard_normal(200), rng.integers(-149, -126, 200))
  values[200:211] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 3.4e38, -3.4e38, 1.1754944e-38,
                     -1.1754944e-38, 1e-45, 2.0 ** -127]
  shifts = np.concatenate([np.arange(-300, 301), [-2**31, -5000, -301, 301, 5000, 2**31 - 1]])
  ours = jax.jit(jax.vmap(norms.ldexp, (None, 0)))(values, shifts.astype(np.int32))
  theirs = jax.jit(jax.vmap(jnp.ldexp, (None, 0)))(values, shifts.astype(np.int32))
  ours, theirs = np.asarray(ours), np.asarray(theirs)
  assert np.array_equal(ours.view(np.int32), theirs.view(np.int32)) or np.array_equal(
      ours, theirs, equal_nan=True) and np.array_equal(np.signbit(ours), np.signbit(theirs))
  assert norms.ldexp(np.float32(3.0), 2) == 12.0 and norms.ldexp(1.5, -1) == 0.75
  assert norms.ldexp(np.float32(2.0 ** -126), -1) == 0.0  # flushed, as jnp.ldexp on the CPU
  with jax.enable_x64(True):  # float64: jnp.ldexp itself
    assert norms.ldexp(jnp.asarray(1.0, jnp.float64), -1074) == 5e-324
