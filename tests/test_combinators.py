"""Stacked and bidirectional recurrences against PyTorch's nn.RNN / GRU / LSTM on packed,
unsorted batches; batch permutation, dropout between layers and the stack converters."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from rnnjax import combinators
from rnnjax import convert

B, T, D, H = 4, 9, 3, 5
LENGTHS = np.array([5, 9, 1, 7], np.int32)  # unsorted: pack_padded_sequence sorts them itself
RTOL, ATOL = 1e-5, 1e-6
MODULES = {'elman': torch.nn.RNN, 'gru': torch.nn.GRU, 'lstm': torch.nn.LSTM}
SHAPES = [(2, True), (1, False)]  # (num_layers, bidirectional)


@functools.lru_cache(maxsize=None)
def _stack(cell):
  """``combinators.stack`` of ``cell``'s layer, jitted (one compile per shape)."""
  return jax.jit(functools.partial(combinators.stack, combinators.layer_for(cell)),
                 static_argnames='dropout_rate')


def _module(cell, layers, bidirectional, seed=0):
  torch.manual_seed(seed)
  return MODULES[cell](D, H, num_layers=layers, bidirectional=bidirectional, batch_first=True)


def _case(cell, layers, directions, seed=0):
  """Inputs ``[B, T, D]`` (zero at padding), initial state leaves ``[L, D, B, H]`` and
  the loss weights ``w [B, T, D H]``, ``v`` (and ``u``) ``[L, D, B, H]``."""
  rng = np.random.default_rng(seed)
  inputs = rng.normal(size=(B, T, D)).astype(np.float32)
  inputs[np.arange(T)[None, :] >= LENGTHS[:, None]] = 0.0
  state_shape = (layers, directions, B, H)
  h0, c0, v, u = (rng.normal(size=state_shape).astype(np.float32) for _ in range(4))
  w = rng.normal(size=(B, T, directions * H)).astype(np.float32)
  initial = (h0, c0) if cell == 'lstm' else h0
  finals_weights = (v, u) if cell == 'lstm' else v
  return inputs, initial, w, finals_weights


def _torch_run(module, cell, inputs, initial, w, finals_weights):
  """Outputs ``[B, T, D H]``, final states ``[L, D, B, H]``, and the gradients of
  ``sum(outputs * w) + sum(finals * v)`` (params in our layout, inputs, initial state)."""
  x = torch.tensor(inputs, requires_grad=True)
  states = [torch.tensor(s.reshape(-1, B, H), requires_grad=True)
            for s in jax.tree_util.tree_leaves(initial)]
  packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(LENGTHS), batch_first=True,
                                                   enforce_sorted=False)
  out, finals = module(packed, tuple(states) if cell == 'lstm' else states[0])
  out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
  finals = finals if cell == 'lstm' else (finals,)
  loss = (out * torch.tensor(w)).sum()
  for final, weights in zip(finals, jax.tree_util.tree_leaves(finals_weights)):
    loss = loss + (final * torch.tensor(weights.reshape(-1, B, H))).sum()
  loss.backward()
  grads = {name: p.grad.numpy() for name, p in module.named_parameters()}
  if cell == 'elman':  # the two biases are one in our layout: same gradient, count it once
    for name in [n for n in grads if n.startswith('bias_hh')]:
      np.testing.assert_allclose(grads[name], grads[name.replace('hh', 'ih')], rtol=RTOL,
                                 atol=ATOL)
      grads[name] = np.zeros_like(grads[name])
  layers, directions = jax.tree_util.tree_leaves(initial)[0].shape[:2]
  param_grads = convert.stack_from_torch(grads, cell, layers, directions == 2)
  final_values = [f.detach().numpy().reshape(layers, directions, B, H) for f in finals]
  return (out.detach().numpy(), final_values, param_grads, x.grad.numpy(),
          [s.grad.numpy().reshape(layers, directions, B, H) for s in states])


@functools.lru_cache(maxsize=None)
def _ours(cell):
  """Jitted ``(params, inputs, initial, lengths, w, v) -> (grads, (outputs, finals))``: the
  gradients of ``sum(outputs * w) + sum(finals * v)`` with respect to the first three."""
  def loss(params, inputs, initial, lengths, w, finals_weights):
    outputs, finals = _stack(cell)(params, inputs, initial, lengths)
    total = jnp.sum(outputs * w) + sum(
        jnp.sum(f * v) for f, v in zip(jax.tree_util.tree_leaves(finals),
                                        jax.tree_util.tree_leaves(finals_weights), strict=True))
    return total, (outputs, finals)

  return jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))


@pytest.mark.parametrize('layers, bidirectional', SHAPES)
@pytest.mark.parametrize('cell', combinators.CELLS)
def test_stack_matches_torch_on_packed_unsorted_batch(cell, layers, bidirectional):
  directions = 2 if bidirectional else 1
  module = _module(cell, layers, bidirectional)
  params = convert.stack_from_torch(module.state_dict(), cell, layers, bidirectional)
  case = _case(cell, layers, directions)
  out, finals, param_grads, input_grads, initial_grads = _torch_run(module, cell, *case)
  inputs, initial, w, v = case
  (our_param_grads, our_input_grads, our_initial_grads), (outputs, our_finals) = _ours(cell)(
      params, inputs, initial, LENGTHS, w, v)

  assert outputs.shape == (B, T, directions * H)
  assert np.all(np.asarray(outputs)[np.arange(T)[None] >= LENGTHS[:, None]] == 0)
  np.testing.assert_allclose(outputs, out, rtol=RTOL, atol=ATOL)
  for ours, theirs in zip(jax.tree_util.tree_leaves(our_finals), finals, strict=True):
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)
  pairs = list(zip(jax.tree_util.tree_leaves(our_param_grads),
                   jax.tree_util.tree_leaves(param_grads), strict=True))
  pairs += [(our_input_grads, input_grads)]
  pairs += list(zip(jax.tree_util.tree_leaves(our_initial_grads), initial_grads, strict=True))
  assert len(pairs) == layers * directions * (3 if cell == 'elman' else 4) + 1 + len(finals)
  for ours, theirs in pairs:
    ours = np.asarray(ours)
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)
    assert np.linalg.norm(ours - theirs) <= RTOL * np.linalg.norm(theirs)


@pytest.mark.parametrize('cell', combinators.CELLS)
def test_batch_permutation_permutes_outputs_finals_and_gradients(cell):
  params = convert.stack_from_torch(_module(cell, 2, True, seed=1).state_dict(), cell, 2, True)
  inputs, initial, w, v = _case(cell, 2, 2, seed=3)
  order = np.array([2, 0, 3, 1])
  permute = lambda s: s[:, :, order]  # state leaves [L, D, B, H]
  reference = _ours(cell)(params, inputs, initial, LENGTHS, w, v)
  permuted = _ours(cell)(params, inputs[order], jax.tree_util.tree_map(permute, initial),
                         LENGTHS[order], w[order], jax.tree_util.tree_map(permute, v))
  (param_grads, input_grads, initial_grads), (outputs, finals) = reference
  (param_grads_p, input_grads_p, initial_grads_p), (outputs_p, finals_p) = permuted
  exact = dict(rtol=0, atol=1e-6)
  np.testing.assert_allclose(outputs_p, np.asarray(outputs)[order], **exact)
  np.testing.assert_allclose(input_grads_p, np.asarray(input_grads)[order], **exact)
  for ours, theirs in zip(jax.tree_util.tree_leaves((finals_p, initial_grads_p)),
                          jax.tree_util.tree_leaves((finals, initial_grads)), strict=True):
    np.testing.assert_allclose(ours, permute(np.asarray(theirs)), **exact)
  for ours, theirs in zip(jax.tree_util.tree_leaves(param_grads_p),  # sums over the batch
                          jax.tree_util.tree_leaves(param_grads), strict=True):
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL)


def test_dropout_between_layers():
  cell = 'elman'
  params = convert.stack_from_torch(_module(cell, 2, True, seed=2).state_dict(), cell, 2, True)
  inputs, initial, _, _ = _case(cell, 2, 2, seed=4)
  run = lambda rate, key: _stack(cell)(params, inputs, initial, jnp.asarray(LENGTHS),
                                       dropout_rate=rate, key=key)
  plain_outputs, plain_finals = run(0.0, None)
  zero_outputs, zero_finals = run(0.0, jax.random.key(5))
  np.testing.assert_array_equal(zero_outputs, plain_outputs)
  np.testing.assert_array_equal(zero_finals, plain_finals)

  (outputs_a, finals_a), (outputs_b, finals_b) = run(0.5, jax.random.key(5)), run(
      0.5, jax.random.key(6))
  np.testing.assert_array_equal(finals_a[0], plain_finals[0])  # layer 0 reads the raw inputs
  np.testing.assert_array_equal(finals_b[0], plain_finals[0])
  real = np.arange(T)[None] < LENGTHS[:, None]
  for a, b in ((outputs_a, outputs_b), (outputs_a, plain_outputs)):
    assert np.mean(np.abs(np.asarray(a - b))[real] > 1e-3) > 0.5
  assert np.max(np.abs(np.asarray(finals_a[1] - finals_b[1]))) > 1e-2  # layer 1 reads dropout
  np.testing.assert_array_equal(np.asarray(outputs_a)[~real], 0.0)  # padding stays zero


@pytest.mark.parametrize('cell', combinators.CELLS)
def test_bad_initial_state_layout_is_named(cell):
  params = convert.stack_from_torch(_module(cell, 2, True).state_dict(), cell, 2, True)
  layer = combinators.layer_for(cell)
  inputs = jnp.zeros((B, T, D))
  torch_layout = jnp.zeros((4, B, H))  # PyTorch's [L * D, B, H], not reshaped
  wrong_hidden = jnp.zeros((2, 2, B, H + 1))
  for state in (torch_layout, wrong_hidden):
    initial = (state, state) if cell == 'lstm' else state
    with pytest.raises(ValueError, match=r'initial_state: expected leaves \[layers, directions, '
                                         r'B, H\] = \[2, 2, 4, 5\], got'):
      combinators.stack(layer, params, inputs, initial)


@pytest.mark.parametrize('layers, bidirectional', SHAPES)
@pytest.mark.parametrize('cell', combinators.CELLS)
def test_stack_state_dict_round_trip(cell, layers, bidirectional):
  module = _module(cell, layers, bidirectional, seed=7)
  state_dict = {k: v.numpy() for k, v in module.state_dict().items()}
  params = convert.stack_from_torch(state_dict, cell, layers, bidirectional)
  back = convert.stack_to_torch(params, cell)
  assert sorted(back) == sorted(state_dict)
  for name, value in back.items():
    assert value.dtype == np.float32 and value.shape == state_dict[name].shape
    if cell == 'elman' and name.startswith('bias'):  # one summed bias in our layout
      continue
    np.testing.assert_array_equal(value, state_dict[name], err_msg=name)
  if cell == 'elman':
    for name in [n for n in back if n.startswith('bias_ih')]:
      other = name.replace('ih', 'hh')
      np.testing.assert_array_equal(back[other], 0.0)
      np.testing.assert_allclose(back[name], state_dict[name] + state_dict[other], rtol=0,
                                 atol=0)
  # ... and params -> state_dict -> params is exact for every cell.
  again = convert.stack_from_torch(back, cell, layers, bidirectional)
  for ours, theirs in zip(jax.tree_util.tree_leaves(again), jax.tree_util.tree_leaves(params),
                          strict=True):
    np.testing.assert_array_equal(ours, theirs)
  # The loaded module computes what the stack computes.
  loaded = _module(cell, layers, bidirectional, seed=8)
  loaded.load_state_dict({k: torch.from_numpy(v) for k, v in back.items()})
  inputs = np.random.default_rng(9).normal(size=(B, T, D)).astype(np.float32)
  with torch.no_grad():
    out, _ = loaded(torch.from_numpy(inputs))
  directions = 2 if bidirectional else 1
  outputs, _ = _stack(cell)(params, jnp.asarray(inputs),
                            combinators.zero_state(cell, layers, directions, B, H))
  np.testing.assert_allclose(outputs, out.numpy(), rtol=RTOL, atol=ATOL)


def test_stack_converters_name_what_is_wrong():
  lstm = {k: v.numpy() for k, v in _module('lstm', 2, True).state_dict().items()}
  with pytest.raises(ValueError, match=r"^state_dict\['weight_hh_l0'\]: expected shape "
                                       r'\[G H, H\] with G = 3 for a gru stack, got \[20, 5\]$'):
    convert.stack_from_torch(lstm, 'gru', 2, True)
  with pytest.raises(ValueError, match=r"entries \['bias_hh_l0_reverse', .*'weight_ih_l1'.*\] "
                                       r'are not part of a lstm stack with num_layers=1, '
                                       r'bidirectional=False'):
    convert.stack_from_torch(lstm, 'lstm', 1, False)
  missing = {k: v for k, v in lstm.items() if k != 'weight_hh_l1_reverse'}
  with pytest.raises(ValueError, match=r"^state_dict: no entry 'weight_hh_l1_reverse' \(expected "
                                       r'shape \[G H, H\] = \[20, 5\] for a lstm stack\)'):
    convert.stack_from_torch(missing, 'lstm', 2, True)
  narrow = {**lstm, 'weight_ih_l1': np.zeros((20, 7), np.float32)}  # layer 1 reads 2 H = 10
  with pytest.raises(ValueError, match=r"^state_dict\['weight_ih_l1'\]: expected shape \[G H, d\] = "
                                       r'\[20, 10\] for a lstm stack, got \[20, 7\]$'):
    convert.stack_from_torch(narrow, 'lstm', 2, True)
  with pytest.raises(ValueError, match="cell: expected one of .*, got 'rnn'"):
    convert.stack_from_torch(lstm, 'rnn', 2, True)
  with pytest.raises(ValueError, match='num_layers: expected an int >= 1, got 0'):
    convert.stack_from_torch(lstm, 'lstm', 0, True)
  params = convert.stack_from_torch(lstm, 'lstm', 2, True)
  with pytest.raises(ValueError, match=r"^params\[0\]\[0\]\['W_h'\]: expected shape \[H, G H\] "
                                       r'with G = 3, got \[5, 20\]$'):
    convert.stack_to_torch(params, 'gru')
  with pytest.raises(ValueError, match=r"^params\[0\]\[0\]: no entry 'W_hh' \(expected shape "
                                       r"\[H, H\]\); it has \['W_h', 'W_x', 'b', 'b_hh'\]$"):
    convert.stack_to_torch(params, 'elman')
  with pytest.raises(ValueError, match=r'directions, got directions \[2, 1\]'):
    convert.stack_to_torch([params[0], params[1][:1]], 'lstm')


@pytest.mark.parametrize('cell', combinators.CELLS)
def test_bad_inputs_and_state_kind_are_named(cell):
  params = convert.stack_from_torch(_module(cell, 2, True).state_dict(), cell, 2, True)
  layer = combinators.layer_for(cell)
  state = combinators.zero_state(cell, 2, 2, B, H)
  with pytest.raises(ValueError, match=r'inputs: expected rank 3 \[B, T, d\], got shape \(4, 9\)'):
    combinators.stack(layer, params, jnp.zeros((B, T)), state)
  with pytest.raises(ValueError, match=rf'inputs: expected d = {D} features .* got shape '
                                       rf'\(4, 9, {D + 1}\)'):
    combinators.stack(layer, params, jnp.zeros((B, T, D + 1)), state)
  other_kind = state[0] if cell == 'lstm' else (state, state)
  with pytest.raises(ValueError, match=r'initial_state: expected an \(h, c\) pair for an LSTM'):
    combinators.stack(layer, params, jnp.zeros((B, T, D)), other_kind)
  with pytest.raises(ValueError, match=r"cell: expected one of \('elman', 'gru', 'lstm'\), "
                                       r"got 'LSTM'"):
    combinators.zero_state('LSTM', 2, 2, B, H)
