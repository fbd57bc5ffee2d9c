"""The run harness from the command line, as a user meets it: real processes killed with
SIGKILL and rerun, a finished run rerun with another config, --overwrite, --help."""

import errno
import json
import pathlib
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from experiments import char_lm
from rnnjax.train import checkpoints
from rnnjax.train import plan
from rnnjax.train import records
from rnnjax.train import run_folder

CHAR_LM = ['--config=experiments/configs/char_lm.py', '--config.hidden_size=24',
           '--config.embedding_size=8', '--config.batch_size=8', '--config.truncation=16',
           '--config.dropout_rate=0.3', '--config.steps=1500', '--config.log_every=50',
           '--config.checkpoint_every=25', '--config.sample_length=20']
CLASSIFY = ['--config=experiments/configs/classify.py', '--config.max_length=16',
            '--config.embedding_size=8', '--config.hidden_size=8', '--config.batch_size=16',
            '--config.steps=1500', '--config.log_every=50', '--config.checkpoint_every=25']


def launch(arguments, folder, **kwargs):
  """The run as a subprocess; its output to pipes unless ``kwargs`` say otherwise (one that
  is not read while the run goes on must not be a pipe: a full one stops the run)."""
  kwargs = {'stdout': subprocess.PIPE, 'stderr': subprocess.PIPE, **kwargs}
  return subprocess.Popen([sys.executable, '-m', 'launch.run', f'--workdir={folder}',
                           *arguments], text=True, **kwargs)


def run(arguments, folder):
  process = launch(arguments, folder)
  stdout, stderr = process.communicate(timeout=600)
  return process.returncode, stdout, stderr


def files(folder: pathlib.Path) -> dict:
  return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob('*'))
          if p.is_file()}


def scalars(folder, tag):
  """(step, value) of ``tag`` as TensorBoard reads the run's event files."""
  from tensorboard.backend.event_processing import event_accumulator
  events = event_accumulator.EventAccumulator(str(folder / 'tensorboard'))
  events.Reload()
  return [(event.step, event.value) for event in events.Scalars(tag)]


def final_params(folder):
  return jax.tree_util.tree_leaves(checkpoints.final_params(folder)[1])


@pytest.mark.slow
@pytest.mark.parametrize('arguments', [CHAR_LM, CLASSIFY], ids=['char_lm', 'classify'])
def test_a_run_killed_after_its_second_checkpoint_resumes_exactly(tmp_path, shared_data_dir,
                                                                  arguments):
  arguments = [*arguments, '--config.checkpoint_every=250']  # an orbax save: 100 steps' time
  whole = tmp_path / 'whole'
  code, _, stderr = run(arguments, whole)
  assert code == 0, stderr
  cut = tmp_path / 'cut'
  process = launch(arguments, cut, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  second = cut / 'checkpoint' / '500' / '_CHECKPOINT_METADATA'
  deadline = time.time() + 300
  while not second.exists() and process.poll() is None and time.time() < deadline:
    time.sleep(0.01)
  process.send_signal(signal.SIGKILL)
  process.communicate()
  assert not (cut / 'summary.json').exists()  # killed before it ended
  assert checkpoints.saved_steps(cut)[-1] < 1500
  code, stdout, stderr = run(arguments, cut)
  assert code == 0, stderr
  assert 'finished after 1500 steps' in stdout
  for name in ('metrics.jsonl', 'summary.json', 'config.json'):
    assert (cut / name).read_bytes() == (whole / name).read_bytes(), name
  for got, expected in zip(final_params(cut), final_params(whole)):
    np.testing.assert_array_equal(got, expected)
  # TensorBoard, reading both event files, hides the steps logged after the checkpoint
  # resumed from, and shows each step once with the uninterrupted run's value
  assert len(list((cut / 'tensorboard').iterdir())) == 2
  assert scalars(cut, 'train/loss') == scalars(whole, 'train/loss')
  assert [step for step, _ in scalars(cut, 'train/loss')] == [1, *range(50, 1501, 50)]


def test_damaged_run_files_read_as_missing_lines_or_files(tmp_path):
  """Hand-damaged files: a bad line inside metrics.jsonl is skipped (the lines after it kept,
  no KeyError); a summary.json that holds a list reads as no summary."""
  good = [{'step': 1, 'loss': 2.0}, {'step': 5, 'loss': 1.5}, {'step': 10, 'loss': 1.0}]
  text = (json.dumps(good[0]) + '\ngarbage\n{"foo": 1}\n' + json.dumps(good[1]) + '\n')
  (tmp_path / 'metrics.jsonl').write_bytes(text.encode() + b'\xff\xfe\n' +
                                           json.dumps(good[2]).encode() + b'\n{"step": 1')
  assert records.read_metrics(tmp_path) == good  # the torn last line dropped too
  assert records.cut_metrics(tmp_path, 5) == good[:2]
  assert records.read_metrics(tmp_path) == good[:2]
  (tmp_path / 'summary.json').write_text('[]')
  (tmp_path / 'devices.json').write_text('[1, {"from_step": "x"}]')
  assert run_folder.read_json(tmp_path / 'summary.json') is None
  assert records.record_devices(tmp_path, 'cpu', 0) is None
  assert run_folder.read_json(tmp_path / 'devices.json', list) == [{'from_step': 0,
                                                                     'devices': 'cpu'}]


@pytest.mark.parametrize('overwrite', [False, True])
def test_a_folder_of_other_files_is_never_cleared(tmp_path, overwrite):
  """launch.run --workdir=<a sweep's folder> (no config.json), or any folder of somebody's
  files, is refused: clearing it would delete the finished runs and tables."""
  (tmp_path / 'results.md').write_text('a table')
  (tmp_path / 'spectral_radius=0.5').mkdir()
  run, = plan.plan(char_lm.EXPERIMENT, [char_lm.EXPERIMENT.config()], [tmp_path],
                   'all' if overwrite else 'none')
  assert run.action == 'refused' and run.reason.startswith(
      f'workdir: {tmp_path} holds results.md, spectral_radius=0.5 and no config.json: not a '
      'run folder, so nothing in it is cleared')
  assert sorted(p.name for p in tmp_path.iterdir()) == ['results.md', 'spectral_radius=0.5']


def test_a_field_the_experiment_gained_since_a_run_at_its_default_changes_nothing(tmp_path):
  """A config.json written before a field existed plans as the same config (the run trained
  with the field's default): ended, not trained again; the field at another value is a change."""
  config = char_lm.EXPERIMENT.config()
  older = {k: v for k, v in json.loads(config.to_json_best_effort()).items()  # as written
           if k not in ('validate_every', 'plateau_decay')}  # before these fields existed
  run_folder.write_json(tmp_path / run_folder.CONFIG, older)
  run_folder.write_json(tmp_path / run_folder.SUMMARY, {'status': 'finished'})
  run, = plan.plan(char_lm.EXPERIMENT, [config], [tmp_path])
  assert (run.action, run.reason) == ('ended', 'finished')
  changed = char_lm.EXPERIMENT.config(plateau_decay=0.5)
  run, = plan.plan(char_lm.EXPERIMENT, [changed], [tmp_path], 'changed')
  assert run.action == 'changed' and run.reason == 'plateau_decay (1.0 -> 0.5)'


def test_a_finished_run_refuses_another_config_and_overwrites_on_request(tmp_path,
                                                                         shared_data_dir):
  arguments = CHAR_LM[:6] + ['--config.steps=20', '--config.log_every=10',
                             '--config.checkpoint_every=10', '--config.sample_length=5']
  folder = tmp_path / 'run'
  code, stdout, _ = run(arguments, folder)
  assert code == 0 and 'finished after 20 steps' in stdout
  before = files(folder)
  code, stdout, stderr = run(arguments + ['--config.seed=1'], folder)
  assert code != 0 and stdout == ''
  assert stderr.strip().count('\n') == 0  # one line
  assert 'seed (0 -> 1)' in stderr and '--overwrite' in stderr
  assert files(folder) == before  # byte for byte
  code, stdout, _ = run(arguments, folder)  # the same config: reported, not trained
  assert code == 0 and 'finished after 20 steps' in stdout and files(folder) == before

  code, _, stderr = run(arguments + ['--config.seed=1', '--overwrite'], folder)
  assert code == 0, stderr
  fresh = tmp_path / 'fresh'
  assert run(arguments + ['--config.seed=1'], fresh)[0] == 0
  for got, expected in zip(final_params(folder), final_params(fresh)):
    np.testing.assert_array_equal(got, expected)
  assert checkpoints.saved_steps(folder) == [10, 20]


def test_configuration_errors_are_one_line_without_a_traceback(tmp_path):
  for arguments, message in (
      (['--config.spectral_radus=1.1'], 'did you mean spectral_radius?'),
      (['--config.steps.x=3'], "has no field 'steps.x' (config.steps is "),
      (['--config.hidden_size=64.5'], "--config.hidden_size: expected an int (the type of its "
                                      "value 256), got '64.5'"),
      (['--config.measure_lyapunov=yes'], '--config.measure_lyapunov: expected true or false'),
      (['--config.spectral_radius=-1'], 'config.spectral_radius: expected a finite value >= 0'),
      (['--config.optimizer=adamx'], "config.optimizer: expected one of"),
      (['--config.data_dir=/nonexistent'], 'tinyshakespeare: /nonexistent/tinyshakespeare/'
                                           'input.txt is missing'),
      (['--config.hidden_size=1000000'], "the training state of 1 run(s) alone takes 1.12e+04 GiB, "
                                         "more than the"),
      (['--config.experiment=experiments.classify'], "config.corpus: the config has no field "
                                                     "'corpus'"),
      (['--config.corpus=foo'], "config.corpus: expected one of"),
      (['--config=experiments/configs/nope.py'], "--config: no config file at "
                                                 "'experiments/configs/nope.py'")):
    code, stdout, stderr = run(['--config=experiments/configs/char_lm.py', *arguments],
                               tmp_path / 'run')
    assert code == 1
    assert stderr.startswith('error: ') and message in stderr, stderr
    assert 'Traceback' not in stderr and stderr.strip().count('\n') == 0, stderr
  assert not (tmp_path / 'run').exists()
  (tmp_path / 'a_file').write_text('')
  code, _, stderr = run(['--config=experiments/configs/char_lm.py'], tmp_path / 'a_file' / 'run')
  assert code == 1 and stderr == (f'error: workdir: {tmp_path / "a_file"} is a file, expected a '
                                  f'folder (the run folder {tmp_path / "a_file" / "run"} or one '
                                  'that holds it)\n'), stderr


def test_help_lists_the_config_fields_and_exits_0():
  result = subprocess.run([sys.executable, '-m', 'launch.run', '--help',
                           '--config=experiments/configs/char_lm.py'], capture_output=True,
                          text=True)
  assert result.returncode == 0
  assert 'spectral_radius = 1.0  # of W_hh at init' in result.stdout
  assert "optimizer = 'adam'  # sgd | adagrad | adam | adamw; default 'sgd'" in result.stdout
  assert '--overwrite' in result.stdout and '``' not in result.stdout


def test_help_without_a_config_lists_the_flags_and_exits_0():
  for module, flag in (('launch.run', '--workdir'), ('launch.sweep', '--slurm.NAME=VALUE')):
    for asked in ('--help', '--helpfull'):  # absl's convention: --helpfull too
      result = subprocess.run([sys.executable, '-m', module, asked], capture_output=True,
                              text=True)
      assert result.returncode == 0 and flag in result.stdout, result.stderr
      assert 'With --config=CONFIG.py, --help also lists the fields' in result.stdout


def test_a_jobs_log_leaves_out_the_libraries_info_lines_unless_asked():
  """A run's log.txt and a job's stderr hold the run's own INFO lines; orbax's, absl's and
  JAX's from WARNING, unless --verbosity is 1 (DEBUG) or more."""
  import logging
  from rnnjax.train import job
  record = lambda name, path, level, error=None: logging.LogRecord(
      name, level, path, 1, 'm', None, error and (type(error), error, None))
  full_disk = OSError(errno.ENOSPC, 'No space left on device')
  records = [record('absl', '/v/site-packages/orbax/checkpoint/manager.py', logging.INFO),
             record('jax._src.xla_bridge', '/v/site-packages/jax/_src/xla_bridge.py',
                    logging.INFO),
             record('absl', '/v/site-packages/rnnjax/train/trainer.py', logging.INFO),
             record('absl', '/home/me/mylab/my_task.py', logging.INFO),
             record('absl', '/v/site-packages/orbax/checkpoint/manager.py', logging.WARNING),
             # a writer thread's traceback of the error the job reports in one line
             record('absl', '/v/site-packages/orbax/checkpoint/_src/futures/future.py',
                    logging.ERROR, full_disk),
             record('absl', '/v/site-packages/orbax/checkpoint/_src/futures/future.py',
                    logging.ERROR, KeyError('a bug keeps its traceback'))]
  assert [job._quiet(0)(r) for r in records] == [False, False, True, True, True, False, True]
  assert all(job._quiet(1)(r) for r in records)


def test_no_tpu_line_on_a_cpu(tmp_path, shared_data_dir):
  code, _, stderr = run(CHAR_LM[:6] + ['--config.steps=2', '--config.sample_length=2'],
                        tmp_path / 'run')
  assert code == 0 and 'libtpu' not in stderr and "backend 'tpu'" not in stderr, stderr


def test_sigterm_checkpoints_the_current_step(tmp_path, shared_data_dir):
  folder = tmp_path / 'run'
  process = launch(CHAR_LM, folder)
  first = folder / 'checkpoint' / '25' / '_CHECKPOINT_METADATA'
  deadline = time.time() + 300
  while not first.exists() and time.time() < deadline:
    time.sleep(0.01)
  process.send_signal(signal.SIGTERM)
  _, stderr = process.communicate(timeout=120)
  assert process.returncode == 128 + signal.SIGTERM
  assert 'run the same command again to resume' in stderr
  stopped = int(re.search(r'after step (\d+)', stderr).group(1))
  assert stopped >= 25 and checkpoints.saved_steps(folder)[-1] == stopped
  assert not (folder / 'summary.json').exists()


FREED_MEMORY = '''
import resource, sys
import numpy as np
from rnnjax.train import job
if sys.argv[1] == 'keep':
  assert job.keep_freed_memory()
np.ones(1 << 24, np.float32)  # 64 MiB, then freed
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
  np.ones(1 << 24, np.float32)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
'''


def test_a_run_process_reuses_freed_memory_without_page_faults():
  """``job.keep_freed_memory``: ten 64 MiB buffers allocated and freed, as XLA
  does with a step's temporaries, fault no page in once the first was freed; glibc's
  default maps each afresh (at least one fault per 2 MiB huge page of each)."""
  faults = {mode: int(subprocess.run([sys.executable, '-c', FREED_MEMORY, mode],
                                     capture_output=True, text=True, check=True).stdout)
            for mode in ('keep', 'default')}
  assert faults['keep'] < 32
  assert faults['default'] >= 10 * 32


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_the_run_resumes_once_there_is_room(tmpfs_disk,
                                                                         shared_data_dir):
  """A real full disk: a 400 KiB tmpfs. Besides the log lines, stderr holds the error
  line alone: not split by orbax's threads, nor followed by their "Event loop is
  closed" tracebacks."""
  disk = tmpfs_disk('400k')
  arguments = [*CHAR_LM, '--config.steps=3000', '--config.log_every=1',
               '--config.checkpoint_every=100']
  code, _, stderr = run(arguments, disk / 'run')
  assert code == 1
  lines = [line for line in stderr.splitlines() if not re.match(r'[IW]\d{4} ', line)]
  assert len(lines) == 1 and lines[0].startswith('error: ') and lines[0].endswith(
      '; free some space and run the same command again to resume from the last checkpoint'
  ), lines[:20]
  subprocess.run(['mount', '-o', 'remount,size=8m', str(disk)], check=True)  # room again
  code, stdout, stderr = run(arguments, disk / 'run')
  assert code == 0, stderr[-2000:]
  assert 'resumed 1 run(s) from the checkpoint of step' in stderr
  assert 'finished after 3000 steps' in stdout
  assert [line['step'] for line in records.read_metrics(disk / 'run')] == list(
      range(1, 3001))  # the torn last line cut, nothing twice
