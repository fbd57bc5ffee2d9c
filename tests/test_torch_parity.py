"""Parity with PyTorch nn.RNN on the same weights: states and every gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rnnjax import cells
from rnnjax import convert
from rnnjax import recurrence

B, T, D, H = 3, 12, 4, 6
RTOL, ATOL = 1e-5, 1e-6


@pytest.mark.parametrize('activation', ['tanh', 'relu'])
def test_states_and_gradients_match_torch(activation):
  torch.manual_seed(0)
  module = torch.nn.RNN(D, H, nonlinearity=activation, batch_first=True)
  params = convert.elman_from_torch(module.state_dict())
  rng = np.random.default_rng(0)
  inputs = rng.normal(size=(B, T, D)).astype(np.float32)
  initial = rng.normal(size=(B, H)).astype(np.float32)
  weights = rng.normal(size=(B, T, H)).astype(np.float32)  # a loss that weighs every state

  x = torch.tensor(inputs, requires_grad=True)
  h0 = torch.tensor(initial[None], requires_grad=True)
  out, h_n = module(x, h0)
  (out * torch.tensor(weights)).sum().add(h_n.square().sum()).backward()

  def loss(params, inputs, initial):
    states, final = recurrence.scan(cells.elman(activation), params, inputs, initial)
    return jnp.sum(states * weights) + jnp.sum(final ** 2), (states, final)

  grads, (states, final) = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(
      params, jnp.asarray(inputs), jnp.asarray(initial))
  np.testing.assert_allclose(states, out.detach().numpy(), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(final, h_n[0].detach().numpy(), rtol=RTOL, atol=ATOL)
  param_grads, input_grads, initial_grads = grads
  np.testing.assert_allclose(param_grads['W_xh'], module.weight_ih_l0.grad.numpy().T,
                             rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(param_grads['W_hh'], module.weight_hh_l0.grad.numpy().T,
                             rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(param_grads['b'], module.bias_ih_l0.grad.numpy(), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(param_grads['b'], module.bias_hh_l0.grad.numpy(), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(input_grads, x.grad.numpy(), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(initial_grads, h0.grad[0].numpy(), rtol=RTOL, atol=ATOL)


def test_round_trip_through_torch_state_dict(key):
  params = cells.init_elman(key, D, H, 'orthogonal', radius=0.8)
  module = torch.nn.RNN(D, H, batch_first=True)
  module.load_state_dict({k: torch.from_numpy(v) for k, v in convert.elman_to_torch(params).items()})
  back = convert.elman_from_torch(module.state_dict())
  for name in params:
    np.testing.assert_allclose(back[name], params[name], rtol=0, atol=0)
  inputs = np.array(jax.random.normal(key, (B, T, D)))
  with torch.no_grad():
    out, _ = module(torch.from_numpy(inputs))
  states, _ = recurrence.scan(cells.elman(), params, jnp.asarray(inputs), jnp.zeros((B, H)))
  np.testing.assert_allclose(states, out.numpy(), rtol=RTOL, atol=ATOL)


def test_missing_entry_is_named():
  with pytest.raises(ValueError, match=r"^state_dict: no entry 'weight_hh_l1' \(expected shape "
                                       r"\[H, H\]\); it has \['bias_hh_l0', "):
    convert.elman_from_torch(torch.nn.RNN(D, H).state_dict(), layer=1)


def _one_line(call, message):
  with pytest.raises(ValueError) as error:
    call()
  assert str(error.value) == message


def test_entries_of_another_shape_are_named_with_both_shapes():
  """One rule for every converter: an entry of another shape, or a missing one, is one line
  naming the entry, the shape expected and the shape given (numpy broadcast a bias of shape
  [1] over every unit; a GRU's [3 H, H] gave numpy's broadcast error naming no entry)."""
  rnn = {k: v for k, v in torch.nn.RNN(D, H).state_dict().items()}
  _one_line(lambda: convert.elman_from_torch({**rnn, 'bias_ih_l0': torch.zeros(1)}),
            f"state_dict['bias_ih_l0']: expected shape [H] = [{H}], got [1]")
  gated = ' (a GRU or an LSTM layer, [G H, H], converts with gated_from_torch)'
  _one_line(lambda: convert.elman_from_torch(torch.nn.GRU(D, H).state_dict()),
            f"state_dict['weight_hh_l0']: expected shape [H, H], got [{3 * H}, {H}]{gated}")
  _one_line(lambda: convert.elman_from_torch({**rnn, 'weight_hh_l0': torch.zeros(H, H + 1)}),
            f"state_dict['weight_hh_l0']: expected shape [H, H], got [{H}, {H + 1}]{gated}")
  _one_line(lambda: convert.elman_from_torch({**rnn, 'weight_ih_l0': torch.zeros(H + 1, D)}),
            f"state_dict['weight_ih_l0']: expected shape [H, d] = [{H}, d], got [{H + 1}, {D}]")
  _one_line(lambda: convert.gated_from_torch(rnn),
            f"state_dict['weight_hh_l0']: expected shape [G H, H] with G in (3, 4), got "
            f"[{H}, {H}]")
  params = convert.elman_from_torch(rnn)
  _one_line(lambda: convert.elman_to_torch({'W_hh': params['W_hh']}),
            f"params: no entry 'W_xh' (expected shape [d, H] = [d, {H}]); it has ['W_hh']")
  _one_line(lambda: convert.elman_to_torch({**params, 'b': np.ones(1)}),
            f"params['b']: expected shape [H] = [{H}], got [1]")
  _one_line(lambda: convert.gated_to_torch(params),
            "params: no entry 'W_h' (expected shape [H, G H] with G in (3, 4)); it has "
            "['W_hh', 'W_xh', 'b']")
  _one_line(lambda: convert.elman_from_torch(rnn, layer=np.int64(-1)),
            'layer: expected an int >= 0, got np.int64(-1)')
  _one_line(lambda: convert.elman_from_torch(rnn, suffix='_reversed'),
            "suffix: expected one of ('', '_reverse'), got '_reversed'")
  assert convert.elman_from_torch(rnn, layer=np.int64(0))['W_hh'].shape == (H, H)


@pytest.mark.parametrize('kind', ['GRU', 'LSTM'])
def test_gated_cells_match_torch(kind):
  torch.manual_seed(1)
  module = getattr(torch.nn, kind)(D, H, batch_first=True)
  params = convert.gated_from_torch(module.state_dict())
  cell = cells.gru_cell if kind == 'GRU' else cells.lstm_cell
  rng = np.random.default_rng(1)
  inputs = rng.normal(size=(B, T, D)).astype(np.float32)
  h0 = rng.normal(size=(B, H)).astype(np.float32)
  c0 = rng.normal(size=(B, H)).astype(np.float32)
  x = torch.tensor(inputs, requires_grad=True)
  if kind == 'GRU':
    out, _ = module(x, torch.tensor(h0[None]))
    initial = jnp.asarray(h0)
  else:
    out, _ = module(x, (torch.tensor(h0[None]), torch.tensor(c0[None])))
    initial = (jnp.asarray(h0), jnp.asarray(c0))
  out.square().sum().backward()

  def loss(params, inputs):
    states, _ = recurrence.scan(cell, params, inputs, initial)
    return jnp.sum(states ** 2), states

  (param_grads, input_grads), states = jax.grad(loss, argnums=(0, 1), has_aux=True)(
      params, jnp.asarray(inputs))
  np.testing.assert_allclose(states, out.detach().numpy(), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(input_grads, x.grad.numpy(), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(param_grads['W_h'], module.weight_hh_l0.grad.numpy().T,
                             rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(param_grads['b_hh'], module.bias_hh_l0.grad.numpy(),
                             rtol=1e-4, atol=1e-5)


def test_elman_with_two_biases_round_trips():
  module = torch.nn.RNN(D, H, batch_first=True)
  params = cells.init_elman(jax.random.key(0), D, H, 'uniform', biases=2)
  state_dict = convert.elman_to_torch(params)
  np.testing.assert_array_equal(state_dict['bias_hh_l0'], params['b_hh'])
  module.load_state_dict({k: torch.from_numpy(v) for k, v in state_dict.items()})
  inputs = np.array(jax.random.normal(jax.random.key(1), (B, T, D)))
  with torch.no_grad():
    out, _ = module(torch.from_numpy(inputs))
  states, _ = recurrence.scan(cells.elman(), params, jnp.asarray(inputs), jnp.zeros((B, H)))
  np.testing.assert_allclose(states, out.numpy(), rtol=RTOL, atol=ATOL)


TORCH_MODULES = {'elman': torch.nn.RNN, 'gru': torch.nn.GRU, 'lstm': torch.nn.LSTM}


def test_bfloat16_rnn_converts_to_its_float32_copy():
  module = torch.nn.RNN(3, 4).to(torch.bfloat16)  # was: TypeError, unsupported ScalarType
  params = convert.stack_from_torch(module.state_dict(), 'elman', 1, False)
  copy = {k: v.float().numpy() for k, v in module.state_dict().items()}
  for name, value in (('W_xh', copy['weight_ih_l0'].T), ('W_hh', copy['weight_hh_l0'].T),
                      ('b', copy['bias_ih_l0'] + copy['bias_hh_l0'])):
    assert params[0][0][name].dtype == np.float32
    np.testing.assert_array_equal(params[0][0][name], value)


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize('cell', TORCH_MODULES)
def test_every_converter_takes_any_float_dtype(cell, dtype):
  """From torch: float32 params equal to torch's own float32 copy of the weights (exact for
  bfloat16 and float16); to torch: float32 arrays holding bfloat16 params exactly."""
  torch.manual_seed(0)
  module = TORCH_MODULES[cell](3, 4, num_layers=2, bidirectional=True).to(dtype)
  state_dict = module.state_dict()
  copy = {k: v.float().numpy() for k, v in state_dict.items()}
  stack = convert.stack_from_torch(state_dict, cell, 2, True)
  layer = (convert.elman_from_torch if cell == 'elman' else convert.gated_from_torch)(
      state_dict, 1, '_reverse')
  for name in layer:
    assert layer[name].dtype == stack[1][1][name].dtype == np.float32
    np.testing.assert_array_equal(layer[name], stack[1][1][name])
  input_weight, recurrent_weight = ('W_xh', 'W_hh') if cell == 'elman' else ('W_x', 'W_h')
  np.testing.assert_array_equal(stack[1][1][input_weight], copy['weight_ih_l1_reverse'].T)
  np.testing.assert_array_equal(stack[1][1][recurrent_weight], copy['weight_hh_l1_reverse'].T)
  if cell != 'elman':
    np.testing.assert_array_equal(stack[1][1]['b_hh'], copy['bias_hh_l1_reverse'])
  low = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.bfloat16), stack)
  back = convert.stack_to_torch(low, cell)
  expected = convert.stack_to_torch(jax.tree_util.tree_map(
      lambda a: np.asarray(a, np.float32), low), cell)
  for name, value in expected.items():
    assert back[name].dtype == np.float32
    np.testing.assert_array_equal(back[name], value)
