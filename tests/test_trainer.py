"""The trainer: one divergence rule, measurements from the optimizer chain, groups,
resume, TensorBoard. Each case of the run-harness issue is a test with its right value."""

import math
import pathlib

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from experiments import language_tasks as tasks
from rnnjax import clipping
from rnnjax import initializers
from rnnjax import models
from rnnjax.data import text
from rnnjax.train import checkpoints
from rnnjax.train import experiment
from rnnjax.train import harness
from rnnjax.train import records
from rnnjax.train import run_folder
from rnnjax.train import trainer

TRAINING = experiment.Experiment(name='test_trainer', task=None, fields={})


def config(**overrides):
  fields = {name: field.default for name, field in experiment.TRAINER_FIELDS.items()}
  fields.update(experiment='test_trainer', steps=1, log_every=1, learning_rate=1.0,
                clipping='global_norm')
  fields.update(overrides)
  return ml_collections.ConfigDict(fields)


def linear_task(gradient, loss=None):
  """params w = 0 (two entries); loss = w . gradient, so every step's gradient is ``gradient``."""
  gradient = jnp.asarray(gradient, jnp.float32)
  return trainer.Task(init=lambda c, k: {'w': jnp.zeros(2)},
                      loss=loss or (lambda p, c, b, k: (jnp.dot(p['w'], gradient), c)),
                      batch=lambda step: {})


def train(task, configs, folder=None):
  """Trains a group, in ``folder``/run_<i> when given; returns (params, records, lines)."""
  folders = None
  if folder is not None:
    folders = [pathlib.Path(folder) / f'run_{i}' for i in range(len(configs))]
    for path, c in zip(folders, configs):
      path.mkdir(parents=True, exist_ok=True)
      run_folder.write_json(path / run_folder.CONFIG, c.to_dict())
  params, run_records, _ = trainer.train(task, configs, folders)
  lines = [records.read_metrics(f) for f in folders] if folders else None
  return params, run_records, lines


def test_global_norm_of_huge_finite_gradients_does_not_overflow():
  grads = {'w': jnp.array([3e19, 4e19], jnp.float32)}
  assert float(clipping.global_norm(grads)) == pytest.approx(5e19, rel=1e-6)
  assert not math.isfinite(float(jnp.sqrt(jnp.sum(grads['w'] ** 2))))  # the naive sum overflows
  assert float(clipping.global_norm({'w': jnp.array([jnp.inf, 1.0])})) == math.inf
  assert math.isnan(float(clipping.global_norm({'w': jnp.array([jnp.nan, 1.0])})))
  assert float(clipping.global_norm({'w': jnp.zeros(3)})) == 0.0


def test_huge_gradient_is_clipped_to_the_threshold_and_logged(tmp_path):
  params, records, lines = train(linear_task([3e19, 4e19]), [config()], tmp_path)
  np.testing.assert_allclose(params[0]['w'], [-0.6, -0.8], rtol=1e-6)
  assert lines[0][0]['grad_norm'] == pytest.approx(5e19, rel=1e-6)
  assert lines[0][0]['clipped'] and records[0]['clipped_fraction'] == 1.0
  assert lines[0][0]['update_norm'] == pytest.approx(1.0, rel=1e-6)


def test_huge_gradient_without_clipping_is_applied_whole():
  params, records, _ = train(linear_task([3e19, 4e19]), [config(clipping='none')])
  np.testing.assert_allclose(params[0]['w'], [-3e19, -4e19], rtol=1e-6)
  assert records[0]['status'] == 'finished' and records[0]['clipped_fraction'] == 0.0


def test_every_skipped_update_is_counted():
  # d/dw sqrt(w) at w = 0 is +inf: every step's gradient is infinite, the loss finite (0).
  sqrt_loss = lambda p, c, b, k: (jnp.sum(jnp.sqrt(p['w'])), c)
  params, records, _ = train(linear_task([0, 0], sqrt_loss),
                             [config(steps=5, on_divergence='skip')])
  assert records[0]['skipped_steps'] == 5
  assert records[0]['status'] == 'finished' and records[0]['steps_done'] == 5
  np.testing.assert_array_equal(params[0]['w'], [0.0, 0.0])


@pytest.mark.parametrize('on_divergence', ['skip', 'stop'])
def test_a_nan_batch_is_skipped_or_stops_the_run(on_divergence):
  def batch(step):
    return {'g': np.full(2, np.nan if step == 3 else 0.1, np.float32)}

  task = trainer.Task(init=lambda c, k: {'w': jnp.zeros(2)}, batch=batch,
                      loss=lambda p, c, b, k: (jnp.dot(p['w'], b['g']), c))
  params, records, _ = train(task, [config(steps=10, log_every=5, on_divergence=on_divergence,
                                           learning_rate=0.5)])
  assert np.isfinite(params[0]['w']).all()
  if on_divergence == 'skip':
    assert records[0]['skipped_steps'] == 1 and records[0]['steps_done'] == 10
    np.testing.assert_allclose(params[0]['w'], [-0.45, -0.45], rtol=1e-6)  # 9 steps of 0.05
  else:
    assert records[0]['status'] == 'diverged' and records[0]['diverged_step'] == 3
    assert records[0]['steps_done'] == 2
    np.testing.assert_allclose(params[0]['w'], [-0.1, -0.1], rtol=1e-6)


def test_elementwise_clipping_below_the_threshold_is_not_counted():
  _, records, _ = train(linear_task([0.9, 0.9]), [config(steps=3, clipping='elementwise')])
  assert records[0]['clipped_fraction'] == 0.0
  _, records, _ = train(linear_task([0.9, 1.1]), [config(steps=3, clipping='elementwise')])
  assert records[0]['clipped_fraction'] == 1.0


@pytest.fixture(scope='module')
def stream():
  ids = np.asarray(jax.random.randint(jax.random.key(7), (3000,), 0, 11), np.int32)
  return text.stream_windows(ids, batch_size=4, truncation=8)


def lm_task(stream, **model_fields):
  model = models.LanguageModel(vocab_size=11, hidden_size=16, embedding_size=5, **model_fields)

  def init(run_config, key):
    run_model = model.clone(radius=run_config.get('spectral_radius', model.radius))
    return tasks.init_language_model(run_model, key)

  return tasks.truncated_bptt(model, *stream, init, None)


def test_a_diverged_run_returns_its_last_finite_params(stream):
  task = lm_task(stream, activation='relu', recurrent_init='identity', radius=1.0)
  runs = [config(steps=40, log_every=5, learning_rate=1000.0, clipping='none')]
  params, records, _ = train(task, runs)
  diverged = records[0]['diverged_step']
  assert records[0]['status'] == 'diverged' and diverged == 3
  assert records[0]['steps_done'] == diverged - 1
  leaves = jax.tree_util.tree_leaves(params[0])
  assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in leaves)
  # Exactly the params after the last finite step.
  before, _, _ = train(task, [config(steps=diverged - 1, log_every=5, learning_rate=1000.0,
                                     clipping='none')])
  for got, expected in zip(leaves, jax.tree_util.tree_leaves(before[0])):
    np.testing.assert_array_equal(got, expected)


def test_group_equals_each_run_alone(stream):
  task = lm_task(stream)
  runs = [config(steps=30, log_every=10, optimizer='adam', learning_rate=1e-2, clipping='none',
                 spectral_radius=0.5, seed=0),
          config(steps=30, log_every=10, optimizer='adam', learning_rate=3e-2,
                 clipping='global_norm', clip_threshold=1.0, spectral_radius=1.0, seed=1),
          config(steps=30, log_every=10, optimizer='adam', learning_rate=1e-3, clipping='none',
                 spectral_radius=1.5, seed=2)]
  group_params, group_records, _ = train(task, runs)
  for run, params, record in zip(runs, group_params, group_records):
    solo_params, solo_records, _ = train(task, [run])
    assert record['train_loss_nats'] == pytest.approx(solo_records[0]['train_loss_nats'],
                                                       rel=1e-5)
    assert record['clipped_fraction'] == solo_records[0]['clipped_fraction']
    np.testing.assert_allclose(params['head']['kernel'], solo_params[0]['head']['kernel'],
                               rtol=1e-4, atol=1e-6)
  assert group_records[0]['clipped_fraction'] == 0.0  # no clipping: an infinite threshold


def test_one_program_serves_every_radius_learning_rate_and_threshold(stream, caplog):
  task = lm_task(stream)
  runs = [config(steps=3, log_every=3, optimizer='adam', learning_rate=lr, clipping=clipping,
                 clip_threshold=threshold, spectral_radius=radius)
          for radius, lr, clipping, threshold in ((0.5, 1e-3, 'global_norm', 0.5),
                                                  (1.5, 3e-2, 'none', 1.0),
                                                  (1.0, 1e-2, 'global_norm', 100.0))]
  with jax.log_compiles(), caplog.at_level('WARNING'):
    train(task, runs)
  compiled = [r.getMessage().split(' with ')[0] for r in caplog.records
              if r.getMessage().startswith('Compiling jit(step)')]
  assert compiled == ['Compiling jit(step)']  # once, for the three runs together


def test_the_compiled_programs_belong_to_the_caller():
  """A task's compiled step and diagnostics live in the ``Programs`` its caller holds
  (a job keeps one and drops it after), in no cache of the trainer's module: training
  with the same programs compiles nothing more."""
  task = linear_task([1.0, 2.0])
  programs = trainer.Programs(task, config())
  params, run_records, _ = trainer.train(task, [config(steps=2)], programs=programs)
  assert run_records[0]['steps_done'] == 2
  np.testing.assert_allclose(params[0]['w'], [-1.0 / 5**0.5, -2.0 / 5**0.5] * np.array(2))
  compiled = dict(programs.executables)
  assert {name for name, _ in compiled} == {'step', 'measure'}
  trainer.train(task, [config(steps=3)], programs=programs)
  assert programs.executables == compiled  # the same executables, none compiled again
  cached = [name for name, value in vars(trainer).items()
            if hasattr(value, 'cache_info') or isinstance(value, dict) and name.isupper()
            and name not in ('LOGGED', 'TOTALS')]
  assert cached == []


def cut_folder(tmp_path, run):
  """The folder of a run to be interrupted, with its config.json."""
  folder = tmp_path / 'cut' / 'run_0'
  folder.mkdir(parents=True)
  run_folder.write_json(folder / run_folder.CONFIG, run.to_dict())
  return folder


def assert_resumed_equals_whole(task, run, folder, whole, whole_records):
  """The interrupted run in ``folder``, resumed to its end, has the final params and records of
  the uninterrupted one."""
  params, run_records, _ = trainer.train(task, [run], [folder])
  for got, expected in zip(jax.tree_util.tree_leaves(params[0]),
                           jax.tree_util.tree_leaves(whole[0])):
    np.testing.assert_array_equal(got, expected)
  assert run_records == whole_records


def test_resume_after_an_interruption_equals_an_uninterrupted_run(stream, tmp_path):
  task = lm_task(stream, dropout_rate=0.3)
  run = config(steps=25, log_every=5, checkpoint_every=10, optimizer='adam', learning_rate=1e-2)
  whole, whole_records, whole_lines = train(task, [run], tmp_path / 'whole')
  calls = []

  def stop_after_17():
    calls.append(True)
    return len(calls) == 17

  folder = cut_folder(tmp_path, run)
  with pytest.raises(trainer.Interrupted, match='after step 17'):
    trainer.train(task, [run], [folder], stop_requested=stop_after_17)
  assert checkpoints.saved_steps(folder) == [10, 17]
  assert_resumed_equals_whole(task, run, folder, whole, whole_records)
  assert (folder / 'metrics.jsonl').read_bytes() == (
      tmp_path / 'whole' / 'run_0' / 'metrics.jsonl').read_bytes()
  assert run_folder.read_json(folder / run_folder.DEVICES, list) == [
      {'from_step': 0, 'devices': 'one device', 'group': 'alone'},
      {'from_step': 17, 'devices': 'one device', 'group': 'alone'}]


def test_devices_json_forgets_starts_after_the_step_resumed_from(tmp_path):
  assert records.record_devices(tmp_path, 'one device', 0) is None
  assert records.record_devices(tmp_path, 'one device', 40) is None
  moved = records.record_devices(tmp_path, '2 devices', 20)  # an older checkpoint
  assert moved == (f'{tmp_path}: resumed at step 20 on 2 devices; the steps before it ran on '
                   'one device, so its numbers differ in the last digits from a run that never '
                   'moved')
  assert run_folder.read_json(tmp_path / run_folder.DEVICES, list) == [
      {'from_step': 0, 'devices': 'one device'}, {'from_step': 20, 'devices': '2 devices'}]
  assert records.record_devices(tmp_path, 'one device', 0) is None  # a fresh start
  assert run_folder.read_json(tmp_path / run_folder.DEVICES, list) == [
      {'from_step': 0, 'devices': 'one device'}]


def test_a_run_resumed_in_another_vmapped_grouping_says_so(tmp_path):
  """A run alone and in a vmapped group differ in the last digits (--processes or
  --max_group_size changed between launches): recorded in devices.json and warned."""
  assert records.record_devices(tmp_path, 'one device', 0, 'alone') is None
  moved = records.record_devices(tmp_path, 'one device', 30, 'in a vmapped group of 2 runs')
  assert moved == (f'{tmp_path}: resumed at step 30 in a vmapped group of 2 runs; the steps '
                   'before it ran alone, so its numbers differ in the last digits from a run '
                   'that never moved')
  assert [start.get('group') for start in run_folder.read_json(
      tmp_path / run_folder.DEVICES, list)] == ['alone', 'in a vmapped group of 2 runs']


def test_a_damaged_checkpoint_is_named_and_the_older_one_used(stream, tmp_path, caplog):
  task = lm_task(stream)
  run = config(steps=20, log_every=5, checkpoint_every=5, optimizer='adam', learning_rate=1e-2)
  whole, _, _ = train(task, [run], tmp_path / 'whole')
  folder = cut_folder(tmp_path, run)
  calls = []
  with pytest.raises(trainer.Interrupted):
    trainer.train(task, [run], [folder], stop_requested=lambda: calls.append(1) or len(calls) == 15)
  assert checkpoints.saved_steps(folder) == [10, 15]
  for path in (folder / 'checkpoint' / '15').rglob('*'):
    if path.is_file() and path.stat().st_size > 100:
      path.write_bytes(path.read_bytes()[:50])  # truncated files
  unfinished = folder / 'checkpoint' / '16.orbax-checkpoint-tmp'  # a save killed midway
  unfinished.mkdir()
  (unfinished / 'part').write_bytes(b'x' * 1000)
  with caplog.at_level('WARNING'):
    params, _, _ = trainer.train(task, [run], [folder])
  assert 'the checkpoint of step 15 is damaged' in caplog.text
  assert (folder / 'checkpoint' / '15.damaged').is_dir()
  assert not unfinished.exists()
  for got, expected in zip(jax.tree_util.tree_leaves(params[0]),
                           jax.tree_util.tree_leaves(whole[0])):
    np.testing.assert_array_equal(got, expected)


def test_tensorboard_events_hold_the_metrics(stream, tmp_path):
  """Also where a start killed before its first checkpoint left events (else TensorBoard
  shows those steps twice): the run from step 0 hides them."""
  from tensorboard.backend.event_processing import event_accumulator
  run_config = config(steps=10, log_every=5, optimizer='adam', learning_rate=1e-2)
  (tmp_path / 'run_0').mkdir()
  run_folder.write_json(tmp_path / 'run_0' / run_folder.CONFIG, run_config.to_dict())
  killed = records.tensorboard(tmp_path / 'run_0', 1)
  records.write_scalars(killed, {'step': 1, 'loss': 99.0})
  records.write_scalars(killed, {'step': 5, 'loss': 99.0})
  killed.close()
  _, _, lines = train(lm_task(stream), [run_config], tmp_path)
  events = event_accumulator.EventAccumulator(str(tmp_path / 'run_0' / 'tensorboard'))
  events.Reload()
  tags = events.Tags()['scalars']
  assert {'train/loss', 'train/grad_norm', 'train/measured_spectral_radius', 'profile/k1'} <= set(tags)
  losses = events.Scalars('train/loss')
  assert [e.step for e in losses] == [1, 5, 10]
  np.testing.assert_allclose([e.value for e in losses], [l['loss'] for l in lines[0]], rtol=1e-6)
  radii = [e.value for e in events.Scalars('train/measured_spectral_radius')]
  np.testing.assert_allclose(radii, [l['measured_spectral_radius'] for l in lines[0]], rtol=1e-6)


def test_metrics_lines_and_records(stream, tmp_path):
  params, run_records, lines = train(lm_task(stream), [config(steps=20, log_every=10,
                                                        optimizer='adam', learning_rate=1e-2,
                                                        clip_threshold=0.5)], tmp_path)
  lines = lines[0]
  assert [l['step'] for l in lines] == [1, 10, 20]
  first = lines[0]
  assert first['bits'] == pytest.approx(first['loss'] / math.log(2))
  assert list(first['profile']) == ['1', '2', '5']  # k < tau = 8
  assert first['clipped'] == (first['grad_norm'] > 0.5)
  assert first['measured_spectral_radius'] == pytest.approx(1.0, abs=1e-4)  # at init: rho = 1
  assert run_records[0]['first_profile'] == first['profile']
  # the summary's final values describe the saved params (the metrics line of step 20 was
  # measured on the params step 20 started from)
  assert run_records[0]['final_measured_spectral_radius'] == pytest.approx(
      float(initializers.host_spectral_radius(params[0]['recurrence']['cell']['W_hh'])),
      rel=1e-6)
  assert run_records[0]['final_measured_spectral_radius'] != lines[-1][
      'measured_spectral_radius']
  assert run_records[0]['train_loss_nats'] == lines[-1]['loss']
  assert run_records[0]['steps_done'] == 20 and run_records[0]['status'] == 'finished'
  assert not any('seconds' in key for line in lines for key in line)  # results hold no time


@pytest.mark.parametrize('field, value, message', [
    ('steps', 0, 'config.steps: expected an int >= 1, got 0'),
    ('log_every', 1.5, 'config.log_every: expected an int >= 1, got 1.5'),
    ('seed', 2**32, r'config.seed: expected an int < 2\*\*32 \(a larger seed gives the key of '
                    r'seed % 2\*\*32\), got 4294967296'),
    ('checkpoint_every', -1, 'config.checkpoint_every: expected an int >= 0, got -1'),
    ('on_divergence', 'ignore', "config.on_divergence: expected one of .* got 'ignore'"),
    ('optimizer', 'adamx', "config.optimizer: expected one of .* got 'adamx'"),
    ('learning_rate', 0.0, 'config.learning_rate: expected a finite value > 0, got 0.0'),
    ('clip_threshold', -1.0, 'config.clip_threshold: expected a finite value > 0'),
])
def test_training_fields_are_checked(field, value, message):
  with pytest.raises(ValueError, match=message):
    experiment.check(TRAINING, config(**{field: value}))


def test_tensorboard_writer_leaves_torch_unimported(tmp_path):
  """tensorboardX would import torch (1-2.5 s a run process) where it is installed, as it is
  with the test extra; the run's writer goes without it and its events read back."""
  import subprocess
  import sys
  from tensorboard.backend.event_processing import event_accumulator
  code = ('import pathlib, sys\n'
          'from rnnjax.train import records\n'
          'writer = records.tensorboard(pathlib.Path(sys.argv[1]), None)\n'
          'records.write_scalars(writer, {"step": 7, "loss": 1.5})\n'
          'writer.close()\n'
          'print("torch" in sys.modules)\n'
          'import torch\n')  # torch itself still imports afterwards
  result = subprocess.run([sys.executable, '-c', code, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.split() == ['False']
  events = event_accumulator.EventAccumulator(str(tmp_path / 'tensorboard'))
  events.Reload()
  assert [(e.step, e.value) for e in events.Scalars('train/loss')] == [(7, 1.5)]


def test_tensorboard_on_a_full_disk_raises_in_the_caller_instead_of_hanging(tmpfs_disk):
  """tensorboardX's SummaryWriter wrote from a thread that died on a full disk, and its
  eleventh add_scalar after waited forever; the run's writer raises ENOSPC where it
  writes. A real 64 KiB tmpfs."""
  import errno
  disk = tmpfs_disk('64k')
  writer = records.tensorboard(disk, None)
  with pytest.raises(OSError) as raised:
    (disk / 'filler').write_bytes(b'x' * 2**17)
  assert raised.value.errno == errno.ENOSPC
  with pytest.raises(OSError) as raised:
    for step in range(1, 1001):
      records.write_scalars(writer, dict({'step': step}, **{name: 1.0 for name in
                                                             records.SCALARS}))
  assert raised.value.errno == errno.ENOSPC and step < 1000


def test_diagnostics_program_has_no_host_callback_and_host_radii_are_the_spectral_radii(stream):
  """The spectral radius is solved on the host after the diagnostics program, not by a
  callback inside it (which deadlocked programs over several CPU devices)."""
  task = lm_task(stream)
  configs = [config(spectral_radius=0.5), config(spectral_radius=1.5)]
  state = trainer.initial_state(task, configs)
  measure = trainer.Programs(task, configs[0]).measure
  text = measure.lower(state, task.batch(1)).as_text()
  assert 'callback' not in text.lower()
  weights, profile, _ = measure(state, task.batch(1))
  assert weights.shape == (2, 16, 16) and profile.shape == (2, 6)
  np.testing.assert_allclose(trainer.host_spectral_radii(weights), [0.5, 1.5], rtol=1e-5)
  assert np.isnan(trainer.host_spectral_radii(np.array([np.inf, 0.0]) * np.ones((2, 1, 1)))[0])
  np.testing.assert_array_equal(trainer.host_spectral_radii(np.full(2, np.nan)), [np.nan] * 2)


def test_a_solved_run_stops_and_the_others_go_on(tmp_path):
  """``Task.solved``, checked every ``solved_every`` steps on each run's params, stops that
  run (the reference code of Pascanu et al. stops at success); the others train on."""
  task = linear_task([1.0, 0.0])._replace(
      solved=lambda config, params: float(params['w'][0]) <= config.threshold, solved_every=5)
  runs = [config(steps=40, log_every=5, clipping='none', learning_rate=0.1, threshold=-1.0),
          config(steps=40, log_every=5, clipping='none', learning_rate=0.1, threshold=-100.0)]
  params, run_records, lines = train(task, runs, tmp_path)
  assert run_records[0]['solved_step'] == 10 and run_records[0]['steps_done'] == 10
  assert run_records[1]['solved_step'] is None and run_records[1]['steps_done'] == 40
  assert [r['status'] for r in run_records] == ['finished', 'finished']
  np.testing.assert_allclose(params[0]['w'], [-1.0, 0.0], rtol=1e-6)
  assert [line['step'] for line in lines[0]] == [1, 5, 10]
  assert [line['step'] for line in lines[1]][-1] == 40


def test_a_loss_in_another_unit_than_nats_is_named_so_and_has_no_bits(tmp_path, caplog):
  """``Task.loss_unit``: a squared error is logged and summarised as such, never in bits; a
  loss in nats (the default) keeps its bits."""
  squared = linear_task([1.0, 0.0])._replace(loss_unit='squared error')
  with caplog.at_level('INFO'):
    _, run_records, lines = train(squared, [config(steps=2)], tmp_path / 'squared')
  assert all('bits' not in line for line in lines[0])
  record = run_records[0]
  assert record['loss_unit'] == 'squared error' and record['train_loss'] == lines[0][-1]['loss']
  assert 'train_loss_nats' not in record and 'train_loss_bits' not in record
  steps = [r.getMessage() for r in caplog.records if 'step 2/2' in r.getMessage()]
  assert steps and 'loss -1.0000 squared error  grad norm' in steps[0], steps
  _, run_records, lines = train(linear_task([1.0, 0.0]), [config(steps=2)], tmp_path / 'nats')
  assert run_records[0]['loss_unit'] == 'nats'
  assert run_records[0]['train_loss_bits'] == pytest.approx(lines[0][-1]['loss'] / math.log(2))


def test_the_largest_lyapunov_exponent_is_logged_on_request(stream, tmp_path):
  """``measure_lyapunov``: each metrics line and the summary carry the largest Lyapunov
  exponent of the probe's trajectory, the final one that of the saved params."""
  from rnnjax import lyapunov
  task = lm_task(stream, radius=1.5)
  run = config(steps=6, log_every=3, optimizer='adam', learning_rate=1e-2,
               measure_lyapunov=True)
  _, run_records, lines = train(task, [run], tmp_path)
  initial = task.init(run, jax.random.split(jax.random.key(run.seed))[0])
  probe = task.probe(initial, task.carry, task.batch(1))  # step 1: at initialization
  expected = float(jnp.mean(lyapunov.lyapunov_spectrum(probe.cell, probe.params, probe.inputs,
                                                       probe.initial_state, 1)))
  assert run_records[0]['first_largest_lyapunov_exponent'] == pytest.approx(expected, abs=1e-5)
  assert lines[0][0]['largest_lyapunov_exponent'] == run_records[0][
      'first_largest_lyapunov_exponent']
  assert math.isfinite(run_records[0]['final_largest_lyapunov_exponent'])
  _, plain, _ = train(task, [config(steps=2, log_every=1)])
  assert plain[0]['final_largest_lyapunov_exponent'] is None  # off by default


def test_every_report_of_a_group_is_followed_by_progress(tmp_path):
  """A measurement's work is its report, and a group's reports run one after another: each
  sends progress when it ends, so an executor's stall watch hears from the group between
  them."""
  events = []

  def report(run_config, params):
    events.append(('report', run_config.seed))
    return {}

  grouped = experiment.Experiment(
      name='test_trainer', fields={}, vmappable=('seed',),
      task=lambda run_config: linear_task([1.0, 0.0])._replace(report=report))
  configs = [config(steps=2, seed=seed) for seed in range(3)]
  harness.run_group(grouped, configs, [tmp_path / str(seed) for seed in range(3)],
                    on_progress=lambda step: events.append(('progress', step)))
  assert events == [('progress', 1), ('progress', 2), ('report', 0), ('progress', 2),
                    ('report', 1), ('progress', 2), ('report', 2), ('progress', 2)]


@pytest.mark.parametrize('loss, last, decaying, expected', [
    (10.0, math.nan, False, (False, False)),  # the first check always improves
    (9.0, 10.0, False, (False, False)),  # 10% better
    (8.99, 9.0, False, (True, False)),  # 0.1% better: the decay begins
    (8.0, 8.99, True, (True, False)),  # better again: the decay goes on
    (7.999, 8.0, True, (True, True)),  # too little while decaying: converged
    (math.inf, 8.0, False, (True, False)),  # a non-finite loss never improves
])
def test_plateau_is_mikolovs_rule(loss, last, decaying, expected):
  assert trainer.plateau(loss, last, decaying, 0.003) == expected


def test_validation_checks_halve_the_rate_on_a_plateau_then_end_the_run(tmp_path):
  """Checks every 5 steps score 10, 9, 8.99, 8.0, 7.999: the rate halves from the third
  check on (at 15, 20) and the fifth ends the run at step 25; each check's line gives the
  rate the steps before it took."""
  scores = [10.0, 9.0, 8.99, 8.0, 7.999, 5.0]
  task = linear_task([1.0, 0.0])._replace(validate=lambda config, params: scores.pop(0))
  run = config(steps=40, log_every=100, clipping='none', validate_every=5, plateau_decay=0.5,
               plateau_threshold=0.003)
  params, run_records, lines = train(task, [run], tmp_path)
  checks = [(line['step'], line['validation_loss'], line['learning_rate'])
            for line in lines[0] if 'validation_loss' in line]
  assert checks == [(5, 10.0, 1.0), (10, 9.0, 1.0), (15, 8.99, 1.0), (20, 8.0, 0.5),
                    (25, 7.999, 0.25)]
  record = run_records[0]
  assert (record['converged_step'], record['steps_done'], record['solved_step']) == (25, 25, None)
  assert record['final_learning_rate'] == 0.25 and record['validation_loss'] == pytest.approx(
      7.999)
  # 15 steps at 1, 5 at 0.5, 5 at 0.25
  np.testing.assert_allclose(params[0]['w'], [-18.75, 0.0], rtol=1e-6)


def test_a_run_resumed_across_validation_checks_equals_an_uninterrupted_one(stream, tmp_path):
  """The learning rate, the last validation loss and the decay live in the checkpoint."""
  task = lm_task(stream)
  model = models.LanguageModel(vocab_size=11, hidden_size=16, embedding_size=5)
  held_out = np.asarray(stream[0])[:, 0].reshape(-1)[:400]  # a training stream: it improves
  task = task._replace(validate=tasks.streamed_validation(model, held_out, 4))
  run = config(steps=40, log_every=10, checkpoint_every=10, optimizer='sgd', learning_rate=0.5,
               validate_every=4, plateau_decay=0.5, plateau_threshold=0.0)
  whole, whole_records, _ = train(task, [run], tmp_path / 'whole')
  calls = []
  folder = cut_folder(tmp_path, run)
  with pytest.raises(trainer.Interrupted):
    trainer.train(task, [run], [folder], stop_requested=lambda: calls.append(1) or len(calls) == 33)
  assert checkpoints.saved_steps(folder) == [30, 33]
  assert_resumed_equals_whole(task, run, folder, whole, whole_records)
  assert whole_records[0]['final_learning_rate'] == 0.0625  # halved at three checks
  assert (folder / 'metrics.jsonl').read_bytes() == (
      tmp_path / 'whole' / 'run_0' / 'metrics.jsonl').read_bytes()
