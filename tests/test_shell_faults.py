"""The sweep and the run harness under faults and odd input: run folders that stay inside
their sweep, no write through a link, paths that hold any character, stopped workers,
errors named for their own cause, swept values of any type, one config-file execution."""

import csv
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from rnnjax.data import corpora
from rnnjax.train import plan
from rnnjax.train import sweep

SWEEP = str(pathlib.Path(sys.executable).parent / 'rnnjax-sweep')
RUN = str(pathlib.Path(sys.executable).parent / 'rnnjax-run')

EXPERIMENT = '''
"""A tiny experiment: a linear model of noise; ``label`` changes nothing but the name. A process
whose $HOLD names a phase ('check', 'task', 'tables'; 'task:LABEL' the task of that label's
runs alone) waits there: it writes $HOLD_DIR/<phase>.held and goes on once $HOLD_DIR/go exists
(a barrier for a test)."""
import os
import pathlib
import time

import jax
import jax.numpy as jnp
from rnnjax.data import corpora
from rnnjax.train import experiment
from rnnjax.train import trainer


def hold(phase, label=None):
  if os.environ.get('HOLD') in (phase, f'{phase}:{label}'):
    folder = pathlib.Path(os.environ['HOLD_DIR'])
    (folder / f'{phase}.held').touch()
    while not (folder / 'go').exists():
      time.sleep(0.05)


def task(config):
  hold('task', config.label)
  if os.environ.get('CORPUS_URL'):  # a corpus behind $CORPUS_URL
    corpora.CORPORA['remote'] = ('remote.txt', os.environ['CORPUS_URL'], '0' * 64)
    corpora.corpus_path('remote', os.environ['HOLD_DIR'])

  def loss(params, carry, batch, key):
    x = jax.random.normal(key, (8, 2))
    return jnp.mean((x @ params['w'] - x[:, :1]) ** 2), carry

  return trainer.Task(init=lambda config, key: {'w': jnp.zeros((2, 1))}, loss=loss,
                      batch=lambda step: {}, report=lambda config, params: {
                          'weight': float(params['w'][0, 0])})


EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, fields={'label': experiment.Field('a', None, 'a name'),
                                      'scale': experiment.Field(1.0, None, 'a number')},
    report=('weight',), vmappable=('seed', 'label', 'scale'), check=lambda config: hold('check'),
    analyses=(lambda runs, keys, folder, heading: hold('tables'),))
'''

CONFIG = '''
import os
import my_experiment
COUNTER = os.environ.get('CONFIG_COUNTER')
if COUNTER:  # one line a run of this file, naming the process
  with open(COUNTER, 'a') as counter:
    counter.write(f'{os.getpid()}\\n')


def get_config():
  return my_experiment.EXPERIMENT.config(steps=STEPS, learning_rate=0.1, log_every=10,
                                         checkpoint_every=10)


def get_sweep():
  return [{'label': label} for label in LABELS]
'''


def project(tmp_path, labels, steps=20):
  folder = tmp_path / 'project'
  folder.mkdir(exist_ok=True)
  (folder / 'my_experiment.py').write_text(EXPERIMENT)
  (folder / 'my_config.py').write_text(CONFIG.replace('STEPS', str(steps)).replace(
      'LABELS', labels))
  return folder


def run_sweep(folder, workdir, *flags, **kwargs):
  return subprocess.run([SWEEP, '--config=my_config.py', f'--workdir={workdir}', *flags],
                        cwd=folder, capture_output=True, text=True, timeout=900, **kwargs)


def held(command, folder, tmp_path, phase):
  """``command`` (in ``folder``) started and held at ``phase`` of the experiment (its
  ``hold``): the process, once it waits there."""
  process = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(os.environ, HOLD=phase, HOLD_DIR=str(tmp_path)))
  deadline = time.time() + 300
  while (not (tmp_path / f'{phase.split(":")[0]}.held').exists()
         and time.time() < deadline):
    assert process.poll() is None, process.communicate()
    time.sleep(0.05)
  return process


def test_swept_paths_and_long_names_stay_inside_the_sweep(tmp_path):
  victim = tmp_path / 'victim'
  victim.mkdir()
  (victim / 'log.txt').write_text('somebody else\'s run\n')
  folder = project(tmp_path, repr(['../../victim', 'plain', 'x' * 300]))
  for _ in range(2):  # the second launch: every run ended, nothing cleared
    result = run_sweep(folder, tmp_path / 'sweep' / 'in')
    assert result.returncode == 0, result.stderr[-2000:]
  assert (victim / 'log.txt').read_text() == 'somebody else\'s run\n'
  assert sorted(victim.iterdir()) == [victim / 'log.txt']
  workdir = tmp_path / 'sweep' / 'in'
  index = json.loads((workdir / 'runs.json').read_text())
  assert sorted(index.values(), key=str) == sorted(
      [{'label': '../../victim'}, {'label': 'plain'}, {'label': 'x' * 300}], key=str)
  for name in index:
    assert (workdir / name / 'summary.json').exists() and '/' not in name and len(name) < 255
  assert 'label=plain' in index
  assert [row['label'] for row in csv.DictReader(open(workdir / 'results.csv'))] == [
      '../../victim', 'plain', 'x' * 300]


def test_folder_names_are_plain_or_hashed():
  names = plan.folder_names([{'a': 'x/y'}, {'a': '..'}, {'a': 'ok'}, {'a': 1e-05}], ['a'])
  assert names[2:] == ['a=ok', 'a=1e-05']
  assert all(re.fullmatch(r'run-[0-9a-f]{16}', name) for name in names[:2])
  assert len(set(names)) == 4


def test_no_file_is_written_through_a_link(tmp_path):
  folder = project(tmp_path, "['plain', 'other']")
  target = tmp_path / 'target'
  target.write_text('keep me\n')
  run = tmp_path / 'sweep' / 'label=plain'
  run.mkdir(parents=True)
  (run / '.lock').symlink_to(target)
  result = run_sweep(folder, tmp_path / 'sweep')
  assert result.returncode == 1
  assert f'failed: label=plain: {run}: .lock is a symbolic link' in result.stderr
  assert target.read_text() == 'keep me\n'


def test_a_workdir_with_a_newline_in_its_name_sweeps(tmp_path):
  folder = project(tmp_path, "['one', 'two']")
  workdir = tmp_path / 'a\nb'
  result = run_sweep(folder, workdir)
  assert result.returncode == 0, result.stderr[-2000:]
  assert [row['status'] for row in csv.DictReader(open(workdir / 'results.csv'))] == [
      'finished', 'finished']


def test_the_config_file_runs_once_in_the_launcher_and_never_in_a_worker(tmp_path):
  folder = project(tmp_path, "['one', 'two', 'three', 'four']")
  counter = tmp_path / 'counter'
  result = run_sweep(folder, tmp_path / 'sweep', '--max_group_size=1',
                     env=dict(os.environ, CONFIG_COUNTER=str(counter)))
  assert result.returncode == 0, result.stderr[-2000:]
  assert len(counter.read_text().split()) == 1  # the launcher's one execution: workers get
  # each run's whole config in their job


@pytest.mark.parametrize('values, message', [
    ('[np.int64(3), np.float32(0.5)]', None),
    ('[decimal.Decimal("1.5"), 2.0]', "get_sweep: run 0: config.scale: expected a bool, int, "
                                      "float, str, tuple or dict, got Decimal('1.5') (a "
                                      'Decimal)'),
    ('["big", 2.0]', "get_sweep: run 0: config.scale: expected a float (the type of its default "
                     "1.0), got 'big'"),
])
def test_swept_values_of_numpy_types_are_plain_and_others_named(tmp_path, values, message):
  folder = project(tmp_path, '[]')
  config = folder / 'my_config.py'
  config.write_text('import decimal\nimport numpy as np\n' + config.read_text().replace(
      "[{'label': label} for label in []]", f"[{{'scale': scale}} for scale in {values}]"))
  result = run_sweep(folder, tmp_path / 'sweep')
  if message is None:
    assert result.returncode == 0, result.stderr[-2000:]
    scales = sorted(json.loads(path.read_text())['scale']
                    for path in (tmp_path / 'sweep').glob('*/config.json'))
    assert scales == [0.5, 3.0]
  else:
    assert result.returncode == 1 and result.stderr == f'error: {message}\n'


def test_numpy_values_become_python_values():
  from rnnjax.train import experiment
  import ml_collections
  config = ml_collections.ConfigDict({'a': 1, 'b': (1, 2), 'c': 0.5})
  config = experiment.override(config, {'a': np.int64(3), 'b': np.array([4, 5]),
                                        'c': np.float32(0.25)})
  assert (config.a, config.b, config.c) == (3, (4, 5), 0.25)
  assert type(config.a) is int and type(config.c) is float


def worker_pid(folder):
  found = re.findall(r'rnnjax\.train\.job \(pid (\d+)\)', (folder / 'log.txt').read_text())
  return int(found[-1])


def test_a_stopped_worker_is_named_and_killed_and_the_others_finish(tmp_path):
  folder = project(tmp_path, "['one', 'two']", steps=300_000)
  workdir = tmp_path / 'sweep'
  launcher = subprocess.Popen([SWEEP, '--config=my_config.py', f'--workdir={workdir}',
                               '--max_group_size=1', '--processes=1', '--stall_minutes=0.1',
                               '--config.steps=4000', '--config.checkpoint_every=100'],
                              cwd=folder, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
  first = workdir / 'label=one'
  deadline = time.time() + 300
  while time.time() < deadline and not (first / 'metrics.jsonl').exists():
    time.sleep(0.1)
  pid = worker_pid(first)
  os.kill(pid, signal.SIGSTOP)
  output, errors = launcher.communicate(timeout=300)
  assert launcher.returncode == 1
  assert re.search(rf'warning: job \d+ \(1 run\(s\), first {first}\): its process \(pid {pid}\) '
                   r'has sent nothing for \d+ s; killing it in \d+ s', output + errors)
  assert re.search(rf'failed: label=one: its process \(pid {pid}\) made no progress for \d+ s '
                   'and was killed', errors)
  assert json.loads((workdir / 'label=two' / 'summary.json').read_text())['status'] == 'finished'


def test_a_launcher_ends_on_sigterm_with_a_stopped_worker(tmp_path):
  folder = project(tmp_path, "['one']", steps=10_000_000)
  workdir = tmp_path / 'sweep'
  launcher = subprocess.Popen([SWEEP, '--config=my_config.py', f'--workdir={workdir}'],
                              cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
  run = workdir / 'run'  # one run: nothing swept
  deadline = time.time() + 300
  while time.time() < deadline and not (run / 'metrics.jsonl').exists():
    time.sleep(0.1)
  os.kill(worker_pid(run), signal.SIGSTOP)
  started = time.time()
  launcher.send_signal(signal.SIGTERM)
  output, _ = launcher.communicate(timeout=120)
  assert launcher.returncode == 143 and time.time() - started < 90
  assert 'interrupted: 0 of 1 runs have ended' in output


def test_errors_are_named_for_their_own_cause(tmp_path):
  """Too many open files is named as that, a full disk as that: each errno its own line
  (``job.failure``), from the OS and from TensorStore's text alike. The EMFILE is real:
  files opened until the limit refuses."""
  import errno
  import resource
  from rnnjax.train import job
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
  handles = []
  try:
    with pytest.raises(OSError) as raised:
      while True:
        handles.append(open(tmp_path / f'f{len(handles)}', 'w'))
  finally:
    for handle in handles:
      handle.close()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
  assert raised.value.errno == errno.EMFILE
  kind, line = job.failure(raised.value)
  assert kind == 'error' and 'raise the limit (ulimit -n)' in line and 'free' not in line
  tensorstore = ValueError('RESOURCE_EXHAUSTED: Failed writing: "x": No space left on device '
                           "[os_error_code='28']")
  kind, line = job.failure(tensorstore)
  assert kind == 'full_disk' and line.endswith('free some space and run the same command again '
                                               'to resume from the last checkpoint')
  kind, line = job.failure(ValueError("RESOURCE_EXHAUSTED: open failed [os_error_code='24']"))
  assert kind == 'error' and 'ulimit -n' in line
  assert job.failure(KeyError('a bug')) is None  # a bug keeps its traceback


def test_results_csv_joins_each_run_folder(tmp_path):
  """results.csv has one row per run with its run folder, commit, date, seed and the fields it
  sets; it joins each run's config.json and metrics.jsonl on the run folder column as they
  are, with no column renamed; its seconds add up to no more than the sweep's wall time."""
  import pandas
  folder = project(tmp_path, "['one', 'two']")
  started = time.time()
  result = run_sweep(folder, tmp_path / 'sweep', '--processes=1',
                     '--config.learning_rate=0.2')
  wall = time.time() - started
  assert result.returncode == 0, result.stderr[-2000:]
  workdir = tmp_path / 'sweep'
  results = pandas.read_csv(workdir / 'results.csv')
  assert list(results['run_folder']) == ['label=one', 'label=two']
  assert {'commit', 'date', 'seed', 'learning_rate', 'seconds', 'weight'} <= set(
      results.columns)
  assert not results.isna().all().any()  # no empty column
  configs = pandas.DataFrame([dict(json.loads((workdir / name / 'config.json').read_text()),
                                   run_folder=name) for name in results['run_folder']])
  metrics = pandas.DataFrame([dict(line, run_folder=name) for name in results['run_folder']
                              for line in map(json.loads, (workdir / name / 'metrics.jsonl')
                                              .read_text().splitlines())])
  joined = results.merge(configs, on='run_folder', suffixes=('', '_config')).merge(
      metrics, on='run_folder', suffixes=('', '_metrics'))
  assert len(joined) == 2 * 3  # two runs, three metrics lines each (steps 1, 10, 20)
  assert (joined['learning_rate'] == joined['learning_rate_config']).all()
  assert 'measured_spectral_radius' in metrics.columns  # not the swept spectral radius
  assert results['seconds'].sum() <= wall


@pytest.mark.parametrize('name', ['config.json', 'metrics.jsonl', 'summary.json', 'timing.json',
                                  'devices.json', 'log.txt', '.lock', 'tensorboard',
                                  'checkpoint'])
def test_no_run_file_is_written_through_a_link(tmp_path, name):
  """Every file and folder the harness writes in a run folder, a link to somebody else's: the
  run is refused in one line and the link's target is left as it was."""
  folder = project(tmp_path, "['plain']")
  target = tmp_path / 'target'
  target.mkdir() if name in ('tensorboard', 'checkpoint') else target.write_text('keep me\n')
  run = tmp_path / 'run'
  run.mkdir()
  (run / name).symlink_to(target)
  result = subprocess.run([RUN, '--config=my_config.py', f'--workdir={run}'], cwd=folder,
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 1 and result.stderr == (
      f'error: {run}: {name} is a symbolic link; a run folder holds no links\n'), result.stderr
  assert (sorted(target.iterdir()) == [] if target.is_dir()
          else target.read_text() == 'keep me\n')


def test_the_sweeps_own_files_are_not_written_through_links(tmp_path):
  """The sweep's lock, its index and its tables: a link in their place is replaced or
  refused, never written through."""
  folder = project(tmp_path, "['one', 'two']")
  workdir = tmp_path / 'sweep'
  workdir.mkdir()
  targets = {}
  for name in ('results.md', 'results.csv', 'runs.json'):
    targets[name] = tmp_path / f'target_{name}'
    targets[name].write_text('keep me\n')
    (workdir / name).symlink_to(targets[name])
  result = run_sweep(folder, workdir)
  assert result.returncode == 0, result.stderr[-2000:]
  assert all(target.read_text() == 'keep me\n' for target in targets.values())
  assert not (workdir / 'results.md').is_symlink()  # replaced by the sweep's own file
  (workdir / '.lock').unlink()
  (workdir / '.lock').symlink_to(targets['runs.json'])
  result = run_sweep(folder, workdir)
  assert result.returncode == 1 and result.stderr == (  # what the link is, no "[Errno 40]"
      f'error: {workdir / ".lock"} is a symbolic link; the harness writes no file through a '
      'link\n')
  assert targets['runs.json'].read_text() == 'keep me\n'


def test_a_plan_holds_only_under_the_lock_that_acts_on_it(tmp_path):
  """Two rnnjax-run of different configs on one new folder: the second, held after its plan
  ('new') while the first trains to its end, plans again under the lock and is refused, and
  the first run is kept as it ended."""
  folder = project(tmp_path, '[]')
  run = tmp_path / 'run'
  second = held([RUN, '--config=my_config.py', f'--workdir={run}', '--config.label=b'], folder,
                tmp_path, 'task')
  first = subprocess.run([RUN, '--config=my_config.py', f'--workdir={run}'], cwd=folder,
                         capture_output=True, text=True, timeout=600)
  assert first.returncode == 0, first.stderr
  kept = lambda: {path.name: path.read_bytes() for path in run.iterdir() if path.name != '.lock'
                  and path.is_file()}
  ended = kept()
  (tmp_path / 'go').touch()
  _, errors = second.communicate(timeout=600)
  assert second.returncode == 1 and errors == (
      f"error: {run} holds a run of another config: label ('a' -> 'b'); pass --overwrite to "
      'replace it\n')
  assert kept() == ended


def test_a_folder_is_a_run_or_a_sweep_never_both(tmp_path):
  """A sweep refuses a run's folder, and a run (even with --overwrite) a sweep's: clearing the
  run would delete the sweep's runs and tables."""
  folder = project(tmp_path, "['one', 'two']")
  run, workdir = tmp_path / 'run', tmp_path / 'sweep'
  assert subprocess.run([RUN, '--config=my_config.py', f'--workdir={run}'], cwd=folder,
                        timeout=600).returncode == 0
  before = sorted(run.rglob('*'))
  result = run_sweep(folder, run)
  assert result.returncode == 1 and result.stderr == (
      f"error: workdir: {run} holds config.json, so it is not a sweep folder (a folder is a run's "
      "or a sweep's, never both); give the sweep another folder\n")
  assert sorted(run.rglob('*')) == before
  assert run_sweep(folder, workdir).returncode == 0
  (workdir / 'config.json').write_bytes((run / 'config.json').read_bytes())  # as an older
  # rnnjax let a sweep be made in a run's folder
  result = subprocess.run([RUN, '--config=my_config.py', f'--workdir={workdir}', '--overwrite'],
                          cwd=folder, capture_output=True, text=True, timeout=600)
  assert result.returncode == 1 and result.stderr == (
      f"error: workdir: {workdir} holds runs.json, so it is not a run folder (a folder is a "
      "run's or a sweep's, never both); give the run another folder\n")
  assert (workdir / 'label=one' / 'summary.json').exists() and (workdir / 'results.md').exists()


@pytest.mark.parametrize('phase', ['check', 'tables'])
@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_any_moment_of_a_sweep_exits_128_plus_it(tmp_path, phase, signum):
  """A signal while the sweep plans (before its workdir is touched) or while it writes its
  tables (after every run ended): no traceback, the tables of what ended, exit 128 + signal."""
  folder = project(tmp_path, "['one', 'two']")
  workdir = tmp_path / 'sweep'
  launcher = held([SWEEP, '--config=my_config.py', f'--workdir={workdir}', '--overwrite'],
                  folder, tmp_path, phase)
  launcher.send_signal(signum)
  (tmp_path / 'go').touch()
  output, errors = launcher.communicate(timeout=600)
  assert launcher.returncode == 128 + signum and 'Traceback' not in errors, errors
  if phase == 'check':
    assert output == f'interrupted before any run started; {workdir} is left as it was\n'
    assert not workdir.exists()
  else:
    assert 'interrupted: 2 of 2 runs have ended and are kept' in output
    rows = list(csv.DictReader(open(workdir / 'results.csv')))
    assert [row['status'] for row in rows] == ['finished', 'finished']


def test_the_tables_hold_what_the_run_folders_hold_now(tmp_path):
  """A run of a sweep retrained under another config (rnnjax-run --overwrite) while the sweep
  still runs: its row says 'replaced', not the other config's numbers as the sweep's run."""
  folder = project(tmp_path, "['one', 'two']")
  workdir = tmp_path / 'sweep'
  launcher = held([SWEEP, '--config=my_config.py', f'--workdir={workdir}', '--processes=1',
                   '--max_group_size=1'], folder, tmp_path, 'task:two')
  assert (workdir / 'label=one' / 'summary.json').exists()
  other = subprocess.run([RUN, '--config=my_config.py', f'--workdir={workdir / "label=one"}',
                          '--config.label=one', '--config.scale=2.0', '--overwrite'],
                         cwd=folder, capture_output=True, text=True, timeout=600)
  assert other.returncode == 0, other.stderr
  (tmp_path / 'go').touch()
  launcher.communicate(timeout=600)
  rows = {row['label']: row for row in csv.DictReader(open(workdir / 'results.csv'))}
  assert rows['one']['status'] == 'replaced' and rows['one']['weight'] in ('', 'nan')
  assert rows['two']['status'] == 'finished'


def test_one_run_of_a_sweep_is_cleared_by_its_name(tmp_path):
  """A run whose config.json is damaged is refused with a hint that clears it alone
  (--overwrite_run=NAME); the sweep's other runs are kept as they ended."""
  folder = project(tmp_path, "['one', 'two']")
  workdir = tmp_path / 'sweep'
  assert run_sweep(folder, workdir).returncode == 0
  (workdir / 'label=one' / 'config.json').write_text('{damaged')
  kept = (workdir / 'label=two' / 'summary.json').read_bytes()
  result = run_sweep(folder, workdir)
  assert result.returncode == 1 and ('pass --overwrite to clear it (a run of a sweep alone: '
                                     '--overwrite_run=label=one)') in result.stderr
  result = run_sweep(folder, workdir, '--overwrite_run=label=one')
  assert result.returncode == 0, result.stderr
  assert '1 ended already' in result.stdout
  assert (workdir / 'label=two' / 'summary.json').read_bytes() == kept
  result = run_sweep(folder, workdir, '--overwrite_run=label=three')
  assert result.returncode == 1 and result.stderr.startswith(
      "error: --overwrite_run: no run of the sweep has the folder 'label=three'")


def test_a_stop_while_the_corpus_downloads_ends_the_run_at_once(tmp_path):
  """SIGTERM while the corpus downloads from a server that accepts and never answers: the run
  ends at once with 143, not after the download's timeout, and its folder is not made."""
  folder = project(tmp_path, '[]')
  with socket.create_server(('127.0.0.1', 0)) as server:
    server.settimeout(300)
    url = f'http://127.0.0.1:{server.getsockname()[1]}/corpus.txt'
    process = subprocess.Popen(
        [RUN, '--config=my_config.py', f'--workdir={tmp_path / "run"}'], cwd=folder,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, CORPUS_URL=url, HOLD_DIR=str(tmp_path)))
    connection, _ = server.accept()  # the download has connected, and waits for an answer
    with connection:
      time.sleep(0.5)
      started = time.time()
      process.send_signal(signal.SIGTERM)
      output, errors = process.communicate(timeout=120)
  assert process.returncode == 143 and time.time() - started < corpora.TIMEOUT_SECONDS / 3
  assert 'stopped on request while the data loaded' in output + errors
  assert not (tmp_path / 'run').exists()
