"""Pascanu et al. (2013) experiments: the temporal order problem and character-level PTB."""

import csv
import json
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import language_tasks as tasks
from experiments import ptb_chars
from experiments import temporal_order
from experiments.configs import ptb_chars as ptb_chars_config
from experiments.configs import temporal_order as temporal_order_config
from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import evaluation
from rnnjax import fused
from rnnjax import regularizers
from rnnjax.data import synthetic
from rnnjax.train import experiment
from rnnjax.train import harness
from rnnjax.train import records
from rnnjax.train import run_folder
from rnnjax.train import sweep

TEMPORAL_ORDER = temporal_order.EXPERIMENT
init_pascanu = jax.jit(temporal_order.init_pascanu, static_argnums=(1, 2, 3, 4))  # one compile a shape


def tiny(**overrides):
  """A temporal-order config small enough to train in a test."""
  fields = dict(length=10, hidden_size=4, batch_size=4, steps=3, log_every=2, test_size=20,
                test_chunk=10)
  fields.update(overrides)
  return experiment.override(temporal_order_config.get_config(), fields)


def init_params(config, key):
  """The params of a temporal-order run of ``config``."""
  return init_pascanu(key, config.init, synthetic.TEMPORAL_ORDER_SYMBOLS, config.hidden_size,
                      synthetic.TEMPORAL_ORDER_CLASSES)


@pytest.mark.parametrize('field, value, message', [
    ('mode', 'random', r"config.mode: expected one of \('fixed', 'range'\), got 'random'"),
    ('length', 9, r'config.length: expected an int >= 10, got 9'),
    ('max_length', 40, r'config.max_length: expected an int >= 50, got 40'),
    ('init', 'sigmoid', r"config.init: expected one of \('basic_tanh', 'smart_tanh'\)"),
    ('optimizer', 'adam', r"config.optimizer: expected 'sgd'"),
    ('clipping', 'global_norm', r"config.clipping: expected 'none' or 'pascanu', got"),
    ('omega_weight', -1.0, r'config.omega_weight: expected a finite value >= 0, got -1.0'),
    ('method', 'MSGD-C', r"config.method: 'MSGD-C' expects clipping 'pascanu' and "
                         r"omega_weight 0, got clipping 'pascanu' and omega_weight 2.0"),
    ('test_size', 1500, r'config.test_size: expected a multiple of config.test_chunk = 1000'),
    ('test_lengths', (50, 5), r'config.test_lengths: expected a tuple of ints >= 10'),
    ('success_threshold', 0.0, r'config.success_threshold: expected an error rate in \(0, 1\]'),
])
def test_config_errors_name_the_field(field, value, message):
  config = temporal_order_config.get_config()
  experiment.check(TEMPORAL_ORDER, config)  # the default passes
  config[field] = value
  with pytest.raises(ValueError, match=message):
    experiment.check(TEMPORAL_ORDER, config)


def test_sweep_trains_all_seeds_and_inits_of_a_setting_as_one_group():
  module = temporal_order_config
  overrides = module.get_sweep()
  assert len(overrides) == 2 * 3 * 2 * 5
  configs = sweep.run_configs(module.get_config(), overrides, {})
  groups = {}
  for config in configs:
    experiment.check(TEMPORAL_ORDER, config)
    groups.setdefault(experiment.group_key(TEMPORAL_ORDER, config), []).append(config)
  assert len(groups) == 2 * 3  # one program per (length, method)
  for members in groups.values():
    assert len(members) == 10
    assert {(c.seed, c.init) for c in members} == {
        (s, i) for s in range(5) for i in temporal_order.PASCANU_INITS}
    assert len({(c.length, c.method, c.clipping, c.omega_weight) for c in members}) == 1
  methods = {c.method: (c.clipping, c.omega_weight, c.learning_rate, c.batch_size,
                        c.hidden_size) for c in configs}
  assert methods == {'MSGD': ('none', 0.0, 0.01, 20, 50), 'MSGD-C': ('pascanu', 0.0, 0.01, 20, 50),
                     'MSGD-CR': ('pascanu', 2.0, 0.01, 20, 50)}


def test_inits_follow_the_reference_code(key):
  basic = init_params(tiny(init='basic_tanh', hidden_size=50), key)
  smart = init_params(tiny(init='smart_tanh', hidden_size=50), key)
  assert basic['cell']['W_xh'].shape == (6, 50) and basic['W_out'].shape == (50, 4)
  np.testing.assert_allclose(np.std(basic['cell']['W_hh']), 0.1, rtol=0.05)
  np.testing.assert_allclose(np.std(smart['W_out']), 0.01, rtol=0.2)
  np.testing.assert_array_equal(np.count_nonzero(np.asarray(smart['cell']['W_hh']), axis=1), 15)
  rho = np.max(np.abs(np.linalg.eigvals(np.asarray(smart['cell']['W_hh'], np.float64))))
  np.testing.assert_allclose(rho, 0.95, atol=1e-5)


@pytest.mark.parametrize('mode', ['fixed', 'range'])
def test_omega_term_in_the_loss_has_the_gradient_of_omega_value_and_grad(key, mode):
  config = tiny(mode=mode, min_length=10, max_length=14, hidden_size=5, init='basic_tanh')
  params = init_params(config, key)
  params['cell']['W_hh'] = 0.6 * params['cell']['W_hh'] / 0.1  # gradients that do not vanish
  inputs, targets, lengths = temporal_order.draw(config, jax.random.key(3), 3)
  weight = 2.0

  @jax.jit
  def compute(params):
    grad = lambda w: jax.value_and_grad(temporal_order.pascanu_loss)(params, inputs, targets, lengths,
                                                             w)
    (plain, g_plain), (regularized, g_reg) = grad(0.0), grad(weight)
    initial = jnp.zeros((inputs.shape[0], 5))
    last = lambda s: temporal_order.last_states(s, lengths)
    _, errors = diagnostics.state_gradients(
        cells.elman('tanh'), params['cell'], inputs, initial,
        lambda s: temporal_order.pascanu_readout_loss(params, last(s), targets))
    omega, g_omega = regularizers.omega_value_and_grad(params['cell'], inputs, initial, errors,
                                                       lengths=lengths)
    return plain, g_plain, regularized, g_reg, omega, g_omega

  plain, g_plain, regularized, g_reg, omega, g_omega = compute(params)
  assert float(omega) > 1e-3 and np.abs(g_omega['W_hh']).max() > 1e-3
  assert float(regularized) == float(plain)  # the logged loss is the cross-entropy alone
  np.testing.assert_allclose(g_reg['cell']['W_hh'] - g_plain['cell']['W_hh'],
                             weight * g_omega['W_hh'], rtol=1e-4, atol=1e-7)
  for name in ('W_xh', 'b'):  # Omega reaches W_hh only (eq. 10, RNN.py line 210)
    np.testing.assert_allclose(g_reg['cell'][name], g_plain['cell'][name], rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(g_omega[name], 0.0)
  for name in ('W_out', 'b_out'):
    np.testing.assert_allclose(g_reg[name], g_plain[name], rtol=1e-6, atol=1e-9)


def test_test_errors_read_the_state_at_each_length(key):
  """``temporal_order.pascanu_errors`` (a scan that keeps only the last state) counts the
  errors of the fused layer's final state, and of each sequence run alone."""
  params = init_pascanu(key, 'basic_tanh', 6, 8, 4)
  params['W_out'] = 30.0 * params['W_out']  # class scores that depend on the state
  inputs, targets = synthetic.temporal_order_pascanu(jax.random.key(5), 64, 16)
  lengths = jnp.asarray(np.random.default_rng(0).integers(10, 17, 64), jnp.int32)
  errors = float(jax.jit(temporal_order.pascanu_errors)(params, inputs, targets, lengths))
  _, last = fused.elman_layer(params['cell'], inputs, jnp.zeros((64, 8)), lengths)
  wrong = np.argmax(last @ params['W_out'] + params['b_out'], -1) != np.asarray(targets)
  assert errors == wrong.sum() and 5 <= errors <= 59  # neither none nor all
  alone = [float(temporal_order.pascanu_errors(params, inputs[i:i + 1, :int(lengths[i])], targets[i:i + 1]))
           for i in range(0, 64, 8)]
  np.testing.assert_array_equal(alone, wrong[::8])


def test_omega_penalty_gradient_equals_omega_value_and_grad():
  rng = np.random.default_rng(0)
  batch, steps, d, hidden = 2, 5, 3, 4
  params = {'W_xh': rng.normal(size=(d, hidden)), 'W_hh': 0.9 * rng.normal(size=(hidden, hidden)),
            'b': rng.normal(size=hidden)}
  params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
  inputs = jnp.asarray(rng.normal(size=(batch, steps, d)), jnp.float32)
  initial = jnp.asarray(rng.normal(size=(batch, hidden)), jnp.float32)
  readout = jnp.asarray(rng.normal(size=(hidden,)), jnp.float32)
  loss_of_states = lambda s: jnp.sum(jnp.sin(s @ readout))  # every step's state is read

  @jax.jit
  def compute(params):
    value, grads = jax.value_and_grad(regularizers.omega_penalty)(params, inputs, initial,
                                                                  loss_of_states)
    _, errors = diagnostics.state_gradients(cells.elman('tanh'), params, inputs, initial,
                                            loss_of_states)
    return value, grads, regularizers.omega_value_and_grad(params, inputs, initial, errors)

  value, grads, (expected, expected_grads) = compute(params)
  np.testing.assert_allclose(value, expected, rtol=1e-6)
  for name in params:
    np.testing.assert_allclose(grads[name], expected_grads[name], rtol=1e-5, atol=1e-8)


def test_tiny_run_writes_test_error_success_and_profile(tmp_path):
  # MSGD-C: the 'pascanu' chain end to end (Omega's gradient is tested above).
  configs = [tiny(seed=seed, init=init, method='MSGD-C', omega_weight=0.0)
             for seed, init in ((0, 'smart_tanh'), (1, 'basic_tanh'))]
  folders = [tmp_path / f'run_{i}' for i in range(2)]
  summaries = harness.run_group(TEMPORAL_ORDER, configs, folders)
  for folder, summary in zip(folders, summaries):
    written = json.loads((folder / run_folder.SUMMARY).read_text())
    assert written == json.loads(json.dumps(summary))
    assert written['status'] == 'finished' and written['steps_done'] == 3
    error = written['test_error']
    assert 0 <= error <= 1 and round(error * 20) == pytest.approx(error * 20)  # of 20 sequences
    assert written['success'] == (error < 0.01)
    assert 'test_error_by_length' not in written  # no test_lengths
    assert set(written['final_profile']) == {'1', '2', '5'}  # distances k < T = 10
    assert all(v > 0 for v in written['final_profile'].values())
    lines = records.read_metrics(folder)
    assert [line['step'] for line in lines] == [1, 2, 3]
    assert all(set(line['profile']) == {'1', '2', '5'} for line in lines)
    assert all(np.isfinite(line['measured_spectral_radius']) for line in lines)
  # The two runs are different programs' lanes of one group: their inits differ.
  assert summaries[0]['first_profile'] != summaries[1]['first_profile']


def test_range_mode_draws_padded_batches_and_tests_at_its_lengths(key):
  config = tiny(mode='range', min_length=10, max_length=14, test_lengths=(20,))
  experiment.check(TEMPORAL_ORDER, config)
  inputs, targets, lengths = temporal_order.draw(config, key, 4)
  assert inputs.shape == (4, 13, 6) and targets.shape == (4,)
  assert 10 <= int(lengths[0]) <= 13
  task = temporal_order.task(config)
  report = task.report(config, task.init(config, key))
  assert set(report) == {'test_error', 'success', 'test_error_by_length'}
  assert 0 <= report['test_error_by_length']['20'] <= 1


def ptb_available() -> bool:
  folder = pathlib.Path(os.environ.get('RNNJAX_DATA_DIR', 'data'))
  return all((folder / 'ptb' / f'ptb.{split}.txt').exists() for split in ('train', 'valid', 'test'))


def test_ptb_chars_keep_word_boundaries():
  if not ptb_available():
    pytest.skip('no ptb/ptb.{train,valid,test}.txt under RNNJAX_DATA_DIR')
  test = ptb_chars.read_chars('ptb.test')
  assert test.startswith('no it was n\'t black monday\n')  # the first line, spaces normalized
  assert '  ' not in test and '\n ' not in test and ' \n' not in test


def test_tiny_ptb_chars_run(tmp_path):
  if not ptb_available():
    pytest.skip('no ptb/ptb.{train,valid,test}.txt under RNNJAX_DATA_DIR')
  base = experiment.override(ptb_chars_config.get_config(), dict(
      hidden_size=8, batch_size=2, truncation=8, steps=2, log_every=1, checkpoint_every=0,
      max_eval_chars=100))
  configs = sweep.run_configs(base, ptb_chars_config.get_sweep(), {})
  assert [(c.method, c.clipping, c.omega_weight, c.seed) for c in configs[::3]] == [
      ('MSGD', 'none', 0.0, 0), ('MSGD-C', 'pascanu', 0.0, 0), ('MSGD-CR', 'pascanu', 2.0, 0)]
  assert [c.seed for c in configs] == [0, 1, 2] * 3
  for config in configs:
    experiment.check(ptb_chars.EXPERIMENT, config)
  config = configs[6]  # MSGD-CR: clipping and Omega
  summary, = harness.run_group(ptb_chars.EXPERIMENT, [config], [tmp_path / config.method])
  assert summary['status'] == 'finished' and summary['steps_done'] == 2
  assert summary['vocab_size'] == 50 and summary['test_chars'] == 100
  assert summary['paper_test_bits_per_char'] == 1.41
  assert 0 < summary['test_bits_per_char'] < 8  # near log2(50) = 5.64 after 2 steps
  assert set(summary['final_profile']) == {'1', '2', '5'}  # k < tau = 8
  bad = configs[0].copy_and_resolve_references()
  bad.omega_weight = 2.0
  with pytest.raises(ValueError, match=r"config.method: 'MSGD' expects clipping 'none'"):
    experiment.check(ptb_chars.EXPERIMENT, bad)


def test_ptb_omega_term_gradient_equals_omega_value_and_grad(key):
  config = experiment.override(ptb_chars_config.get_config(),
                               dict(hidden_size=6, spectral_radius=1.2))
  model = ptb_chars.model_for(config, 12)
  rng = np.random.default_rng(0)
  ids = rng.integers(0, 12, size=(2, 3, 6)).astype(np.int32)  # [W, B, tau]
  base = tasks.truncated_bptt(model, ids[:, :, :5], ids[:, :, 1:], None, None)
  regularized = ptb_chars.with_omega(model, base, 2.0)
  params = tasks.init_language_model(model, key)
  batch, carry = base.batch(1), jnp.zeros((3, 6))  # window 0: the state is reset

  @jax.jit
  def compute(params):
    value_and_grad = lambda loss: jax.value_and_grad(loss, has_aux=True)(params, carry, batch,
                                                                         key)
    (value, _), grads = value_and_grad(regularized.loss)
    (plain, _), plain_grads = value_and_grad(base.loss)
    variables = {'params': params}
    inputs = model.apply(variables, batch['inputs'], method=model.embed)
    window_loss = lambda s: evaluation.cross_entropy(
        model.apply(variables, s, method=model.logits), batch['targets'])
    cell = params['recurrence']['cell']
    _, errors = diagnostics.state_gradients(cells.elman('tanh'), cell, inputs, carry, window_loss)
    return value, grads, plain, plain_grads, regularizers.omega_value_and_grad(
        cell, inputs, carry, errors)

  value, grads, plain, plain_grads, (omega, g_omega) = compute(params)
  assert float(value) == float(plain) and float(omega) > 1e-3
  cell, plain_cell = grads['recurrence']['cell'], plain_grads['recurrence']['cell']
  np.testing.assert_allclose(cell['W_hh'] - plain_cell['W_hh'], 2.0 * g_omega['W_hh'],
                             rtol=1e-4, atol=1e-7)
  assert np.abs(g_omega['W_hh']).max() > 1e-4
  for name in ('W_xh', 'b'):
    np.testing.assert_allclose(cell[name], plain_cell[name], rtol=1e-6, atol=1e-9)
  np.testing.assert_allclose(grads['head']['kernel'], plain_grads['head']['kernel'], rtol=1e-6,
                             atol=1e-9)


def _cell(w_hh):
  hidden = w_hh.shape[0]
  return {'W_xh': jnp.zeros((synthetic.TEMPORAL_ORDER_SYMBOLS, hidden)), 'W_hh': w_hh,
          'b': jnp.zeros(hidden)}


def test_distractor_exponent_of_a_linear_contraction_is_its_log_rate():
  """Inputs that do not reach the state keep it at 0, where the Jacobian is 0.5 I: lambda_1 =
  log 0.5 nats a step."""
  exponent = temporal_order.distractor_exponent(_cell(0.5 * jnp.eye(4)))
  np.testing.assert_allclose(exponent, np.log(0.5), rtol=1e-4)  # float32 over 4,096 steps


@pytest.mark.parametrize('gain, expected', [(0.5, (1, 1)), (2.0, (4, 0))])
def test_fixed_points_count_the_stable_ones_and_those_the_task_reaches(gain, expected):
  """h -> tanh(gain h) per unit, H = 2: at gain 0.5 one stable point, 0, where the task's
  sequences (whose inputs do not reach the state) end; at gain 2 the four stable corners
  (+-0.957, +-0.957), which uniform starts reach, and 0 unstable, where the task's end."""
  params = {'cell': _cell(gain * jnp.eye(2))}
  assert temporal_order.fixed_points(params, jax.random.key(0)) == expected


def test_criteria_of_the_generalization_page():
  """Five Omega runs, four generalizing (lambda_1 -0.1) and one not (lambda_1 0.0), and five
  flossing runs, none generalizing, of which two are under 1% at T = 5,000: the Omega arm
  holds (4 of 5), both dynamics tests hold, and Fisher's test of 4/5 against 2/5 gives
  p = 0.524 (two-sided)."""
  from rnnjax.train import report

  def row(method, omega, generalizes, at_longest, exponent):
    return {'method': method, 'omega_weight': omega, 'flossing_weight': 1.0 - omega / 4,
            'error T=50': report.wilson(0 if generalizes else 500, 10_000),
            'error T=5000': report.wilson(50 if at_longest else 5000, 10_000),
            'generalizes': generalizes, 'distractor lambda_1': exponent}

  rows = ([row('MSGD-CR', 4.0, True, True, -0.1)] * 4 + [row('MSGD-CR', 4.0, False, False, 0.0)]
          + [row('MSGD-C', 0.0, False, True, 0.0)] * 2 + [row('MSGD-C', 0.0, False, False, 0.0)] * 3)
  omega, general, other, fisher = temporal_order.criteria(rows)
  assert (omega['runs'].successes, omega['runs'].trials, omega['held']) == (4, 5, True)
  assert (general['runs'].successes, general['runs'].trials, general['held']) == (4, 4, True)
  assert (other['runs'].successes, other['runs'].trials, other['held']) == (6, 6, True)
  assert fisher['criterion'].startswith('under 1% at T = 5000: MSGD-CR 4/5 against MSGD-C 2/5')
  assert round(fisher['p'], 3) == 0.524
  rows[0] = dict(rows[0], **{'distractor lambda_1': -0.03})  # between the two bounds
  assert [verdict.get('held') for verdict in temporal_order.criteria(rows)] == [
      True, False, True, None]


def test_methods_pools_the_inits_and_tests_each_method_against_the_one_before(tmp_path):
  """T = 50: MSGD 0 of 10, MSGD-C 6 of 10, MSGD-CR 10 of 10; Fisher's two-sided p of 6/10
  against 0/10 is 0.0108, of 10/10 against 6/10 0.0867."""
  def run(method, seed, init, success, length=50, mode='fixed'):
    return {'status': 'finished', 'summary': {'success': success},
            'values': {'length': length, 'method': method, 'init': init, 'seed': seed},
            'config': {'mode': mode, 'method': method, 'length': length}}
  solved = {'MSGD': 0, 'MSGD-C': 6, 'MSGD-CR': 10}
  runs = [run(method, seed, init, 2 * seed + (init == 'smart') < count)
          for method, count in solved.items() for seed in range(5) for init in ('basic', 'smart')]
  runs.append(run('MSGD-CR', 0, 'basic', True, mode='range'))  # not the fixed-length sweep
  keys = ['length', 'method', 'init', 'seed']
  temporal_order.methods(runs, keys, tmp_path, '')
  row, = csv.DictReader((tmp_path / 'methods.csv').open())
  assert [row[f'solved by {m} yes'] for m in solved] == ['0', '6', '10']
  assert row['solved by MSGD-CR of'] == '10'
  assert round(float(row["Fisher's p, MSGD-C against MSGD"]), 4) == 0.0108
  assert round(float(row["Fisher's p, MSGD-CR against MSGD-C"]), 4) == 0.0867
  flossing = [dict(r, values={**r['values'], 'flossing_weight': s % 2})
              for s, r in enumerate(runs)]
  temporal_order.methods(flossing, keys + ['flossing_weight'], tmp_path / 'f', '')
  assert not (tmp_path / 'f').exists()  # arms another field tells apart: no table
  apart = [dict(r, values={**r['values'], 'flossing_weight': r['config']['method'] == 'MSGD'})
           for r in runs]  # one arm a method, but MSGD's alone flosses
  temporal_order.methods(apart, keys + ['flossing_weight'], tmp_path / 'g', '')
  assert not (tmp_path / 'g').exists()
