"""Every public function of ``rnnjax.__all__`` (its modules' too, but ``rnnjax.models``) that
takes an option string or a threshold refuses a value outside its set in one line that names
the argument, before any work (``rnnjax.checks``); numpy integers count as ints."""

import inspect
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnjax
from rnnjax import cells
from rnnjax import checks
from rnnjax import combinators
from rnnjax import convert
from rnnjax import seq2seq

# Parameters that take one of a fixed set of names, and those that take a number in a range.
OPTIONS = {'activation', 'family', 'protocol', 'method', 'ratio', 'reduction', 'cell',
           'recurrent_init', 'suffix', 'kind', 'mode', 'clipping', 'init', 'last_state'}
THRESHOLDS = {'threshold', 'max_trusted_norm', 'fallback_factor', 'bound', 'tolerance',
              'damping', 'max_loss', 'dropout_rate', 'learning_rate', 'temperature'}
# Outside every parameter's set: a typo, a negative threshold (its sign flips a clipped
# gradient), NaN.
BAD = {'option': ('elementwize', 'no such option'), 'number': (-1.0, math.nan)}
BAD_NUMBER = {'fallback_factor': (math.nan, math.inf)}  # any finite multiple of W_hh is one

B, T, D, H = 2, 4, 3, 4
KEY = jax.random.key(0)
ELMAN = cells.init_elman(KEY, D, H)
X = jnp.ones((B, T, D))
H0 = jnp.zeros((B, H))
STATES = jnp.zeros((B, T, H))
SD = convert.elman_to_torch(ELMAN)
GATED = cells.init_gru(KEY, D, H)
S2S = seq2seq.init(KEY, 'elman', 6, 3, H)
IDS = jnp.ones((B, T), jnp.int32)

# A valid call of each function, its keyword arguments replaced by ``**bad``.
CALLS = {
    'cells.activation_derivative': lambda **k: cells.activation_derivative(STATES, **k),
    'cells.activation_function': lambda **k: cells.activation_function(**{'activation': 'tanh',
                                                                          **k}),
    'cells.elman': lambda **k: cells.elman(**k),
    'cells.elman_cell': lambda **k: cells.elman_cell(ELMAN, H0, X[:, 0], **k),
    'cells.init_elman': lambda **k: cells.init_elman(KEY, D, H, **k),
    'clipping.clip': lambda **k: rnnjax.clipping.clip(**{'family': 'global_norm',
                                                           'threshold': 1.0, **k}),
    'clipping.clip_pascanu': lambda **k: rnnjax.clipping.clip_pascanu(**{'threshold': 1.0, **k}),
    'clipping.pascanu_clip_updates': lambda **k: rnnjax.clipping.pascanu_clip_updates(
        ELMAN, ELMAN, **{'threshold': 1.0, **k}),
    'clipping.clip_with_fallback': lambda **k: rnnjax.clipping.clip_with_fallback(**k),
    'clipping.clipped_sgd': lambda **k: rnnjax.clipping.clipped_sgd(**{'learning_rate': 0.1,
                                                                     **k}),
    'combinators.init_stack': lambda **k: combinators.init_stack(
        KEY, **{'cell': 'elman', 'input_size': D, 'hidden_size': H, **k}),
    'combinators.layer_for': lambda **k: combinators.layer_for(**{'cell': 'elman', **k}),
    'combinators.stack': lambda **k: combinators.stack(
        combinators.layer_for('elman'), [[ELMAN]], X, H0[None, None], key=KEY, **k),
    'combinators.zero_state': lambda **k: combinators.zero_state(
        **{'cell': 'elman', 'layers': 1, 'directions': 1, 'batch_size': B, 'hidden_size': H,
           **k}),
    'convert.elman_from_torch': lambda **k: convert.elman_from_torch(SD, **k),
    'convert.elman_to_torch': lambda **k: convert.elman_to_torch(ELMAN, **k),
    'convert.gated_from_torch': lambda **k: convert.gated_from_torch(
        convert.gated_to_torch(GATED), **k),
    'convert.gated_to_torch': lambda **k: convert.gated_to_torch(GATED, **k),
    'convert.stack_from_torch': lambda **k: convert.stack_from_torch(
        SD, **{'cell': 'elman', 'num_layers': 1, 'bidirectional': False, **k}),
    'convert.stack_to_torch': lambda **k: convert.stack_to_torch([[ELMAN]],
                                                                 **{'cell': 'elman', **k}),
    'diagnostics.jacobian_product_norms': lambda **k: rnnjax.jacobian_product_norms(
        STATES, ELMAN['W_hh'], (1,), **k),
    'evaluation.perplexity': lambda **k: rnnjax.perplexity(3.0, 2, **k),
    'fused.checkpointed_elman_layer': lambda **k: rnnjax.checkpointed_elman_layer(
        ELMAN, X, H0, 2, **k),
    'fused.elman_layer': lambda **k: rnnjax.elman_layer(ELMAN, X, H0, **k),
    'fused.elman_layer_with': lambda **k: rnnjax.elman_layer_with(**k),
    'fused.state_gradients_from_states':
        lambda **k: rnnjax.fused.state_gradients_from_states(ELMAN['W_hh'], STATES, STATES, **k),
    'gradient_tables.gradient_norm_table': lambda **k: rnnjax.gradient_norm_table(
        (1.0,), (1,), hidden_size=2, sequences=1, **k),
    'parallel.elman_deer': lambda **k: rnnjax.elman_deer(
        ELMAN, X, H0, **{'method': 'elk' if 'damping' in k else 'deer', **k}),
    'parallel.damping_sweep': lambda **k: rnnjax.parallel.damping_sweep(ELMAN, X, H0, **k),
    'regularizers.omega': lambda **k: rnnjax.omega(ELMAN['W_hh'], STATES, STATES, **k),
    'regularizers.omega_value_and_grad': lambda **k: rnnjax.regularizers.omega_value_and_grad(
        ELMAN, X, H0, STATES, **k),
    'regularizers.omega_penalty': lambda **k: rnnjax.omega_penalty(
        ELMAN, X, H0, lambda s: jnp.sum(s), **k),
    'sampling.check_temperature': lambda **k: rnnjax.sampling.check_temperature(
        **{'temperature': 1.0, **k}),
    'sampling.draw': lambda **k: rnnjax.sampling.draw(KEY, jnp.zeros(5), **k),
    'sampling.sample': lambda **k: rnnjax.sample(types.SimpleNamespace(vocab_size=5), None,
                                                 jnp.ones(2, jnp.int32), 2, KEY, **k),
    'seq2seq.decode': lambda **k: seq2seq.decode(**{'cell': 'elman', 'params': S2S,
                                                    'sources': IDS, 'max_length': 3, **k}),
    'seq2seq.encode': lambda **k: seq2seq.encode(**{'cell': 'elman', 'params': S2S,
                                                    'sources': IDS, **k}),
    'seq2seq.init': lambda **k: seq2seq.init(KEY, **{'cell': 'elman', 'vocab_size': 6,
                                                     'embedding_size': 3, 'hidden_size': H,
                                                     **k}),
    'seq2seq.loss': lambda **k: seq2seq.loss(**{'cell': 'elman', 'params': S2S,
                                                'sources': IDS, 'targets': IDS, **k}),
    'seq2seq.step_function': lambda **k: seq2seq.step_function(**{'cell': 'elman', **k}),
    'seq2seq.teacher_forced_logits': lambda **k: seq2seq.teacher_forced_logits(
        **{'cell': 'elman', 'params': S2S, 'sources': IDS, 'targets': IDS, **k}),
}


def _public_functions():
  """``{'module.name': function}`` of every function of ``rnnjax.__all__`` and of its
  modules' ``__all__`` (``rnnjax.models`` left to its own tests)."""
  found = {}
  for name in rnnjax.__all__:
    value = getattr(rnnjax, name)
    if isinstance(value, types.ModuleType):
      if name == 'models':
        continue
      for member in value.__all__:
        function = getattr(value, member)
        if inspect.isfunction(function):
          found[f'{name}.{member}'] = function
    elif inspect.isfunction(value):
      found[f'{value.__module__.removeprefix("rnnjax.")}.{name}'] = value
  return found


def _cases():
  cases = []
  for qualified, function in sorted(_public_functions().items()):
    for parameter, declared in inspect.signature(function).parameters.items():
      if parameter in OPTIONS and 'str' in str(declared.annotation):  # not a cell function
        cases += [(qualified, parameter, bad) for bad in BAD['option']]
      elif parameter in THRESHOLDS:
        cases += [(qualified, parameter, bad)
                  for bad in BAD_NUMBER.get(parameter, BAD['number'])]
  return cases


CASES = _cases()


def test_the_walk_finds_the_functions_and_each_has_a_call():
  functions = {qualified for qualified, _, _ in CASES}
  assert {'clipping.clip', 'clipping.clip_with_fallback', 'gradient_tables.gradient_norm_table',
          'regularizers.omega', 'convert.elman_from_torch', 'parallel.elman_deer'} <= functions
  assert functions <= set(CALLS), f'no call for {sorted(functions - set(CALLS))}'
  assert len(CASES) > 80


@pytest.mark.parametrize('qualified, parameter, bad', CASES,
                         ids=[f'{q}-{p}-{b}' for q, p, b in CASES])
def test_a_value_outside_the_set_is_refused_in_one_line_naming_the_argument(
    qualified, parameter, bad):
  with pytest.raises(ValueError) as error:
    CALLS[qualified](**{parameter: bad})
  message = str(error.value)
  assert message.startswith(f'{parameter}: expected ') and '\n' not in message, message
  assert checks.shown(bad) in message, message


def test_every_valid_call_runs():
  """The calls of the table are valid: a refusal above is the bad value's."""
  for qualified in {qualified for qualified, _, _ in CASES}:
    if qualified == 'sampling.sample':  # the stand-in model holds no network
      continue
    CALLS[qualified]()


def test_elementwise_clipping_of_a_typo_and_a_negative_threshold():
  """The two faults of issue 36: a typo clipped by global norm, -1 flipped the sign."""
  with pytest.raises(ValueError, match=r"^family: expected one of \('global_norm', "
                                       r"'elementwise'\), got 'elementwize'$"):
    rnnjax.clipping.clip('elementwize', 1.0)
  for threshold in (-1, 0.0, math.nan, jnp.asarray(-1.0), np.float32(-1)):
    with pytest.raises(ValueError, match=r'^threshold: expected a value > 0 \(inf allowed\)'):
      rnnjax.clipping.clip('global_norm', threshold)
  # a threshold traced by inject_hyperparams passes to the program, which takes its value
  transform = rnnjax.clipping.clip('elementwise', jnp.float32(0.5))
  clipped, _ = jax.jit(transform.update)({'w': jnp.asarray([2.0, -3.0])},
                                         transform.init(None))
  np.testing.assert_array_equal(clipped['w'], [0.5, -0.5])


def test_checks_accept_numpy_integers_and_refuse_bools_and_floats():
  assert checks.integer('layers', np.int64(2), 1) == 2
  assert checks.integer('seed', jnp.asarray(3, jnp.int32), 0) == 3
  for bad in (True, 2.0, '2', np.array([2]), 0):
    with pytest.raises(ValueError, match=r'^layers: expected an int >= 1, got '):
      checks.integer('layers', bad, 1)
  assert checks.one_of('cell', 'gru', ('elman', 'gru')) == 'gru'
  with pytest.raises(ValueError, match=r"^directions: expected one of \(1, 2\), got True$"):
    checks.one_of('directions', True, (1, 2))
