import os

# As rnnjax sets it before jaxlib loads: XLA's C++ logs at fatal only. Importing jax first
# would set jax's own default (1, warnings and errors) for every run these tests start.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import jax  # noqa: E402
import pytest  # noqa: E402

from rnnjax.train import job  # noqa: E402

# The tests' own programs in the cache their runs use: a program compiled again (by another
# test module, after its caches were cleared, or by a run) is read back, not compiled.
job.use_compilation_cache()

# Strict dtype promotion is not used: optax's own Adam (bias correction, a
# Python float to an int32 power) fails under it.


@pytest.fixture
def key():
  return jax.random.key(0)


@pytest.fixture(scope='session')
def shared_data_dir():
  """The folder of real corpora ($RNNJAX_DATA_DIR; .ci/run points it at ../shared/data)."""
  import os
  import pathlib
  folder = pathlib.Path(os.environ.get('RNNJAX_DATA_DIR', 'data'))
  if not (folder / 'tinyshakespeare' / 'input.txt').exists():
    pytest.skip(f'no tinyshakespeare/input.txt under RNNJAX_DATA_DIR={folder}')
  return folder


@pytest.fixture
def trained_char_lm(tmp_path, shared_data_dir):
  """The folder of a char_lm run of H = 16 trained 2 steps (``launch.run``), whose cell the
  measurements of a trained network read."""
  import subprocess
  import sys
  folder = tmp_path / 'char_lm'
  subprocess.run([sys.executable, '-m', 'launch.run', '--config=experiments/configs/char_lm.py',
                  f'--workdir={folder}', '--config.steps=2', '--config.hidden_size=16',
                  '--config.embedding_size=8', '--config.batch_size=4', '--config.truncation=16',
                  '--config.sample_length=3'], capture_output=True, check=True)
  return folder


@pytest.fixture
def tmpfs_disk(tmp_path):
  """``tmpfs_disk(size)``: a real tmpfs of ``size`` (e.g. '64k') mounted at
  ``tmp_path / 'disk'``, unmounted after the test (lazily: a test's writer may still
  hold a file there); the test is skipped where this process may not mount one."""
  import shutil
  import subprocess
  disk = tmp_path / 'disk'
  mounted = []

  def mount(size: str):
    disk.mkdir()
    if not shutil.which('mount') or subprocess.run(
        ['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', str(disk)],
        capture_output=True).returncode:
      pytest.skip('cannot mount a tmpfs here')
    mounted.append(disk)
    return disk

  yield mount
  for path in mounted:
    subprocess.run(['umount', '--lazy', str(path)], check=True)


@pytest.fixture(autouse=True, scope='module')
def _fresh_compilation_caches():
  """Each test module starts with JAX's in-memory caches of compiled programs cleared: one
  process runs every module, and its memory would otherwise grow with every program."""
  jax.clear_caches()
  yield


def pytest_collection_modifyitems(config, items):
  """The slow tests first, each group in its own order. Under pytest-xdist's default ``load``
  scheduling, which hands each worker consecutive chunks of this order, the first worker's
  first chunk holds them."""
  del config
  items.sort(key=lambda item: item.get_closest_marker('slow') is None)
