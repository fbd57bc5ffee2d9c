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
