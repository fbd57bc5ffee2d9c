"""The library behaves as JAX users expect of a JAX library: cells that are values (a jit with the
cell static compiles once), layers that jit without static arguments to name, forward-mode
autodiff through the fused layer, a zero initial state where none is given, and one dtype
rule (the params' dtype decides; float64 under x64 from init to output)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnjax as rj
from rnnjax import combinators
from rnnjax import models

B, T, D, H = 3, 7, 4, 5


@pytest.fixture
def params(key):
  return rj.init_elman(key, D, H, radius=1.2)


@pytest.fixture
def inputs(key):
  return jax.random.normal(jax.random.fold_in(key, 1), (B, T, D))


def test_the_elman_cell_is_a_value_a_static_jit_compiles_once(params, inputs):
  assert rj.elman('tanh') == rj.elman('tanh') and hash(rj.elman('tanh')) == hash(rj.elman())
  assert rj.elman('tanh') != rj.elman('relu')
  traces = []

  def traced_scan(cell, params, inputs):
    traces.append(cell)  # runs once a trace: a recompile appends again
    return rj.scan(cell, params, inputs)

  scan = jax.jit(traced_scan, static_argnums=0)
  outputs = [scan(rj.elman('tanh'), params, inputs + i)[0] for i in range(3)]
  assert len(traces) == 1
  np.testing.assert_array_equal(outputs[2], rj.scan(rj.elman('tanh'), params, inputs + 2)[0])


def test_the_fused_layer_jits_with_its_options_bound(params, inputs):
  layer = rj.elman_layer_with(activation='relu', reverse=True)
  assert layer == rj.elman_layer_with(activation='relu', reverse=True)
  states, final = jax.jit(layer)(params, inputs)
  expected, expected_final = rj.scan(rj.elman('relu'), params, inputs, reverse=True)
  np.testing.assert_allclose(states, expected, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(final, expected_final, rtol=1e-6, atol=1e-6)
  lengths = jnp.array([7, 3, 0])
  np.testing.assert_allclose(jax.jit(layer)(params, inputs, None, lengths)[0],
                             rj.elman_layer(params, inputs, None, lengths, True, 'relu')[0])


def test_a_traced_option_is_one_named_error(params, inputs):
  """``jax.jit(rj.elman_layer)`` traces every argument: a bool option is then a tracer, which
  decides no program (a string option JAX itself refuses before the layer runs)."""
  with pytest.raises(ValueError, match=r'^reverse: expected a Python value .*elman_layer_with'):
    jax.jit(rj.elman_layer)(params, inputs, reverse=True)
  with pytest.raises(ValueError, match='^activation:'):
    rj.elman_layer_with(activation='sigmoid')
  with pytest.raises(ValueError, match='^unroll:'):
    rj.elman_layer_with(unroll=0)


def _jvp(function, params, tangents):
  return jax.jvp(function, (params,), (tangents,))[1]


def test_forward_mode_through_the_fused_layer_equals_the_scans(params, inputs):
  tangents = jax.tree_util.tree_map(lambda p: jnp.full_like(p, 0.3), params)
  fused = lambda p: rj.elman_layer(p, inputs)[0]
  scanned = lambda p: rj.scan(rj.elman(), p, inputs)[0]
  expected = _jvp(scanned, params, tangents)
  np.testing.assert_allclose(_jvp(fused, params, tangents), expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(jax.jit(lambda p, t: _jvp(fused, p, t))(params, tangents),
                             expected, rtol=1e-5, atol=1e-6)
  by_columns = jax.jacfwd(lambda w: rj.elman_layer(dict(params, W_hh=w), inputs)[1])
  by_rows = jax.jacrev(lambda w: rj.elman_layer(dict(params, W_hh=w), inputs)[1])
  np.testing.assert_allclose(by_columns(params['W_hh']), by_rows(params['W_hh']), rtol=1e-5,
                             atol=1e-6)
  batched = jax.vmap(lambda x: _jvp(lambda p: rj.elman_layer(p, x[None])[0], params, tangents))
  np.testing.assert_allclose(batched(inputs)[:, 0], expected, rtol=1e-5, atol=1e-6)
  # forward over reverse (Hessian-vector products) through the hand-written backward pass
  loss = lambda layer: lambda p: jnp.sum(layer(p) ** 2)
  np.testing.assert_allclose(_jvp(jax.grad(loss(fused)), params, tangents)['W_hh'],
                             _jvp(jax.grad(loss(scanned)), params, tangents)['W_hh'],
                             rtol=1e-4, atol=1e-5)


def _zeros_and_omitted(function, *zeros):
  """``function`` with the zero state given, and with it left out (None)."""
  given, omitted = function(*zeros), function(*(None for _ in zeros))
  for a, b in zip(jax.tree_util.tree_leaves(given), jax.tree_util.tree_leaves(omitted)):
    np.testing.assert_array_equal(a, b)
    assert a.dtype == b.dtype


def test_an_omitted_initial_state_is_zeros(key, params, inputs):
  zeros = jnp.zeros((B, H))
  _zeros_and_omitted(lambda h: rj.elman_layer(params, inputs, h), zeros)
  _zeros_and_omitted(lambda h: rj.checkpointed_elman_layer(params, inputs[:, :6], h, 3), zeros)
  _zeros_and_omitted(lambda h: rj.scan(rj.elman(), params, inputs, h), zeros)
  _zeros_and_omitted(lambda h: rj.scan(rj.elman_cell, params, inputs, h), zeros)
  _zeros_and_omitted(lambda h: rj.truncated_scan(rj.elman(), params, inputs, h, truncation=3),
                     zeros)
  gru, lstm = rj.init_gru(key, D, H), rj.init_lstm(key, D, H)
  _zeros_and_omitted(lambda h: rj.scan(rj.gru_cell, gru, inputs, h), zeros)
  _zeros_and_omitted(lambda h: rj.scan(rj.lstm_cell, lstm, inputs, None if h is None else
                                       (h, h)), zeros)
  _zeros_and_omitted(lambda h: rj.elman_deer(params, inputs, h)[:2], zeros)
  _zeros_and_omitted(lambda h: rj.state_gradients(rj.elman(), params, inputs, h,
                                                  lambda s: jnp.sum(s[:, -1] ** 2)), zeros)
  _zeros_and_omitted(lambda h: rj.lyapunov_spectrum(rj.elman(), params, inputs, h, k=2), zeros)
  _zeros_and_omitted(lambda h: rj.flossing_loss(rj.elman(), params, inputs, h, k=2), zeros)
  for cell in ('elman', 'lstm'):
    stack = rj.init_stack(key, cell, D, H, layers=2, directions=2)
    layer = combinators.layer_for(cell)
    state = combinators.zero_state(cell, 2, 2, B, H)
    _zeros_and_omitted(lambda h: rj.stack(layer, stack, inputs, h), state)
    _zeros_and_omitted(lambda h: rj.bidirectional(layer, stack[0], inputs, h),
                       jax.tree_util.tree_map(lambda s: s[0], state))
  model = models.Elman(H)
  variables = model.init(key, inputs)
  _zeros_and_omitted(lambda h: model.apply(variables, inputs, h), zeros)
  language_model = models.LanguageModel(11, H, embedding_size=3)
  ids = jnp.arange(12).reshape(3, 4) % 11
  variables = language_model.init(key, ids)
  _zeros_and_omitted(lambda h: language_model.apply(variables, ids, h), zeros)


def test_a_cell_that_does_not_say_what_it_carries_needs_its_state(params, inputs):
  own = lambda p, h, x: rj.elman_cell(p, h, x)
  with pytest.raises(ValueError, match=r'^initial_state: expected the carry of .* no zero_state'):
    rj.scan(own, params, inputs)
  with pytest.raises(ValueError, match='^loss_fn:'):
    rj.state_gradients(rj.elman(), params, inputs)


HALF = jnp.bfloat16


def test_bfloat16_params_give_bfloat16_everywhere(key, inputs):
  params = rj.init_elman(key, D, H, dtype=HALF)
  assert {p.dtype for p in params.values()} == {jnp.dtype(HALF)}
  np.testing.assert_array_equal(params['W_hh'], rj.init_elman(key, D, H)['W_hh'].astype(HALF))
  assert rj.elman_cell(params, jnp.zeros((B, H)), inputs[:, 0])[0].dtype == HALF
  assert rj.scan(rj.elman(), params, inputs)[0].dtype == HALF
  assert rj.elman_layer(params, inputs)[0].dtype == HALF
  assert rj.scan(rj.gru_cell, rj.init_gru(key, D, H, dtype=HALF), inputs)[0].dtype == HALF
  assert rj.scan(rj.lstm_cell, rj.init_lstm(key, D, H, dtype=HALF), inputs)[0].dtype == HALF
  # the QR runs in float32 (XLA's has no bfloat16); the exponents of the same values in
  # float32, rounded
  exponents = rj.lyapunov_spectrum(rj.elman(), params, inputs, k=2)
  widened = rj.lyapunov_spectrum(rj.elman(), jax.tree_util.tree_map(
      lambda p: p.astype(jnp.float32), params), inputs, k=2)
  assert exponents.dtype == HALF
  np.testing.assert_array_equal(exponents, widened.astype(HALF))
  loss, gradients = rj.state_gradients(rj.elman(), params, inputs,
                                       loss_fn=lambda s: jnp.sum(s[:, -1]))
  assert loss.dtype == HALF and gradients.dtype == HALF
  states, final, info = rj.elman_deer(params, inputs)  # no tolerance given: none refused
  assert states.dtype == HALF and final.dtype == HALF and np.all(info['converged'])
  model = models.Elman(H, param_dtype=HALF)
  variables = model.init(key, inputs)
  assert jax.tree_util.tree_leaves(variables)[0].dtype == HALF
  assert model.apply(variables, inputs)[0].dtype == HALF
  model = models.Elman(H, dtype=HALF)  # float32 params, bfloat16 computation
  variables = model.init(key, inputs)
  assert jax.tree_util.tree_leaves(variables)[0].dtype == jnp.float32
  assert model.apply(variables, inputs)[0].dtype == HALF
  language_model = models.LanguageModel(11, H, embedding_size=3, param_dtype=HALF)
  ids = jnp.arange(12).reshape(3, 4) % 11
  logits, last = language_model.apply(language_model.init(key, ids), ids)
  assert logits.dtype == HALF and last.dtype == HALF


def test_float64_under_x64_from_init_to_output(key):
  with jax.enable_x64(True):
    params = rj.init_elman(key, D, H, dtype=jnp.float64)
    inputs = jax.random.normal(key, (B, T, D), jnp.float64)
    assert {p.dtype for p in params.values()} == {jnp.dtype(jnp.float64)}
    assert rj.elman_layer(params, inputs)[0].dtype == jnp.float64
    assert rj.scan(rj.elman(), params, inputs.astype(jnp.float32))[0].dtype == jnp.float64
    assert rj.lyapunov_spectrum(rj.elman(), params, inputs).dtype == jnp.float64
    assert rj.state_gradients(rj.elman(), params, inputs,
                              loss_fn=jnp.sum)[1].dtype == jnp.float64
    assert rj.elman_deer(params, inputs)[0].dtype == jnp.float64
    model = models.Elman(H, param_dtype=jnp.float64)
    assert model.init_with_output(key, inputs)[0][0].dtype == jnp.float64


def test_an_init_dtype_that_is_not_floating_is_named(key):
  with pytest.raises(ValueError, match=r'^dtype: expected a floating dtype'):
    rj.init_elman(key, D, H, dtype=jnp.int32)
  with pytest.raises(ValueError, match=r'^dtype: expected a dtype JAX holds \(float64 needs x64'):
    rj.init_gru(key, D, H, dtype=jnp.float64)
