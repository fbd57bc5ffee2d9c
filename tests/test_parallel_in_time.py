"""experiments.parallel_in_time: the caps, a small sweep with a trained network, its errors.

The tiny char_lm run has H = 16 and E = 8, and the networks at initialization are given the
same sizes, so DEER and quasi-DEER compile once for both.
"""

import csv
import math
import subprocess
import sys

import numpy as np
import pytest

from experiments import parallel_in_time

CONFIG = '''
import itertools
from experiments.configs.parallel_in_time import get_config as base

def get_config():
  return base()

def get_sweep():
  common = {'input_size': 8, 'lengths': (4, 8, 16), 'sequences': 3, 'dtype': 'float32',
            'lyapunov_transient': 16, 'lyapunov_steps': 48, 'max_iterations': 1024}
  runs = [{'method': m, 'spectral_radius': r, 'hidden_size': 16, 'trained_run': '', **common}
          for m, r in itertools.product(('deer', 'quasi'), (0.5, 1.5))]
  return runs + [{'method': m, 'spectral_radius': 0.0, 'hidden_size': 16,
                  'trained_run': 'TRAINED', **common} for m in ('deer', 'quasi')]
'''


def test_caps_follow_the_work_budget():
  config = parallel_in_time.EXPERIMENT.config
  cap = lambda method, batch, steps, hidden: parallel_in_time.cap(
      config(method=method, sequences=batch, damped_max_iterations=256), hidden, steps)
  assert cap('quasi', 3, 4096, 64) == 1024  # max_iterations
  assert cap('quasi', 3, 64, 64) == 64  # T
  assert cap('deer', 3, 64, 4) == 64
  assert cap('deer', 3, 4096, 64) == 19  # 6.4e10 / (3 * 4096 * 64^3)
  assert cap('deer', 3, 1024, 256) is None  # 1 < 3: skipped
  assert cap('deer', 3, 2, 256) == 2  # T below the smallest cap of 3
  assert cap('quasi_elk', 3, 64, 4) == 128  # 2 T
  assert cap('elk', 3, 4096, 4) == 256  # damped_max_iterations


def test_the_slope_is_fitted_over_the_converged_lengths():
  assert parallel_in_time.slope((16, 32, 64, 128), (2, 4, 8, 16)) == pytest.approx(1.0)
  assert parallel_in_time.slope((16, 32, 64, 128), (5, 5, 5, math.inf)) == pytest.approx(0.0)
  assert math.isnan(parallel_in_time.slope((16, 32, 64), (5, math.inf, math.inf)))


def test_a_sweep_with_a_trained_network(tmp_path, trained_char_lm):
  run_dir = trained_char_lm
  config = tmp_path / 'small.py'
  config.write_text(CONFIG.replace('TRAINED', str(run_dir)))
  result = subprocess.run([sys.executable, '-m', 'launch.sweep', f'--config={config}',
                           f'--workdir={tmp_path / "sweep"}'], capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = list(csv.DictReader(open(tmp_path / 'sweep' / 'results.csv')))
  assert (tmp_path / 'sweep' / 'points_slope.png').stat().st_size > 10_000
  number = lambda row, key: float(row[key])
  by = {(row['method'], row['spectral_radius'], row.get('trained_run', '')): row for row in rows}
  assert len(rows) == 6
  for row in rows:  # converged at every length; DEER (quadratic) before quasi (linear)
    assert number(row, 'longest_converged') == 16 and number(row, 'iterations_T16') <= 16
    assert number(row, 'solver_seconds') > 0 and number(row, 'seconds') > 0
    assert math.isfinite(number(row, 'slope'))
  for rho in ('0.5', '1.5'):
    assert number(by['deer', rho, ''], 'iterations_T16') < number(by['quasi', rho, ''],
                                                                  'iterations_T16')
  # a larger radius, less contraction, more iterations
  assert number(by['deer', '0.5', ''], 'iterations_T16') < number(by['deer', '1.5', ''],
                                                                  'iterations_T16')
  assert number(by['deer', '0.5', ''], 'largest_lyapunov_exponent') < number(
      by['deer', '1.5', ''], 'largest_lyapunov_exponent') < 0.1
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
  config = parallel_in_time.EXPERIMENT.config(inputs='normal', sequences=2, lengths=(5,),
                                              input_size=3, hidden_size=4,
                                              lyapunov_transient=2, lyapunov_steps=3)
  params, inputs, activation = parallel_in_time.problem(config)
  assert inputs.shape == (2, 5, 3) and params['W_hh'].shape == (4, 4) and activation == 'tanh'


def test_each_seed_reads_its_own_held_out_stream(shared_data_dir):
  config = parallel_in_time.EXPERIMENT.config
  first = parallel_in_time.problem(config(seed=0, sequences=1, lengths=(32,),
                                          lyapunov_transient=0, lyapunov_steps=8))[1]
  second = parallel_in_time.problem(config(seed=1, sequences=1, lengths=(32,),
                                           lyapunov_transient=0, lyapunov_steps=8))[1]
  assert first.shape == second.shape == (1, 32, 64) and not np.allclose(first, second)
