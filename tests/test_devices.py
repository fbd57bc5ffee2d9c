"""Many devices and many processes: the same numbers as one device.

Each run is a real ``python -m launch.run`` subprocess on CPU devices made by
``--xla_force_host_platform_device_count``: a character-LM run data parallel
over 8 devices, a group of 8 runs one per device, and one run data parallel
over the 4 devices of 2 processes joined by ``jax.distributed`` on localhost;
each is compared with the same run on one device after 20 steps (every logged
loss and the final params to 1e-5 relative).
"""

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from rnnjax.train import checkpoints
from rnnjax.train import devices
from rnnjax.train import records
from rnnjax.train import run_folder

pytestmark = pytest.mark.slow
ROOT = pathlib.Path(__file__).resolve().parent.parent
SMALL = ['--config=experiments/configs/char_lm.py', '--config.hidden_size=32',
         '--config.embedding_size=16', '--config.batch_size=16', '--config.truncation=16',
         '--config.steps=20', '--config.log_every=5', '--config.sample_length=10',
         '--config.checkpoint_every=0', '--config.optimizer=sgd', '--config.learning_rate=1.0']
# SGD: Adam's m / sqrt(v) turns the last-bit differences of a reordered gradient
# sum into visible ones for entries whose gradient is near zero (rare characters).


def environment(device_count: int, xla_flags: str = '', **extra) -> dict:
  env = dict(os.environ, RNNJAX_COMPILATION_CACHE='', **extra,
             XLA_FLAGS=f'--xla_force_host_platform_device_count={device_count} {xla_flags}')
  env.setdefault('RNNJAX_DATA_DIR', str(ROOT.parent / 'shared' / 'data'))
  return env


def launch(arguments, device_count: int = 1, **extra) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, '-m', 'launch.run', *SMALL, *arguments], cwd=ROOT,
                          env=environment(device_count, **extra), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen) -> str:
  output, _ = process.communicate(timeout=600)
  assert process.returncode == 0, output[-3000:]
  return output


def run(arguments, device_count: int = 1) -> str:
  return finish(launch(arguments, device_count))


def losses(folder: pathlib.Path) -> list[float]:
  return [line['loss'] for line in records.read_metrics(folder)]


def assert_same_run(folder: pathlib.Path, reference: pathlib.Path) -> None:
  assert [line['step'] for line in records.read_metrics(folder)] == [1, 5, 10, 15, 20]
  np.testing.assert_allclose(losses(folder), losses(reference), rtol=1e-5)
  _, params = checkpoints.final_params(folder)
  _, expected = checkpoints.final_params(reference)
  for got, want in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(expected)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.max(np.abs(want)))


@pytest.fixture(scope='module')
def one_device(tmp_path_factory) -> pathlib.Path:
  folder = tmp_path_factory.mktemp('one_device') / 'run'
  run([f'--workdir={folder}'])
  return folder


def test_data_parallel_over_8_devices_equals_one_device(one_device, tmp_path):
  output = run([f'--workdir={tmp_path}', '--config.layout=data'], device_count=8)
  assert '8 devices (1 process(es)), batch split over them' in output
  assert_same_run(tmp_path, one_device)


def test_group_of_8_runs_one_per_device_equals_one_device(tmp_path):
  """A sweep's group of 8 runs split over 8 devices (one run each) trains each run as one
  device does."""
  rates = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]  # larger ones amplify rounding
  config = tmp_path / 'rates.py'
  config.write_text('from experiments.configs.char_lm import get_config\n\n\n'
                    f'def get_sweep():\n  return [{{"learning_rate": r}} for r in {rates}]\n')
  fields = [arg for arg in SMALL if arg.startswith('--config.') and 'learning_rate' not in arg]

  def sweep(name, device_count, *extra):
    done = subprocess.run(
        [sys.executable, '-m', 'launch.sweep', f'--config={config}',
         f'--workdir={tmp_path / name}', '--processes=1', *fields, *extra], cwd=ROOT,
        env=environment(device_count), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

  sweep('one', 1)
  sweep('eight', 8, '--config.layout=runs')
  for rate in rates:
    eight = tmp_path / 'eight' / f'learning_rate={rate}'
    header = (eight / 'log.txt').read_text()  # names the job's log, where its shared lines go
    job_log = pathlib.Path(re.search(r"the job's log: (\S+)", header).group(1)).read_text()
    assert '8 devices (1 process(es)), runs split over them' in job_log
    assert_same_run(eight, tmp_path / 'one' / f'learning_rate={rate}')
  assert len({losses(tmp_path / 'one' / f'learning_rate={rate}')[-1] for rate in rates}) == 8


def free_port() -> int:
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    return probe.getsockname()[1]


def test_two_processes_train_one_run_over_their_4_devices(one_device, tmp_path):
  coordinator = f'127.0.0.1:{free_port()}'
  processes = [launch([f'--workdir={tmp_path}', '--config.layout=data'], device_count=2,
                      RNNJAX_COORDINATOR=coordinator, RNNJAX_NUM_PROCESSES='2',
                      RNNJAX_PROCESS_ID=str(index)) for index in range(2)]
  outputs = [finish(process) for process in processes]
  assert all('4 devices (2 process(es)), batch split over them' in out for out in outputs)
  assert f'{tmp_path}: finished after 20 steps' in outputs[0]
  assert 'finished after' not in outputs[1]  # process 1 reports nothing and writes nothing
  assert_same_run(tmp_path, one_device)  # one line per logged step: written once
  assert len(list((tmp_path / 'tensorboard').iterdir())) == 1
  assert run_folder.read_json(tmp_path / 'summary.json')['steps_done'] == 20


def test_layout_errors_name_the_field():
  with pytest.raises(ValueError, match='config.layout: expected one of'):
    devices.placement('rows', 1, {'ids': np.zeros((4, 3))})


def test_data_layout_errors_say_what_cannot_be_split(monkeypatch):
  monkeypatch.setattr(jax, 'devices', lambda: ['first', 'second'])  # raised before any mesh
  with pytest.raises(ValueError, match="draw their batches inside the compiled program"):
    devices.placement('data', 1, {'step': np.zeros(())})  # temporal_order's batches
  with pytest.raises(ValueError, match="divisible by the 2 devices, got 15"):
    devices.placement('data', 1, {'ids': np.zeros((15, 3))})


def test_one_device_places_nothing():
  assert devices.placement('auto', 3, {'ids': np.zeros((4, 3))}).mesh is None
  assert devices.describe(devices.Placement('single', None)) == 'one device'


def test_a_layout_the_devices_cannot_take_is_refused_before_the_folder_is_touched(tmp_path):
  process = subprocess.run(
      [sys.executable, '-m', 'launch.run', *SMALL, f'--workdir={tmp_path}',
       '--config.layout=data', '--config.batch_size=15'],
      cwd=ROOT, env=environment(2), capture_output=True, text=True, timeout=300)
  assert process.returncode == 1
  assert process.stderr.strip().splitlines()[-1] == (
      "error: config.layout: 'data' needs a batch size divisible by the 2 devices, got 15")
  assert not list(tmp_path.iterdir())  # the corrected command needs no --overwrite


def test_a_run_resumed_on_other_devices_says_so(tmp_path):
  first = launch([f'--workdir={tmp_path}', '--config.steps=3000'])
  deadline = time.time() + 300
  while not (tmp_path / run_folder.METRICS).exists() and time.time() < deadline:
    time.sleep(0.2)
  first.send_signal(signal.SIGTERM)  # checkpoints the step it is at
  first.communicate(timeout=300)
  assert first.returncode == 128 + signal.SIGTERM
  output = run([f'--workdir={tmp_path}', '--config.steps=3000'], device_count=2)
  starts = json.loads((tmp_path / run_folder.DEVICES).read_text())
  assert [entry['devices'] for entry in starts] == [
      'one device', '2 devices (1 process(es)), batch split over them']
  assert starts[0]['from_step'] == 0 and starts[1]['from_step'] > 0
  assert (f'resumed at step {starts[1]["from_step"]} on 2 devices (1 process(es)), batch split '
          'over them; the steps before it ran on one device') in output


def test_only_placements_over_cpu_devices_wait_for_each_step():
  assert not devices.needs_one_step_at_a_time(devices.Placement('single', None))
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ('devices',))
  assert devices.needs_one_step_at_a_time(devices.Placement('data', mesh))


def test_bad_distributed_variables_are_one_line(tmp_path):
  result = subprocess.run(
      [sys.executable, '-m', 'launch.run', *SMALL, f'--workdir={tmp_path}'], cwd=ROOT,
      env=environment(1, RNNJAX_COORDINATOR='127.0.0.1:1', RNNJAX_NUM_PROCESSES='2',
                      RNNJAX_PROCESS_ID='5'), capture_output=True, text=True, timeout=300)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith('error: RNNJAX_COORDINATOR')
  assert not (tmp_path / 'config.json').exists()


def test_the_readme_example_over_8_cpu_devices_finishes(tmp_path):
  """The README's CPU example (the char_lm defaults, data parallel over 8 devices), cut to
  30 steps. With the spectral radius solved by a host callback inside the diagnostics
  program it aborted in 6 of 8 tries on 2 cores (an all-reduce rendezvous timeout)."""
  process = subprocess.run(
      [sys.executable, '-m', 'launch.run', '--config=experiments/configs/char_lm.py',
       f'--workdir={tmp_path}', '--config.layout=data', '--config.steps=30',
       '--config.log_every=10', '--config.sample_length=10'],
      cwd=ROOT, env=environment(8), capture_output=True, text=True, timeout=600)
  assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]
  assert [line['step'] for line in records.read_metrics(tmp_path)] == [1, 10, 20, 30]


def test_thousands_of_data_parallel_steps_over_2_cpu_devices_finish(tmp_path):
  """With every step dispatched before the last one ended, XLA:CPU's client hung here
  (both of two tries, in the step's all-reduce, after a few thousand steps); the
  trainer now waits for each step over several CPU devices. XLA's own timeout is cut
  to 20 s so that a hang fails the test instead of waiting for pytest."""
  process = subprocess.run(
      [sys.executable, '-m', 'launch.run', *SMALL, f'--workdir={tmp_path}',
       '--config.layout=data', '--config.hidden_size=64', '--config.truncation=64',
       '--config.steps=8000', '--config.log_every=4000'],
      cwd=ROOT, env=environment(2, '--xla_cpu_collective_call_terminate_timeout_seconds=20'),
      capture_output=True, text=True, timeout=600)
  assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]
  assert [line['step'] for line in records.read_metrics(tmp_path)] == [1, 4000, 8000]
