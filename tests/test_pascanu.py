"""Pascanu, Mikolov & Bengio (2013): Omega, clipping with fallback, smart init, temporal order."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from rnnjax import cells
from rnnjax import clipping
from rnnjax import diagnostics
from rnnjax import fused
from rnnjax import initializers
from rnnjax import recurrence
from rnnjax import regularizers
from rnnjax.data import synthetic
from rnnjax.train import optimizers

from rnnjax.train import trainer

# The scalar cell "C1-like": h_t = tanh(0.5 x_t + 1.5 h_{t-1} - 0.25), h_{-1} = 0, x = (1, 2),
# loss E = h_2 (the last state). By hand, in float64:
#   a_1 = 0.5 - 0.25 = 0.25,                  h_1 = tanh(0.25) = 0.24491866240370913
#   a_2 = 1.0 + 1.5 h_1 - 0.25 = 1.1173779936055637,  h_2 = tanh(a_2) = 0.8066549645295868
#   phi'_1 = 1 - h_1^2 = 0.940014848806378,   phi'_2 = 1 - h_2^2 = 0.34930776819977094
#   g_2 = dE/dh_2 = 1,  g_1 = dE/dh_1 = g_2 phi'_2 w = 0.5239616522996564
# With H = 1 the ratio r_t = |g_t phi'_t w| / |g_t| = phi'_t |w|:
#   r_1 = 0.940014848806378 * 1.5 = 1.4100222732095669
#   r_2 = 0.34930776819977094 * 1.5 = 0.5239616522996564
# Reference code (squared norms, mean over the 2 kept pairs):
#   ((r_1^2 - 1)^2 + (r_2^2 - 1)^2) / 2 = (0.9764657409388234 + 0.5262982865026464) / 2
#                                         = 0.751382013720735
# Paper, eq. 9 (norms, sum over t, batch of 1):
#   (r_1 - 1)^2 + (r_2 - 1)^2 = 0.16811826452794068 + 0.2266125084812732 = 0.3947307730092139


def test_omega_scalar_cell_equals_hand_computation():
  params = {'W_xh': jnp.array([[0.5]]), 'W_hh': jnp.array([[1.5]]), 'b': jnp.array([-0.25])}
  inputs = jnp.array([[[1.0], [2.0]]])  # [B = 1, T = 2, d = 1]
  initial = jnp.zeros((1, 1))

  @jax.jit
  def compute(params):
    cell = cells.elman('tanh')
    states, _ = recurrence.scan(cell, params, inputs, initial)
    _, grads = diagnostics.state_gradients(cell, params, inputs, initial,
                                           lambda s: jnp.sum(s[:, -1, 0]))
    w = params['W_hh']
    return states, grads, {
        'code': regularizers.omega(w, states, grads),
        'paper': regularizers.omega(w, states, grads, ratio='norm', reduction='sum'),
        'norm_mean': regularizers.omega(w, states, grads, ratio='norm'),
        'nothing_kept': regularizers.omega(w, states, jnp.zeros_like(grads)),
        'by_params': regularizers.omega_value_and_grad(params, inputs, initial, grads)[0]}

  states, grads, omegas = compute(params)
  np.testing.assert_allclose(states[0, :, 0], [0.24491866240370913, 0.8066549645295868],
                             rtol=1e-6)
  np.testing.assert_allclose(grads[0, :, 0], [0.5239616522996564, 1.0], rtol=1e-6)
  np.testing.assert_allclose(omegas['code'], 0.751382013720735, rtol=1e-5)
  np.testing.assert_allclose(omegas['paper'], 0.3947307730092139, rtol=1e-5)
  np.testing.assert_allclose(omegas['norm_mean'], 0.3947307730092139 / 2, rtol=1e-5)
  np.testing.assert_allclose(omegas['by_params'], 0.751382013720735, rtol=1e-5)
  # No kept pair (every dE/dh_t is 0): 0, where the reference code divides 0 by 0.
  assert float(omegas['nothing_kept']) == 0.0


@pytest.mark.parametrize('activation', ['tanh', 'relu'])
def test_omega_equals_explicit_jacobians(activation):
  # r_t from the full Jacobian J[j, i] = dh_t[j]/dh_{t-1}[i] of the cell (jax.jacobian),
  # independent of the row-layout formula; pairs past lengths or with g_t = 0 are left out.
  batch, steps, d, hidden = 2, 4, 2, 3
  rng = np.random.default_rng(1)
  params = {'W_xh': rng.normal(size=(d, hidden)), 'W_hh': 0.8 * rng.normal(size=(hidden, hidden)),
            'b': rng.normal(size=hidden)}
  params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
  inputs = jnp.asarray(rng.normal(size=(batch, steps, d)), jnp.float32)
  initial = jnp.full((batch, hidden), 0.3)
  errors = rng.normal(size=(batch, steps, hidden)).astype(np.float32)
  errors[0, 1] = 0.0  # no error reaches this state: left out
  lengths = np.array([4, 3])
  cell = cells.elman(activation)

  @jax.jit
  def compute(errors, lengths):
    states, _ = recurrence.scan(cell, params, inputs, initial)
    previous = jnp.concatenate([initial[:, None], states[:, :-1]], axis=1)  # h_{t-1}
    one_step = jax.jacobian(lambda h, x: cell(params, h, x)[0])
    omegas = {(ratio, reduction): regularizers.omega(params['W_hh'], states, errors, activation,
                                                     lengths, ratio, reduction)
              for ratio in regularizers.RATIOS for reduction in regularizers.REDUCTIONS}
    return jax.vmap(jax.vmap(one_step))(previous, inputs), omegas  # [B, T, H, H]

  jacobians, omegas = compute(errors, lengths)
  jacobians = np.asarray(jacobians, np.float64)
  assert (jacobians != 0).mean() > 0.5  # not a degenerate (all-dead relu) case
  terms = {'squared_norm': [], 'norm': []}
  for b in range(batch):
    for t in range(lengths[b]):
      if not errors[b, t].any():
        continue
      ratio = np.linalg.norm(errors[b, t] @ jacobians[b, t]) / np.linalg.norm(errors[b, t])
      terms['squared_norm'].append((ratio ** 2 - 1) ** 2)
      terms['norm'].append((ratio - 1) ** 2)
  assert len(terms['norm']) == 6
  for ratio, values in terms.items():
    np.testing.assert_allclose(omegas[ratio, 'mean'], np.mean(values), rtol=1e-5)
    np.testing.assert_allclose(omegas[ratio, 'sum'], np.sum(values) / batch, rtol=1e-5)


# (through_states, ratio) of omega_value_and_grad
VARIANTS = ((False, 'squared_norm'), (True, 'squared_norm'), (True, 'norm'))


def test_omega_gradient_equals_central_differences():
  with jax.enable_x64(True):
    batch, steps, d, hidden = 2, 3, 2, 2
    rng = np.random.default_rng(0)
    host = {'W_xh': rng.normal(size=(d, hidden)), 'W_hh': rng.normal(size=(hidden, hidden)),
            'b': rng.normal(size=hidden)}
    inputs = rng.normal(size=(batch, steps, d))
    initial = rng.normal(size=(batch, hidden))
    cell = cells.elman('tanh')

    @jax.jit
    def autodiff(params):
      _, errors = diagnostics.state_gradients(cell, params, inputs, initial,
                                              lambda s: jnp.sum(jnp.sin(s[:, -1])))
      states, _ = recurrence.scan(cell, params, inputs, initial)
      return errors, states, [regularizers.omega_value_and_grad(
          params, inputs, initial, errors, through_states=through, ratio=ratio)
                              for through, ratio in VARIANTS]

    errors, fixed_states, results = autodiff(host)

    @jax.jit
    def omegas_at(p):  # dE/dh_t held at its value at the base params, as eq. 10
      states = recurrence.scan(cell, p, inputs, initial)[0]
      return jnp.stack([regularizers.omega(p['W_hh'], states if through else fixed_states,
                                           errors, ratio=ratio) for through, ratio in VARIANTS])

    values = np.asarray(omegas_at(host))
    assert values.dtype == np.float64
    step = 1e-6
    numeric = {name: np.zeros((len(VARIANTS),) + array.shape) for name, array in host.items()}
    for name, array in host.items():
      for index in np.ndindex(array.shape):
        shifted = [array.copy(), array.copy()]
        shifted[0][index] += step
        shifted[1][index] -= step
        plus, minus = (np.asarray(omegas_at(dict(host, **{name: a}))) for a in shifted)
        numeric[name][(slice(None),) + index] = (plus - minus) / (2 * step)
    for i, (through, ratio) in enumerate(VARIANTS):
      value, grads = results[i]
      np.testing.assert_allclose(value, values[i], rtol=1e-12)
      for name in host:
        np.testing.assert_allclose(grads[name], numeric[name][i], rtol=1e-6, atol=1e-9,
                                   err_msg=f'{name}, through_states={through}, ratio={ratio}')
      assert np.abs(grads['W_hh']).max() > 1e-3
      for name in ('W_xh', 'b'):  # through the states only
        assert (np.abs(grads[name]).max() > 1e-3) == through


def test_omega_of_state_gradients_past_float32_squares():
  """Issue 26: dE/dh_t of magnitude 1.5e19 gave Omega 0.876855 against float64's 0.834285 (its
  sums of squares overflowed float32), NaN or exactly 1.0 beyond. Omega does not depend on the
  scale of dE/dh_t: at 1.5e19, 1e30 and 3e38 it equals the float64 value of the formula
  computed in numpy, and its gradient equals the one at unit scale."""
  params = cells.init_elman(jax.random.key(3), 3, 4, 'gaussian', radius=0.8)
  inputs = jax.random.normal(jax.random.key(4), (2, 6, 3))
  states, _ = recurrence.scan(cells.elman('tanh'), params, inputs, jnp.zeros((2, 4)))
  _, errors = diagnostics.state_gradients(cells.elman('tanh'), params, inputs, jnp.zeros((2, 4)),
                                          lambda s: jnp.sum(s ** 2))
  unit = errors / jnp.max(jnp.abs(errors))
  w_hh = np.asarray(params['W_hh'], np.float64)
  g, h = np.asarray(unit, np.float64), np.asarray(states, np.float64)
  ratios = (np.linalg.norm((g * (1 - h ** 2)) @ w_hh.T, axis=-1) / np.linalg.norm(g, axis=-1))
  expected = {('squared_norm', 'mean'): np.mean((ratios ** 2 - 1) ** 2),
              ('norm', 'sum'): np.sum((ratios - 1) ** 2) / 2}
  omega_and_grad = jax.jit(jax.value_and_grad(regularizers.omega), static_argnums=(3, 5, 6))
  for (ratio, reduction), value in expected.items():
    _, unit_grad = omega_and_grad(params['W_hh'], states, unit, 'tanh', None, ratio, reduction)
    for scale in (1.5e19, 1e30, 3e38):
      omega, grad = omega_and_grad(params['W_hh'], states, unit * scale, 'tanh', None, ratio,
                                   reduction)
      np.testing.assert_allclose(omega, value, rtol=1e-5, err_msg=f'{ratio} {scale}')
      np.testing.assert_allclose(grad, unit_grad, rtol=1e-5, atol=1e-7)
  assert 0.5 < expected[('squared_norm', 'mean')] < 2  # a value away from 0 and 1


def test_omega_errors():
  w, states = jnp.eye(2), jnp.zeros((1, 3, 2))
  with pytest.raises(ValueError, match=r'state_gradients: expected the shape of states'):
    regularizers.omega(w, states, jnp.zeros((1, 3, 3)))
  with pytest.raises(ValueError, match=r"w_hh: expected shape \[H, H\] = \(2, 2\)"):
    regularizers.omega(jnp.eye(3), states, states)
  with pytest.raises(ValueError, match=r'ratio: expected one of'):
    regularizers.omega(w, states, states, ratio='cube')
  with pytest.raises(ValueError, match=r'activation: expected one of'):
    regularizers.omega(w, states, states, activation='sigmoid')
  with pytest.raises(ValueError, match=r'^bound: expected a finite value >= 0, got -1.0$'):
    regularizers.omega(w, states, states, bound=-1.0)


def test_omega_takes_a_traced_bound_under_jit():
  """The bound an argument of a jitted function (it was a TracerBoolConversionError): the
  value of the same bound given concretely, for a bound that keeps every pair and one that
  leaves out the pairs of small dE/dh."""
  keys = jax.random.split(jax.random.key(3), 2)
  states = jnp.tanh(jax.random.normal(keys[0], (2, 5, 3)))
  errors = jax.random.normal(keys[1], (2, 5, 3)) * jnp.logspace(-6, 0, 5)[None, :, None]
  w = 1.3 * jnp.eye(3)
  traced = jax.jit(lambda bound: regularizers.omega(w, states, errors, bound=bound))
  for bound in (0.0, 1e-20, 1e-6):
    np.testing.assert_allclose(traced(bound), regularizers.omega(w, states, errors, bound=bound),
                               rtol=1e-6)
  assert float(traced(1e-6)) != float(traced(0.0))  # the bound is used, not dropped
  penalty = jax.jit(lambda bound: regularizers.omega_penalty(
      {'W_xh': jnp.eye(3), 'W_hh': w, 'b': jnp.zeros(3)}, states, jnp.zeros((2, 3)),
      lambda s: jnp.sum(s[:, -1]), bound=bound))
  assert np.isfinite(float(penalty(1e-20)))


REFERENCE_CLIP = clipping.clip_with_fallback()
REFERENCE_CLIP_UPDATE = jax.jit(REFERENCE_CLIP.update)
SGD = clipping.clipped_sgd(0.01)
SGD_UPDATE = jax.jit(SGD.update)


def model_params():
  return {'cell': {'W_xh': jnp.full((2, 2), 0.5), 'W_hh': jnp.array([[1.0, -2.0], [3.0, 4.0]]),
                   'b': jnp.ones(2)},
          'head': {'W': jnp.ones((2, 3)), 'b': jnp.ones(3)}}


@pytest.mark.parametrize('bad', [np.nan, np.inf, 2e10])
def test_fallback_replaces_untrusted_gradient_by_002_w_hh(bad):
  # RNN.py lines 234-243: a NaN, infinite or > 1e10 norm gives 0.02 W_hh for W_hh and 0 elsewhere.
  params = model_params()
  grads = jax.tree_util.tree_map(jnp.ones_like, params)
  grads['head']['W'] = grads['head']['W'].at[0, 1].set(bad)
  updates, _ = REFERENCE_CLIP_UPDATE(grads, REFERENCE_CLIP.init(params), params)
  np.testing.assert_allclose(updates['cell']['W_hh'], [[0.02, -0.04], [0.06, 0.08]], rtol=1e-6)
  for path, leaf in jax.tree_util.tree_leaves_with_path(updates):
    if 'W_hh' not in jax.tree_util.keystr(path):
      np.testing.assert_array_equal(leaf, 0.0)
  # One MSGD-C step at lr 0.01: W_hh <- (1 - 0.01 * 0.02) W_hh, everything else unchanged.
  new = optax.apply_updates(params, SGD_UPDATE(grads, SGD.init(params), params)[0])
  np.testing.assert_allclose(new['cell']['W_hh'], 0.9998 * params['cell']['W_hh'], rtol=1e-6)
  np.testing.assert_array_equal(new['head']['W'], params['head']['W'])


def test_clipping_rescales_huge_norm_without_overflow():
  grads = {'W_hh': jnp.array([3e19, 4e19], jnp.float32)}
  params = {'W_hh': jnp.array([1.0, 2.0])}
  assert not np.isfinite(jnp.sqrt(jnp.sum(grads['W_hh'] ** 2)))  # the naive norm overflows
  np.testing.assert_allclose(clipping.global_norm(grads), 5e19, rtol=1e-6)
  trusting = clipping.clip_with_fallback(threshold=1.0, max_trusted_norm=np.inf)
  out, _ = jax.jit(trusting.update)(grads, trusting.init(params), params)
  np.testing.assert_allclose(out['W_hh'], [0.6, 0.8], rtol=1e-6)
  # The reference's own rule (norm > 1e10 is untrusted) takes the fallback instead.
  reference = clipping.clip_with_fallback()
  out, _ = reference.update(grads, reference.init(params), params)
  np.testing.assert_allclose(out['W_hh'], [0.02, 0.04], rtol=1e-6)
  out, _ = reference.update({'W_hh': jnp.array([3.0, 4.0])}, None, params)
  np.testing.assert_allclose(out['W_hh'], [0.6, 0.8], rtol=1e-6)
  small = {'W_hh': jnp.array([0.3, -0.4])}
  out, _ = reference.update(small, None, params)
  np.testing.assert_array_equal(out['W_hh'], small['W_hh'])


def test_clipping_errors():
  with pytest.raises(ValueError, match=r'threshold: expected a value > 0'):
    clipping.clip_with_fallback(threshold=0.0)
  clip = clipping.clip_with_fallback()
  with pytest.raises(ValueError, match=r'params: expected the current params'):
    clip.update({'W_hh': jnp.ones(2)}, None)
  with pytest.raises(ValueError, match=r"recurrent_name: expected a leaf named 'W_hh'"):
    clip.update({'W': jnp.ones(2)}, None, {'W': jnp.ones(2)})


def test_sparse_at_radius_has_15_nonzeros_per_row_and_radius_095(key):
  w = jax.jit(initializers.sparse_at_radius, static_argnums=(1, 2, 3))(key, 50, 15, 0.95)
  assert w.shape == (50, 50) and w.dtype == jnp.float32
  np.testing.assert_array_equal(np.count_nonzero(np.asarray(w), axis=1), 15)
  assert np.count_nonzero(np.asarray(w), axis=0).std() > 0  # per column it varies
  rho = np.max(np.abs(np.linalg.eigvals(np.asarray(w, np.float64))))
  np.testing.assert_allclose(rho, 0.95, atol=1e-5)
  for bad in (0, 51):
    with pytest.raises(ValueError, match=r'nonzeros: expected an int in \[1, H\] = \[1, 50\]'):
      initializers.sparse_at_radius(key, 50, nonzeros=bad)


def check_temporal_order(inputs, targets, length):
  """Asserts the layout of ``temporal_order_pascanu`` for one length, on host arrays."""
  inputs, targets = np.asarray(inputs), np.asarray(targets)
  n, m = int(length * .1), int(length * .5)  # tempOrder.py lines 57, 59
  np.testing.assert_array_equal(inputs.sum(-1), 1.0)  # one-hot rows
  symbols = inputs.argmax(-1)
  marked = symbols < 2  # channels 0 (A) and 1 (B)
  steps = np.arange(length)
  in_first = (steps >= n) & (steps < 2 * n)
  in_second = (steps >= m) & (steps < m + n)
  np.testing.assert_array_equal(marked[:, in_first].sum(1), 1)
  np.testing.assert_array_equal(marked[:, in_second].sum(1), 1)
  assert not marked[:, ~(in_first | in_second)].any()  # distractors 2-5 everywhere else
  first = symbols[:, in_first][marked[:, in_first]]
  second = symbols[:, in_second][marked[:, in_second]]
  np.testing.assert_array_equal(targets, first + 2 * second)  # AA 0, BA 1, AB 2, BB 3
  return steps[marked.argmax(1)], symbols


def test_temporal_order_pascanu_layout(key):
  length = 50
  inputs, targets = jax.jit(synthetic.temporal_order_pascanu, static_argnums=(1, 2))(
      key, 2000, length)
  assert inputs.shape == (2000, length, 6) and inputs.dtype == jnp.float32
  assert targets.shape == (2000,) and targets.dtype == jnp.int32
  first_steps, symbols = check_temporal_order(inputs, targets, length)
  # L = 50: the windows are [L/10, 2L/10) = [5, 10) and [5L/10, 6L/10) = [25, 30), all drawn.
  assert set(first_steps.tolist()) == set(range(5, 10))
  assert set(np.asarray(targets).tolist()) == {0, 1, 2, 3}
  assert set(np.unique(symbols[symbols >= 2]).tolist()) == {2, 3, 4, 5}
  # Usable under vmap (traced only: compiling a vmapped random draw is slow on CPU).
  shapes = jax.eval_shape(jax.vmap(lambda k: synthetic.temporal_order_pascanu(k, 3, length)),
                          jax.random.split(key, 4))
  assert [s.shape for s in shapes] == [(4, 3, length, 6), (4, 3)]


def test_temporal_order_pascanu_windows_and_errors():
  # int(.1 L) of tempOrder.py equals L // 10 for every length: [n, 2n) with n = floor(L / 10).
  assert all(int(length * .1) == length // 10 for length in range(10, 5000))
  with pytest.raises(ValueError, match=r'length: expected an int T >= 10'):
    synthetic.temporal_order_pascanu(jax.random.key(0), 2, 9)
  with pytest.raises(ValueError, match=r'min_length: expected an int >= 10'):
    synthetic.temporal_order_pascanu_range(jax.random.key(0), 2, 9, 20)
  with pytest.raises(ValueError, match=r'max_length: expected an int >= 20'):
    synthetic.temporal_order_pascanu_range(jax.random.key(0), 2, 20, 19)


def test_temporal_order_pascanu_range_draws_lengths_as_reference():
  draw = jax.jit(synthetic.temporal_order_pascanu_range, static_argnums=(1, 2, 3))
  batches = [draw(jax.random.key(seed), 8, 10, 14) for seed in range(60)]
  inputs, targets, lengths = (np.stack([np.asarray(b[i]) for b in batches]) for i in range(3))
  assert inputs.shape == (60, 8, 13, 6)  # padded to max_length - 1 steps
  assert set(lengths.ravel().tolist()) == {10, 11, 12, 13}  # max_length 14 excluded, RNN.py 321
  assert (lengths == lengths[:, :1]).all()  # one length per batch
  for batch in range(60):
    length = int(lengths[batch, 0])
    check_temporal_order(inputs[batch, :, :length], targets[batch], length)
    np.testing.assert_array_equal(inputs[batch, :, length:], 0.0)


def chain_step(clipping, grads, params, threshold=1.0, learning_rate=0.5):
  """One update of ``optimizers.make_optimizer('sgd', ...)``: (new params, measurements)."""
  chain = optimizers.make_optimizer('sgd', learning_rate, clipping, threshold)
  updates, state = jax.jit(chain.update)(grads, chain.init(params), params)
  return optax.apply_updates(params, updates), optimizers.measurements(state)


def test_pascanu_clipping_in_the_optimizer_chain():
  params = model_params()
  ones = jax.tree_util.tree_map(jnp.ones_like, params)  # 19 entries: norm sqrt(19)
  # Above the threshold: rescaled to norm 1, as global_norm clipping; recorded in ClipState.
  new, measured = chain_step('pascanu', ones, params)
  np.testing.assert_allclose(new['head']['b'], 1.0 - 0.5 / np.sqrt(19), rtol=1e-6)
  np.testing.assert_allclose(measured['grad_norm'], np.sqrt(19), rtol=1e-6)
  assert bool(measured['clipped'])
  np.testing.assert_allclose(measured['update_norm'], 0.5, rtol=1e-6)
  same, _ = chain_step('global_norm', ones, params)
  for a, b in zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(same)):
    np.testing.assert_array_equal(a, b)
  # Below it: unchanged, not clipped; the threshold is the chain's injected hyperparameter.
  new, measured = chain_step('pascanu', ones, params, threshold=5.0)
  np.testing.assert_allclose(new['head']['b'], 0.5, rtol=1e-6)
  assert not bool(measured['clipped'])
  # Non-finite or > 1e10: W_hh <- W_hh - lr 0.02 W_hh, the rest unchanged; the norm is kept.
  for bad in (np.nan, np.inf, 2e10):
    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    grads['head']['W'] = grads['head']['W'].at[0, 0].set(bad)
    new, measured = chain_step('pascanu', grads, params)
    np.testing.assert_allclose(new['cell']['W_hh'], 0.99 * params['cell']['W_hh'], rtol=1e-6)
    np.testing.assert_array_equal(new['head']['W'], params['head']['W'])
    np.testing.assert_array_equal(new['cell']['W_xh'], params['cell']['W_xh'])
    assert bool(measured['clipped'])
    assert (np.isnan(measured['grad_norm']) if np.isnan(bad) else
            float(measured['grad_norm']) >= min(bad, 1e10))
  assert optimizers.family('pascanu') == 'pascanu' and optimizers.handles_non_finite('pascanu')
  assert not optimizers.handles_non_finite('global_norm')
  assert not optimizers.handles_non_finite('none')
  with pytest.raises(ValueError, match=r"clip_threshold: expected a finite value > 0 for "
                                       r"clipping='pascanu'"):
    optimizers.check('sgd', 0.01, 'pascanu', 0.0)


def fallback_task(w_hh=1.0):
  """params {'W_hh': [[w]], 'x': [0, 0]}; loss sum(sqrt(x)) = 0, finite, whose gradient
  d sqrt(x)/dx at 0 is +inf: every step's gradient is non-finite."""
  return trainer.Task(
      init=lambda c, k: {'W_hh': jnp.full((1, 1), w_hh), 'x': jnp.zeros(2)},
      loss=lambda p, c, b, k: (jnp.sum(jnp.sqrt(p['x'])) + 0.0 * jnp.sum(p['W_hh']), c),
      batch=lambda step: {})


def trainer_config(**overrides):
  """The trainer fields' defaults (``experiment.TRAINER_FIELDS``), 3 steps of SGD at 0.5
  with the reference clipping, and ``overrides``."""
  from rnnjax.train import experiment
  fields = {name: field.default for name, field in experiment.TRAINER_FIELDS.items()}
  fields.update(steps=3, log_every=1, optimizer='sgd', learning_rate=0.5, clipping='pascanu')
  fields.update(overrides)
  return ml_collections.ConfigDict(fields)


def test_trainer_applies_the_fallback_update_of_a_non_finite_gradient():
  # clipping 'pascanu': the step is judged by its update (finite), so it is applied:
  # W_hh <- (1 - 0.5 * 0.02) W_hh three times, x unchanged, nothing skipped or stopped.
  params, records, _ = trainer.train(fallback_task(), [trainer_config()])
  np.testing.assert_allclose(params[0]['W_hh'], [[0.99 ** 3]], rtol=1e-6)
  np.testing.assert_array_equal(params[0]['x'], [0.0, 0.0])
  record = records[0]
  assert record['status'] == 'finished' and record['steps_done'] == 3
  assert record['skipped_steps'] == 0 and record['clipped_fraction'] == 1.0
  # The same gradient with plain global-norm clipping is skipped (or stops the run).
  params, records, _ = trainer.train(fallback_task(), [trainer_config(
      clipping='global_norm', on_divergence='skip')])
  np.testing.assert_array_equal(params[0]['W_hh'], [[1.0]])
  assert records[0]['skipped_steps'] == 3
  _, records, _ = trainer.train(fallback_task(), [trainer_config(clipping='global_norm')])
  assert records[0]['status'] == 'diverged' and records[0]['diverged_step'] == 1


def test_omega_ignores_nan_in_padding_and_shows_nan_where_it_counts():
  """Padding is zeroed before Omega and its dE/dh_t (the "double where"): NaN past a
  length changes neither Omega nor its gradient; a NaN dE/dh_t of a real step makes
  Omega NaN instead of dropping the pair (which would give a finite, wrong Omega)."""
  key = jax.random.key(3)
  params = cells.init_elman(key, 3, 4, 'gaussian', radius=0.8)
  inputs = jax.random.normal(jax.random.fold_in(key, 1), (2, 6, 3))
  initial = jnp.zeros((2, 4))
  lengths = jnp.array([6, 3])
  last = lambda states: jnp.sum(jnp.take_along_axis(states, (lengths - 1)[:, None, None], 1) ** 2)
  penalty = lambda p, x: regularizers.omega_penalty(p, x, initial, last, lengths=lengths)
  nan_padded = inputs.at[1, 3:].set(jnp.nan)
  assert float(penalty(params, nan_padded)) == float(penalty(params, inputs))
  gradient = jax.grad(penalty)(params, nan_padded)['W_hh']
  np.testing.assert_array_equal(gradient, jax.grad(penalty)(params, inputs)['W_hh'])
  assert np.all(np.isfinite(gradient))
  states, _ = recurrence.scan(cells.elman('tanh'), params, inputs, initial)
  _, errors = diagnostics.state_gradients(cells.elman('tanh'), params, inputs, initial,
                                          lambda s: jnp.sum(s ** 2))
  assert np.isnan(float(regularizers.omega(params['W_hh'], states, errors.at[0, 2].set(jnp.nan))))
  assert float(regularizers.omega(params['W_hh'], states[:0], errors[:0], reduction='sum')) == 0.0
  as_list = regularizers.omega(params['W_hh'], states, errors, lengths=[6, 2])
  assert float(as_list) == float(regularizers.omega(params['W_hh'], states, errors,
                                                    lengths=jnp.array([6, 2])))
  for bad, message in (([99, 2], r'lengths: expected values in \[0, T\] = \[0, 6\]'),
                       ([-1, 2], r'lengths: expected values in \[0, T\]'),
                       ([6.0, 2.0], 'lengths: expected integers')):
    with pytest.raises(ValueError, match=message):
      regularizers.omega(params['W_hh'], states, errors, lengths=bad)
  with pytest.raises(ValueError, match=r'states: expected shape \[B, T, H\] = \(2, 6, 4\), got '
                                       r'\(2, 3, 4\)'):
    regularizers.omega_penalty(params, inputs, initial, last, states=states[:, :3])


@pytest.mark.parametrize('activation', ['tanh', 'relu', 'linear'])
def test_the_layers_state_gradients_equal_autodiffs_and_omega_with_the_layers_states(activation):
  """fused.state_gradients_from_states (the layer's backward loop from its states) equals
  diagnostics.state_gradients (autodiff of the recurrence run again) to float32 rounding at
  every step of every length, 0 past a length; omega_penalty given the layer's states (which
  uses it) equals omega_penalty without them, value and W_hh gradient; the loop runs to the
  longest length (8 of T = 12)."""
  key = jax.random.key(5)
  params = cells.init_elman(key, 3, 16, 'gaussian', radius=1.1)
  inputs = jax.random.normal(jax.random.fold_in(key, 1), (4, 12, 3))
  initial = jax.random.normal(jax.random.fold_in(key, 2), (4, 16)) * 0.1
  lengths = jnp.array([8, 3, 1, 5])
  readout = jax.random.normal(jax.random.fold_in(key, 3), (16,))

  def loss(states):  # reads each sequence's states before its length only
    alive = jnp.arange(12)[None, :, None] < lengths[:, None, None]
    return jnp.sum(jnp.where(alive, jnp.sin(states @ readout)[..., None], 0.0))

  states, _ = fused.elman_layer(params, inputs, initial, lengths, activation=activation)
  _, expected = diagnostics.state_gradients(cells.elman(activation), params, inputs, initial,
                                            loss, lengths)
  alive = (jnp.arange(12)[None, :] < lengths[:, None])[..., None]
  ours = fused.state_gradients_from_states(params['W_hh'], states, jax.grad(loss)(states),
                                           lengths, activation)
  np.testing.assert_allclose(ours, jnp.where(alive, expected, 0.0), rtol=2e-5, atol=1e-6)
  assert float(jnp.max(jnp.abs(ours[:, 8:]))) == 0.0 and float(jnp.max(jnp.abs(ours))) > 0.1

  def penalty(p, given):
    return regularizers.omega_penalty(p, inputs, initial, loss, activation, lengths, given)
  value, grads = jax.value_and_grad(penalty)(params, states)
  recomputed, recomputed_grads = jax.value_and_grad(penalty)(params, None)
  np.testing.assert_allclose(value, recomputed, rtol=1e-5)
  np.testing.assert_allclose(grads['W_hh'], recomputed_grads['W_hh'], rtol=1e-4, atol=1e-7)
  with pytest.raises(ValueError, match=r'direct: expected the shape of states \(4, 12, 16\)'):
    fused.state_gradients_from_states(params['W_hh'], states, states[:, :3], lengths)
