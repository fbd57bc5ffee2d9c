"""rnnjax as its users install it: the documented installs (a checkout, a wheel) run as written
in fresh environments, the core alone light and beside a JAX of one's own, and a wheel with
an experiment of one's own."""

import csv
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
INSTALL_PAGES = (ROOT / 'README.md', ROOT / 'docs' / 'getting_started.md')
# The first line of each documented install block.
CHECKOUT, WHEEL = '# from a checkout', '# from a wheel'
# What the core must not import: the extras' packages.
EXTRAS_ONLY = ('orbax', 'tensorstore', 'submitit', 'sentencepiece', 'matplotlib',
               'tensorboardX', 'ml_collections', 'flax')
# jax's own closure: what any environment with jax holds (the core's size beyond it is ours).
JAX_ITSELF = {'jax', 'jaxlib', 'numpy', 'scipy', 'ml-dtypes', 'ml_dtypes', 'opt-einsum',
              'opt_einsum'}
SMOKE = """
import math, sys
import jax, jax.numpy as jnp
import rnnjax as rj
key = jax.random.key(0)
params = rj.init_elman(key, 3, 8, 'orthogonal', radius=0.9)
inputs = jax.random.normal(key, (2, 50, 3))
states, last = rj.elman_layer(params, inputs)
print(states.shape, rj.elman_cell(params, last, inputs[:, 0])[0].shape)
table = rj.gradient_norm_table(protocol='linearised')
print(f'{table[1.0][20]:.2e} {table[1.3][60]:.2e}')
linear = rj.lyapunov_spectrum(rj.elman('linear'), params, inputs, k=2)
print(bool(jnp.allclose(linear, math.log(0.9), atol=1e-5)))
print(sorted(name for name in sys.modules if name.split('.')[0] in {EXTRAS}))
""".replace('{EXTRAS}', repr(set(EXTRAS_ONLY)))

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
  # the caller's PYTHONPATH (a checkout) would show pip an rnnjax already there
  environment = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
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
                  *map(str, wheels.glob('rnnjax-*.whl'))], check=True, capture_output=True,
                 env=environment)
  project = tmp_path / 'project'
  project.mkdir()
  (project / 'my_experiment.py').write_text(EXPERIMENT)
  (project / 'my_config.py').write_text(CONFIG)
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


def documented_blocks(page: pathlib.Path) -> dict[str, str]:
  """The page's install blocks (```sh blocks whose first line is CHECKOUT or WHEEL)."""
  blocks = re.findall(r'```sh\n(.*?)\n```', page.read_text(), re.S)
  return {kind: block for block in blocks for kind in (CHECKOUT, WHEEL)
          if block.startswith(kind)}


def test_the_install_pages_document_the_same_installs():
  readme, docs = (documented_blocks(page) for page in INSTALL_PAGES)
  assert set(readme) == {CHECKOUT, WHEEL} and readme == docs
  for page in INSTALL_PAGES:
    assert 'pip install rnnjax ' not in page.read_text() + ' '  # not on PyPI


def test_importing_rnnjax_changes_nothing_in_the_process_environment():
  """Not at import, and not when its names load (jax's own import sets its log level, and
  is compared after it)."""
  code = ('import os; before = dict(os.environ); import rnnjax; print(dict(os.environ) == '
          'before); import jax; before = dict(os.environ); rnnjax.elman_layer; rnnjax.models; '
          'print(dict(os.environ) == before)')
  environment = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
  result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          env=environment, check=True)
  assert result.stdout.split() == ['True', 'True'], result.stderr


def _venv(folder: pathlib.Path) -> tuple[pathlib.Path, dict]:
  """A fresh virtual environment and the environment variables that put it first on PATH
  (and no checkout on PYTHONPATH)."""
  subprocess.run([sys.executable, '-m', 'venv', str(folder)], check=True)
  environment = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
  environment['PATH'] = f'{folder / "bin"}{os.pathsep}{environment["PATH"]}'
  return folder / 'bin' / 'python', environment


def _run(command, cwd, environment, **kwargs):
  result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True,
                          shell=isinstance(command, str), **kwargs)
  assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-3000:])
  return result


def _checkout_copy(folder: pathlib.Path) -> pathlib.Path:
  """The checkout's files (tracked and new, not ignored) in ``folder``, as a clone has them."""
  listed = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard'], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.split()
  for name in listed:
    if (ROOT / name).is_file():
      (folder / name).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(ROOT / name, folder / name)
  return folder


INSPECT = """
import importlib.metadata as metadata, json, os
sizes = {}
for dist in metadata.distributions():
  files = [f.locate() for f in dist.files or []]
  sizes[dist.metadata['Name']] = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
print(json.dumps({'sizes': sizes,
                  'versions': {d.metadata['Name'].lower(): d.version
                               for d in metadata.distributions()}}))
"""


@pytest.mark.slow
def test_the_documented_installs_in_fresh_environments(tmp_path):
  """README's and getting_started's install blocks, run as written: the wheel without extras
  in a fresh environment (at most 30 packages beside pip; no extra's package imported by
  import rnnjax; a cell, the seed table and a Lyapunov spectrum; rnnjax-sweep and
  rnnjax.models say which extra to install); then, in an environment holding jax 0.10.2 and
  flax 0.12.8, the wheel changes none of jax, jaxlib, flax, ml_dtypes (pip's dry run) and
  the checkout block installs with the harness, changing none of them either."""
  blocks = documented_blocks(INSTALL_PAGES[0])
  checkout = _checkout_copy(tmp_path / 'checkout')
  elsewhere = tmp_path / 'elsewhere'
  elsewhere.mkdir()

  # The wheel, no extras, in a fresh environment.
  python, environment = _venv(tmp_path / 'core')
  _run(['bash', '-euo', 'pipefail', '-c', blocks[WHEEL]], checkout, environment, timeout=1200)
  wheel, = (checkout / 'dist').glob('rnnjax-*.whl')
  installed = json.loads(_run([python, '-c', INSPECT], elsewhere, environment).stdout)
  packages = sorted(set(installed['versions']) - {'pip', 'setuptools'})
  assert len(packages) <= 30, packages
  ours = {name: size for name, size in installed['sizes'].items()
          if name.lower() not in JAX_ITSELF | {'pip', 'setuptools'}}
  assert sum(ours.values()) < 50e6, ours  # beyond jax's own closure (jaxlib alone ~350 MB)
  imported = _run([python, '-X', 'importtime', '-c', 'import rnnjax'], elsewhere,
                  environment).stderr
  names = {line.split('|')[-1].strip().split('.')[0] for line in imported.splitlines()
           if '|' in line}
  assert not names & set(EXTRAS_ONLY), names & set(EXTRAS_ONLY)
  output = _run([python, '-c', SMOKE], elsewhere, environment).stdout.splitlines()
  assert output == ['(2, 50, 8) (2, 8)', '6.18e-02 3.03e+04', 'True', '[]'], output
  for command, extra in (([str(python.parent / 'rnnjax-sweep'), '--help'], 'train'),
                         ([python, '-c', 'import rnnjax.models'], 'flax')):
    result = subprocess.run(command, cwd=elsewhere, env=environment, capture_output=True,
                            text=True)
    assert result.returncode == 1 and f"pip install 'rnnjax[{extra}]'" in result.stderr
    if extra == 'train':
      assert result.stderr.count('\n') == 1, result.stderr  # one line, no traceback

  # An environment of one's own, with the newest JAX: the wheel and the checkout change none.
  python, environment = _venv(tmp_path / 'lab')
  held = {'jax': '0.10.2', 'jaxlib': '0.10.2', 'flax': '0.12.8'}
  _run([python, '-m', 'pip', 'install', '-q', *(f'{n}=={v}' for n, v in held.items())],
       elsewhere, environment, timeout=1200)
  before = json.loads(_run([python, '-c', INSPECT], elsewhere, environment).stdout)['versions']
  for extras in ('', '[train]'):
    report = tmp_path / f'report{extras}.json'
    _run([python, '-m', 'pip', 'install', '-q', '--dry-run', '--report', str(report),
          f'{wheel}{extras}'], elsewhere, environment, timeout=1200)
    changed = {item['metadata']['name'].lower()
               for item in json.loads(report.read_text())['install']}
    assert not changed & {'jax', 'jaxlib', 'flax', 'ml-dtypes', 'ml_dtypes'}, changed
  _run(['bash', '-euo', 'pipefail', '-c', blocks[CHECKOUT]], checkout, environment,
       timeout=1200)
  after = json.loads(_run([python, '-c', INSPECT], elsewhere, environment).stdout)['versions']
  assert {n: after[n] for n in ('jax', 'jaxlib', 'flax', 'ml_dtypes')} == {
      n: before[n] for n in ('jax', 'jaxlib', 'flax', 'ml_dtypes')}
  assert 'orbax-checkpoint' in after
  result = _run([str(python.parent / 'rnnjax-sweep'), '--help'], elsewhere, environment)
  assert '--workdir' in result.stdout
