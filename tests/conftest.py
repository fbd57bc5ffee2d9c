import jax
import pytest

jax.config.update('jax_numpy_dtype_promotion', 'strict')


@pytest.fixture
def key():
  return jax.random.key(0)
