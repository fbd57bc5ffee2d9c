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


def test_the_log_fit_residual_is_zero_for_c_log_t_and_large_for_growth_like_t():
  lengths = (16, 32, 64, 128, 256, 512)
  logarithmic = [2 + 3 * math.log(t) for t in lengths]
  assert parallel_in_time.log_fit_residual(lengths, logarithmic) == pytest.approx(0, abs=1e-12)
  # iterations = T: the line in ln T misses by 0.24 of the mean count (by hand: numpy's
  # polyfit of (ln T, T) and the RMS of what it leaves, over the mean 168)
  linear = parallel_in_time.log_fit_residual(lengths, [float(t) for t in lengths])
  x = np.log(lengths)
  residual = np.asarray(lengths) - np.polyval(np.polyfit(x, lengths, 1), x)
  assert linear == pytest.approx(np.sqrt(np.mean(residual ** 2)) / np.mean(lengths))
  assert linear > parallel_in_time.LOGARITHMIC
  assert math.isnan(parallel_in_time.log_fit_residual(lengths[:4], (3, 3, 3, math.inf)))


def test_log_product_norms_are_the_norms_of_the_products_without_overflow():
  rng = np.random.default_rng(0)
  jacobians = (rng.normal(size=(40, 5, 5)) * 3.0).astype(np.float32)
  product, expected = np.eye(5), []
  for jacobian in jacobians.astype(np.float64):
    product = product @ jacobian
    expected.append(np.log(np.linalg.norm(product, 2)))
  np.testing.assert_allclose(parallel_in_time.log_product_norms(jacobians), expected, rtol=1e-5)
  big = np.repeat(np.eye(3)[None] * 1e30, 100, axis=0).astype(np.float32)  # 1e3000 at the end
  logs = parallel_in_time.log_product_norms(big)
  assert np.isfinite(logs).all() and logs[-1] == pytest.approx(100 * np.log(1e30), rel=1e-5)
  zero = np.zeros((3, 2, 2), np.float32)
  assert np.all(np.isneginf(parallel_in_time.log_product_norms(zero)))


def test_the_predictors_expand_at_the_zero_guess_only_where_w_hh_does():
  """A contracting W_hh (radius 0.6) contracts along the zero guess (exponent < 0) and DEER
  certifies it in a few iterates; an expanding one (radius 3) has an exponent > 0 there and
  needs more iterates. The iterates counted are the updates DEER makes to its certificate at
  that T, plus the zero guess."""
  import jax.numpy as jnp
  from rnnjax import parallel
  reports = {}
  for radius in (0.6, 3.0):
    config = parallel_in_time.EXPERIMENT.config(
        inputs='normal', sequences=1, lengths=(32,), hidden_size=8, input_size=4,
        spectral_radius=radius, lyapunov_transient=0, lyapunov_steps=32, predictor_length=32,
        dtype='float32')
    params, inputs, _ = parallel_in_time.problem(config)
    initial = jnp.zeros((1, 8), inputs.dtype)
    reports[radius] = parallel_in_time.predictors(config, params, inputs, initial, {})
    _, _, info = parallel.elman_deer(params, inputs[:, :32], initial, tolerance=1e-5)
    assert reports[radius]['iterates'] == int(info['iterations'][0]) + 1
    assert reports[radius]['exponent_along_iterates'] >= reports[radius]['exponent_zero_guess']
  assert reports[0.6]['exponent_zero_guess'] < 0 < reports[3.0]['exponent_zero_guess']
  assert reports[0.6]['iterates'] < reports[3.0]['iterates']


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
