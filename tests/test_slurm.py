"""The sweep launcher against a real single-node Slurm cluster (scripts/start_slurm.sh;
.ci/run starts it). Skipped where no Slurm answers."""

import csv
import json
import shutil
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from experiments import char_lm
from rnnjax.train import checkpoints
from rnnjax.train import executors
from rnnjax.train import experiment

CONFIG = '''
from experiments.configs.char_lm import get_config

def get_sweep():
  fixed = dict(hidden_size=8, embedding_size=4, batch_size=4, truncation=8, steps=STEPS,
               log_every=10, checkpoint_every=CHECKPOINT, sample_length=5)
  return [dict(fixed, spectral_radius=r) for r in RADII]
'''


def slurm_is_up() -> bool:
  if shutil.which('sinfo') is None:
    return False
  result = subprocess.run(['sinfo', '-h', '-o', '%T'], capture_output=True, text=True)
  return result.returncode == 0 and any(s in result.stdout for s in ('idle', 'mix', 'alloc'))


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not slurm_is_up(), reason='no Slurm (scripts/start_slurm.sh)')]


def config_file(tmp_path, steps, checkpoint_every, radii):
  path = tmp_path / 'slurm_tiny.py'
  path.write_text(CONFIG.replace('STEPS', str(steps)).replace(
      'CHECKPOINT', str(checkpoint_every)).replace('RADII', repr(tuple(radii))))
  return path


def sweep(config, workdir, *flags):
  return subprocess.Popen([sys.executable, '-m', 'launch.sweep', f'--config={config}',
                           f'--workdir={workdir}', *flags], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def results(workdir):
  return [{k: v for k, v in row.items() if k != 'seconds'}
          for row in csv.DictReader(open(workdir / 'results.csv'))]


def test_a_sweep_on_slurm_equals_the_local_sweep(tmp_path, shared_data_dir):
  config = config_file(tmp_path, 40, 20, (0.5, 0.9, 1.1, 1.5))
  local = sweep(config, tmp_path / 'local')
  _, errors = local.communicate(timeout=600)
  assert local.returncode == 0, errors
  on_slurm = sweep(config, tmp_path / 'slurm', '--executor=slurm',
                   '--slurm.slurm_partition=debug', '--slurm.timeout_min=10',
                   '--slurm.cpus_per_task=2', '--slurm.mem_gb=2')
  output, errors = on_slurm.communicate(timeout=900)
  assert on_slurm.returncode == 0, errors
  assert '4 to train in 1 job(s) on Slurm' in output
  assert results(tmp_path / 'slurm') == results(tmp_path / 'local')
  assert 'Slurm job' in (tmp_path / 'slurm' / 'spectral_radius=0.5' / 'log.txt').read_text()


def test_one_job_through_each_executor_gives_the_same_result_file(tmp_path, shared_data_dir):
  """Local workers and Slurm tasks run a job through the same ``job.run_job``: the same
  job (in two folders) gives the same result file and the same summaries."""
  config = char_lm.EXPERIMENT.config(hidden_size=8, embedding_size=4, batch_size=4,
                                     truncation=8, steps=20, log_every=10, sample_length=5)
  results = {}
  for name, executor in (
      ('local', executors.find('local')(executors.Settings(tmp_path / 'local' / '.jobs', 1, 1))),
      ('slurm', executors.find('slurm')(executors.Settings(tmp_path / 'slurm', options={
          'slurm_partition': 'debug', 'timeout_min': 10, 'mem_gb': 2}), poll_seconds=1.0))):
    job = {'id': '0', 'experiment': char_lm.EXPERIMENT.name, 'overwrite': 'none',
           'result': str(tmp_path / name / '0.result.json'),
           'runs': [{'folder': str(tmp_path / name / f'run{i}'),
                     'config': experiment.as_dict(experiment.override(config, {'seed': i}))}
                    for i in range(2)]}
    ended = []
    executor.run([job], lambda job, result: ended.append(result), lambda job, step: None, print)
    results[name] = json.loads((tmp_path / name / '0.result.json').read_text())
    assert ended == [results[name]]
  for result in results.values():
    for run in result['runs']:
      run['folder'] = run['folder'].split('/')[-1]
  assert results['local'] == results['slurm'] == {
      'id': '0', 'exit': 'ok', 'runs': [{'folder': f'run{i}', 'status': 'finished', 'reason': ''}
                                        for i in range(2)]}
  for i in range(2):
    assert (tmp_path / 'local' / f'run{i}' / 'summary.json').read_bytes() == (
        tmp_path / 'slurm' / f'run{i}' / 'summary.json').read_bytes()


def job_ids():
  result = subprocess.run(['squeue', '-h', '-r', '-o', '%i %T'], capture_output=True, text=True)
  return dict(line.split() for line in result.stdout.splitlines())


def test_a_requeued_job_resumes_from_its_checkpoint(tmp_path, shared_data_dir):
  config = config_file(tmp_path, 20000, 1000, (0.9,))
  whole = sweep(config, tmp_path / 'whole')
  _, errors = whole.communicate(timeout=900)
  assert whole.returncode == 0, errors
  before = set(job_ids())
  launcher = sweep(config, tmp_path / 'requeued', '--executor=slurm',
                   '--slurm.slurm_partition=debug', '--slurm.timeout_min=20',
                   '--slurm.mem_gb=2')
  folder = tmp_path / 'requeued' / 'run'  # one run: nothing swept
  deadline = time.time() + 300
  while time.time() < deadline and not checkpoints.saved_steps(folder):
    time.sleep(0.2)
  queue = job_ids()
  job = [j for j, state in queue.items() if j not in before and state == 'RUNNING']
  assert len(job) == 1 and checkpoints.saved_steps(folder), (queue, before)
  subprocess.run(['scontrol', 'requeue', job[0]], check=True)
  output, errors = launcher.communicate(timeout=1200)
  assert launcher.returncode == 0, errors
  log = (folder / 'log.txt').read_text()
  assert 'interrupted: stopped on request after step' in log  # SIGTERM: it saved the step
  assert 'resumed 1 run(s) from the checkpoint of step' in log
  for name in ('metrics.jsonl', 'summary.json'):
    assert (folder / name).read_bytes() == (tmp_path / 'whole' / 'run' /
                                             name).read_bytes(), name
  for got, expected in zip(jax.tree_util.tree_leaves(checkpoints.final_params(folder)[1]),
                           jax.tree_util.tree_leaves(checkpoints.final_params(
                               tmp_path / 'whole' / 'run')[1])):
    np.testing.assert_array_equal(got, expected)


def test_a_requeued_group_resumes_as_a_unit_and_ends_bit_equal(tmp_path, shared_data_dir):
  """Two runs vmapped into one Slurm job, requeued while they train: the job resumes the group
  from its runs' newest common checkpoint, and both runs end bit-equal to the same sweep run
  locally without a stop (one group of two in both: ``groups.json``)."""
  config = config_file(tmp_path, 20000, 1000, (0.9, 1.1))
  whole = sweep(config, tmp_path / 'whole', '--processes=1')
  _, errors = whole.communicate(timeout=900)
  assert whole.returncode == 0, errors
  before = set(job_ids())
  launcher = sweep(config, tmp_path / 'requeued', '--executor=slurm',
                   '--slurm.slurm_partition=debug', '--slurm.timeout_min=20',
                   '--slurm.mem_gb=2')
  folders = [tmp_path / 'requeued' / f'spectral_radius={r}' for r in (0.9, 1.1)]
  deadline = time.time() + 300
  while time.time() < deadline and not all(checkpoints.saved_steps(f) for f in folders):
    time.sleep(0.2)
  queue = job_ids()
  job = [j for j, state in queue.items() if j not in before and state == 'RUNNING']
  assert len(job) == 1, (queue, before)
  subprocess.run(['scontrol', 'requeue', job[0]], check=True)
  output, errors = launcher.communicate(timeout=1200)
  assert launcher.returncode == 0, errors
  for group in (tmp_path / 'whole', tmp_path / 'requeued'):
    assert [sorted(g) for g in json.loads((group / 'groups.json').read_text())['groups']] == [
        ['spectral_radius=0.9', 'spectral_radius=1.1']]
  for folder in folders:
    assert 'resumed 2 run(s) from the checkpoint of step' in (folder / 'log.txt').read_text()
    reference = tmp_path / 'whole' / folder.name
    for name in ('metrics.jsonl', 'summary.json'):
      assert (folder / name).read_bytes() == (reference / name).read_bytes(), name
    for got, expected in zip(jax.tree_util.tree_leaves(checkpoints.final_params(folder)[1]),
                             jax.tree_util.tree_leaves(checkpoints.final_params(reference)[1])):
      np.testing.assert_array_equal(got, expected)
