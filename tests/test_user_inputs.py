"""Params and inputs as JAX users pass them, on every recurrent path: any Mapping of params
(flax's FrozenDict), a callable activation (jax.nn.gelu) in the cell, the scan and the fused
layer, an Elman cell without bias, an initial state [H] broadcast over the batch, and
integer inputs refused with one line."""

import functools

import flax.core
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rnnjax import cells
from rnnjax import combinators
from rnnjax import convert
from rnnjax import fused
from rnnjax import recurrence

B, T, D, H = 4, 7, 3, 5
LENGTHS = np.array([7, 3, 0, 5], np.int32)

# Each single-layer Elman path: (params, inputs, initial_state, activation) -> (states, final).
PATHS = {
    'cell': lambda p, x, h, a='tanh': _loop(p, x, h, a),
    'scan': lambda p, x, h, a='tanh': recurrence.scan(cells.elman(a), p, x, h),
    'truncated_scan': lambda p, x, h, a='tanh': recurrence.truncated_scan(cells.elman(a), p, x,
                                                                          h, 3),
    'fused': lambda p, x, h, a='tanh': fused.elman_layer(p, x, h, activation=a),
    'checkpointed': lambda p, x, h, a='tanh': fused.checkpointed_elman_layer(
        p, x, h, segment_length=T, activation=a),
    'stack': lambda p, x, h, a='tanh': _one_layer_stack(p, x, h, a),
}


def _loop(params, inputs, initial, activation):
  """The cell stepped by a Python loop: ``(states [B, T, H], final [B, H])``."""
  h, outputs = initial, []
  for t in range(inputs.shape[1]):
    h, y = cells.elman_cell(params, h, inputs[:, t], activation)
    outputs.append(y)
  return jnp.stack(outputs, axis=1), h


def _one_layer_stack(params, inputs, initial, activation):
  """``combinators.stack`` of one forward Elman layer; state leaves ``[1, 1, ...]``."""
  outputs, final = combinators.stack(combinators.layer_for('elman', activation), [[params]],
                                     inputs, initial[None, None])
  return outputs, final[0, 0]


@pytest.fixture(scope='module')
def problem():
  keys = jax.random.split(jax.random.key(0), 4)
  params = cells.init_elman(keys[0], D, H, 'gaussian', radius=1.2)
  params['b'] = 0.3 * jax.random.normal(keys[1], (H,))
  inputs = jax.random.normal(keys[2], (B, T, D))
  initial = 0.5 * jax.random.normal(keys[3], (B, H))
  return params, inputs, initial


def _equal(actual, expected, rtol=1e-6, atol=1e-6):
  for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


@pytest.mark.parametrize('path', PATHS)
def test_frozen_dict_params_equal_dict_params(problem, path):
  params, inputs, initial = problem
  frozen = flax.core.FrozenDict(params)
  run = PATHS[path]
  _equal(run(frozen, inputs, initial), run(params, inputs, initial), rtol=0, atol=0)
  grads = jax.grad(lambda p: jnp.sum(run(p, inputs, initial)[0] ** 2))(frozen)
  assert isinstance(grads, flax.core.FrozenDict)
  _equal(dict(grads), jax.grad(lambda p: jnp.sum(run(p, inputs, initial)[0] ** 2))(params))


def test_frozen_dict_in_gated_cells_and_stacks(problem):
  _, inputs, _ = problem
  for cell in ('gru', 'lstm'):
    params = combinators.init_stack(jax.random.key(1), cell, D, H, layers=2, directions=2)
    frozen = [[flax.core.FrozenDict(p) for p in layer] for layer in params]
    initial = combinators.zero_state(cell, 2, 2, B, H)
    layer = combinators.layer_for(cell)
    _equal(combinators.stack(layer, frozen, inputs, initial, LENGTHS),
           combinators.stack(layer, params, inputs, initial, LENGTHS), rtol=0, atol=0)


@pytest.mark.parametrize('path', PATHS)
def test_gelu_paths_agree_with_the_scan(problem, path):
  """jax.nn.gelu in every path: states and gradients equal autodiff of the plain scan."""
  params, inputs, initial = problem
  weights = jax.random.normal(jax.random.key(7), (B, T, H))

  def loss(run, p, x, h):
    states, final = run(p, x, h, jax.nn.gelu)
    return jnp.sum(jnp.sin(states) * weights) + jnp.sum(final ** 3)

  expected = jax.grad(functools.partial(loss, PATHS['scan']), argnums=(0, 1, 2))(
      params, inputs, initial)
  _equal(PATHS[path](params, inputs, initial, jax.nn.gelu),
         PATHS['scan'](params, inputs, initial, jax.nn.gelu))
  if path == 'truncated_scan':  # a window cuts the gradient: compare with a window of T
    return
  grads = jax.jit(jax.grad(functools.partial(loss, PATHS[path]), argnums=(0, 1, 2)))(
      params, inputs, initial)
  _equal(grads, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('reverse', [False, True])
@pytest.mark.parametrize('time_major', [False, True])
def test_fused_gelu_with_lengths_matches_the_scan(problem, reverse, time_major):
  params, inputs, initial = problem
  weights = jax.random.normal(jax.random.key(8), (B, T, H))

  def loss(p, x, h, fast):
    if fast:
      x = jnp.swapaxes(x, 0, 1) if time_major else x
      states, final = fused.elman_layer(p, x, h, LENGTHS, reverse, jax.nn.gelu,
                                        time_major=time_major)
      states = jnp.swapaxes(states, 0, 1) if time_major else states
    else:
      states, final = recurrence.scan(cells.elman(jax.nn.gelu), p, x, h, LENGTHS, reverse)
    return jnp.sum(states * weights) + jnp.sum(jnp.sin(final)), (states, final)

  expected_grads, expected = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(
      params, inputs, initial, False)
  grads, values = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(params, inputs, initial, True)
  _equal(values, expected)
  _equal(grads, expected_grads, rtol=1e-5, atol=1e-5)


def test_fused_gelu_gradients_match_central_finite_differences(problem):
  """In float64: the vjp-of-phi backward of the fused layer equals (L(x + e v) - L(x - e v)) / 2e
  along random directions of every argument, and along single coordinates of W_hh and b."""
  params, inputs, initial = problem
  with jax.enable_x64(True):
    params, inputs, initial = jax.tree_util.tree_map(
        lambda a: np.asarray(a, np.float64), (params, inputs, initial))
    weights = np.asarray(jax.random.normal(jax.random.key(9), (B, T, H), jnp.float64))
    lengths = np.array([7, 2, 0, 6], np.int32)

    def loss(p, x, h):
      states, final = fused.elman_layer(p, x, h, lengths, activation=jax.nn.gelu)
      return jnp.sum(jnp.tanh(states) * weights) + jnp.sum(final ** 2)

    grads = jax.grad(loss, argnums=(0, 1, 2))(params, inputs, initial)
    assert grads[0]['W_hh'].dtype == np.float64
    rng = np.random.default_rng(0)
    arguments = (params, inputs, initial)
    epsilon = 1e-6
    for _ in range(3):
      direction = jax.tree_util.tree_map(lambda a: rng.normal(size=a.shape), arguments)
      shifted = lambda sign: jax.tree_util.tree_map(lambda a, v: a + sign * epsilon * v,
                                                    arguments, direction)
      numeric = (loss(*shifted(1)) - loss(*shifted(-1))) / (2 * epsilon)
      analytic = sum(float(np.sum(g * v)) for g, v in zip(jax.tree_util.tree_leaves(grads),
                                                          jax.tree_util.tree_leaves(direction)))
      assert analytic == pytest.approx(float(numeric), rel=1e-7, abs=1e-9)
    for name, index in (('W_hh', (1, 3)), ('b', (2,)), ('W_xh', (0, 4))):
      up, down = ({**params, name: params[name].copy()} for _ in range(2))
      up[name][index] += epsilon
      down[name][index] -= epsilon
      numeric = (loss(up, inputs, initial) - loss(down, inputs, initial)) / (2 * epsilon)
      assert float(grads[0][name][index]) == pytest.approx(float(numeric), rel=1e-7, abs=1e-9)


def test_callable_tanh_equals_the_named_fast_path(problem):
  """The callable path (pre-activations saved, phi' by jax.vjp) and the named path (phi'
  from the states) of the same phi: the same states and gradients."""
  params, inputs, initial = problem
  loss = lambda activation: lambda p, x, h: jnp.sum(jnp.cos(fused.elman_layer(
      p, x, h, LENGTHS, activation=activation)[0]))
  named = jax.grad(loss('tanh'), argnums=(0, 1, 2))(params, inputs, initial)
  called = jax.grad(loss(lambda a: jnp.tanh(a)), argnums=(0, 1, 2))(params, inputs, initial)
  _equal(called, named, rtol=1e-5, atol=1e-6)  # 1 - h^2 and the vjp of tanh round apart


def test_bad_activation_is_named(problem):
  params, inputs, initial = problem
  for run in (lambda: fused.elman_layer(params, inputs, initial, activation='gelu'),
              lambda: cells.elman(3.0)):
    with pytest.raises(ValueError, match=r"activation: expected one of \['linear', 'relu', "
                                         r"'tanh'\], got .* \(or a callable phi"):
      run()


@pytest.mark.parametrize('path', PATHS)
def test_cell_without_bias_equals_zero_bias(problem, path):
  params, inputs, initial = problem
  no_bias = {'W_xh': params['W_xh'], 'W_hh': params['W_hh']}
  zero = dict(no_bias, b=jnp.zeros(H))
  run = PATHS[path]
  _equal(run(no_bias, inputs, initial), run(zero, inputs, initial), rtol=0, atol=0)
  grads = jax.grad(lambda p: jnp.sum(jnp.sin(run(p, inputs, initial)[0])))
  without, with_zero = grads(no_bias), grads(zero)
  assert set(without) == {'W_xh', 'W_hh'}
  _equal([without['W_xh'], without['W_hh']], [with_zero['W_xh'], with_zero['W_hh']], rtol=0,
         atol=0)


def test_init_without_bias(key):
  for init, shape in ((cells.init_elman, (D, H)), (cells.init_gru, (D, 3 * H)),
                      (cells.init_lstm, (D, 4 * H))):
    params = init(key, D, H, biases=0)
    assert sorted(params) == sorted(['W_xh', 'W_hh'] if init is cells.init_elman else
                                    ['W_x', 'W_h'])
  assert sorted(cells.init_elman(key, D, H, 'uniform', biases=0)) == ['W_hh', 'W_xh']
  # the weights are those of the same key with a bias: only the bias entries are left out
  np.testing.assert_array_equal(cells.init_elman(key, D, H, 'uniform', biases=0)['W_hh'],
                                cells.init_elman(key, D, H, 'uniform')['W_hh'])
  with pytest.raises(ValueError, match='biases: expected 0, 1 or 2, got 3'):
    cells.init_elman(key, D, H, biases=3)


@pytest.mark.parametrize('cell', ['gru', 'lstm'])
def test_gated_cells_without_bias_equal_zero_biases(problem, cell):
  _, inputs, _ = problem
  params = {'gru': cells.init_gru, 'lstm': cells.init_lstm}[cell](jax.random.key(2), D, H, 0)
  blocks = params['W_h'].shape[1]
  zero = dict(params, b=jnp.zeros(blocks), b_hh=jnp.zeros(blocks))
  step = {'gru': cells.gru_cell, 'lstm': cells.lstm_cell}[cell]
  initial = combinators.zero_state(cell, 1, 1, B, H)
  initial = jax.tree_util.tree_map(lambda s: s[0, 0] + 0.1, initial)
  _equal(recurrence.scan(step, params, inputs, initial),  # the same sums, fused differently
         recurrence.scan(step, zero, inputs, initial), rtol=1e-6, atol=1e-7)


def test_torch_rnn_without_bias_round_trips_and_agrees(problem):
  """nn.RNN(bias=False) <-> an Elman cell without bias: same states, state_dict back equal."""
  _, inputs, initial = problem
  torch.manual_seed(0)
  module = torch.nn.RNN(D, H, batch_first=True, bias=False)
  params = convert.elman_from_torch(module.state_dict())
  assert sorted(params) == ['W_hh', 'W_xh']
  expected, final = module(torch.tensor(np.asarray(inputs)),
                           torch.tensor(np.asarray(initial))[None])
  states, ours = fused.elman_layer(params, inputs, initial)
  np.testing.assert_allclose(states, expected.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ours, final[0].detach().numpy(), rtol=1e-5, atol=1e-6)
  back = convert.stack_to_torch([[params]], 'elman')
  assert sorted(back) == ['weight_hh_l0', 'weight_ih_l0']
  module.load_state_dict({k: torch.from_numpy(v) for k, v in back.items()})  # strict: no biases


@pytest.mark.parametrize('path', PATHS)
def test_initial_state_of_shape_h_is_broadcast_over_the_batch(problem, path):
  params, inputs, _ = problem
  state = jnp.linspace(-0.5, 0.5, H)
  run = PATHS[path]
  batched = jnp.broadcast_to(state, (B, H))
  # (the stack's leaves are [1, 1, H] against [1, 1, B, H])
  _equal(run(params, inputs, state), run(params, inputs, batched), rtol=0, atol=0)
  # the gradient of an [H] state is the sum over the batch of the [B, H] state's
  loss = lambda h: jnp.sum(jnp.sin(run(params, inputs, h)[0]))
  np.testing.assert_allclose(jax.grad(loss)(state), jax.grad(loss)(batched).sum(axis=0),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('cell', ['gru', 'lstm'])
def test_gated_state_of_shape_h_is_broadcast(problem, cell):
  _, inputs, _ = problem
  params = {'gru': cells.init_gru, 'lstm': cells.init_lstm}[cell](jax.random.key(3), D, H)
  step = {'gru': cells.gru_cell, 'lstm': cells.lstm_cell}[cell]
  state = jnp.linspace(-0.5, 0.5, H)
  single = (state, 2 * state) if cell == 'lstm' else state
  batched = jax.tree_util.tree_map(lambda s: jnp.broadcast_to(s, (B, H)), single)
  _equal(recurrence.scan(step, params, inputs, single, LENGTHS),
         recurrence.scan(step, params, inputs, batched, LENGTHS), rtol=0, atol=0)


def test_a_cell_that_carries_one_value_per_sequence_keeps_its_state():
  """A carry [B] is a batch of scalars, not an [H] to broadcast: the cell decides."""
  def counter(params, carry, x):
    return carry + x[:, 0], carry + x[:, 0]
  outputs, final = recurrence.scan(counter, None, jnp.ones((3, 4, 1)), jnp.array([0., 10., 20.]))
  np.testing.assert_array_equal(final, [4., 14., 24.])
  np.testing.assert_array_equal(outputs[:, -1], [4., 14., 24.])


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('dtype', [jnp.int32, jnp.bool_])
def test_integer_inputs_are_refused_in_one_line(problem, path, dtype):
  params, inputs, initial = problem
  with pytest.raises(ValueError) as error:
    PATHS[path](params, inputs.astype(dtype), initial)
  name = jnp.dtype(dtype).name
  assert str(error.value) == (f'inputs: expected a floating dtype (token ids need an embedding '
                              f'or jax.nn.one_hot first), got {name}')


def test_integer_inputs_to_gated_stacks_and_cells_are_refused(problem):
  _, inputs, _ = problem
  ids = inputs.astype(jnp.int32)
  params = combinators.init_stack(jax.random.key(4), 'gru', D, H, layers=1, directions=2)
  with pytest.raises(ValueError, match='inputs: expected a floating dtype .* got int32'):
    combinators.stack(combinators.layer_for('gru'), params, ids,
                      combinators.zero_state('gru', 1, 2, B, H))
  with pytest.raises(ValueError, match='inputs: expected a floating dtype .* got int32'):
    cells.lstm_cell(cells.init_lstm(jax.random.key(5), D, H), (jnp.zeros((B, H)),) * 2,
                    ids[:, 0])


def test_a_state_that_a_cell_cannot_broadcast_is_named():
  def adder(params, carry, x):  # [H] + [B]: a broadcasting TypeError inside the cell
    return carry + x[:, 0], carry
  with pytest.raises(ValueError, match=r'initial_state: expected leading batch size 3 .* '
                                       r'got shape \(5,\)'):
    recurrence.scan(adder, None, jnp.ones((3, 4, 1)), jnp.zeros(5))
