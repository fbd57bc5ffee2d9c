"""experiments.gradient_norms: the seed's table digit for digit, and the other modes."""

import subprocess
import sys


from experiments import gradient_norms

# Seed note 001, verbatim.
SEED_TABLE = """\
rho = 0.7:  |grad| after 20 steps  8.05e-05, 40 steps  1.40e-08, 60 steps  2.28e-12
rho = 1.0:  |grad| after 20 steps  6.18e-02, 40 steps  7.61e-03, 60 steps  1.41e-03
rho = 1.3:  |grad| after 20 steps  2.43e+01, 40 steps  7.53e+02, 60 steps  3.03e+04"""


def run(*flags):
  return subprocess.run([sys.executable, '-m', 'experiments.gradient_norms', *flags],
                        capture_output=True, text=True, check=True).stdout


def test_seed_table_digit_for_digit(tmp_path):
  assert '\n'.join(gradient_norms.seed_lines(gradient_norms.seed_study())) == SEED_TABLE
  output = run('--source=seed', f'--workdir={tmp_path}')
  assert output.startswith(SEED_TABLE + '\n')
  assert '| 1.3 | 2.43e+01 | 7.53e+02 | 3.03e+04 |' in (tmp_path / 'gradient_norms_seed.md').read_text()
  assert (tmp_path / 'gradient_norms_seed.png').stat().st_size > 10_000


def test_jax_mode_agrees_with_the_seed_in_distribution(tmp_path):
  output = run('--source=jax', '--seeds=32', '--radii=0.7,1.0,1.3', f'--workdir={tmp_path}')
  lines = (tmp_path / 'gradient_norms_jax.csv').read_text().splitlines()
  header = lines[0].split(',')
  rows = {float(l.split(',')[0]): dict(zip(header[1:], map(float, l.split(',')[1:])))
          for l in lines[1:]}
  seed = gradient_norms.seed_study()
  for rho in (0.7, 1.0, 1.3):
    # The seed's single draw lies within a factor 4 of the median over 32 draws at step 20,
    assert 0.25 < seed[rho][19] / rows[rho]['median@20'] < 4
    assert rows[rho]['p10@60'] <= rows[rho]['median@60'] <= rows[rho]['p90@60']
  # and the fitted per-step rate grows with rho, below rho (the tanh' tax).
  rates = [rows[rho]['rate'] for rho in (0.7, 1.0, 1.3)]
  assert rates == sorted(rates) and all(r < rho for r, rho in zip(rates, (0.7, 1.0, 1.3)))
  assert (tmp_path / 'gradient_norms_jax.png').exists()
  assert 'rate' in output


def test_network_mode_reads_a_finished_run(tmp_path, shared_data_dir):
  run_dir = tmp_path / 'char_lm'
  subprocess.run([sys.executable, '-m', 'launch.run',
                  '--config=experiments/configs/char_lm.py', f'--workdir={run_dir}',
                  '--config.steps=2', '--config.hidden_size=16', '--config.embedding_size=8',
                  '--config.batch_size=4', '--config.truncation=16', '--config.sample_length=3'],
                 capture_output=True, check=True)
  output = run('--source=network', f'--run={run_dir}', '--radii=0.5,1.5', '--window=21',
               f'--workdir={tmp_path}')
  table = (tmp_path / 'gradient_norms_network.md').read_text()
  assert table.splitlines()[0] == '| network | 1 | 2 | 5 | 10 | 20 |'
  rows = table.splitlines()[2:]
  assert rows[0].startswith('| init, rho=0.5 |') and rows[2].startswith('| trained (char_lm)')
  small = [float(v) for v in rows[0].split('|')[2:-1]]
  large = [float(v) for v in rows[1].split('|')[2:-1]]
  assert all(s < l for s, l in zip(small, large))  # larger rho, slower vanishing
  assert small[-1] < 1e-3
  assert (tmp_path / 'gradient_norms_network.png').exists()
  assert 'wrote' in output
