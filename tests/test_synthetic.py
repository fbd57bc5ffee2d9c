"""The synthetic long-range tasks and the long_range experiment."""

import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import long_range
from rnnjax.data import synthetic


def test_adding_problem(key):
  inputs, targets = synthetic.adding(key, 4096, 50)
  assert inputs.shape == (4096, 50, 2) and targets.shape == (4096, 1)
  markers = np.asarray(inputs[..., 1])
  np.testing.assert_array_equal(markers.sum(axis=1), 2)
  assert markers[:, :25].sum(axis=1).min() == 1  # one mark in each half
  np.testing.assert_allclose(targets[:, 0], (inputs[..., 0] * inputs[..., 1]).sum(axis=1), rtol=1e-6)
  # The trivial baseline: predicting 1 has MSE 1/6 = 0.167.
  assert round(synthetic.ADDING_BASELINE_MSE, 3) == 0.167
  assert float(jnp.mean((targets - 1.0) ** 2)) == pytest.approx(1 / 6, abs=0.01)


def test_temporal_order_problem(key):
  inputs, classes = synthetic.temporal_order(key, 2048, 100)
  assert inputs.shape == (2048, 100, 6) and classes.shape == (2048,)
  symbols = np.asarray(jnp.argmax(inputs, -1))
  relevant = symbols >= 4
  np.testing.assert_array_equal(relevant.sum(axis=1), 2)
  first = relevant.argmax(axis=1)
  second = 99 - relevant[:, ::-1].argmax(axis=1)
  assert first.min() >= 10 and first.max() < 20 and second.min() >= 50 and second.max() < 60
  rows = np.arange(2048)
  decoded = (symbols[rows, first] - 4) * 2 + (symbols[rows, second] - 4)
  np.testing.assert_array_equal(decoded, classes)
  assert np.bincount(np.asarray(classes), minlength=4).min() > 400  # all four classes
  assert synthetic.TEMPORAL_ORDER_BASELINE_LOSS == pytest.approx(math.log(4)) == pytest.approx(1.386, abs=1e-3)


def test_copy_task(key):
  inputs, targets = synthetic.copy(key, 8, 20, memory=5)
  assert inputs.shape == (8, 30, 10) and targets.shape == (8, 30)
  ids = np.asarray(jnp.argmax(inputs, -1))
  np.testing.assert_array_equal(targets[:, -5:], ids[:, :5])  # recall the first 5 symbols
  np.testing.assert_array_equal(targets[:, :-5], 0)
  np.testing.assert_array_equal(ids[:, 24], 9)  # the delimiter after T - 1 blanks
  assert ids[:, :5].min() >= 1 and ids[:, :5].max() <= 8
  assert synthetic.copy_baseline_loss(20, 5) == pytest.approx(5 * math.log(8) / 30)


@pytest.mark.parametrize('call, message', [
    (lambda key: synthetic.adding(key, 4, 1), 'length: expected an int T >= 2, got 1'),
    (lambda key: synthetic.temporal_order(key, 0, 50), 'batch_size: expected an int >= 1, got 0'),
    (lambda key: synthetic.copy(key, 4, 10, memory=0), 'memory: expected an int >= 1, got 0'),
])
def test_bad_sizes_are_named(call, message, key):
  with pytest.raises(ValueError, match=message):
    call(key)


def test_tasks_under_vmap():
  keys = jax.random.split(jax.random.key(0), 3)
  inputs, targets = jax.vmap(lambda k: synthetic.adding(k, 2, 10))(keys)
  assert inputs.shape == (3, 2, 10, 2) and targets.shape == (3, 2, 1)


def test_parse_init():
  assert long_range.parse_init('gaussian:1.2') == ('gaussian', 1.2)
  assert long_range.init_label('identity:1') == 'IRNN (identity x 1, relu)'
  with pytest.raises(ValueError, match="inits: expected entries .* got 'xavier:1'"):
    long_range.parse_init('xavier:1')


def test_vmapped_runs_equal_solo_runs():
  # Stacking runs into one vmapped program changes nothing: each run's result equals its solo run.
  from experiments.configs import long_range as configs
  config = configs.get_config()
  config.steps, config.test_size, config.hidden_size = 30, 64, 8
  run = long_range.make_run(config, 10, 'tanh')
  params = [long_range.initial_params(config, spec, 0, 2, 1) for spec in ('gaussian:0.5', 'orthogonal:1.0')]
  stacked = jax.tree_util.tree_map(lambda *l: jnp.stack(l), *params)
  keys = jnp.stack([jax.random.key(0), jax.random.key(1)])
  thresholds = jnp.array([0.0, 1.0])
  together = jax.jit(jax.vmap(run))(stacked, keys, thresholds)
  for i in range(2):
    alone = jax.jit(run)(params[i], keys[i], thresholds[i])
    assert float(together['test_error'][i]) == pytest.approx(float(alone['test_error']), rel=1e-5)


def test_long_range_experiment_writes_table_and_heatmaps(tmp_path):
  output = subprocess.run(
      [sys.executable, '-m', 'experiments.long_range', f'--workdir={tmp_path}',
       '--config.lengths=(5,10)', '--config.steps=20', '--config.seeds=2',
       "--config.inits=('gaussian:1.0','identity:1.0')", '--config.clip_thresholds=(0.0,1.0)',
       '--config.test_size=64'], capture_output=True, text=True, check=True).stdout
  table = (tmp_path / 'results.md').read_text()
  assert len(table.splitlines()) == 2 + 2 * 2 * 2  # header + T x init x clipping
  assert '| 10 | IRNN (identity x 1, relu) | global norm 1 |' in table
  for clip in ('0', '1'):
    assert (tmp_path / f'heatmap_clip_{clip}.png').stat().st_size > 5_000
  assert '16 runs in' in output


@pytest.mark.parametrize('field, value, message', [
    ('lengths', (10, 1), 'config.lengths: length: expected an int T >= 2, got 1'),
    ('seeds', 0, 'config.seeds: expected an int >= 1, got 0'),
    ('clip_thresholds', (), 'config.clip_thresholds: expected at least one value'),
    ('clip_thresholds', (1.0, -2.0), r'config.clip_thresholds: expected values >= 0 \(0: no clipping\), got -2.0'),
    ('learning_rate', -1.0, 'learning_rate: expected a finite value > 0, got -1.0'),
    ('optimizer', 'rmsprop', "optimizer: expected one of .* got 'rmsprop'"),
])
def test_long_range_config_is_checked_before_training(field, value, message):
  from experiments.configs import long_range as configs
  config = configs.get_config()
  config[field] = value
  with pytest.raises(ValueError, match=message):
    long_range.check_config(config)
