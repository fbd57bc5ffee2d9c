"""DEER and quasi-DEER equal the sequential scan where they converge, and say so where not.

Each distinct call signature costs an XLA compile of 2 to 5 s on CPU, so the tests
share a few: most go through ``_run``, with lengths and an initial guess always given.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import parallel
from rnnjax import recurrence

B, T, D, H = 4, 24, 3, 8
LENGTHS = np.array([24, 0, 9, 1], np.int32)  # a full length, a 0 length
RTOL, ATOL = 1e-5, 1e-6
# 'converged' certifies the linearised error of the states within the tolerance; float32 rounding
# floors that estimate near 1e-7 at these sizes (near 1e-6 for relu's larger states).
TOLERANCE = {'deer': 1e-6, 'quasi': 1e-6}

deer = jax.jit(parallel.elman_deer,
               static_argnames=('activation', 'method', 'tolerance', 'max_iterations'))


def _run(params, inputs, initial, method='deer', guess=None, **options):
  """``elman_deer`` with LENGTHS, zeros as the default guess and the method's tolerance."""
  guess = jnp.zeros((B, inputs.shape[1], H)) if guess is None else guess
  return deer(params, inputs, initial, jnp.asarray(LENGTHS), method=method, initial_guess=guess,
              tolerance=TOLERANCE[method], **options)


def _normal(rng, *shape, scale=1.0):
  # numpy draws: an eager jax.random.normal compiles for every new shape (about 1 s each)
  return jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)


def _problem(seed, radius, recurrent_init='gaussian', steps=T):
  rng = np.random.default_rng(seed)
  params = cells.init_elman(jax.random.key(seed), D, H, recurrent_init, radius=radius)
  params['b'] = _normal(rng, H, scale=0.1)
  return params, _normal(rng, B, steps, D), _normal(rng, B, H, scale=0.5)


@functools.partial(jax.jit, static_argnames='activation')
def _sequential(params, inputs, initial, lengths=LENGTHS, activation='tanh'):
  return recurrence.scan(cells.elman(activation), params, inputs, initial, lengths)


@pytest.mark.parametrize('method', ['deer', 'quasi'])
def test_states_equal_sequential_scan(method):
  for recurrent_init in ('gaussian', 'orthogonal'):
    for radius in (0.5, 0.9, 1.0):
      params, inputs, initial = _problem(1, radius, recurrent_init)
      expected, expected_final = _sequential(params, inputs, initial)
      states, final, info = _run(params, inputs, initial, method)
      assert info['converged'].all(), (recurrent_init, radius, info)
      assert (info['residual'] <= TOLERANCE[method]).all()
      assert (info['iterations'] <= np.maximum(LENGTHS, 1)).all()  # at most T (length 0: 1)
      np.testing.assert_allclose(states, expected, rtol=RTOL, atol=ATOL)
      np.testing.assert_allclose(final, expected_final, rtol=RTOL, atol=ATOL)
      np.testing.assert_array_equal(states[1], 0.0)  # length 0: all padding
      np.testing.assert_array_equal(final[1], initial[1])


@pytest.mark.parametrize('activation, method', [('tanh', 'deer'), ('relu', 'quasi')])
def test_gradients_equal_autodiff_of_sequential_scan(activation, method):
  params, inputs, initial = _problem(2, 0.9)
  params['b_hh'] = -0.5 * params['b']  # the second bias is summed
  lengths = jnp.asarray(LENGTHS)
  weights = _normal(np.random.default_rng(5), B, T, H)

  def loss(layer, params, inputs, initial):
    states, final = layer(params, inputs, initial)[:2]
    return jnp.sum(jnp.sin(states) * weights) + jnp.sum(final ** 3)

  plain = functools.partial(_sequential, lengths=lengths, activation=activation)
  fast = functools.partial(parallel.elman_deer, lengths=lengths, activation=activation,
                           method=method, tolerance=TOLERANCE[method])
  expected, grads = (jax.jit(jax.grad(functools.partial(loss, layer), argnums=(0, 1, 2)))(
      params, inputs, initial) for layer in (plain, fast))
  for name in params:
    np.testing.assert_allclose(grads[0][name], expected[0][name], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(grads[1], expected[1], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(grads[2], expected[2], rtol=1e-4, atol=1e-5)
  assert np.abs(grads[2][1]).min() > 0  # length 0: the final state is the initial one


def test_quasi_reaches_deer_fixed_point_in_more_iterations():
  params, inputs, initial = _problem(3, 0.9)
  states, final, info = _run(params, inputs, initial, 'deer')
  quasi_states, quasi_final, quasi_info = _run(params, inputs, initial, 'quasi')
  assert info['converged'].all() and quasi_info['converged'].all()
  np.testing.assert_allclose(quasi_states, states, rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(quasi_final, final, rtol=RTOL, atol=ATOL)
  assert (quasi_info['iterations'] >= info['iterations']).all()
  long = LENGTHS > 1  # linear against quadratic convergence
  assert (quasi_info['iterations'][long] > 2 * info['iterations'][long]).all()


def test_chaotic_dynamics_report_no_convergence_at_the_cap():
  # rho = 3: DEER needs 27 to 80 of the T = 100 iterations on such problems (float32
  # rounding, amplified along the trajectory, moves the count from machine to machine: 27-51
  # on an AMD EPYC, 55-80 on another); at a cap of 15 none has converged.
  params, inputs, initial = _problem(4, 3.0, steps=100)
  expected, _ = _sequential(params, inputs, initial, None)
  states, _, info = deer(params, inputs, initial, max_iterations=15)
  np.testing.assert_array_equal(info['converged'], False)
  np.testing.assert_array_equal(info['iterations'], 15)
  assert (info['residual'] > 1e-5).all() and np.isfinite(info['residual']).all()
  assert (np.abs(states - expected).max(axis=(1, 2)) > 0.1).all()  # wrong, and flagged


def test_overflowing_linear_solve_stops_and_reports_inf():
  # rho = 6: the products of the Jacobians linearised at h = 0 pass float32's range.
  params, inputs, initial = _problem(4, 6.0, steps=100)
  _, _, info = deer(params, inputs, initial, max_iterations=30)
  np.testing.assert_array_equal(info['converged'], False)
  np.testing.assert_array_equal(info['residual'], np.inf)
  np.testing.assert_array_equal(info['iterations'], 1)  # not the cap: no use going on


def test_linear_activation_converges_in_one_newton_step():
  params, inputs, initial = _problem(5, 0.9)
  expected, expected_final = _sequential(params, inputs, initial, activation='linear')
  states, final, info = deer(params, inputs, initial, jnp.asarray(LENGTHS), activation='linear',
                             tolerance=TOLERANCE['deer'])
  np.testing.assert_array_equal(info['iterations'], 1)
  np.testing.assert_array_equal(info['converged'], True)
  np.testing.assert_allclose(states, expected, rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(final, expected_final, rtol=RTOL, atol=ATOL)


def test_k_iterations_make_k_steps_exact_and_unconverged_gradients_are_nan():
  params, inputs, initial = _problem(6, 1.5)
  expected, _ = _sequential(params, inputs, initial)
  k = 5

  def final_sum(initial, params):
    states, final, info = _run(params, inputs, initial, max_iterations=k)
    return final.sum(), (states, info)

  (g_initial, g_params), (states, info) = jax.jit(jax.grad(final_sum, argnums=(0, 1),
                                                           has_aux=True))(initial, params)
  converged = np.asarray(info['converged'])
  assert not converged[0] and info['iterations'][0] == k and converged[LENGTHS <= 1].all()
  np.testing.assert_allclose(states[:, :k], expected[:, :k], rtol=RTOL, atol=ATOL)
  assert np.abs(states[0, k:] - expected[0, k:]).max() > 1e-3
  # No fixed point, no gradient: NaN for the unconverged sequences and the shared weights.
  assert np.isnan(g_initial[~converged]).all()
  assert np.isfinite(g_initial[converged]).all() and np.abs(g_initial[converged]).min() > 0
  for name in params:
    assert np.isnan(g_params[name]).all(), name
  # Without the cap: converged, within T iterations (Newton on a triangular system).
  states, _, info = _run(params, inputs, initial)
  np.testing.assert_array_equal(info['converged'], True)
  assert k < info['iterations'][0] <= T
  np.testing.assert_allclose(states, expected, rtol=RTOL, atol=ATOL)


def test_initial_guess_at_the_solution_needs_no_iteration():
  params, inputs, initial = _problem(7, 0.9)
  expected, final = _sequential(params, inputs, initial)
  alive = (np.arange(T) < LENGTHS[:, None])[..., None]
  # The solver's trajectory keeps the last state at padded steps; the outputs there are 0.
  states, _, info = _run(params, inputs, initial, guess=jnp.where(alive, expected,
                                                                    final[:, None]))
  np.testing.assert_array_equal(info['iterations'], 0)
  np.testing.assert_allclose(states, expected, rtol=RTOL, atol=ATOL)
  _, _, info = _run(params, inputs, initial, guess=expected)
  np.testing.assert_array_equal(info['iterations'], [0, 1, 1, 1])


def test_vmap_over_sequences_equals_the_batch():
  params, inputs, initial = _problem(8, 0.9)
  batched = _run(params, inputs, initial)
  one = lambda x, h, n: parallel.elman_deer(params, x[None], h[None], n[None],
                                            tolerance=TOLERANCE['deer'])
  mapped = jax.jit(jax.vmap(one))(inputs, initial, jnp.asarray(LENGTHS))
  np.testing.assert_allclose(mapped[0][:, 0], batched[0], rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(mapped[1][:, 0], batched[1], rtol=RTOL, atol=ATOL)
  # each sequence iterates on its own: its count does not depend on the rest of the batch
  np.testing.assert_array_equal(mapped[2]['iterations'][:, 0], batched[2]['iterations'])
  assert len(set(batched[2]['iterations'].tolist())) > 1


def test_bad_input_is_named():
  params, inputs, initial = _problem(9, 0.9)
  call = functools.partial(parallel.elman_deer, params)
  cases = [
      (lambda: call(inputs[0], initial), r'inputs: expected rank 3'),
      (lambda: call(inputs[..., :2], initial), r'inputs: expected last axis d = 3'),
      (lambda: call(inputs[:, :0], initial), r'inputs: expected T >= 1'),
      (lambda: call(inputs, initial[:2]), r'initial_state: expected leading batch size 4'),
      (lambda: call(inputs, initial[:, :5]), r'initial_state: expected last axis H = 8, got shape \(4, 5\)'),
      (lambda: call(inputs, initial, jnp.zeros(3, jnp.int32)), r'lengths: expected shape'),
      (lambda: call(inputs, initial, jnp.full(B, T + 1)), r'lengths: expected values in \[0, T\]'),
      (lambda: call(inputs, initial, activation='sigmoid'), r'activation: expected one of'),
      (lambda: call(inputs, initial, method='newton'), r"method: expected one of \('deer', "),
      (lambda: call(inputs, initial, initial_guess=inputs), r'initial_guess: expected shape'),
      (lambda: call(inputs, initial, tolerance=0.0),
       r'tolerance: expected a finite number > 0, got 0'),
      (lambda: call(inputs, initial, tolerance=-1e-6), r'tolerance: expected a finite number > 0'),
      # tolerance inf would 'converge' in 0 iterations on the untouched zero guess
      (lambda: call(inputs, initial, tolerance=float('inf')), r'tolerance: .* got inf'),
      (lambda: call(inputs, initial, tolerance=True), r'tolerance: .* got True'),
      (lambda: call(inputs, initial, max_iterations=0), r'max_iterations: expected an int in \[1, '),
      (lambda: call(inputs, initial, max_iterations=2.5), r'max_iterations: .* got 2.5'),
      (lambda: call(inputs, initial, max_iterations=True), r'max_iterations: .* got True'),
      (lambda: call(inputs, initial, max_iterations=2**40), r'max_iterations: .* got 1099511627776'),
      (lambda: call(inputs, (initial,)), r'initial_state: expected one \[B, H\] array'),
      (lambda: parallel.elman_deer(dict(params, W_hh=params['W_hh'][:, :5]), inputs, initial),
       r'params: expected W_xh \[d, H\], W_hh \[H, H\]'),
  ]
  for bad_call, message in cases:
    with pytest.raises(ValueError, match=message):
      bad_call()


def test_lengths_as_a_list_and_a_numpy_tolerance_are_taken():
  """The rule of every path: lengths may be a list; a 0-d numpy or JAX tolerance is a
  number (both raised before)."""
  params, inputs, initial = _problem(9, 0.9)
  lengths = [T, 3, 0, 5]
  as_list = parallel.elman_deer(params, inputs, initial, lengths, tolerance=jnp.float32(1e-5))
  as_array = parallel.elman_deer(params, inputs, initial, jnp.array(lengths), tolerance=1e-5)
  np.testing.assert_array_equal(as_list[0], as_array[0])
  np.testing.assert_array_equal(as_list[1], as_array[1])


def _products(jaxpr) -> list:
  """Every dot_general of a jaxpr, its sub-jaxprs' included."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == 'dot_general':
      found.append(eqn)
    for value in eqn.params.values():
      for sub in value if isinstance(value, (list, tuple)) else [value]:
        inner = getattr(sub, 'jaxpr', sub)
        if hasattr(inner, 'eqns'):
          found.extend(_products(inner))
  return found


@pytest.mark.parametrize('method', parallel.METHODS)
def test_every_product_of_the_solver_and_its_gradient_is_at_full_precision(method):
  """At JAX's default precision a GPU may round float32 matmul inputs to TF32 (about 1e-3),
  and then no residual test at 1e-5 passes: no product of the solve or of its gradient may
  take the default."""
  params, inputs, initial = _problem(0, 0.9)
  loss = lambda p, x: jnp.sum(parallel.elman_deer(p, x, initial, method=method)[1])
  products = _products(jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(params, inputs).jaxpr)
  assert products and all(
      eqn.params['precision'] == (jax.lax.Precision.HIGHEST,) * 2 for eqn in products), [
          (eqn.params['precision'], [str(v.aval) for v in eqn.invars]) for eqn in products
          if eqn.params['precision'] != (jax.lax.Precision.HIGHEST,) * 2]
