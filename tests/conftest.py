import jax
import pytest

# Strict dtype promotion is not used: optax's own Adam (bias correction, a
# Python float to an int32 power) fails under it.


@pytest.fixture
def key():
  return jax.random.key(0)


@pytest.fixture
def shared_data_dir():
  """The folder of real corpora ($RNNJAX_DATA_DIR; .ci/run points it at ../shared/data)."""
  import os
  import pathlib
  folder = pathlib.Path(os.environ.get('RNNJAX_DATA_DIR', 'data'))
  if not (folder / 'tinyshakespeare' / 'input.txt').exists():
    pytest.skip(f'no tinyshakespeare/input.txt under RNNJAX_DATA_DIR={folder}')
  return folder
