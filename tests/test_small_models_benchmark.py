"""benchmarks/small_models.py: its FLOP count, its rows' configs, and that its bare update is
the trainer's update (else the harness/bare ratio compares different work)."""

import math

import jax
import numpy as np
import pytest

from benchmarks import small_models
from experiments import temporal_order
from rnnjax.train import experiment
from rnnjax.train import trainer


def test_update_flops_counts_forward_backward_and_omega():
  # forward 2 B T (d H + H^2) + 2 B H K; the update 3x; Omega 2 x 2 B T H^2 more
  forward = 2 * 20 * 200 * (6 * 50 + 50 * 50) + 2 * 20 * 1 * 50 * 4
  assert small_models.update_flops(20, 200, 6, 50, 4, 1) == 3 * forward
  assert small_models.update_flops(20, 200, 6, 50, 4, 1, omega=True) == (
      3 * forward + 4 * 20 * 200 * 50 * 50)
  # a language model: ids looked up (no input projection), a readout at every step
  assert small_models.update_flops(32, 64, 0, 128, 65, 64) == 3 * 2 * 32 * 64 * (
      128 * 128 + 128 * 65)


def test_row_flops_reads_the_shapes_of_the_params():
  config = temporal_order.EXPERIMENT.config(hidden_size=8, batch_size=3, omega_weight=2.0)
  params = temporal_order.init_pascanu(jax.random.key(0), 'basic_tanh', 6, 8, 4)
  assert small_models.row_flops(config, params, 10.0) == small_models.update_flops(
      3, 10.0, 6, 8, 4, 1, omega=True)
  lm = {'recurrence': {'cell': {'W_xh': np.zeros((5, 8)), 'W_hh': np.zeros((8, 8))}},
        'head': {'kernel': np.zeros((8, 7))}}
  lm_config = experiment.override(config, {'omega_weight': 0.0, 'method': 'MSGD-C'})
  assert small_models.row_flops(lm_config, lm, 16.0) == small_models.update_flops(
      3, 16.0, 0, 8, 7, 16.0)


def test_rows_are_the_configs_the_issue_names():
  label, kind, configs = small_models.row_configs('a')
  (config,) = configs
  assert (config.mode, config.min_length, config.max_length, config.hidden_size,
          config.batch_size, config.method, config.omega_weight, config.flossing_weight) == (
              'range', 50, 200, 50, 20, 'MSGD-CR', 4.0, 0.0)
  (config,) = small_models.row_configs('b')[2]
  assert (config.mode, config.length, config.method, config.omega_weight) == (
      'fixed', 200, 'MSGD-C', 0.0)
  (config,) = small_models.row_configs('c')[2]
  assert (config.task, config.length, config.hidden_size, config.batch_size,
          config.recurrent_init, config.activation) == ('adding', 400, 100, 16, 'identity',
                                                        'relu')
  (config,) = small_models.row_configs('d')[2]
  assert (config.hidden_size, config.batch_size, config.truncation) == (256, 32, 50)
  _, kind, configs = small_models.row_configs('e')
  assert len(configs) == 10 and {c.truncation for c in configs} == {64}
  assert len({experiment.group_key(kind, c) for c in configs}) == 1  # one vmapped group
  # --quick shrinks the reports alone
  (quick,) = small_models.row_configs('a', quick=True)[2]
  assert quick.test_size == 1000 and experiment.override(
      quick, {'test_size': 10000}) == small_models.row_configs('a')[2][0]


def test_single_core_env_adds_the_flags_once():
  env = small_models.single_core_env({'XLA_FLAGS': '--xla_foo=1'}, 3)
  assert env['XLA_FLAGS'] == f'--xla_foo=1 {small_models.ONE_THREAD}'
  assert env[small_models.PINNED] == '3'
  assert small_models.single_core_env(env, 3)['XLA_FLAGS'] == env['XLA_FLAGS']


def test_markdown_table():
  table = small_models.markdown([{'config': 'x', 'fixed s': 1.23456}], ('config', 'fixed s'))
  assert table.splitlines() == ['| config | fixed s |', '|---|---|', '| x | 1.23 |']


@pytest.mark.slow  # compiles the trainer's step and the bare scan: about a minute
def test_bare_update_is_the_trainers_update():
  """Three updates of a small MSGD-CR temporal order group of two runs (range mode, data
  drawn in the loss from the step's key): the bare scan's params are the trainer's."""
  base = temporal_order.EXPERIMENT.config(
      mode='range', min_length=10, max_length=16, hidden_size=8, batch_size=4, steps=3,
      init='basic_tanh', omega_weight=2.0, log_every=100, checkpoint_every=0)
  configs = [experiment.override(base, {'seed': seed}) for seed in (0, 1)]
  task = temporal_order.EXPERIMENT.task(configs[0])
  params, _, _ = trainer.train(task, configs)
  initial = trainer.initial_state(task, configs)
  run = small_models.bare_program(task, configs[0])
  state, losses = run((initial.params, initial.opt_state, initial.carry, initial.key), {},
                      np.arange(1, 4, dtype=np.int32))
  assert losses.shape == (3, 2) and np.all(np.isfinite(losses))
  for i in range(2):
    for ours, theirs in zip(jax.tree_util.tree_leaves(jax.tree_util.tree_map(
        lambda leaf, i=i: leaf[i], state[0])), jax.tree_util.tree_leaves(params[i])):
      np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
  length = small_models.trained_steps(task, configs[0], 3)
  assert 10 <= length < 16 and not math.isnan(length)


@pytest.mark.parametrize('name', ['b'])
def test_trained_steps_of_a_fixed_length(name):
  _, kind, configs = small_models.row_configs(name)
  assert small_models.trained_steps(None, configs[0], 5) == 200.0


def test_generalization_budget_scales_the_row_and_the_studys_own_figure():
  """5 runs of 1,000,000 updates at 2 ms and 10 fixed s are 5 x 2,010 s = 2.79 run hours; the
  study's own 3.67 run hours for 10 runs of 100,000 updates scale to 18.35 (18.3 printed)."""
  line = small_models.generalization_budget(2.0, 10.0)
  assert '1,000,000 updates x 5 seeds: 2.79 run hours' in line
  assert 'against 18.3 from the study' in line and '(6.57x)' in line
