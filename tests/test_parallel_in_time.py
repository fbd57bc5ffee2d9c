"""experiments.parallel_in_time: a tiny sweep with a trained network, its files, the error.

One CLI run holds the whole sweep: the tiny char_lm run has H = 16 and E = 8, and the
networks at initialization are given the same sizes, so DEER and quasi-DEER compile once
(about 5 s each on CPU) for both.
"""

import csv
import math
import subprocess
import sys

import numpy as np

from experiments import parallel_in_time


def run(*flags, check=True):
  return subprocess.run([sys.executable, '-m', 'experiments.parallel_in_time', *flags],
                        capture_output=True, text=True, check=check)


def test_caps_follow_the_work_budget():
  assert parallel_in_time.cap('quasi', 3, 4096, 64) == 1024  # --max_iterations
  assert parallel_in_time.cap('quasi', 3, 64, 64) == 64  # T
  assert parallel_in_time.cap('deer', 3, 64, 4) == 64
  assert parallel_in_time.cap('deer', 3, 4096, 64) == 19  # 6.4e10 / (3 * 4096 * 64^3)
  assert parallel_in_time.cap('deer', 3, 1024, 256) is None  # 1 < 3: skipped
  assert parallel_in_time.cap('deer', 3, 2, 256) == 2  # T below the smallest cap of 3


def test_iterations_text_says_capped_overflowed_and_partial():
  def outcome(iterations, converged, overflowed=(False, False, False)):
    return {'iterations': np.array(iterations), 'converged': np.array(converged),
            'overflowed': np.array(overflowed), 'cap': 64}

  text = parallel_in_time.iterations_text
  assert text(outcome([3, 5, 4], [True] * 3), 3) == '4'
  assert text(outcome([3, 64, 5], [True, False, True]), 3) == '5 (2/3)'
  assert text(outcome([64, 64, 5], [False, False, True]), 3) == '>64 (1/3)'
  assert text(outcome([1, 1, 1], [False] * 3, [True] * 3), 3) == 'overflow'
  assert text(None, 3) == 'skipped'
  assert math.isinf(parallel_in_time.median_iterations(outcome([64, 64, 5],
                                                               [False, False, True])))


def test_sweep_with_a_trained_network_writes_table_and_heatmap(tmp_path, shared_data_dir):
  run_dir = tmp_path / 'char_lm'
  subprocess.run([sys.executable, '-m', 'launch.run',
                  '--config=experiments/configs/char_lm.py', f'--workdir={run_dir}',
                  '--config.steps=2', '--config.hidden_size=16', '--config.embedding_size=8',
                  '--config.batch_size=4', '--config.truncation=16', '--config.sample_length=3'],
                 capture_output=True, check=True)
  output = run('--radii=0.5,1.5', '--lengths=16', '--hidden_sizes=16', '--input_size=8',
               f'--run={run_dir}', f'--workdir={tmp_path}').stdout
  with open(tmp_path / 'parallel_in_time.csv') as f:
    rows = {row['setting']: row for row in csv.DictReader(f)}
  assert list(rows)[:2] == ['init H=16 rho=0.5 T=16', 'init H=16 rho=1.5 T=16']
  trained = list(rows)[2]
  assert trained.startswith('trained char_lm H=16 rho=') and trained.endswith(' T=16')
  small, large = rows['init H=16 rho=0.5 T=16'], rows['init H=16 rho=1.5 T=16']
  number = lambda row, key: float(row[key])
  for row in rows.values():  # each sequence converged; DEER (quadratic) before quasi (linear)
    assert number(row, 'deer_converged') == number(row, 'quasi_converged') == 3
    assert number(row, 'deer_iterations') < number(row, 'quasi_iterations') <= 16
    assert number(row, 'deer_max_dev') < 1e-3
    assert min(number(row, f'{m}_seconds') for m in ('deer', 'quasi', 'fused')) > 0
  # a larger radius, less contraction, more iterations (quasi-DEER needs nearly T = 16 for both)
  assert number(small, 'deer_iterations') < number(large, 'deer_iterations')
  assert number(small, 'quasi_iterations') <= number(large, 'quasi_iterations')
  assert number(small, 'growth') < number(large, 'growth')
  assert number(small, 'growth') < 0.6  # about rho at a weak drive: tanh' near 1
  table = (tmp_path / 'parallel_in_time.md').read_text()
  assert table.startswith('Measured at commit ')
  assert table.splitlines()[2] == ('| setting | growth | DEER iters | quasi iters | DEER s | '
                                   'quasi s | fused s | DEER/fused | DEER dev |')
  assert len(table.splitlines()) == 4 + 3 and table in output
  assert (tmp_path / 'parallel_in_time.png').stat().st_size > 10_000
  assert 'wrote' in output


def test_a_folder_without_an_ended_run_is_a_one_line_usage_error(tmp_path):
  result = run(f'--run={tmp_path / "nothing"}', '--hidden_sizes=4', '--lengths=8',
               f'--workdir={tmp_path}', check=False)
  assert result.returncode == 1
  assert result.stderr.startswith('error: ') and result.stderr.count('\n') == 1, result.stderr
  assert 'holds no ended run' in result.stderr and 'python -m launch.run' in result.stderr
  assert not (tmp_path / 'parallel_in_time.csv').exists()


def test_normal_inputs_have_the_shape_asked_for():
  import jax
  inputs = parallel_in_time.initial_inputs('normal', jax.random.key(0), 2, 5, 3)
  assert inputs.shape == (2, 5, 3)
