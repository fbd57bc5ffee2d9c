"""Kinds of fault reported against other RNN libraries, each swept over the paths it applies to.

1. Non-finite logits never become a plausible token (``sampling.sample``, ``seq2seq.decode``).
2. Padded steps reach neither outputs nor gradients (every path that takes lengths).
3. Inputs are checked alike everywhere, before any work: lengths as a list, T = 0 and
   B = 0, the initial state's shape and kind, one dtype rule (the params' dtype),
   converters of any float dtype (tests/test_torch_parity.py), ids in [0, V).
4. ``truncated_scan``'s traced program does not grow with T / tau.
5. ``train_bpe`` trains on every line, however long.

C1 is the Elman cell with H = d = 1: h_t = tanh(0.5 x_t + 1.0 h_{t-1} - 0.5), h_0 = 0.

The sweeps that only need to know whether a path accepts its arguments, and the shapes
and dtypes it returns, trace it with ``jax.eval_shape`` (no compilation); the values are
checked on the paths that differ in how they compute (scan, fused, stack, seq2seq), each
compiled once, so that the file stays fast.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import combinators
from rnnjax import fused
from rnnjax import models
from rnnjax import recurrence
from rnnjax import sampling
from rnnjax import seq2seq
from rnnjax.data import batching
from rnnjax.data import subwords
from rnnjax.data import text

B, T, D, H = 3, 5, 2, 4
LENGTHS = np.array([5, 2, 0], np.int32)
C1 = {'W_xh': jnp.full((1, 1), 0.5), 'W_hh': jnp.ones((1, 1)), 'b': jnp.full((1,), -0.5)}
INIT = {'elman': cells.init_elman, 'gru': cells.init_gru, 'lstm': cells.init_lstm}
BF16, F32 = jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32)


def _swapped(run):
  """A time-major layer as a batch-major one."""
  def batch_major(params, x, h, lengths=None):
    states, final = run(params, jnp.swapaxes(x, 0, 1), h, lengths)
    return jnp.swapaxes(states, 0, 1), final
  return batch_major


def _no_lengths(run):
  def without(params, x, h, lengths=None):
    assert lengths is None, 'this path takes no lengths'
    return run(params, x, h)
  return without


# name -> (cell, layout, run(params, inputs [B, T, D], initial_state, lengths=None)).
PATHS = {
    'scan/elman': ('elman', 'cell', functools.partial(recurrence.scan, cells.elman())),
    'scan/gru': ('gru', 'cell', functools.partial(recurrence.scan, cells.gru_cell)),
    'scan/lstm': ('lstm', 'cell', functools.partial(recurrence.scan, cells.lstm_cell)),
    'scan/lstm/reverse': ('lstm', 'cell', functools.partial(recurrence.scan, cells.lstm_cell,
                                                            reverse=True)),
    'fused': ('elman', 'cell', fused.elman_layer),
    'fused/time_major': ('elman', 'cell', _swapped(functools.partial(fused.elman_layer,
                                                                     time_major=True))),
    'models.Elman': ('elman', 'cell', lambda p, x, h, lengths=None: models.Elman(
        p['W_hh'].shape[0]).apply({'params': {'cell': p}}, x, h, lengths)),
    'stack/elman': ('elman', 'stack', functools.partial(combinators.stack,
                                                        combinators.layer_for('elman'))),
    'stack/gru': ('gru', 'stack', functools.partial(combinators.stack,
                                                    combinators.layer_for('gru'))),
    'stack/lstm': ('lstm', 'stack', functools.partial(combinators.stack,
                                                      combinators.layer_for('lstm'))),
    'bidirectional/gru': ('gru', 'layer', functools.partial(combinators.bidirectional,
                                                            combinators.layer_for('gru'))),
    'truncated/elman': ('elman', 'cell', _no_lengths(functools.partial(
        recurrence.truncated_scan, cells.elman(), truncation=2))),
    'truncated/lstm': ('lstm', 'cell', _no_lengths(functools.partial(
        recurrence.truncated_scan, cells.lstm_cell, truncation=2))),
    'checkpointed': ('elman', 'cell', _no_lengths(functools.partial(
        fused.checkpointed_elman_layer, segment_length=1))),
}
# The sweeps of the checks leave out the reversed paths: the flag changes no check.
CHECKED_PATHS = [name for name in PATHS if not name.endswith('/reverse')]
LENGTH_PATHS = [name for name in CHECKED_PATHS
                if not name.startswith(('truncated', 'checkpointed'))]


def _filled(structure, dtype, seed):
  """Arrays of ``structure``'s shapes in ``dtype``, N(0, 0.5^2) rounded to bfloat16 (so
  that casts between float32 and bfloat16 are exact), made without compiling anything."""
  rng = np.random.default_rng(seed)
  fill = lambda s: jnp.asarray(np.asarray(0.5 * rng.normal(size=s.shape), BF16).astype(dtype))
  return jax.tree_util.tree_map(fill, structure)


@functools.cache
def _setup_cached(name, batch, hidden, dtype):
  cell, layout, _ = PATHS[name]
  if layout == 'cell':
    make, shape = lambda: INIT[cell](jax.random.key(0), D, hidden), (batch, hidden)
  else:
    layers = 2 if layout == 'stack' else 1
    make = lambda: combinators.init_stack(jax.random.key(0), cell, D, hidden, layers, 2)
    make = make if layout == 'stack' else (lambda m=make: m()[0])
    shape = (layers, 2, batch, hidden) if layout == 'stack' else (2, batch, hidden)
  params = _filled(jax.eval_shape(make), dtype, seed=0)
  h = _filled(jax.ShapeDtypeStruct(shape, dtype), dtype, seed=1)
  return params, ((h, -h) if cell == 'lstm' else h)


def _setup(name, batch=B, hidden=H, dtype=F32):
  """``(params, initial_state, run)`` of a path: a cell, a bidirectional layer or a stack
  of 2 layers x 2 directions (a fresh copy of the params' dicts and lists)."""
  params, initial = _setup_cached(name, batch, hidden, jnp.dtype(dtype))
  copy = jax.tree_util.tree_map(lambda a: a, params)
  return copy, initial, PATHS[name][2]


@functools.cache
def _inputs(batch=B, steps=T, dtype=F32):
  return _filled(jax.ShapeDtypeStruct((batch, steps, D), dtype), dtype, seed=2)


def _weighted_sum(tree):
  """sum(leaf * w) with fixed weights w of each leaf's shape: every entry counts."""
  return sum(jnp.sum(leaf * jnp.cos(jnp.arange(leaf.size)).reshape(leaf.shape))
             for leaf in jax.tree_util.tree_leaves(tree))


def _equal(ours, theirs):
  """Equal pytrees: structure, shapes, dtypes and every value, bit for bit."""
  assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(theirs)
  for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def _width(name):
  return H if PATHS[name][1] == 'cell' else 2 * H


# 1. Non-finite logits never become a token. -------------------------------------------------

V = 7


@functools.cache
def _language_model():
  model = models.LanguageModel(vocab_size=V, hidden_size=6, embedding_size=3)
  structure = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 2), jnp.int32),
                             model.initial_state(1))['params']
  return model, _filled(structure, F32, seed=3)


@functools.cache
def _seq2seq_params(cell='elman'):
  return _filled(jax.eval_shape(lambda: seq2seq.init(jax.random.key(0), cell, 13, 4, 8)), F32,
                 seed=4)


def _corrupt(params, how):
  """``params`` (a LanguageModel's or seq2seq's) with the output bias NaN or +inf at one id,
  or finite params whose logits overflow: the state is tanh(5) in every unit whatever the
  input (W_xh = W_hh = 0, b = 5) and every output weight is 3e38."""
  params = jax.tree_util.tree_map(lambda a: a, params)  # a copy of the dicts
  if 'head' in params:  # a LanguageModel's
    head, bias, kernel, cell = params['head'], 'bias', 'kernel', params['recurrence']['cell']
  else:
    head, bias, kernel, cell = params, 'b_out', 'W_out', params['decoder']
  if how == 'nan':
    head[bias] = jnp.full_like(head[bias], jnp.nan)
  elif how == 'inf':
    head[bias] = head[bias].at[3].set(jnp.inf)
  else:
    cell.update(W_xh=0 * cell['W_xh'], W_hh=0 * cell['W_hh'], b=jnp.full_like(cell['b'], 5.0))
    head[kernel] = jnp.full_like(head[kernel], 3e38)
  return params


SOURCES = jnp.array([[3, 4, 0], [5, 6, 7]], jnp.int32)
# Jitted once each: the corruptions only change the params' values.
_jit_sample = jax.jit(sampling.sample, static_argnums=(0, 3, 5, 6))
_jit_decode = jax.jit(seq2seq.decode, static_argnums=(0, 3, 4))


def test_nan_head_bias_sample_is_an_error_not_token_zero():
  model, params = _language_model()
  params = _corrupt(params, 'nan')
  with pytest.raises(ValueError, match=r"params: the logits at generated step 0 are not finite "
                                       r".*non-finite params: \[\"\['head'\]\['bias'\]\"\]"):
    sampling.sample(model, params, jnp.array([1, 2]), 4, jax.random.key(0))
  traced = _jit_sample(model, params, jnp.array([1, 2]), 4, jax.random.key(0), 0.0, None)
  np.testing.assert_array_equal(traced, [sampling.INVALID] * 4)


def test_nan_output_bias_decode_is_an_error_not_pad():
  params = _corrupt(_seq2seq_params(), 'nan')
  with pytest.raises(ValueError, match=r"params: the logits at row 0, step 0 are not finite .*"
                                       r"\[\"\['b_out'\]\"\]"):
    seq2seq.decode('elman', params, SOURCES, 4)
  tokens = _jit_decode('elman', params, SOURCES, 4, 0.0, None)
  np.testing.assert_array_equal(tokens, np.full((2, 4), seq2seq.INVALID))  # never PAD (0)
  with pytest.raises(ValueError, match=r'decoded: rows \[0, 1\] hold INVALID \(-1\) tokens'):
    seq2seq.accuracies(tokens, jnp.array([[4, 3, 2], [7, 6, 5]], jnp.int32))


SAMPLERS = {'sample/greedy': (0.0, None), 'sample/top_k': (1.0, 3),
            'decode/greedy': (0.0, None), 'decode/temperature': (1.0, None)}


@pytest.mark.parametrize('path', SAMPLERS)
def test_non_finite_logits_never_give_a_token(path):
  """NaN or inf in the params, or finite params whose logits overflow: never a token.
  ``sample`` (called outside jit) raises naming the cause; ``decode`` (called jitted) gives
  the sentinel at every step (the other halves: the two tests above)."""
  temperature, top_k = SAMPLERS[path]
  key = jax.random.key(1)
  for how, cause in (('nan', 'non-finite params'), ('inf', 'non-finite params'),
                     ('overflow', 'the params are finite, so the activations overflowed')):
    if path.startswith('sample'):
      model, params = _language_model()
      params = _corrupt(params, how)
      with pytest.raises(ValueError, match=f'params: the logits at .* not finite .*{cause}'):
        sampling.sample(model, params, jnp.array([1, 2]), 4, key, temperature, top_k)
    else:
      params = _corrupt(_seq2seq_params(), how)
      tokens = _jit_decode('elman', params, SOURCES, 4, temperature, key)
      np.testing.assert_array_equal(tokens, np.full((2, 4), seq2seq.INVALID), err_msg=how)


# 2. Padded steps reach neither outputs nor gradients. ---------------------------------------

C1_GRADIENT = {'W_xh': 2.359343, 'b': 1.572895, 'W_hh': 0.0}


def _c1_final_float64(params, inputs=(1.0, 2.0)):
  """C1's state after the real steps, in float64."""
  h = 0.0
  for x in inputs:
    h = np.tanh(params['W_xh'] * x + params['W_hh'] * h + params['b'])
  return h


@pytest.mark.parametrize('path', ['scan/elman', 'fused'])
def test_c1_nan_in_padding_gives_the_true_gradient(path):
  x = jnp.array([[[1.0], [2.0], [jnp.nan]]])
  run = PATHS[path][2]
  loss = lambda p: jnp.sum(run(p, x, jnp.zeros((1, 1)), jnp.array([2]))[1])
  value, grads = jax.jit(jax.value_and_grad(loss))(C1)
  assert float(value) == pytest.approx(np.tanh(0.5), rel=1e-6)
  point = {name: float(C1[name].ravel()[0]) for name in C1}
  for name, expected in C1_GRADIENT.items():
    assert float(grads[name].ravel()[0]) == pytest.approx(expected, rel=1e-6, abs=1e-7), name
    step = 1e-6  # float64 central differences over the two real steps
    up, down = dict(point, **{name: point[name] + step}), dict(point, **{name: point[name] - step})
    finite_difference = (_c1_final_float64(up) - _c1_final_float64(down)) / (2 * step)
    assert finite_difference == pytest.approx(expected, abs=2e-6), name


@pytest.mark.parametrize('name', ['scan/lstm/reverse', 'fused/time_major', 'stack/elman'])
def test_nan_and_inf_in_padding_reach_no_output_or_gradient(name):
  params, initial, run = _setup(name)
  real = np.arange(T)[None, :] < LENGTHS[:, None]  # [B, T]
  x = np.asarray(_inputs())
  clean = np.where(real[..., None], x, 0.0).astype(np.float32)
  poisoned = np.where(real[..., None], x, np.array([np.nan, np.inf], np.float32))
  loss = lambda p, x, h: _weighted_sum(run(p, x, h, LENGTHS))
  value_and_grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
  expected = value_and_grads(params, clean, initial)
  got = value_and_grads(params, poisoned, initial)
  for leaf in jax.tree_util.tree_leaves(got):
    assert np.all(np.isfinite(leaf))
  _equal(got, expected)  # bit for bit: padding is never read
  input_grads = np.asarray(got[1][1])
  np.testing.assert_array_equal(input_grads[~real], 0.0)
  assert np.all(np.abs(input_grads[real]).max(axis=-1) > 0)  # the real steps do count


def test_seq2seq_pad_embedding_reaches_no_loss_or_gradient():
  params = _seq2seq_params('elman')
  poisoned = dict(params, embedding=params['embedding'].at[seq2seq.PAD].set(jnp.nan))
  sources = jnp.array([[5, 6, 7, 0], [8, 0, 0, 0], [3, 4, 9, 10]], jnp.int32)
  targets = jnp.array([[7, 6, 5, 2, 0], [8, 2, 0, 0, 0], [10, 9, 4, 3, 2]], jnp.int32)
  value_and_grad = jax.jit(jax.value_and_grad(lambda p: seq2seq.loss('elman', p, sources,
                                                                     targets)))
  expected, got = value_and_grad(params), value_and_grad(poisoned)
  assert np.isfinite(float(got[0]))
  _equal(got, expected)
  np.testing.assert_array_equal(got[1]['embedding'][seq2seq.PAD], 0.0)


# 3. Inputs checked alike everywhere. --------------------------------------------------------

def _structure(tree):
  return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


def test_fused_layer_takes_a_list_of_lengths_and_an_empty_time_axis():
  x = jnp.array([[[1.0], [2.0], [3.0]], [[1.0], [1.0], [1.0]]])
  layer = jax.jit(fused.elman_layer)
  states, final = jax.jit(lambda x, h: fused.elman_layer(C1, x, h, [3, 0]))(x, jnp.zeros((2, 1)))
  _equal((states, final), layer(C1, x, jnp.zeros((2, 1)), np.array([3, 0])))
  np.testing.assert_array_equal(states[1], 0.0)
  states, final = layer(C1, jnp.zeros((2, 0, 1)), jnp.full((2, 1), 0.25))
  assert states.shape == (2, 0, 1)
  np.testing.assert_array_equal(final, 0.25)  # h_0
  jacobian = jax.jit(jax.jacobian(lambda h: fused.elman_layer(C1, jnp.zeros((2, 0, 1)), h)[1]))(
      jnp.ones((2, 1)))
  np.testing.assert_array_equal(jacobian.reshape(2, 2), np.eye(2))


@pytest.mark.parametrize('name', LENGTH_PATHS)
def test_lengths_as_a_list(name):
  params, initial, run = _setup(name)
  as_list = jax.eval_shape(lambda p, x, h: run(p, x, h, LENGTHS.tolist()), params, _inputs(),
                           initial)
  assert as_list == jax.eval_shape(run, params, _inputs(), initial, LENGTHS)


@pytest.mark.parametrize('name', CHECKED_PATHS)
def test_no_steps_return_the_initial_state_with_identity_gradient(name):
  params, initial, run = _setup(name)
  empty = jnp.zeros((B, 0, D))
  outputs, final = jax.eval_shape(run, params, empty, initial)
  assert outputs.shape == (B, 0, _width(name))
  assert final == _structure(initial)
  if name in ('scan/lstm', 'truncated/lstm', 'checkpointed', 'stack/gru'):
    cotangent = _filled(_structure(initial), F32, seed=5)

    @jax.jit
    def final_and_pullback(initial):
      final, pullback = jax.vjp(lambda h: run(params, empty, h)[1], initial)
      return final, pullback(cotangent)[0]

    final, back = final_and_pullback(initial)
    _equal(final, initial)
    _equal(back, cotangent)  # d final / d h_0 = identity


@pytest.mark.parametrize('name', CHECKED_PATHS)
def test_empty_batch(name):
  params, initial, run = _setup(name, batch=0)
  lengths = np.zeros((0,), np.int32) if name in LENGTH_PATHS else None
  outputs, final = jax.eval_shape(run, params, _inputs(batch=0), initial, lengths)
  assert outputs.shape == (0, T, _width(name))
  assert final == _structure(initial)
  if name in ('fused', 'checkpointed', 'scan/lstm'):  # the hand-written and the scan's backward
    grads = jax.eval_shape(jax.grad(lambda p: _weighted_sum(
        run(p, _inputs(batch=0), initial, lengths))), params)
    assert grads == _structure(params)


def test_gru_stack_state_of_another_hidden_size_is_named():
  params, _, run = _setup('stack/gru', hidden=8)
  with pytest.raises(ValueError, match=r'initial_state: expected leaves \[layers, directions, '
                                       r'B, H\] = \[2, 2, 3, 8\], got \(2, 2, 3, 7\)'):
    run(params, _inputs(), jnp.zeros((2, 2, B, 7)))
  with pytest.raises(ValueError, match=r'initial_state: expected last axis H = 8, got shape '
                                       r'\(3, 7\)'):
    recurrence.scan(cells.gru_cell, params[0][0], _inputs(), jnp.zeros((B, 7)))


@pytest.mark.parametrize('name', CHECKED_PATHS)
def test_state_of_another_hidden_size_is_named(name):
  params, _, run = _setup(name, hidden=8)
  _, wrong, _ = _setup(name, hidden=7)
  with pytest.raises(ValueError, match=r'initial_state: expected .*8.* got .*7\)'):
    jax.eval_shape(run, params, _inputs(), wrong)


@pytest.mark.parametrize('name', CHECKED_PATHS)
def test_state_of_another_kind_is_named(name):
  params, initial, run = _setup(name)
  wrong = initial[0] if PATHS[name][0] == 'lstm' else (initial, initial)
  with pytest.raises(ValueError, match=r'initial_state: expected (an \(h, c\) pair|one)'):
    jax.eval_shape(run, params, _inputs(), wrong)


MIXES = [  # (params, inputs, initial state)
    (F32, BF16, BF16), (F32, F32, BF16), (BF16, F32, F32), (BF16, BF16, F32)]


@pytest.mark.parametrize('name', CHECKED_PATHS)
def test_one_dtype_rule_the_params_dtype(name):
  """Every mix computes in the params' dtype: outputs and finals come back in it (and the
  gradients with respect to inputs and state in their own dtypes)."""
  lengths = LENGTHS if name in LENGTH_PATHS else None
  for params_dtype, inputs_dtype, state_dtype in MIXES:
    params, initial, run = _setup(name, dtype=params_dtype)
    state = jax.tree_util.tree_map(lambda s, d=state_dtype: s.astype(d), initial)
    x = _inputs(dtype=inputs_dtype)
    for leaf in jax.tree_util.tree_leaves(jax.eval_shape(run, params, x, state, lengths)):
      assert leaf.dtype == params_dtype, (params_dtype, inputs_dtype, state_dtype)
  if name in ('fused', 'checkpointed', 'scan/lstm', 'truncated/elman'):  # the last mix
    grads = jax.eval_shape(jax.grad(lambda x, h: _weighted_sum(run(params, x, h, lengths)).astype(
        F32), argnums=(0, 1)), x, state)
    assert grads == _structure((x, state))


@pytest.mark.parametrize('name, mix', [('fused', (BF16, F32, F32)),
                                       ('scan/lstm', (F32, BF16, BF16))])
def test_dtype_mixes_equal_a_cast_by_hand(name, mix):
  """... bit for bit the result of inputs and state cast to the params' dtype by hand."""
  params_dtype, inputs_dtype, state_dtype = mix
  run = jax.jit(PATHS[name][2])
  params, initial, _ = _setup(name, dtype=params_dtype)
  state = jax.tree_util.tree_map(lambda s: s.astype(state_dtype), initial)
  _equal(run(params, _inputs(dtype=inputs_dtype), state, LENGTHS),
         run(params, _inputs(dtype=params_dtype), initial, LENGTHS))


@pytest.mark.parametrize('name', CHECKED_PATHS)
def test_params_of_two_dtypes_are_named(name):
  params, initial, run = _setup(name)
  first = params[0][0] if PATHS[name][1] == 'stack' else params[0] if PATHS[name][1] == 'layer' \
      else params
  first['b'] = first['b'].astype(BF16)
  with pytest.raises(ValueError, match=r"params: expected one floating dtype for all params .*"
                                       r"got \['bfloat16', 'float32'\]"):
    jax.eval_shape(run, params, _inputs(), initial)


ID_CASES = {  # name -> (call, message)
    'pad_sequences/pad_id -1': (lambda: batching.pad_sequences([[5, 6, 7], [5]], pad_id=-1),
                                r'pad_id: expected an int id in \[0, 2\*\*31\) .* got -1'),
    'pad_sequences/pad_id V': (lambda: batching.pad_sequences([[5, 6], [5]], pad_id=8,
                                                              vocab_size=8),
                               r'pad_id: expected an int id in \[0, V\) = \[0, 8\), got 8'),
    'pad_sequences/negative id': (lambda: batching.pad_sequences([[5, 6], [-2, 3]]),
                                  r'sequences\[1\]: expected ids in \[0, 2\*\*31\) .* got min -2'),
    'pad_sequences/id V': (lambda: batching.pad_sequences([[5, 8]], vocab_size=8),
                           r'sequences\[0\]: expected ids in \[0, V\) = \[0, 8\), got min 5 '
                           r'and max 8'),
    'pad_sequences/int64 beyond int32': (lambda: batching.pad_sequences([np.array([2 ** 31])]),
                                         r'sequences\[0\]: expected ids in \[0, 2\*\*31\)'),
    'stream_windows/negative id': (lambda: text.stream_windows(np.arange(-1, 22), 2, 5),
                                   r'ids: expected ids in \[0, 2\*\*31\) .* got min -1'),
    'stream_windows/id V': (lambda: text.stream_windows(np.arange(23), 2, 5, vocab_size=20),
                            r'ids: expected ids in \[0, V\) = \[0, 20\), got min 0 and max 22'),
    'text.decode/-1': (lambda: text.decode(np.array([0, -1]), 'ab'),
                       r'ids: expected ids in \[0, V\) = \[0, 2\), got min -1'),
    'LanguageModel/-1': (lambda: _language_model()[0].apply(
        {'params': _language_model()[1]}, jnp.array([[1, -1]]), jnp.zeros((1, 6))),
                         r'ids: expected ids in \[0, V\) = \[0, 7\), got min -1'),
    'LanguageModel/V': (lambda: _language_model()[0].apply(
        {'params': _language_model()[1]}, jnp.array([[V]]), jnp.zeros((1, 6))),
                        r'ids: expected ids in \[0, V\) = \[0, 7\), got min 7'),
    'sample/prompt -1': (lambda: sampling.sample(*_language_model(), jnp.array([-1]), 2,
                                                 jax.random.key(0)),
                         r'prompt: expected ids in \[0, V\) = \[0, 7\), got min -1'),
    'seq2seq.encode/-1': (lambda: seq2seq.encode('gru', _seq2seq_params('gru'),
                                                 jnp.array([[3, -1]])),
                          r'sources: expected ids in \[0, V\) = \[0, 13\), got min -1'),
    'seq2seq.decode/V': (lambda: seq2seq.decode('gru', _seq2seq_params('gru'), jnp.array([[13]]),
                                                2),
                         r'sources: expected ids in \[0, V\) = \[0, 13\), got min 13'),
    'seq2seq.loss/targets -1': (lambda: seq2seq.loss('gru', _seq2seq_params('gru'),
                                                     jnp.array([[3]]), jnp.array([[-1, 2]])),
                                r'targets: expected ids in \[0, V\) = \[0, 13\), got min -1'),
    'seq2seq.encode/real id after PAD': (
        lambda: seq2seq.encode('gru', _seq2seq_params('gru'), jnp.array([[3, 0, 4]])),
        r'sources: expected right-padded rows .* row 0 is \[3, 0, 4\]'),
}


@pytest.mark.parametrize('case', ID_CASES)
def test_ids_outside_the_vocabulary_are_named(case):
  call, message = ID_CASES[case]
  with pytest.raises(ValueError, match=message):
    call()


def test_ids_inside_the_vocabulary_pass():
  ids, lengths = batching.pad_sequences([[5, 6, 7], [5]], pad_id=0, vocab_size=8)
  np.testing.assert_array_equal(ids, [[5, 6, 7], [5, 0, 0]])
  np.testing.assert_array_equal(lengths, [3, 1])
  inputs, _ = text.stream_windows(np.arange(23), 2, 5, vocab_size=23)
  assert inputs.max() == 20
  assert text.decode(np.array([1, 0]), 'ab') == 'ba'


# 4. No Python loop over time in truncated BPTT. ---------------------------------------------

def test_truncated_scan_program_does_not_grow_with_the_number_of_windows():
  params, initial, _ = _setup('scan/elman')
  cell = cells.elman()

  def equations(steps, truncation):
    x = jnp.zeros((B, steps, D))
    loss = lambda p, x: jnp.sum(recurrence.truncated_scan(cell, p, x, initial, truncation)[0])
    return (len(jax.make_jaxpr(loss)(params, x).jaxpr.eqns),
            len(jax.make_jaxpr(jax.grad(loss))(params, x).jaxpr.eqns))

  assert equations(16, 1) == equations(256, 1)  # were 82 and 1282 (one scan per window)
  assert equations(17, 4) == equations(257, 4)  # ... and with a shorter last window


def test_truncated_gradient_is_the_sum_of_each_window_alone():
  """Windows of 3, 3 and 1 steps: the gradient of the whole loss is the sum of the
  gradients of scans over each window alone from the state the forward pass reached
  (stopped), and exactly zero with respect to the initial state."""
  params, initial, _ = _setup('scan/elman')
  cell, x = cells.elman(), _inputs(steps=7)
  loss = lambda p, x, h: _weighted_sum(recurrence.truncated_scan(cell, p, x, h, 3)[0])
  states, truncated = jax.jit(lambda p, x, h: (
      recurrence.truncated_scan(cell, p, x, h, 3)[0],
      jax.grad(loss, argnums=(0, 1, 2))(p, x, h)))(params, x, initial)
  weights = jnp.cos(jnp.arange(B * 7 * H)).reshape(B, 7, H)  # _weighted_sum's
  window_grad = jax.jit(jax.grad(lambda p, x, h, w: jnp.sum(recurrence.scan(cell, p, x, h)[0] * w),
                                 argnums=(0, 1)))
  params_sum = jax.tree_util.tree_map(jnp.zeros_like, params)
  input_grads = []
  for start, end in ((0, 3), (3, 6), (6, 7)):
    before = initial if start == 0 else states[:, start - 1]
    p, g = window_grad(params, x[:, start:end], before, weights[:, start:end])
    params_sum = jax.tree_util.tree_map(jnp.add, params_sum, p)
    input_grads.append(g)
  np.testing.assert_allclose(truncated[1], jnp.concatenate(input_grads, axis=1), rtol=1e-6,
                             atol=1e-7)
  for name in params:
    np.testing.assert_allclose(truncated[0][name], params_sum[name], rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(truncated[2], 0.0)


# 5. No training line dropped. ----------------------------------------------------------------

def test_bpe_trains_on_a_line_longer_than_sentencepiece_default():
  short = [f'the cat sat on the mat {i}' for i in range(40)]  # no z, b, r, q, u or k
  unit = 'a zebra quokka walks on '
  long = (unit * (6899 // len(unit) + 1))[:6899]
  assert len(long.encode('utf-8')) == 6899 > subwords.DEFAULT_MAX_SENTENCE_BYTES
  processor, _ = subwords.train_bpe(short + [long], 60)
  assert processor.decode(processor.encode('zebra quokka')) == 'zebra quokka'
  assert subwords.UNK not in processor.encode('zebra quokka')
  processor, _ = subwords.train_bpe([long], 30)  # long lines only: no vocab_size error
  assert processor.decode(processor.encode('zebra quokka')) == 'zebra quokka'
