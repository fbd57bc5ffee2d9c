"""The seed worked examples (notes 000 and 002) and the Elman cell."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import recurrence


def scalar_params(w_h):
  return {'W_xh': jnp.ones((1, 1)), 'W_hh': jnp.full((1, 1), w_h), 'b': jnp.zeros((1,))}


def states_for(w_h, inputs=(1.0, 0.0, 0.0)):
  x = jnp.asarray(inputs, jnp.float32).reshape(1, -1, 1)
  states, _ = recurrence.scan(cells.elman('tanh'), scalar_params(w_h), x, jnp.zeros((1, 1)))
  return np.asarray(states).ravel()


def test_worked_example_fading_weight():
  # Seed note 002: h = 0.7616, 0.3634, 0.1797 for W_h = 0.5 on x = (1, 0, 0).
  np.testing.assert_allclose(states_for(0.5), [0.7616, 0.3634, 0.1797], atol=5e-5)


def test_worked_example_flooding_weight():
  # Seed note 000: with W_h = 2, h2 = tanh(1.52) = 0.909, h3 = tanh(1.82) = 0.949.
  np.testing.assert_allclose(states_for(2.0), [0.7616, 0.9093, 0.9487], atol=5e-5)


def test_worked_example_input_gradient():
  # Seed note 002: dh_3/dx_1 = 0.420 * 0.5 * 0.868 * 0.5 * 0.968 = 0.0882.
  def h3(x1):
    x = jnp.stack([x1, 0.0, 0.0]).reshape(1, 3, 1)
    _, final = recurrence.scan(cells.elman('tanh'), scalar_params(0.5), x, jnp.zeros((1, 1)))
    return final[0, 0]

  gradient = float(jax.grad(h3)(jnp.float32(1.0)))
  assert gradient == pytest.approx(0.0882, abs=5e-5)
  h = states_for(0.5)
  closed_form = (1 - h[0] ** 2) * 0.5 * (1 - h[1] ** 2) * 0.5 * (1 - h[2] ** 2)
  assert gradient == pytest.approx(closed_form, rel=1e-5)


def test_relu_cell_is_rectified_affine_map(key):
  params = cells.init_elman(key, 3, 4, 'uniform')
  x, h = jax.random.normal(key, (2, 3)), jax.random.normal(jax.random.key(1), (2, 4))
  new, out = cells.elman('relu')(params, h, x)
  expected = np.maximum(np.asarray(x @ params['W_xh'] + h @ params['W_hh'] + params['b']), 0)
  np.testing.assert_allclose(new, expected, rtol=1e-6)
  np.testing.assert_array_equal(new, out)


def test_unknown_activation_is_named():
  with pytest.raises(ValueError, match="activation: expected one of .* got 'sigmoid'"):
    cells.elman('sigmoid')


def test_parameter_count_matches_seed_formula(key):
  # Seed note 000: H d + H^2 + H parameters, whatever T is (d = 10, H = 20: 620).
  params = cells.init_elman(key, 10, 20)
  assert sum(p.size for p in jax.tree_util.tree_leaves(params)) == 20 * 10 + 20 * 20 + 20 == 620


def test_gru_update_gate_one_keeps_the_old_state(key):
  """PyTorch's convention: h_t = (1 - z) n + z h_{t-1}, so z = 1 keeps h_{t-1} whatever x is."""
  params = cells.init_gru(key, 3, 4)
  hidden = 4
  saturated = params['b'].at[hidden:2 * hidden].set(1e4)  # gates r, z, n: z's bias huge
  params = dict(params, b=saturated)
  h = jnp.array([[0.3, -0.7, 0.1, 0.9]])
  for x in (jnp.zeros((1, 3)), jnp.array([[5.0, -2.0, 1.0]])):
    new, _ = cells.gru_cell(params, h, x)
    np.testing.assert_allclose(new, h, rtol=0, atol=1e-7)
  params = dict(params, b=saturated.at[hidden:2 * hidden].set(-1e4))  # z = 0: h_t = n
  new, _ = cells.gru_cell(params, h, jnp.zeros((1, 3)))
  assert not np.allclose(new, h, atol=1e-2)


def test_params_of_another_cell_or_of_shapes_that_do_not_fit_are_named(key):
  """Each is named by its argument up front, not left to fail deep inside with a TypeError,
  KeyError or a broadcasting error."""
  params = cells.init_elman(key, 3, 4)
  h, x = jnp.zeros((2, 4)), jnp.zeros((2, 3))
  elman_shapes = r'params: expected W_xh \[d, H\], W_hh \[H, H\] and biases \[H\] of one H'
  for bad in (dict(params, W_hh=jnp.zeros((4, 5))), dict(params, W_xh=jnp.zeros((3, 5))),
              dict(params, b=jnp.zeros(5)), dict(params, b_hh=jnp.zeros(3))):
    with pytest.raises(ValueError, match=elman_shapes):
      cells.elman_cell(bad, h, x)
  with pytest.raises(ValueError, match=r"params: expected the elman cell's \['W_xh', 'W_hh', 'b'\]"):
    cells.elman_cell({'W_xh': params['W_xh'], 'b': params['b']}, h, x)  # b is optional, W_hh not
  with pytest.raises(ValueError, match=r"params: expected the gru cell's \['W_x', 'W_h', 'b'\]"):
    cells.gru_cell(params, h, x)
  with pytest.raises(ValueError, match=r'params: expected W_x \[d, 4 H\], W_h \[H, 4 H\]'):
    cells.lstm_cell(cells.init_gru(key, 3, 4), (h, h), x)
  with pytest.raises(ValueError, match=r"activation: expected one of \['linear', 'relu', 'tanh'\], "
                                       r"got 'sigmoid'"):
    cells.elman_cell(params, h, x, 'sigmoid')
  with pytest.raises(ValueError, match='inputs: expected an array \\[B, T, d\\], got list'):
    recurrence.scan(cells.elman('tanh'), params, [[[0.0] * 3]] * 2, h)


def test_init_elman_checks_every_number(key):
  assert cells.init_elman(key, np.int64(3), np.int64(4))['W_hh'].shape == (4, 4)  # numpy ints
  for kwargs, message in (({'hidden_size': True}, 'hidden_size: expected a positive int, got True'),
                          ({'radius': -1.0, 'recurrent_init': 'uniform'},
                           'radius: expected a finite value >= 0, got -1.0'),
                          ({'input_scale': float('nan')}, 'input_scale: expected a finite value '
                                                           r'>= 0 \(or None\), got nan')):
    arguments = dict({'input_size': 3, 'hidden_size': 4}, **kwargs)
    with pytest.raises(ValueError, match=message):
      cells.init_elman(key, **arguments)
