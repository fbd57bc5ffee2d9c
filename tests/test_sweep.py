"""The sweep launcher on local processes: skip, rerun, lock, kill, fail, tables, every experiment."""

import csv
import json
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from experiments import char_lm
from rnnjax.train import checkpoints
from rnnjax.train import executors
from rnnjax.train import experiment
from rnnjax.train import plan
from rnnjax.train import records
from rnnjax.train import report
from rnnjax.train import sweep

TINY_CONFIG = '''
from experiments.configs.char_lm import get_config

def get_sweep():
  fixed = dict(hidden_size=8, embedding_size=4, batch_size=4, truncation=8, steps=STEPS,
               log_every=10, checkpoint_every=CHECKPOINT_EVERY, sample_length=5)
  return [dict(fixed, spectral_radius=0.5), dict(fixed, spectral_radius=1.5),
          dict(fixed, spectral_radius=RADIUS)]
'''


def write_config(tmp_path, steps=30, radius=-1.0, name='tiny.py', checkpoint_every=10):
  path = tmp_path / name
  path.write_text(TINY_CONFIG.replace('STEPS', str(steps)).replace('RADIUS', str(radius))
                  .replace('CHECKPOINT_EVERY', str(checkpoint_every)))
  return path


def launch(config, workdir, *flags, **kwargs):
  return subprocess.Popen([sys.executable, '-m', 'launch.sweep', f'--config={config}',
                           f'--workdir={workdir}', *flags], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, **kwargs)


def run_sweep(config, workdir, *flags):
  process = launch(config, workdir, *flags)
  stdout, stderr = process.communicate(timeout=900)
  return process.returncode, stdout, stderr


def summaries(workdir):
  return {f.name: json.loads((f / 'summary.json').read_text())
          for f in workdir.iterdir() if (f / 'summary.json').exists()}


def metrics_steps(folder):
  return [line['step'] for line in records.read_metrics(folder)]


def test_sweep_runs_skips_and_tabulates(tmp_path, shared_data_dir):
  config = write_config(tmp_path)
  workdir = tmp_path / 'sweep'
  code, output, errors = run_sweep(config, workdir, '--processes=1')  # one job, not cut in two
  assert code == 1  # a run failed its checks; the others ran
  assert 'failed: spectral_radius=-1.0: config.spectral_radius: expected a finite value >= 0' \
      in errors
  assert '3 runs (1 failed)' in output
  ended = summaries(workdir)
  assert sorted(ended) == ['spectral_radius=0.5', 'spectral_radius=1.5']
  for name, summary in ended.items():
    assert summary['status'] == 'finished' and summary['steps_done'] == 30
    assert metrics_steps(workdir / name) == [1, 10, 20, 30]
    timing = json.loads((workdir / name / 'timing.json').read_text())
    assert timing['group_size'] == 2  # the two valid runs trained as one vmapped group
    log = (workdir / name / 'log.txt').read_text()
    assert 'rnnjax.train.job' in log and 'step 30/30' in log
    assert 'orbax' not in log and 'CheckpointManager' not in log  # libraries' INFO left out
    other, = set(ended) - {name}  # a run's log holds its lines, not its group's other run's
    assert log.count('step 30/30') == 1 and other not in log
    job_log = re.search(r"the job's log: (\S+)", log)[1]  # the group's lines, written once
    assert '2 run(s) on one device' in pathlib.Path(job_log).read_text()
  rows = list(csv.DictReader(open(workdir / 'results.csv')))
  assert [r['spectral_radius'] for r in rows] == ['0.5', '1.5', '-1.0']
  assert [r['status'] for r in rows] == ['finished', 'finished', 'failed']
  assert float(rows[0]['first_profile_k1']) == pytest.approx(
      ended['spectral_radius=0.5']['first_profile']['1'])
  assert (workdir / 'gradient_profile.png').stat().st_size > 10_000
  table = (workdir / 'results.md').read_text()
  assert table.startswith('Measured at commit ') and table in output

  # Relaunch: the ended runs are not trained again; same table.
  logs = {name: (workdir / name / 'log.txt').read_text() for name in ended}
  code, again, _ = run_sweep(config, workdir)
  assert code == 1 and '2 ended already' in again
  assert {name: (workdir / name / 'log.txt').read_text() for name in ended} == logs
  assert (workdir / 'results.md').read_text() == table


def test_command_line_fields_set_every_run_and_a_swept_one_is_refused(tmp_path,
                                                                     shared_data_dir):
  config = write_config(tmp_path, steps=10, radius=1.0)
  workdir = tmp_path / 'sweep'
  code, output, errors = run_sweep(config, workdir, '--config.spectral_radius=0.7')
  assert code == 1 and output == ''
  assert errors == (f'error: --config.spectral_radius: get_sweep() in {config} sweeps '
                    'spectral_radius (its runs differ in it); change its values in get_sweep() '
                    'instead\n')
  assert not workdir.exists()
  code, output, errors = run_sweep(config, workdir, '--config.spectral_radus=2')
  assert code == 1 and errors.startswith('error: --config.spectral_radus: ') and \
      'did you mean spectral_radius?' in errors and not workdir.exists()
  code, output, errors = run_sweep(config, workdir, '--config.hidden_size=-1')
  assert code == 1 and errors == ('error: every run of the sweep fails its checks: '
                                  'config.hidden_size: expected an int >= 1, got -1; '
                                  f'{workdir} is left as it was\n') and not workdir.exists()
  spaced = subprocess.run([sys.executable, '-m', 'launch.sweep', '--config', str(config),
                           '--config.spectral_radus=2', f'--workdir={workdir}'],
                          capture_output=True, text=True)  # names this file, not another
  assert spaced.returncode == 1 and spaced.stderr.startswith(
      f'error: --config.spectral_radus: {config} has no field')

  flags = ('--config.learning_rate=0.25', '--config.seed=3', '--config.steps=5')  # steps: in
  # place of get_sweep()'s 10 for every run
  code, output, errors = run_sweep(config, workdir, *flags)
  assert code == 0, errors
  ended = summaries(workdir)  # the folders named after the swept values alone
  assert sorted(ended) == ['spectral_radius=0.5', 'spectral_radius=1.0', 'spectral_radius=1.5']
  for name in ended:
    run_config = json.loads((workdir / name / 'config.json').read_text())
    assert (run_config['learning_rate'], run_config['seed'], run_config['steps'],
            run_config['spectral_radius']) == (0.25, 3, 5, float(name.split('=')[1]))
  assert ("\n\nSet for every run on the command line: learning_rate=0.25, seed=3, steps=5.\n"
          in (workdir / 'results.md').read_text())
  code, output, _ = run_sweep(config, workdir, *flags)
  assert code == 0 and '3 runs: 3 ended already' in output
  code, output, errors = run_sweep(config, workdir, *flags, f'--config.data_dir={tmp_path}/no')
  assert code == 1 and '3 run(s) whose config changed will train again' in output
  assert errors.count('is missing') == 3  # each job failed on its data before clearing its
  assert summaries(workdir) == ended  # run: the finished runs are kept, not cleared first
  code, output, _ = run_sweep(config, workdir)  # without them: every run's config changed
  assert code == 0 and '3 run(s) whose config changed will train again' in output
  assert all(json.loads((workdir / name / 'config.json').read_text())['learning_rate'] != 0.25
             for name in ended)


def test_command_line_fields_replace_the_fixed_ones_and_never_a_swept_one():
  import ml_collections
  base = ml_collections.ConfigDict({'extra': {'a': 0, 'b': 0}, 'steps': 1, 'seed': 0})
  nested = [{'extra.a': 1, 'steps': 10}, {'extra.a': 2, 'steps': 10}]
  configs = sweep.run_configs(experiment.override(base, {'steps': 3, 'seed': 4}), nested,
                              {'steps': 3, 'seed': 4}, 'f.py')
  assert [c.to_dict() for c in configs] == [{'extra': {'a': 1, 'b': 0}, 'steps': 3, 'seed': 4},
                                            {'extra': {'a': 2, 'b': 0}, 'steps': 3, 'seed': 4}]
  # a command-line field inside a swept dict (or around one) would set every run alike
  whole = [{'extra': {'a': 1}}, {'extra': {'a': 2}}]
  for given, swept, runs in (('extra.a', 'extra', whole), ('extra.b', 'extra', whole),
                             ('extra', 'extra', whole), ('extra', 'extra.a', nested)):
    with pytest.raises(sweep.SweepError, match=f'--config.{given}: get_sweep\\(\\) in f.py '
                                               f'sweeps {swept} \\(its runs differ in it\\)'):
      sweep.run_configs(base, runs, {given: 3}, 'f.py')


def test_a_workdir_that_cannot_be_a_folder_is_one_line(tmp_path):
  """A workdir that is a file, or under one, or a dangling link: one line, no traceback."""
  config = write_config(tmp_path, radius=1.0)
  (tmp_path / 'a_file').write_text('')
  (tmp_path / 'a_link').symlink_to(tmp_path / 'nothing')
  for workdir, message in (
      (tmp_path / 'a_file', f'workdir: {tmp_path / "a_file"} is a file, expected a folder'),
      (tmp_path / 'a_file' / 'sweep', f'workdir: {tmp_path / "a_file"} is a file'),
      (tmp_path / 'a_link', f'workdir: {tmp_path / "a_link"} is a link to '
                            f'{tmp_path / "nothing"}, which does not exist')):
    code, output, errors = run_sweep(config, workdir)
    assert code == 1 and output == '' and errors.startswith(f'error: {message}'), errors
    assert errors.count('\n') == 1, errors
  assert not (tmp_path / 'nothing').exists()


def test_a_changed_run_trains_again_and_only_it(tmp_path, shared_data_dir):
  workdir = tmp_path / 'sweep'
  assert run_sweep(write_config(tmp_path, radius=1.0), workdir)[0] == 0
  before = summaries(workdir)
  changed = write_config(tmp_path, radius=1.2)  # the third run's spectral radius
  (workdir / 'a_link').symlink_to(workdir / 'spectral_radius=0.5')  # as the README makes one
  code, output, _ = run_sweep(changed, workdir)
  assert code == 0
  assert '2 ended already' in output and '1 to train' in output
  assert (f'note: 1 run folder(s) in {workdir} belong to no run of this sweep and are left as '
          'they are: spectral_radius=1.0 (') in output
  after = summaries(workdir)
  for name in ('spectral_radius=0.5', 'spectral_radius=1.5'):
    assert after[name] == before[name]
  assert 'spectral_radius=1.2' in after  # a new folder for the new value
  damaged = workdir / 'spectral_radius=0.5' / 'config.json'  # refused, not read as "changed"
  original = damaged.read_text()                               # (which would clear the run)
  damaged.write_text(original[:100])
  code, output, errors = run_sweep(changed, workdir)
  assert code == 1 and 'whose config changed' not in output
  assert (f"failed: spectral_radius=0.5: {damaged.parent} holds metrics.jsonl, summary.json, "
          "checkpoint, tensorboard but no readable config.json; pass --overwrite to clear it"
          ) in errors
  assert summaries(workdir)['spectral_radius=0.5'] == before['spectral_radius=0.5']
  damaged.write_text(original)
  steps = write_config(tmp_path, steps=40, radius=1.0, name='longer.py')  # every run changes
  code, output, _ = run_sweep(steps, workdir)
  assert code == 0 and '3 run(s) whose config changed will train again' in output
  assert all(summaries(workdir)[name]['steps_done'] == 40
             for name in ('spectral_radius=0.5', 'spectral_radius=1.5', 'spectral_radius=1.0'))


def test_a_second_launcher_on_a_locked_sweep_exits_naming_the_holder(tmp_path,
                                                                     shared_data_dir):
  config = write_config(tmp_path, steps=100_000, radius=1.0)
  workdir = tmp_path / 'sweep'
  first = launch(config, workdir)
  wait_until(lambda: (workdir / '.lock').exists(), 120)
  time.sleep(1)
  code, _, errors = run_sweep(config, workdir)
  assert code == 1
  assert f'is in use by pid {first.pid} on host' in errors
  first.send_signal(signal.SIGTERM)
  first.communicate(timeout=120)
  assert first.returncode == 143


@pytest.mark.slow
def test_after_sigkill_of_the_launcher_a_relaunch_trains_no_run_twice(tmp_path,
                                                                      shared_data_dir):
  # a checkpoint every 100 steps (an orbax save costs about 100 steps of this model)
  config = write_config(tmp_path, steps=3000, radius=1.0, checkpoint_every=100)
  workdir = tmp_path / 'sweep'
  first = launch(config, workdir)
  wait_until(lambda: all(checkpoints.saved_steps(workdir / f'spectral_radius={r}')
                         for r in (0.5, 1.5, 1.0)), 300)
  first.send_signal(signal.SIGKILL)
  first.communicate()
  time.sleep(1)  # the children get SIGKILL from the kernel as their parent dies
  workers = {pid for radius in (0.5, 1.5, 1.0)
             for pid in worker_pids(workdir / f'spectral_radius={radius}')}
  assert workers and not any(alive(pid) for pid in workers)  # no orphan
  code, output, errors = run_sweep(config, workdir)
  assert code == 0, errors
  assert list((workdir / '.jobs').glob('*.result.json'))  # this launch's, in the
  # sweep's own folder
  for radius in (0.5, 1.5, 1.0):
    assert metrics_steps(workdir / f'spectral_radius={radius}') == [1] + list(
        range(10, 3001, 10))


def alive(pid: int) -> bool:
  """Whether a process lives (a zombie, dead but not yet reaped, does not)."""
  try:
    return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z'
  except OSError:
    return False


def worker_pids(folder):
  """The pids of the workers that ran a run's jobs, from its log.txt."""
  return [int(pid) for pid in re.findall(r'rnnjax\.train\.job \(pid (\d+)\)',
                                          (folder / 'log.txt').read_text())]


@pytest.mark.slow
def test_a_worker_runs_its_cores_jobs_and_one_killed_takes_only_its_job(tmp_path,
                                                                       shared_data_dir):
  """One process, runs one a job: one worker trains them one after another. Killed -9
  in the first job, that job fails with the signal named, the next jobs run on a new
  worker, and a relaunch resumes the killed run from its checkpoint."""
  config = write_config(tmp_path, steps=400, radius=1.0, checkpoint_every=50)
  workdir = tmp_path / 'sweep'
  process = launch(config, workdir, '--processes=1', '--max_group_size=1')
  deadline = time.time() + 300
  first = None
  while time.time() < deadline and first is None:
    for folder in workdir.glob('spectral_radius=*'):
      if (folder / 'metrics.jsonl').exists() and checkpoints.saved_steps(folder):
        first = folder
    time.sleep(0.05)
  killed, = worker_pids(first)
  os.kill(killed, signal.SIGKILL)
  _, errors = process.communicate(timeout=600)
  assert process.returncode == 1
  assert errors.strip().startswith(f'failed: {first.name}: its process (pid {killed}) was '
                                   'killed by signal 9')
  assert (f'its process (pid {killed}) was killed by signal 9'
          in (first / 'log.txt').read_text())  # the run's own log says so too
  others = [f for f in workdir.glob('spectral_radius=*') if f != first]
  assert len(others) == 2
  successor, = set(worker_pids(others[0]) + worker_pids(others[1]))  # one worker, two jobs
  assert successor != killed
  assert all(json.loads((f / 'summary.json').read_text())['steps_done'] == 400 for f in others)
  resumed = checkpoints.saved_steps(first)[-1]
  code, output, errors = run_sweep(config, workdir)
  assert code == 0, errors
  assert '1 to train (1 from their checkpoints)' in output
  assert metrics_steps(first) == [1] + list(range(10, 401, 10))
  assert f'resumed 1 run(s) from the checkpoint of step {resumed}' in (first / 'log.txt').read_text()


TINY_RUN = dict(hidden_size=8, embedding_size=4, batch_size=4, truncation=8, steps=3,
                log_every=10, checkpoint_every=10, sample_length=5)


def test_no_module_holds_a_cache_of_programs():
  """A worker's memory stays bounded from job to job: compiled programs belong to the
  ``trainer.Programs`` a job holds and drops, and JAX's own caches are cleared before a job of
  another program (``job.serve``); no module of the library keeps a cache of its own."""
  import importlib
  import pkgutil
  import rnnjax
  for info in pkgutil.walk_packages(rnnjax.__path__, 'rnnjax.'):
    module = importlib.import_module(info.name)
    cached = [name for name, value in vars(module).items() if hasattr(value, 'cache_info')]
    assert cached == [], info.name


def job_of(tmp_path, name, **values):
  config = char_lm.EXPERIMENT.config(**dict(TINY_RUN, **values))
  return {'id': name, 'experiment': char_lm.EXPERIMENT.name, 'overwrite': 'none',
          'result': str(tmp_path / f'{name}.result.json'),
          'runs': [{'folder': str(tmp_path / name), 'config': experiment.as_dict(config)}]}


def test_a_worker_keeps_jax_caches_only_between_jobs_of_one_program(tmp_path, monkeypatch):
  """``job.serve`` clears JAX's caches before its first job and before each job whose program
  (experiment and group key) differs from the last one's: another seed or learning rate keeps
  them, another hidden size or an experiment that does not load clears them."""
  import io
  from rnnjax.train import job
  calls = []
  monkeypatch.setattr(job, 'setup_process', lambda: [])
  monkeypatch.setattr(job.jax, 'clear_caches', lambda: calls.append('clear'))
  monkeypatch.setattr(job, 'run_job', lambda one, *args, **kwargs: calls.append(one['id']) or {
      'id': one['id'], 'exit': 'ok', 'runs': []})
  jobs = [job_of(tmp_path, 'a', seed=0), job_of(tmp_path, 'b', seed=1),
          job_of(tmp_path, 'c', seed=2, learning_rate=0.5), job_of(tmp_path, 'd', hidden_size=9),
          job_of(tmp_path, 'e', hidden_size=9), dict(job_of(tmp_path, 'f'), experiment='nowhere'),
          dict(job_of(tmp_path, 'g'), experiment='nowhere'), job_of(tmp_path, 'h', hidden_size=9)]
  assert job.serve([json.dumps(one) for one in jobs], io.BytesIO()) == 0
  assert calls == ['clear', 'a', 'b', 'c', 'clear', 'd', 'e', 'clear', 'f', 'clear', 'g',
                   'clear', 'h']


def test_a_worker_signalled_after_a_job_takes_no_other(tmp_path, shared_data_dir):
  """A signal that comes after a job's training (its report, or between jobs) ends the
  worker before the next job: it exits 128 + 15 without taking it."""
  worker = subprocess.Popen([sys.executable, '-m', 'rnnjax.train.job'], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  worker.stdin.write(json.dumps(job_of(tmp_path, 'one')) + '\n')
  worker.stdin.flush()
  events = [json.loads(worker.stdout.readline())]
  while events[-1]['event'] != 'ended':
    events.append(json.loads(worker.stdout.readline()))
  assert events[0] == {'job': 'one', 'event': 'taken'}
  result = json.loads((tmp_path / 'one.result.json').read_text())
  assert result['exit'] == 'ok' and result['runs'][0]['status'] == 'finished'
  worker.send_signal(signal.SIGTERM)
  time.sleep(1)
  try:  # the worker may have ended already: then the pipe is closed
    worker.stdin.write(json.dumps(job_of(tmp_path, 'two')) + '\n')
    worker.stdin.close()
  except BrokenPipeError:
    pass
  assert worker.stdout.read() == ''  # not taken
  assert worker.wait(timeout=60) == 143
  assert not (tmp_path / 'two').exists()


def test_a_job_handed_to_a_worker_that_ends_untaken_runs_on_a_new_one(tmp_path,
                                                                     shared_data_dir):
  local = executors.find('local')(executors.Settings(tmp_path / 'jobs', 1, 1))
  start = local._worker
  stopping = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.readline(); '
                               'sys.exit(143)'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)

  def worker(cores):
    if not local.workers:  # the first: a worker that ends without taking its job
      local.workers[cores] = stopping
      return stopping
    return start(cores)

  local._worker = worker
  ends = []
  job = job_of(tmp_path, 'run')
  local.run([job], lambda job, result: ends.append(result), lambda job, step: None, print)
  assert [result['exit'] for result in ends] == ['ok']
  assert json.loads((tmp_path / 'run' / 'summary.json').read_text())['steps_done'] == 3
  assert (f'its process (pid {stopping.pid}) ended with exit status 143 before it took the '
          'job') in (tmp_path / 'run' / 'log.txt').read_text()


def wait_until(condition, seconds, every=0.1):
  """Until ``condition()`` holds, or ``seconds`` have passed."""
  deadline = time.time() + seconds
  while not condition() and time.time() < deadline:
    time.sleep(every)


def wait_for_training(workdir, runs, seconds=120):
  """Until ``runs`` run folders of the sweep have a metrics line: their workers took their
  jobs and train (a signal before that finds a run with nothing to checkpoint)."""
  wait_until(lambda: len(list(workdir.glob('*/metrics.jsonl'))) >= runs, seconds, 0.5)


def test_interrupted_sweep_stops_its_runs_and_resumes(tmp_path, shared_data_dir):
  config = write_config(tmp_path, steps=100_000, radius=1.0)
  workdir = tmp_path / 'sweep'
  process = launch(config, workdir)
  wait_for_training(workdir, runs=3)
  process.send_signal(signal.SIGTERM)
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 143
  assert 'interrupted: 0 of 3 runs have ended and are kept' in output
  workers = {pid for folder in workdir.glob('spectral_radius=*') for pid in worker_pids(folder)}
  assert workers and not any(alive(pid) for pid in workers)  # none left
  for radius in (0.5, 1.5, 1.0):  # each run checkpointed the step it stopped at
    assert checkpoints.saved_steps(workdir / f'spectral_radius={radius}')


def test_ctrl_c_stops_a_launcher_started_with_sigint_ignored(tmp_path, shared_data_dir):
  """A script's background job starts with SIGINT ignored (POSIX); the launcher sets its
  own handler, as its runs do, so Ctrl-C stops the sweep instead of its next jobs
  starting on new workers."""
  config = write_config(tmp_path, steps=100_000, radius=1.0)
  workdir = tmp_path / 'sweep'
  process = launch(config, workdir, '--max_group_size=1', start_new_session=True,
                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
  wait_for_training(workdir, runs=1)
  os.killpg(process.pid, signal.SIGINT)
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 130
  assert 'interrupted: 0 of 3 runs have ended and are kept' in output
  assert len(list(workdir.glob('*/log.txt'))) == 2  # the third job never started


def test_ctrl_c_on_a_sweep_checkpoints_every_run_without_a_traceback(tmp_path, shared_data_dir):
  """Ctrl-C reaches the launcher and its runs at once (one process group): each run
  saves the step it is at, as on SIGTERM, instead of dying in a KeyboardInterrupt
  (which lost everything since the last periodic checkpoint)."""
  config = write_config(tmp_path, steps=100_000, radius=1.0)
  workdir = tmp_path / 'sweep'
  process = launch(config, workdir, start_new_session=True)
  wait_for_training(workdir, runs=3)
  os.killpg(process.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 130
  assert 'interrupted: 0 of 3 runs have ended and are kept' in output
  for radius in (0.5, 1.5, 1.0):
    folder = workdir / f'spectral_radius={radius}'
    assert checkpoints.saved_steps(folder)
    log = (folder / 'log.txt').read_text()
    assert 'interrupted: stopped on request after step' in log
    assert 'Traceback' not in log
  again = launch(config, workdir, start_new_session=True)
  first_line = again.stdout.readline()
  os.killpg(again.pid, signal.SIGINT)
  again.communicate(timeout=120)
  assert '3 to train (3 from their checkpoints)' in first_line


def test_a_sweep_whose_runs_all_fail_exits_non_zero_with_each_reason(tmp_path):
  config = write_config(tmp_path, radius=1.0)
  workdir = tmp_path / 'sweep'
  process = subprocess.run(
      [sys.executable, '-m', 'launch.sweep', f'--config={config}', f'--workdir={workdir}'],
      capture_output=True, text=True, env=dict(os.environ, RNNJAX_DATA_DIR=str(tmp_path / 'no')))
  assert process.returncode == 1
  failed = [line for line in process.stderr.splitlines() if line.startswith('failed: ')]
  assert len(failed) == 3
  assert all('tinyshakespeare' in line and 'is missing' in line for line in failed), failed


def test_a_misspelt_sweep_key_is_an_error_before_any_run(tmp_path):
  config = tmp_path / 'typo.py'
  config.write_text(write_config(tmp_path, steps=3, radius=1.0).read_text().replace(
      'spectral_radius=1.5', 'spectral_radus=1.5'))
  code, _, errors = run_sweep(config, tmp_path / 'sweep')
  assert code == 1
  assert ("get_sweep: run 1: config.spectral_radus: the config has no field 'spectral_radus'; "
          'did you mean spectral_radius?') in errors
  assert not any((tmp_path / 'sweep').glob('*/summary.json'))
  twice = write_config(tmp_path, radius=0.5, name='twice.py')
  code, _, errors = run_sweep(twice, tmp_path / 'sweep')
  assert code == 1 and errors == ('error: get_sweep: runs [0, 2] have the same swept values '
                                  '(spectral_radius=0.5); give each run its own\n')


@pytest.mark.parametrize('source, got', [
    ('def get_sweep():\n  return (dict(seed=seed) for seed in range(2))', 'get_sweep() in {} returned '
     'a generator'),
    ("def get_sweep():\n  return {'seed': 1}", 'get_sweep() in {} returned a dict'),
    ("def get_sweep():\n  return [('seed', 1)]", 'get_sweep() in {} returned a list holding a tuple'),
    ('def get_sweep():\n  return []', 'get_sweep() in {} returned no runs'),
])
def test_a_get_sweep_of_another_shape_is_one_line(tmp_path, source, got):
  config = tmp_path / 'odd.py'
  config.write_text(f'from experiments.configs.char_lm import get_config\n\n{source}\n')
  code, _, errors = run_sweep(config, tmp_path / 'sweep')
  assert code == 1 and errors == (f'error: --config: {got.format(config)}; expected a list of '
                                  'dicts of field values, one a run\n')
  assert not (tmp_path / 'sweep').exists()


def test_a_get_config_of_another_type_is_one_line(tmp_path):
  config = tmp_path / 'odd.py'
  config.write_text("def get_config():\n  return {'experiment': 'experiments.char_lm'}\n")
  process = subprocess.run([sys.executable, '-m', 'launch.run', f'--config={config}',
                            f'--workdir={tmp_path / "run"}'], capture_output=True, text=True)
  assert process.returncode == 1 and process.stderr == (
      f'error: --config: get_config() in {config} returned a dict; expected an '
      'ml_collections.ConfigDict (EXPERIMENT.config(...))\n')


def test_a_misspelt_or_mistyped_slurm_field_is_one_line(tmp_path):
  config = write_config(tmp_path, radius=0.5)
  for flag, message in (('--slurm.partition=debug', "error: --slurm.partition: --slurm has no "
                         "field 'partition'; did you mean slurm_partition?\n"),
                        ('--slurm.timeout_min=soon', "error: --slurm.timeout_min: expected an int "
                         "(the type of its value 60), got 'soon'\n")):
    code, _, errors = run_sweep(config, tmp_path / 'sweep', '--executor=slurm', flag)
    assert code == 1 and errors == message and not (tmp_path / 'sweep').exists()


@pytest.mark.slow
def test_classifier_and_long_range_sweeps(tmp_path, shared_data_dir):
  classify = tmp_path / 'classify_tiny.py'
  classify.write_text('''
from experiments.configs.classify import get_config as base

def get_config():
  config = base()
  config.update(max_length=16, embedding_size=8, hidden_size=8, batch_size=32, steps=20,
                log_every=10, checkpoint_every=0)
  return config

def get_sweep():
  return [{'cell': cell, 'last_state': last} for cell in ('elman', 'gru')
          for last in ('true', 'padded_end')]
''')
  code, output, errors = run_sweep(classify, tmp_path / 'classify')
  assert code == 0, errors
  table = (tmp_path / 'classify' / 'results.md').read_text()
  assert '| cell | last_state | status | test_accuracy |' in table and table in output
  assert table.count('| finished |') == 4
  long_range = tmp_path / 'long_range_tiny.py'
  long_range.write_text('''
import itertools
from experiments.configs.long_range import get_config as base

def get_config():
  config = base()
  config.update(steps=20, log_every=10, checkpoint_every=0, test_size=64, hidden_size=8)
  return config

def get_sweep():
  return [{'length': t, 'recurrent_init': init, 'activation': act, 'clipping': clip,
           'seed': seed} for t, (init, act), clip, seed in itertools.product(
              (5, 10), (('gaussian', 'tanh'), ('identity', 'relu')), ('none', 'global_norm'),
              (0, 1))]
''')
  code, output, errors = run_sweep(long_range, tmp_path / 'long_range')
  assert code == 0, errors
  # one vmapped program per T and activation, each cut into one job per process
  processes = len(os.sched_getaffinity(0))
  assert f'16 to train in {4 * min(processes, 4)} job(s) on {processes} process(es)' in output
  over_seeds = (tmp_path / 'long_range' / 'results_over_seeds.md').read_text()
  assert over_seeds.count('\n| ') == 2 * 2 * 2 + 1  # header + T x init x clipping
  assert ('| seeds | diverged | failed | test_error: median [IQR] | success: k of n (95% CI) |'
          in over_seeds)
  heatmaps = sorted(p.name for p in (tmp_path / 'long_range').glob('heatmap_*.png'))
  assert heatmaps == ['heatmap_clipping=global_norm.png', 'heatmap_clipping=none.png']


def test_swept_keys_and_names():
  runs = [{'a': 1, 'b': 'x', 'c': 0}, {'a': 2, 'b': 'x', 'c': 0}, {'a': 2, 'b': 'y', 'c': 0}]
  assert sweep.swept_keys(runs) == ['a', 'b']
  assert plan.folder_names(runs, ['a', 'b']) == ['a=1,b=x', 'a=2,b=x', 'a=2,b=y']


def test_groups_are_cut_evenly_over_the_processes_distinct_programs_first(tmp_path):
  from experiments.configs import char_lm as char_lm_config

  def jobs(runs, max_group_size, parts):
    configs = sweep.run_configs(char_lm_config.get_config(), runs, {})
    plans = plan.plan(char_lm.EXPERIMENT, configs, [tmp_path / str(i) for i in range(len(runs))])
    return plan.jobs(char_lm.EXPERIMENT, plans, max_group_size, parts)

  runs = [{'truncation': 64, 'spectral_radius': 0.5 + i / 10} for i in range(5)] + [
      {'truncation': 16, 'spectral_radius': 0.5 + i / 10} for i in range(3)]
  # tau 64's 5 runs into 3 + 2, tau 16's 3 into 2 + 1; the job of most work first, then
  # the most work of another program, so that the two processes compile different programs
  assert jobs(runs, 0, parts=2) == [[2, 3, 4], [0, 1], [6, 7], [5]]  # 3 and 2 runs: two
  even = [{'truncation': tau, 'spectral_radius': 0.5 + i / 10} for tau in (64, 16)  # programs
          for i in range(4)]
  assert jobs(even, 0, parts=2) == [[0, 1], [4, 5], [2, 3], [6, 7]]
  assert jobs(runs, 0, parts=1) == [[0, 1, 2, 3, 4], [5, 6, 7]]
  assert jobs(runs, 0, parts=8) == [
      [0], [5], [1], [2], [3], [4], [6], [7]]  # two programs: one run at tau 64, one at 16
  assert jobs(runs, 2, parts=2) == [
      [1, 2], [0], [3, 4], [6, 7], [5]]  # at most 2 a job, sizes differing by at most one


def test_default_sweep_is_the_main_job():
  from experiments.configs import char_lm as module
  runs = module.get_sweep()
  assert len(runs) == 20
  assert sweep.swept_keys(runs) == ['spectral_radius', 'clipping', 'truncation']
  assert sorted({r['spectral_radius'] for r in runs}) == [0.5, 0.9, 1.0, 1.1, 1.5]
  assert {r['clipping'] for r in runs} == {'none', 'global_norm'}
  assert {r['truncation'] for r in runs} == {16, 64}


@pytest.mark.slow
def test_second_sweep_with_one_changed_run_compiles_nothing(tmp_path, shared_data_dir):
  """JAX's persistent compilation cache (``RNNJAX_COMPILATION_CACHE``): the first sweep
  fills it; a second sweep, in a new folder, whose one changed run differs in a value
  (a spectral radius, not a program) writes no new cache entry: every program of it,
  training, diagnostics, evaluation and sampling, was compiled before."""
  cache = tmp_path / 'cache'
  environment = dict(os.environ, RNNJAX_COMPILATION_CACHE=str(cache))
  for config, workdir in ((write_config(tmp_path, steps=3, radius=1.0), 'first'),
                          (write_config(tmp_path, steps=3, radius=1.2, name='changed.py'),
                           'second')):
    process = launch(config, tmp_path / workdir, env=environment)
    _, errors = process.communicate(timeout=900)
    assert process.returncode == 0, errors[-2000:]
    if workdir == 'first':
      entries = sorted(os.listdir(cache))
  assert entries and sorted(os.listdir(cache)) == entries
  assert summaries(tmp_path / 'second')['spectral_radius=1.2']['steps_done'] == 3


def test_points_plot_groups_runs_and_leaves_out_what_is_not_a_number(tmp_path, monkeypatch):
  drawn = []
  monkeypatch.setattr(report, '_draw', lambda path, panels, x, y, log='', title='': drawn.append(
      (path.name, {name: [(list(c[0]), list(c[1]), c[2]['label']) for c in curves]
                   for name, curves in panels.items()}, log)))
  rows = [{'method': 'deer', 'hidden_size': 4, 'iterations': 3.0, 'exponent': -0.5},
          {'method': 'deer', 'hidden_size': 4, 'iterations': math.inf, 'exponent': 0.1},
          {'method': 'quasi', 'hidden_size': 4, 'iterations': 12.0, 'exponent': -0.5},
          {'method': 'quasi', 'hidden_size': 16, 'iterations': 40.0, 'exponent': -0.3},
          {'method': 'quasi', 'hidden_size': 16, 'iterations': None, 'exponent': -0.2}]
  report._plot_points(rows, 'iterations', 'exponent', 'method', 'hidden_size', tmp_path)
  assert drawn == [('points_iterations.png', {
      'hidden_size=4': [([-0.5], [3.0], 'method=deer'), ([-0.5], [12.0], 'method=quasi')],
      'hidden_size=16': [([-0.3], [40.0], 'method=quasi')]}, 'y')]
  drawn.clear()
  report._plot_points(rows, 'exponent', 'iterations', 'method', 'hidden_size', tmp_path)
  assert drawn[0][2] == ''  # a y that is not positive: a linear axis
  drawn.clear()
  report._plot_points(rows[4:], 'iterations', 'exponent', 'method', 'hidden_size', tmp_path)
  assert drawn == []  # nothing to draw: no file


@pytest.mark.parametrize('on_divergence, status', [('stop', 'diverged'), ('skip', 'finished')])
def test_a_run_whose_report_fails_keeps_its_status_and_the_error(tmp_path, shared_data_dir,
                                                                 on_divergence, status):
  """Adam at a rate of 1e38 overflows float32 within a few steps: the run stops as
  diverged (or, skipping its non-finite steps, finishes), and its report's sampling error is
  kept in its summary, not made a failure that every rerun repeats."""
  from experiments.configs.char_lm import get_config
  from rnnjax.train import harness
  config = experiment.override(get_config(), dict(
      hidden_size=16, steps=20, log_every=10, checkpoint_every=10, learning_rate=1e38,
      sample_length=5, on_divergence=on_divergence))
  [summary] = harness.run_group(char_lm.EXPERIMENT, [config], [tmp_path / 'run'])
  assert summary['status'] == status
  assert 'logits at generated step 0 are not finite' in summary['report_error']
  assert json.loads((tmp_path / 'run' / 'summary.json').read_text())['status'] == status


def test_the_last_events_of_a_job_written_at_once_end_it_at_once(tmp_path, monkeypatch):
  """A worker whose 'taken' and 'ended' arrive in one read: the job ends when they come, not
  after the stall watch names and kills the worker."""
  fake = tmp_path / 'worker'
  fake.write_text('#!/bin/sh\nread job\nprintf \'{"job": "0", "event": "taken"}\\n'
                  '{"job": "0", "event": "ended"}\\n\'\nread more\n')
  fake.chmod(0o755)
  monkeypatch.setattr(sys, 'executable', str(fake))
  local = executors.find('local')(executors.Settings(tmp_path / 'jobs', 1, 1, 2.0))
  said, ended = [], []
  job = {'id': '0', 'result': str(tmp_path / 'jobs' / '0.result.json'),
         'runs': [{'folder': str(tmp_path / 'run'), 'config': {}}]}
  local.run([job], lambda job, result: ended.append(result), lambda job, step: None, said.append)
  assert said == [] and len(ended) == 1


def test_a_jobs_result_comes_with_its_ended_event_which_a_full_disk_cannot_lose(
    tmp_path, monkeypatch):
  """A worker on a full disk cannot write its job's result file: the result its 'ended' event
  carries is the job's, so each run's reason names the full disk, not 'ended without a
  result'."""
  result = {'id': '0', 'exit': 'full_disk', 'runs': [
      {'folder': str(tmp_path / 'run'), 'status': 'failed', 'reason': 'the disk is full'}]}
  fake = tmp_path / 'worker'
  fake.write_text('#!/bin/sh\nread job\ncat <<EOF\n{"job": "0", "event": "taken"}\n'
                  + json.dumps({'job': '0', 'event': 'ended', 'result': result})
                  + '\nEOF\nread more\n')
  fake.chmod(0o755)
  monkeypatch.setattr(sys, 'executable', str(fake))
  local = executors.find('local')(executors.Settings(tmp_path / 'jobs', 1, 1, 2.0))
  ended = []
  job = {'id': '0', 'result': str(tmp_path / 'jobs' / '0.result.json'),
         'runs': [{'folder': str(tmp_path / 'run'), 'config': {}}]}
  local.run([job], lambda job, got: ended.append(got), lambda job, step: None, print)
  assert ended == [result] and not (tmp_path / 'jobs' / '0.result.json').exists()


def test_launcher_flags_out_of_range_are_one_line_before_the_workdir(tmp_path):
  config = write_config(tmp_path, radius=0.5)
  for flag in ('--max_group_size=-3', '--processes=-1', '--threads_per_run=-2',
               '--stall_minutes=0'):
    code, _, errors = run_sweep(config, tmp_path / 'sweep', flag)
    assert code == 1 and errors.startswith(f'error: flag {flag}: ') and errors.count('\n') == 1
    assert not (tmp_path / 'sweep').exists()
  config, cores = write_config(tmp_path, radius=1.0, name='ok.py'), len(os.sched_getaffinity(0))
  for flag, got in ((f'--processes={cores + 1}', f'{cores + 1} x 1'),
                    (f'--threads_per_run={cores + 1}', f'1 x {cores + 1}')):
    code, _, errors = run_sweep(config, tmp_path / 'sweep', flag)
    assert code == 1 and errors == (f'error: --processes x --threads_per_run: expected at most '
                                    f'the {cores} cores, got {got}\n')
    assert not (tmp_path / 'sweep').exists()
  no_slurm = launch(config, tmp_path / 'sweep', '--executor=slurm',
                    env=dict(os.environ, PATH=str(tmp_path)))  # no srun on it
  _, errors = no_slurm.communicate(timeout=300)
  assert no_slurm.returncode == 1 and errors.startswith('error: --executor=slurm: no Slurm here')
  assert errors.count('\n') == 1 and not (tmp_path / 'sweep').exists()


ONE_STEP_RUNS = '''
from experiments.configs.char_lm import get_config

def get_sweep():
  fixed = dict(hidden_size=8, embedding_size=4, batch_size=4, truncation=8, steps=1,
               log_every=1, checkpoint_every=1, sample_length=5)
  return [dict(fixed, seed=seed) for seed in range(RUNS)]
'''


def disk_usage(folder):
  """What ``du -s`` counts for ``folder``, in bytes (whole blocks of every file and folder)."""
  return int(subprocess.run(['du', '-s', '--block-size=1', str(folder)], capture_output=True,
                            text=True, check=True).stdout.split()[0])


@pytest.fixture(scope='module')
def sweeps_of_one_step_runs(tmp_path_factory, shared_data_dir):
  """Sweeps of 20 and of 2,000 one-step runs of a tiny char_lm, each on its own:
  ``{runs: (workdir, seconds)}``."""
  swept = {}
  for runs in (20, 2000):
    folder = tmp_path_factory.mktemp(f'runs{runs}')
    config = folder / 'one_step.py'
    config.write_text(ONE_STEP_RUNS.replace('RUNS', str(runs)))
    started = time.monotonic()
    code, output, errors = run_sweep(config, folder / 'sweep')
    swept[runs] = folder / 'sweep', time.monotonic() - started
    assert code == 0 and f'{runs} runs (0 failed)' in output, errors
  return swept


@pytest.mark.slow
def test_a_sweep_of_2000_runs_costs_what_20_do_a_run(sweeps_of_one_step_runs):
  """A sweep's cost grows linearly in its runs: 2,000 one-step runs take at most twice the
  seconds a run of 20 do and as much disk a run, and each run's log.txt holds that run's
  lines and its job's header, the job's shared lines being written once to the job's log."""
  (small, small_seconds), (large, large_seconds) = sweeps_of_one_step_runs.values()
  assert large_seconds / 2000 <= 2 * small_seconds / 20, (small_seconds, large_seconds)
  # a run's checkpoint takes 4 to 6 OCDBT files, as its writes come: a margin for that
  assert disk_usage(large) / 2000 <= 1.25 * disk_usage(small) / 20
  runs, named = sorted(large.glob('seed=*')), set()
  assert len(runs) == 2000
  for folder in runs:
    header, *lines = (folder / 'log.txt').read_text().strip().splitlines()
    named.add(re.fullmatch(r"=== \S+ \S+ job \d+: \d+ run\(s\) .*; the job's log: (\S+)",
                           header)[1])
    assert len(lines) == 2 and ' step 1/1 ' in lines[0], lines
    assert lines[1].split(' INFO ')[1].startswith(f'{folder}: finished;'), lines
    assert re.findall(re.escape(str(large)) + r'/[^:]+', lines[1]) == [str(folder)]
  assert len(named) > 1 and all(pathlib.Path(path).read_text().count('run(s) on one device')
                                == 1 for path in named)


