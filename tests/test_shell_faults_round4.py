"""The run harness and the sweep launcher under more shell faults (issue 49): a run nested in the
folder an --overwrite clears, a closed terminal (SIGHUP), a file-size limit (EFBIG), a workdir
name that is not UTF-8, get_sweep() dicts whose keys come in another order, an sbatch that
refuses or stalls, an unreachable Ray head. Each is one line, and nothing is lost."""

import csv
import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest

from rnnjax.train import checkpoints
from rnnjax.train import executors
from rnnjax.train import job
from rnnjax.train import run_folder

sys.path.insert(0, os.path.dirname(__file__))
from test_shell_faults import CONFIG, EXPERIMENT, RUN, SWEEP, project, run_sweep  # noqa: E402


def run(folder, workdir, *flags, **kwargs):
  return subprocess.run([RUN, '--config=my_config.py', f'--workdir={workdir}', *flags],
                        cwd=folder, capture_output=True, text=True, timeout=600, **kwargs)


def tree(folder):
  return sorted((str(path), path.read_bytes() if path.is_file() else None)
                for path in folder.rglob('*') if path.name != '.lock')


def test_an_overwrite_never_clears_a_folder_that_holds_another_run(tmp_path):
  folder = project(tmp_path, '[]', steps=3)
  outer = tmp_path / 'outer'
  assert run(folder, outer).returncode == 0
  for inner in (outer / 'notes' / 'inner', outer / 'checkpoint' / 'inner'):
    assert run(folder, inner).returncode == 0
    before = tree(outer)
    result = run(folder, outer, '--overwrite')
    assert result.returncode == 1 and result.stderr.splitlines()[-1] == (
        f'error: workdir: {outer} holds another run or sweep in {inner} (its config.json), so '
        'nothing in it is cleared or trained; move that one out or give the run another folder')
    assert tree(outer) == before
    shutil.rmtree(inner.parent if inner.parent.name == 'notes' else inner)
  assert run(folder, outer, '--overwrite').returncode == 0  # nothing nested: cleared as before


def test_nested_finds_a_run_or_a_sweep_below_a_run_folder(tmp_path):
  (tmp_path / 'run' / 'tensorboard' / 'x').mkdir(parents=True)
  assert run_folder.nested(tmp_path / 'run') is None
  (tmp_path / 'run' / 'tensorboard' / 'x' / 'runs.json').write_text('{}')
  assert run_folder.nested(tmp_path / 'run') == tmp_path / 'run' / 'tensorboard' / 'x' / 'runs.json'
  (tmp_path / 'other' / 'deep').mkdir(parents=True)  # no config.json: only run files searched
  (tmp_path / 'other' / 'deep' / 'config.json').write_text('{}')
  assert run_folder.nested(tmp_path / 'other') is None
  (tmp_path / 'other' / 'config.json').write_text('{}')
  assert run_folder.nested(tmp_path / 'other') == tmp_path / 'other' / 'deep' / 'config.json'
  with pytest.raises(ValueError, match='holds another run or sweep'):
    run_folder.clear(tmp_path / 'other')
  assert (tmp_path / 'other' / 'deep' / 'config.json').exists()


def test_sighup_is_a_request_to_stop_everywhere_sigterm_is():
  import inspect
  assert signal.SIGHUP in executors.STOP_SIGNALS and signal.SIGTERM in executors.STOP_SIGNALS
  default = inspect.signature(job.setup_process).parameters['signals'].default
  assert set(executors.STOP_SIGNALS) <= set(default)


def test_a_closed_terminal_checkpoints_the_run_at_its_step(tmp_path):
  """SIGHUP (the terminal closed) saves the step the run is at, as SIGTERM does."""
  folder = project(tmp_path, '[]', steps=10_000_000)
  workdir = tmp_path / 'run'
  process = subprocess.Popen([RUN, '--config=my_config.py', f'--workdir={workdir}'], cwd=folder,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 300
  while time.time() < deadline and not checkpoints.saved_steps(workdir):
    time.sleep(0.05)
  time.sleep(0.5)
  process.send_signal(signal.SIGHUP)
  _, errors = process.communicate(timeout=120)
  assert process.returncode == 128 + signal.SIGHUP, errors[-2000:]
  stopped = int(re.search(r'after step (\d+)', errors).group(1))
  assert stopped > 10 and checkpoints.saved_steps(workdir)[-1] == stopped
  assert 'Traceback' not in errors


def test_a_closed_terminal_checkpoints_a_sweeps_runs(tmp_path):
  folder = project(tmp_path, "['one']", steps=10_000_000)
  workdir = tmp_path / 'sweep'
  launcher = subprocess.Popen([SWEEP, '--config=my_config.py', f'--workdir={workdir}'],
                              cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
  deadline = time.time() + 300
  while time.time() < deadline and not checkpoints.saved_steps(workdir / 'run'):
    time.sleep(0.05)
  time.sleep(0.5)
  launcher.send_signal(signal.SIGHUP)
  output, _ = launcher.communicate(timeout=180)
  assert launcher.returncode == 128 + signal.SIGHUP
  assert 'interrupted: 0 of 1 runs have ended' in output
  assert checkpoints.saved_steps(workdir / 'run')[-1] > 10


def test_efbig_is_a_refusal_of_the_file_system():
  kind, line = job.failure(OSError(errno.EFBIG, 'File too large'))
  assert kind == 'full_disk' and line == (
      '[Errno 27] File too large; a file-size limit refused the write: raise it (ulimit -f '
      'unlimited) and run the same command again to resume from the last checkpoint')
  assert errno.EFBIG in checkpoints._REFUSED  # pylint: disable=protected-access


BIG = ("{'w': jnp.zeros((2, 1))}",  # 400 KB of random floats, which no compression shrinks
       "{'w': jnp.zeros((2, 1)), 'big': jax.random.normal(key, (100_000,))}")


def test_a_file_size_limit_is_one_line_and_the_run_resumes_without_it(tmp_path):
  """Under ``ulimit -f`` (RLIMIT_FSIZE) smaller than a checkpoint (400 KB of params) the run
  ends with one line naming the limit, not orbax's 400 characters; without it, it resumes."""
  folder = project(tmp_path, '[]', steps=30)
  (folder / 'my_experiment.py').write_text(EXPERIMENT.replace(*BIG))
  workdir = tmp_path / 'run'

  def limited():
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))
  result = run(folder, workdir, preexec_fn=limited,
               env=dict(os.environ, RNNJAX_COMPILATION_CACHE=''))  # no cache entry cut short
  assert result.returncode == 1, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr
  assert re.fullmatch(
      rf'error: {workdir}/checkpoint/\S+: cannot write the checkpoint of step 10: File too large '
      r'\(EFBIG\); nothing was deleted; a file-size limit refused the write: raise it \(ulimit -f '
      r'unlimited\) and run the same command again to resume from the last checkpoint',
      result.stderr.splitlines()[-1]), result.stderr[-2000:]
  result = run(folder, workdir)
  assert result.returncode == 0, result.stderr[-2000:]
  assert json.loads((workdir / 'summary.json').read_text())['steps_done'] == 30


@pytest.mark.parametrize('command', [RUN, SWEEP])
def test_a_workdir_name_that_is_not_utf8_is_one_line_and_makes_no_folder(tmp_path, command):
  folder = project(tmp_path, "['one', 'two']", steps=3)
  workdir = os.fsencode(tmp_path) + b'/sub/bad\xffname'
  result = subprocess.run([command, '--config=my_config.py', b'--workdir=' + workdir],
                          cwd=folder, capture_output=True, text=True, timeout=600)
  assert result.returncode == 1 and result.stderr.splitlines()[-1] == (
      f"error: workdir: expected a path in UTF-8, got '{tmp_path}/sub/bad\\xffname' (\\x: bytes "
      'that are not UTF-8); give a folder whose name is UTF-8 text'), result.stderr[-2000:]
  assert not (tmp_path / 'sub').exists()


ORDERED = "[{'label': 'one', 'scale': 1.0}, {'scale': 2.0, 'label': 'two'}]"
REORDERED = "[{'scale': 1.0, 'label': 'one'}, {'label': 'two', 'scale': 2.0}]"


def test_a_sweeps_runs_list_their_keys_in_one_order(tmp_path):
  folder = project(tmp_path, '[]', steps=3)
  (folder / 'my_config.py').write_text(CONFIG.replace('STEPS', '3').replace(
      "[{'label': label} for label in LABELS]", ORDERED))
  workdir = tmp_path / 'sweep'
  result = run_sweep(folder, workdir, '--processes=1')
  assert result.returncode == 0, result.stderr[-2000:]
  index = json.loads((workdir / 'runs.json').read_text())
  assert [list(values) for values in index.values()] == [['label', 'scale']] * 2


def test_a_sweep_relaunched_with_its_keys_in_another_order_keeps_its_runs(tmp_path):
  folder = project(tmp_path, '[]', steps=3)
  workdir = tmp_path / 'sweep'
  tables = []
  for sweep in (ORDERED, REORDERED):
    (folder / 'my_config.py').write_text(CONFIG.replace('STEPS', '3').replace(
        "[{'label': label} for label in LABELS]", sweep))
    result = run_sweep(folder, workdir, '--processes=1')
    assert result.returncode == 0, result.stderr[-2000:]
    tables.append([{k: v for k, v in row.items() if k != 'seconds'}
                   for row in csv.DictReader(open(workdir / 'results.csv'))])
  assert '2 ended already' in result.stdout and tables[0] == tables[1]


FAKE_SLURM = {'srun': 'exit 0', 'squeue': 'exit 0',
              'sbatch': 'echo "sbatch: error: invalid partition specified: nope" >&2\nexit 1'}


def fake_slurm(tmp_path, sbatch):
  """A folder of fake Slurm commands (``sbatch``'s body given) for the front of $PATH."""
  bin_folder = tmp_path / 'bin'
  bin_folder.mkdir()
  for name, body in dict(FAKE_SLURM, sbatch=sbatch).items():
    (bin_folder / name).write_text(f'#!/bin/sh\n{body}\n')
    (bin_folder / name).chmod(0o755)
  return f'{bin_folder}{os.pathsep}{os.environ["PATH"]}'


def test_sbatch_refusing_the_jobs_is_one_line(tmp_path):
  folder = project(tmp_path, "['one', 'two']", steps=3)
  workdir = tmp_path / 'sweep'
  result = run_sweep(folder, workdir, '--executor=slurm', '--slurm.slurm_partition=nope',
                     env=dict(os.environ, PATH=fake_slurm(tmp_path, FAKE_SLURM['sbatch'])))
  assert result.returncode == 1 and 'Traceback' not in result.stderr
  assert result.stderr.splitlines() == [
      'error: --executor=slurm: sbatch refused the jobs: sbatch: error: invalid partition '
      'specified: nope; fix what it names (--slurm.slurm_partition, --slurm.slurm_account, '
      '--slurm.timeout_min, --slurm.mem_gb, ...) and run the same command again']
  assert not (workdir / 'label=one').exists()


def test_a_stalled_sbatch_times_out_in_one_line(tmp_path, monkeypatch):
  from rnnjax.train import slurm_executor
  monkeypatch.setenv('PATH', fake_slurm(tmp_path, 'sleep 600'))
  runner = slurm_executor.Slurm(executors.Settings(tmp_path / '.jobs'), poll_seconds=0.1,
                                submit_seconds=2)
  jobs = [{'id': '0', 'result': str(tmp_path / '0.json'), 'runs': []}]
  started = time.time()
  with pytest.raises(ValueError) as raised:
    runner.run(jobs, lambda job, result: None, lambda job, step: None, print)
  assert time.time() - started < 30
  assert str(raised.value) == (
      '--executor=slurm: sbatch did not answer within 2 s and was stopped; check that Slurm '
      'answers (sinfo; squeue lists any job it submitted) and run the same command again')
  assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL


def test_an_unreachable_ray_address_is_one_line_at_once(tmp_path):
  pytest.importorskip('ray')
  folder = project(tmp_path, "['one']", steps=3)
  workdir = tmp_path / 'sweep'
  started = time.time()
  result = run_sweep(folder, workdir, '--executor=ray', '--ray.address=127.0.0.1:1')
  assert time.time() - started < 60
  assert result.returncode == 1 and result.stderr.splitlines() == [
      "error: --ray.address: nothing answers at 127.0.0.1:1 (Connection refused); expected the "
      "HOST:PORT of a running Ray cluster's head (ray start --head prints it), 'auto' on a node "
      "of one, or '' to start Ray on this machine"]
  assert not workdir.exists()
