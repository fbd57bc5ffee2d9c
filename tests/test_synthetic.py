"""The synthetic long-range tasks and the long_range experiment."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import long_range
from experiments.configs import long_range as configs
from rnnjax.data import synthetic
from rnnjax.train import experiment
from rnnjax.train import trainer


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


def test_vmapped_runs_equal_solo_runs():
  # Stacking runs into one vmapped program changes nothing: each run's result equals its solo run.
  runs = []
  for init, radius, clipping in (('gaussian', 0.5, 'none'), ('orthogonal', 1.0, 'global_norm')):
    runs.append(experiment.override(configs.get_config(), dict(
        length=10, steps=30, log_every=10, test_size=64, hidden_size=8, recurrent_init=init,
        spectral_radius=radius, clipping=clipping, seed=len(runs))))
  for config in runs:
    experiment.check(long_range.EXPERIMENT, config)
  assert len({experiment.group_key(long_range.EXPERIMENT, c) for c in runs}) == 1  # one group
  task = long_range.task(runs[0])
  together, records, _ = trainer.train(task, runs)
  for config, params, record in zip(runs, together, records):
    alone, alone_records, _ = trainer.train(task, [config])
    assert record['train_loss_nats'] == pytest.approx(alone_records[0]['train_loss_nats'],
                                                       rel=1e-5)
    assert task.report(config, params)['test_error'] == pytest.approx(
        task.report(config, alone[0])['test_error'], rel=1e-5)


@pytest.mark.parametrize('field, value, message', [
    ('length', 1, 'config.length: length: expected an int T >= 2, got 1'),
    ('task', 'parity', "config.task: expected one of .* got 'parity'"),
    ('hidden_size', 0, 'config.hidden_size: expected an int >= 1, got 0'),
    ('spectral_radius', -1.0, 'config.spectral_radius: expected a finite value >= 0, got -1.0'),
    ('success_threshold', 0.0, 'config.success_threshold: expected a value > 0, got 0.0'),
    ('clip_threshold', -2.0, 'config.clip_threshold: expected a finite value > 0'),
    ('learning_rate', -1.0, 'config.learning_rate: expected a finite value > 0, got -1.0'),
    ('optimizer', 'rmsprop', "config.optimizer: expected one of .* got 'rmsprop'"),
])
def test_long_range_config_is_checked_before_training(field, value, message):
  config = configs.get_config()
  config[field] = value
  if field == 'clip_threshold':
    config.clipping = 'global_norm'
  with pytest.raises(ValueError, match=message):
    experiment.check(long_range.EXPERIMENT, config)
