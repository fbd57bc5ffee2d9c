"""Each initializer's spectral radius equals the request."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import initializers


def radius(matrix):
  return np.max(np.abs(np.linalg.eigvals(np.asarray(matrix, np.float64))))


@pytest.mark.parametrize('rho', [0.0, 0.5, 0.9, 1.0, 1.1, 1.5])
@pytest.mark.parametrize('hidden_size', [8, 64])
def test_gaussian_at_radius(rho, hidden_size, key):
  w = initializers.gaussian_at_radius(key, hidden_size, rho)
  assert w.dtype == np.float32 and w.shape == (hidden_size, hidden_size)
  assert radius(w) == pytest.approx(rho, abs=1e-4)


@pytest.mark.parametrize('rho', [0.5, 1.0, 1.5])
def test_orthogonal_at_radius_has_all_singular_values_rho(rho, key):
  w = initializers.orthogonal_at_radius(key, 32, rho)
  assert radius(w) == pytest.approx(rho, abs=1e-4)
  np.testing.assert_allclose(np.linalg.svd(np.asarray(w), compute_uv=False), rho, atol=1e-4)


def test_identity_gain():
  w = initializers.identity(16, 0.7)
  assert radius(w) == pytest.approx(0.7, abs=1e-6)
  np.testing.assert_array_equal(w, 0.7 * np.eye(16, dtype=np.float32))


def test_pytorch_uniform_bound(key):
  w = initializers.pytorch_uniform(key, (256, 256), 256)
  assert np.abs(w).max() <= 1 / 16
  assert np.abs(w).max() > 0.99 / 16  # fills the interval


def test_spectral_radius_under_jit(key):
  w = initializers.gaussian_at_radius(key, 16, 1.3)
  assert float(jax.jit(initializers.spectral_radius)(w)) == pytest.approx(1.3, abs=1e-4)


@pytest.mark.parametrize('init', ['gaussian', 'orthogonal', 'identity'])
def test_init_elman_radius(init, key):
  params = cells.init_elman(key, 5, 24, init, radius=1.1)
  assert radius(params['W_hh']) == pytest.approx(1.1, abs=1e-4)
  assert params['W_xh'].shape == (5, 24) and params['b'].shape == (24,)


@pytest.mark.parametrize('init', ['gaussian', 'orthogonal', 'identity'])
def test_init_elman_takes_radii_as_arrays_and_under_vmap(init, key):
  """One init per spectral radius of a sweep, vmapped (a traced radius is not refused by
  the check of a number); a concrete 0-d array is its number."""
  radii = jnp.array([0.5, 0.9, 1.5])
  stacked = jax.jit(jax.vmap(lambda r: cells.init_elman(key, 3, 16, init, radius=r)))(radii)
  assert [radius(w) for w in stacked['W_hh']] == pytest.approx([0.5, 0.9, 1.5], abs=1e-4)
  one = cells.init_elman(key, 3, 16, init, radius=jnp.array(0.9))
  np.testing.assert_allclose(one['W_hh'], stacked['W_hh'][1], rtol=1e-5, atol=1e-6)
  for bad, message in ((jnp.array(-0.5), 'got -0.5'), (jnp.array([1.0, 2.0]), r'got Array\(\[1'),
                       (np.array(True), 'got array\\(True\\)')):
    with pytest.raises(ValueError, match=f'radius: expected a finite value >= 0, {message}'):
      cells.init_elman(key, 3, 16, init, radius=bad)
  with pytest.raises(ValueError, match=r'radius: expected a real 0-d value, got a traced bool\[\]'):
    jax.vmap(lambda r: cells.init_elman(key, 3, 16, init, radius=r))(jnp.array([True, False]))


@pytest.mark.parametrize('function', [
    lambda key: initializers.gaussian_at_radius(key, 8, -0.5),
    lambda key: initializers.orthogonal_at_radius(key, 8, -0.5),
    lambda key: initializers.identity(8, -0.5),
    lambda key: cells.init_elman(key, 3, 8, 'gaussian', radius=-0.5),
])
def test_negative_radius_is_rejected(function, key):
  with pytest.raises(ValueError, match=r'(radius|gain): expected a finite value >= 0, got -0.5'):
    function(key)


def test_unknown_init_and_bad_sizes(key):
  with pytest.raises(ValueError, match="recurrent_init: expected one of .* got 'zeros'"):
    cells.init_elman(key, 3, 8, 'zeros')
  with pytest.raises(ValueError, match='hidden_size: expected a positive int, got 0'):
    cells.init_elman(key, 3, 0)
  with pytest.raises(ValueError, match=r'matrix: expected a square \[H, H\] array, H >= 1, got shape \(2, 3\)'):
    initializers.spectral_radius(np.ones((2, 3)))


def test_a_concrete_matrix_is_solved_without_a_callback(monkeypatch):
  """Eagerly the radius is solved on the host directly (a callback's program can wait on its
  own argument's buffer); under jit through the callback, the same value."""
  w = jax.random.normal(jax.random.key(0), (16, 16))
  expected = float(initializers.host_spectral_radius(np.asarray(w)))
  under_jit = float(jax.jit(initializers.spectral_radius)(w))
  monkeypatch.setattr(jax, 'pure_callback', lambda *args, **kwargs: pytest.fail('a callback'))
  assert float(initializers.spectral_radius(w)) == expected == under_jit
  assert float(jnp.max(jnp.abs(jnp.linalg.eigvals(np.asarray(
      initializers.gaussian_at_radius(jax.random.key(1), 16, 0.9)))))) == pytest.approx(0.9,
                                                                                          rel=1e-5)
