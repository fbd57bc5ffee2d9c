"""rnnjax as a user of ``pip install rnnjax`` gets it: no checkout, an experiment of one's own."""

import csv
import os
import pathlib
import subprocess
import sys
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

EXPERIMENT = '''
"""A two-run experiment of the user's own: a linear model of noise, its squared error."""
import jax
import jax.numpy as jnp
from rnnjax.train import experiment
from rnnjax.train import trainer


def task(config):
  def loss(params, carry, batch, key):
    x = jax.random.normal(key, (8, 2))
    return jnp.mean((x @ params['w'] - x[:, :1]) ** 2), carry

  return trainer.Task(init=lambda config, key: {'w': jnp.zeros((2, 1))}, loss=loss,
                      batch=lambda step: {}, report=lambda config, params: {
                          'weight': float(params['w'][0, 0])}, loss_unit='squared error')


EXPERIMENT = experiment.Experiment(name=__name__, task=task, fields={}, report=('weight',),
                                   vmappable=('seed',))
'''

CONFIG = '''
import my_experiment


def get_config():
  return my_experiment.EXPERIMENT.config(steps=40, learning_rate=0.1, log_every=10)


def get_sweep():
  return [{'seed': 0}, {'seed': 1}]
'''


@pytest.mark.slow
def test_a_non_editable_install_sweeps_an_experiment_of_ones_own(tmp_path):
  wheels = tmp_path / 'wheels'
  subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '-w', str(wheels),
                  str(ROOT)], check=True, capture_output=True)
  venv = tmp_path / 'venv'
  subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
  python = venv / 'bin' / 'python'
  site = subprocess.run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                        capture_output=True, text=True, check=True).stdout.strip()
  # the dependencies from this interpreter's site-packages (a path, not its .pth files: the
  # checkout's editable install stays out), rnnjax itself from the wheel
  pathlib.Path(site, 'dependencies.pth').write_text(sysconfig.get_paths()['purelib'] + '\n')
  subprocess.run([python, '-m', 'pip', 'install', '-q', '--no-deps',
                  *map(str, wheels.glob('rnnjax-*.whl'))], check=True, capture_output=True)
  project = tmp_path / 'project'
  project.mkdir()
  (project / 'my_experiment.py').write_text(EXPERIMENT)
  (project / 'my_config.py').write_text(CONFIG)
  environment = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
  where = subprocess.run([python, '-c', 'import rnnjax; print(rnnjax.__file__)'], cwd=project,
                         capture_output=True, text=True, check=True, env=environment)
  assert where.stdout.startswith(site)  # the installed copy, not the checkout
  result = subprocess.run([venv / 'bin' / 'rnnjax-sweep', '--config=my_config.py',
                           '--workdir=results'], cwd=project, capture_output=True, text=True,
                          env=environment, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  rows = list(csv.DictReader(open(project / 'results' / 'results.csv')))
  assert [row['seed'] for row in rows] == ['0', '1']
  assert all(row['status'] == 'finished' and 0.5 < float(row['weight']) <= 1.0 for row in rows)
