"""experiments.parallel_in_time: the caps, a small sweep with a trained network, its errors.

The tiny char_lm run has H = 16 and E = 8, and the networks at initialization are given the
same sizes, so DEER and quasi-DEER compile once for both.
"""

import csv
import subprocess
import sys

from experiments import parallel_in_time

CONFIG = '''
import itertools
from experiments.configs.parallel_in_time import get_config as base

def get_config():
  return base()

def get_sweep():
  runs = [{'method': m, 'spectral_radius': r, 'hidden_size': 16, 'input_size': 8, 'length': 16}
          for m, r in itertools.product(('deer', 'quasi'), (0.5, 1.5))]
  return runs + [{'method': m, 'spectral_radius': 0.0, 'hidden_size': 16, 'input_size': 8,
                  'length': 16, 'trained_run': 'TRAINED'} for m in ('deer', 'quasi')]
'''


def test_caps_follow_the_work_budget():
  config = parallel_in_time.EXPERIMENT.config
  cap = lambda method, batch, steps, hidden: parallel_in_time.cap(
      config(method=method, sequences=batch, length=steps), hidden)
  assert cap('quasi', 3, 4096, 64) == 1024  # max_iterations
  assert cap('quasi', 3, 64, 64) == 64  # T
  assert cap('deer', 3, 64, 4) == 64
  assert cap('deer', 3, 4096, 64) == 19  # 6.4e10 / (3 * 4096 * 64^3)
  assert cap('deer', 3, 1024, 256) is None  # 1 < 3: skipped
  assert cap('deer', 3, 2, 256) == 2  # T below the smallest cap of 3


def test_a_sweep_with_a_trained_network(tmp_path, shared_data_dir):
  run_dir = tmp_path / 'char_lm'
  subprocess.run([sys.executable, '-m', 'launch.run',
                  '--config=experiments/configs/char_lm.py', f'--workdir={run_dir}',
                  '--config.steps=2', '--config.hidden_size=16', '--config.embedding_size=8',
                  '--config.batch_size=4', '--config.truncation=16', '--config.sample_length=3'],
                 capture_output=True, check=True)
  config = tmp_path / 'small.py'
  config.write_text(CONFIG.replace('TRAINED', str(run_dir)))
  result = subprocess.run([sys.executable, '-m', 'launch.sweep', f'--config={config}',
                           f'--workdir={tmp_path / "sweep"}'], capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = list(csv.DictReader(open(tmp_path / 'sweep' / 'results.csv')))
  assert (tmp_path / 'sweep' / 'points_iterations.png').stat().st_size > 10_000
  number = lambda row, key: float(row[key])
  by = {(row['method'], row['spectral_radius'], row.get('trained_run', '')): row for row in rows}
  assert len(rows) == 6
  for row in rows:  # each sequence converged; DEER (quadratic) before quasi (linear)
    assert number(row, 'converged') == 3 and number(row, 'iterations') <= 16
    assert number(row, 'max_deviation') < 1e-3
    assert min(number(row, 'seconds'), number(row, 'fused_seconds')) > 0
  for rho in ('0.5', '1.5'):
    assert number(by['deer', rho, ''], 'iterations') < number(by['quasi', rho, ''],
                                                              'iterations')
  # a larger radius, less contraction, more iterations
  assert number(by['deer', '0.5', ''], 'iterations') < number(by['deer', '1.5', ''],
                                                              'iterations')
  assert number(by['deer', '0.5', ''], 'growth') < number(by['deer', '1.5', ''], 'growth')
  assert number(by['deer', '0.5', ''], 'growth') < 0.6  # about rho at a weak drive
  trained = [row for row in rows if row['trained_run']]
  assert len(trained) == 2 and 0 < number(trained[0], 'measured_spectral_radius') < 3
  assert (tmp_path / 'sweep' / 'results.md').read_text().startswith('Measured at commit ')


def test_a_folder_without_an_ended_run_is_a_one_line_error(tmp_path):
  result = subprocess.run([sys.executable, '-m', 'launch.run',
                           '--config=experiments/configs/parallel_in_time.py',
                           f'--config.trained_run={tmp_path / "nothing"}',
                           f'--workdir={tmp_path / "run"}'], capture_output=True, text=True)
  assert result.returncode == 1
  assert result.stderr.startswith('error: ') and result.stderr.count('\n') == 1, result.stderr
  assert 'holds no ended run' in result.stderr
  assert not (tmp_path / 'run').exists()


def test_normal_inputs_have_the_shape_asked_for():
  config = parallel_in_time.EXPERIMENT.config(inputs='normal', sequences=2, length=5,
                                              input_size=3, hidden_size=4)
  params, inputs, activation = parallel_in_time.problem(config)
  assert inputs.shape == (2, 5, 3) and params['W_hh'].shape == (4, 4) and activation == 'tanh'
