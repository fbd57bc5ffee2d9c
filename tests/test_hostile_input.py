"""Issue 49, an adversarial new user: each case is refused in one line that names the argument
and the fix, before any work (``rnnjax.checks``), or gives the right value."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnjax as rj
from rnnjax import checks
from rnnjax import combinators

B, T, D, H = 2, 5, 3, 4
KEY = jax.random.key(0)
PARAMS = rj.init_elman(KEY, D, H)
X = jnp.ones((B, T, D))
H0 = jnp.zeros((B, H))
FACTORY = ("cell: expected a cell, a function (params, carry, x) -> (carry, y), got the "
           "factory rnnjax.elman; call it for a cell: rnnjax.elman('tanh')")


def _refused(message, call):
  """``call()`` raises a ValueError of exactly ``message``, on one line."""
  with pytest.raises(ValueError) as error:
    call()
  assert str(error.value) == message and '\n' not in message


# Every path that takes a cell, called with ``cell``.
CELL_PATHS = {
    'scan': lambda cell: rj.scan(cell, PARAMS, X, H0),
    'scan/no state': lambda cell: rj.scan(cell, PARAMS, X),
    'truncated_scan': lambda cell: rj.truncated_scan(cell, PARAMS, X, H0, 2),
    'state_gradients': lambda cell: rj.state_gradients(cell, PARAMS, X, H0, loss_fn=jnp.sum),
    'lyapunov_spectrum': lambda cell: rj.lyapunov_spectrum(cell, PARAMS, X, H0),
    'flossing_loss': lambda cell: rj.flossing_loss(cell, PARAMS, X, H0),
}


@pytest.mark.parametrize('path', CELL_PATHS)
def test_the_factory_in_place_of_a_cell_is_named(path):
  _refused(FACTORY, lambda: CELL_PATHS[path](rj.elman))


@pytest.mark.parametrize('path', CELL_PATHS)
def test_the_layer_in_place_of_a_cell_is_named(path):
  for layer in (rj.elman_layer, combinators.layer_for('elman'), rj.elman_layer_with()):
    with pytest.raises(ValueError, match=r'^cell: expected a cell, .*(rnnjax\.elman_layer|'
                                         r'ElmanLayer), a layer, which runs a whole sequence; '
                                         r"a cell runs one step: rnnjax\.elman\('tanh'\)$"):
      CELL_PATHS[path](layer)


def test_other_callables_in_place_of_a_cell_are_named():
  with pytest.raises(ValueError, match=r'^cell: .*got rnnjax\.init_elman, an initializer'):
    rj.scan(rj.init_elman, PARAMS, X, H0)
  with pytest.raises(ValueError, match=r"^cell: .*\(e\.g\. rnnjax\.elman\('tanh'\)\), "
                                       r"got 'elman'$"):
    rj.scan('elman', PARAMS, X, H0)
  with pytest.raises(ValueError, match=r'^cell: .*of signature \(h, x\), which cannot take '
                                       r'\(params, carry, x\)'):
    rj.scan(lambda h, x: (h, h), PARAMS, X, H0)


def test_cells_still_pass_the_cell_check():
  for cell in (rj.elman(), rj.elman_cell, rj.gru_cell, rj.lstm_cell,
               lambda params, carry, x: rj.elman_cell(params, carry, x, 'relu'),
               jax.jit(rj.elman_cell)):
    assert checks.cell('cell', cell) is cell
  states, _ = rj.scan(jax.jit(rj.elman_cell), PARAMS, X, H0)
  np.testing.assert_allclose(states, rj.elman_layer(PARAMS, X, H0)[0], rtol=1e-6, atol=1e-6)


def test_a_string_where_a_bool_is_meant_is_refused():
  message = "reverse: expected a bool (True or False), got 'False'"
  _refused(message, lambda: rj.scan(rj.elman(), PARAMS, X, H0, reverse='False'))
  _refused(message, lambda: rj.elman_layer(PARAMS, X, H0, reverse='False'))
  _refused(message, lambda: rj.elman_layer_with(reverse='False'))
  _refused("time_major: expected a bool (True or False), got 'no'",
           lambda: rj.elman_layer(PARAMS, X, H0, time_major='no'))
  _refused("through_states: expected a bool (True or False), got 'False'",
           lambda: rj.lyapunov_spectrum(rj.elman(), PARAMS, X, through_states='False'))
  np.testing.assert_array_equal(rj.scan(rj.elman(), PARAMS, X, H0, reverse=np.bool_(True))[0],
                                rj.scan(rj.elman(), PARAMS, X, H0, reverse=True)[0])


def test_a_float_unroll_is_refused():
  _refused('unroll: expected an int >= 1 or a bool, got 2.0',
           lambda: rj.scan(rj.elman(), PARAMS, X, H0, unroll=2.0))
  _refused('unroll: expected an int >= 1 or a bool, got 2.0',
           lambda: rj.truncated_scan(rj.elman(), PARAMS, X, H0, 2, unroll=2.0))
  _refused('unroll: expected an int >= 1, got 2.0',
           lambda: rj.elman_layer(PARAMS, X, H0, unroll=2.0))
  unrolled, _ = rj.scan(rj.elman(), PARAMS, X, H0, unroll=np.int64(2))
  np.testing.assert_allclose(unrolled, rj.scan(rj.elman(), PARAMS, X, H0, unroll=True)[0],
                             rtol=1e-6, atol=1e-6)


def test_options_of_the_wrong_type_in_lyapunov_and_stack():
  _refused("k: expected an int in [1, 4], got 'all'",
           lambda: rj.lyapunov_spectrum(rj.elman(), PARAMS, X, k='all'))
  _refused("dropout_rate: expected a value in [0, 1), got '0.1'",
           lambda: rj.stack(combinators.layer_for('elman'), [[PARAMS]], X, dropout_rate='0.1'))


def test_a_bidirectional_layer_takes_two_directions_params():
  layer = combinators.layer_for('elman')
  for params, given in (([PARAMS], 'a list of 1'), ([PARAMS] * 3, 'a list of 3'),
                        (PARAMS, 'a dict')):
    _refused(f'params: expected [forward_params, backward_params], one per direction, got '
             f'{given}; for one direction call the layer itself',
             lambda p=params: rj.bidirectional(layer, p, X))
  outputs, final = rj.bidirectional(layer, (PARAMS, PARAMS), X)
  assert outputs.shape == (B, T, 2 * H) and final.shape == (2, B, H)


@pytest.mark.parametrize('state', [0.0, jnp.float32(0.0)], ids=['python', 'array'])
def test_a_scalar_initial_state_is_named(state):
  message = (f'initial_state: expected leaves [B, ...] (Elman, GRU: [B, H]; [H] is broadcast '
             f'over the batch), got a scalar {checks.shown(state)}; pass jnp.zeros((2, H)), or '
             f'None for zeros')
  _refused(message, lambda: rj.scan(rj.elman(), PARAMS, X, state))
  _refused(message, lambda: rj.elman_layer(PARAMS, X, state))
  _refused(message, lambda: rj.lyapunov_spectrum(rj.elman(), PARAMS, X, state))


def test_params_as_nested_lists_are_named():
  listed = {name: np.asarray(value).tolist() for name, value in PARAMS.items()}
  message = ("params: expected arrays, got a nested list of numbers at ['W_hh']; convert them: "
             "jax.tree.map(jnp.asarray, params, is_leaf=lambda v: isinstance(v, list))")
  _refused(message, lambda: rj.scan(rj.elman(), listed, X, H0))
  _refused(message, lambda: rj.elman_layer(listed, X, H0))
  _refused(message, lambda: rj.elman_cell(listed, H0, X[:, 0]))
  _refused(message.replace("['W_hh']", "[0][0]['W_hh']"),
           lambda: rj.stack(combinators.layer_for('elman'), [[listed]], X))
  converted = jax.tree.map(jnp.asarray, listed, is_leaf=lambda v: isinstance(v, list))
  np.testing.assert_array_equal(rj.scan(rj.elman(), converted, X, H0)[0],
                                rj.scan(rj.elman(), PARAMS, X, H0)[0])


def test_float16_init_that_would_overflow_is_named():
  with pytest.raises(ValueError, match=re.escape(
      'radius: expected weights that fit in float16 (largest 65504), got radius=100000.0, '
      'W_hh up to ')):
    rj.init_elman(KEY, D, H, 'identity', radius=1e5, dtype=jnp.float16)
  with pytest.raises(ValueError, match=r'^radius: expected weights that fit in float16 .*'
                                       r'use a smaller radius or dtype=jnp\.float32$'):
    rj.init_elman(KEY, D, H, radius=1e5, dtype=jnp.float16)
  with pytest.raises(ValueError, match=r'^input_scale: expected weights that fit in float16'):
    rj.init_elman(KEY, D, H, input_scale=1e5, dtype=jnp.float16)
  fits = rj.init_elman(KEY, D, H, 'identity', radius=6e4, dtype=jnp.float16)
  assert bool(jnp.all(jnp.isfinite(fits['W_hh'])))
  assert rj.init_elman(KEY, D, H, radius=1e5)['W_hh'].dtype == jnp.float32  # float32 holds it


def test_the_jit_of_the_layer_with_a_string_option_as_documented():
  """JAX refuses the string before the layer runs; the two ways the docstring shows work."""
  assert "static_argnames='activation'" in rj.elman_layer.__doc__
  assert 'elman_layer_with' in rj.elman_layer.__doc__
  with pytest.raises(TypeError):
    jax.jit(rj.elman_layer)(PARAMS, X, activation='relu')
  expected = rj.elman_layer(PARAMS, X, activation='relu')[0]
  np.testing.assert_allclose(jax.jit(rj.elman_layer, static_argnames='activation')(
      PARAMS, X, activation='relu')[0], expected, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(jax.jit(rj.elman_layer_with(activation='relu'))(PARAMS, X)[0],
                             expected, rtol=1e-6, atol=1e-6)


def test_forward_mode_where_jax_allows_it_and_the_documented_fix_elsewhere():
  """jvp and jacfwd run through the layer; linearize and jvp of a jit of it cannot (a
  custom_vjp), and the docstring's fix, ``rj.scan(rj.elman(...))``, gives the same tangent."""
  tangent = jnp.full((H, H), 0.3)
  fused = lambda w: rj.elman_layer(dict(PARAMS, W_hh=w), X)[1]
  scanned = lambda w: rj.scan(rj.elman('tanh'), dict(PARAMS, W_hh=w), X)[1]
  expected = jax.jvp(scanned, (PARAMS['W_hh'],), (tangent,))[1]
  np.testing.assert_allclose(jax.jvp(fused, (PARAMS['W_hh'],), (tangent,))[1], expected,
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(jax.linearize(scanned, PARAMS['W_hh'])[1](tangent), expected,
                             rtol=1e-5, atol=1e-6)
  with pytest.raises(TypeError, match='custom_vjp'):  # JAX's, on applying the linear map
    jax.linearize(fused, PARAMS['W_hh'])[1](tangent)
  assert 'jax.linearize' in rj.elman_layer.__doc__
  assert 'rnnjax.scan(rnnjax.elman(activation), params, inputs)' in ' '.join(
      rj.elman_layer.__doc__.split())
