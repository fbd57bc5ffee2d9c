"""Compiled programs without module caches: evaluation and sampling hold no cache of their own
(JAX's jit cache holds the programs), and a second call with the same model and shapes
compiles nothing."""

import contextlib
import functools
import logging
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import combinators
from rnnjax import convert
from rnnjax import evaluation
from rnnjax import fused
from rnnjax import initializers
from rnnjax import models
from rnnjax import recurrence
from rnnjax import sampling
from rnnjax import seq2seq
from rnnjax.data import batching, classification, corpora, subwords, synthetic, text

MODULES = [cells, combinators, convert, evaluation, fused, initializers, recurrence, sampling,
           seq2seq, batching, classification, corpora, subwords, synthetic, text]
V, H = 11, 8


@contextlib.contextmanager
def compiled(caplog):
  """Collects the names of the programs XLA compiles inside the block (``jax.log_compiles``)."""
  names = []
  caplog.clear()
  with caplog.at_level(logging.WARNING), jax.log_compiles():
    yield names
  names.extend(record.getMessage().split()[1] for record in caplog.records
               if record.getMessage().startswith('Compiling '))


@pytest.mark.parametrize('module', MODULES, ids=lambda m: m.__name__)
def test_no_module_holds_a_cache(module):
  for name, value in vars(module).items():
    assert not isinstance(value, functools._lru_cache_wrapper), f'{module.__name__}.{name}'
    if isinstance(value, (dict, list)) and not name.isupper() and not name.startswith('__'):
      pytest.fail(f'{module.__name__}.{name}: a module-level {type(value).__name__}')


def _model():
  return models.LanguageModel(vocab_size=V, hidden_size=H, embedding_size=4)


@pytest.fixture(scope='module')
def params():
  model = _model()
  return model.init(jax.random.key(0), jnp.zeros((1, 3), jnp.int32),
                    model.initial_state(1))['params']


def test_evaluation_compiles_once_per_model_and_shapes(caplog, params):
  ids = np.asarray(jax.random.randint(jax.random.key(1), (2, 41), 0, V), np.int32)
  windows = text.stream_windows(ids.ravel(), batch_size=2, truncation=5)
  first = (evaluation.evaluate(_model(), params, *windows),
           evaluation.evaluate_streaming(_model(), params, ids))
  with compiled(caplog) as names:  # an equal model built anew, the same shapes
    again = (evaluation.evaluate(_model(), params, *windows),
             evaluation.evaluate_streaming(_model(), params, ids))
  assert names == [] and again == first
  with compiled(caplog) as names:  # the counter sees a new shape
    evaluation.evaluate(_model(), params, *text.stream_windows(ids.ravel(), 2, 4))
    evaluation.evaluate_streaming(_model(), params, ids[:, :30])
  assert 'jit(_window_losses)' in names and 'jit(_streaming_total)' in names


def test_sampling_compiles_once_per_model_length_and_mode(caplog, params):
  prompt = jnp.array([1, 2, 3], jnp.int32)
  first = [sampling.sample(_model(), params, prompt, 6, jax.random.key(0), t, k)
           for t, k in ((0.0, None), (0.5, None), (0.5, 3))]
  with compiled(caplog) as names:  # other keys and temperatures are values, not programs
    for t, k in ((0.0, None), (0.9, None), (1e-45, 3), (0.5, 3)):
      sampling.sample(_model(), params, prompt, 6, jax.random.key(5), t, k)
    again = sampling.sample(_model(), params, prompt, 6, jax.random.key(0), 0.5, 3)
  assert names == []
  np.testing.assert_array_equal(again, first[2])
  with compiled(caplog) as names:
    sampling.sample(_model(), params, prompt, 7, jax.random.key(0), 0.5)
  assert names == ['jit(_generate)']
