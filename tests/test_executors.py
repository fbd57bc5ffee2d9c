"""Executors through the one interface: one defined here and registered in one line, and Ray on
a real local runtime (``ray.init(num_cpus=2)``; skipped where Ray is not installed)."""

import os
import re
import signal
import time

import jax
import numpy as np
import pytest

from experiments import char_lm
from experiments.configs.char_lm import get_config
from rnnjax.train import checkpoints
from rnnjax.train import executors
from rnnjax.train import job as jobs
from rnnjax.train import sweep
from test_sweep import launch, run_sweep, wait_for_training, write_config


class InProcess:
  """Each job in this process, one after another."""
  OPTIONS: dict = {}
  where, parts = 'in this process', 1

  def __init__(self, settings: executors.Settings):
    self.stopping: list[int] = []

  def run(self, jobs_to_run, on_end, on_progress, say):
    for job in jobs_to_run:
      on_end(job, jobs.run_job(job, self.stopping, lambda step, job=job: on_progress(job, step)))

  def stop(self):
    self.stopping.append(signal.SIGINT)


def test_an_executor_is_a_class_and_a_registry_line(tmp_path, shared_data_dir, monkeypatch,
                                                     capsys):
  monkeypatch.setitem(executors.EXECUTORS, 'in_process', InProcess)
  fixed = dict(hidden_size=8, embedding_size=4, batch_size=4, truncation=8, steps=30,
               log_every=10, checkpoint_every=10, sample_length=5)
  runs = [dict(fixed, spectral_radius=radius) for radius in (0.5, 1.5, -1.0)]
  configs = sweep.run_configs(get_config(), runs, {})
  code = sweep.sweep(char_lm.EXPERIMENT, configs, runs, tmp_path / 'sweep',
                     executor='in_process')
  output = capsys.readouterr()
  assert code == 1 and '2 to train in 1 job(s) in this process' in output.out
  assert 'failed: spectral_radius=-1.0: config.spectral_radius' in output.err
  table = (tmp_path / 'sweep' / 'results.md').read_text()
  assert table.count('| finished |') == 2 and table.count('| failed |') == 1


@pytest.fixture(scope='module')
def ray_address():
  """The address of a Ray runtime started here with 2 CPUs, for the sweeps to join."""
  ray = pytest.importorskip('ray')
  context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
  yield context.address_info['gcs_address']
  ray.shutdown()


def task_pids(folder):
  """The pids of the Ray workers that ran a run's jobs, from its log.txt."""
  return [int(pid) for pid in re.findall(r'in a Ray task on \S+ \(pid (\d+)\)',
                                          (folder / 'log.txt').read_text())]


@pytest.mark.slow
def test_kill_9_of_a_ray_worker_and_a_rerun_equal_an_uninterrupted_sweep(
    tmp_path, shared_data_dir, ray_address):
  config = write_config(tmp_path, steps=400, checkpoint_every=50)
  assert run_sweep(config, tmp_path / 'whole')[0] == 1  # local workers; one run is refused
  on_ray = ('--executor=ray', f'--ray.address={ray_address}')
  process = launch(config, tmp_path / 'ray', *on_ray, '--ray.max_retries=0')
  deadline, killed = time.time() + 300, None
  while time.time() < deadline and killed is None:
    for folder in (tmp_path / 'ray').glob('spectral_radius=*'):
      if (folder / 'log.txt').exists() and checkpoints.saved_steps(folder):
        killed = folder
    time.sleep(0.05)
  os.kill(task_pids(killed)[0], signal.SIGKILL)
  _, errors = process.communicate(timeout=600)
  assert process.returncode == 1
  assert f'failed: {killed.name}: its Ray task ended without a result' in errors, errors
  code, output, errors = run_sweep(config, tmp_path / 'ray', *on_ray)
  assert code == 1 and '1 to train (1 from their checkpoints)' in output, errors
  for radius in (0.5, 1.5):
    folder, whole = (tmp_path / name / f'spectral_radius={radius}' for name in ('ray', 'whole'))
    for name in ('metrics.jsonl', 'summary.json'):
      assert (folder / name).read_bytes() == (whole / name).read_bytes(), (radius, name)
    for got, expected in zip(jax.tree_util.tree_leaves(checkpoints.final_params(folder)[1]),
                             jax.tree_util.tree_leaves(checkpoints.final_params(whole)[1])):
      np.testing.assert_array_equal(got, expected)


def test_ctrl_c_stops_the_ray_tasks_and_exits_130_with_the_tables(tmp_path, shared_data_dir,
                                                                  ray_address):
  config = write_config(tmp_path, steps=100_000, radius=1.0)
  workdir = tmp_path / 'sweep'
  process = launch(config, workdir, '--executor=ray', f'--ray.address={ray_address}',
                   start_new_session=True)
  wait_for_training(workdir, runs=3)  # two tasks (of 2 runs and 1) at once on 2 CPUs
  os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the launcher's group, not Ray's workers
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 130
  assert 'interrupted: 0 of 3 runs have ended and are kept' in output
  table = (workdir / 'results.md').read_text()
  assert table in output and table.count('| interrupted |') == 3
  for folder in workdir.glob('spectral_radius=*'):  # each checkpointed where it stopped
    assert 'interrupted: stopped on request after step' in (folder / 'log.txt').read_text()
    assert checkpoints.saved_steps(folder)
