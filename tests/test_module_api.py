"""Each library module names its public API in ``__all__``; every public function there has a
docstring and a full annotation (the type checker, ``python -m mypy``, checks the rest)."""

import inspect

import pytest

from rnnjax import cells
from rnnjax import combinators
from rnnjax import convert
from rnnjax import counts
from rnnjax import evaluation
from rnnjax import fused
from rnnjax import initializers
from rnnjax import recurrence
from rnnjax import sampling
from rnnjax import seq2seq
from rnnjax.data import batching, classification, corpora, subwords, synthetic, text

MODULES = [cells, combinators, convert, counts, evaluation, fused, initializers, recurrence,
           sampling, seq2seq, batching, classification, corpora, subwords, synthetic, text]


@pytest.mark.parametrize('module', MODULES, ids=lambda m: m.__name__)
def test_all_names_the_public_api(module):
  assert module.__all__ and len(set(module.__all__)) == len(module.__all__)
  for name in module.__all__:
    assert hasattr(module, name), f'{module.__name__}.{name}'
  functions = [name for name, value in vars(module).items()
               if inspect.isfunction(value) and value.__module__ == module.__name__
               and not name.startswith('_')]
  assert set(functions) - set(module.__all__) <= {
      'check_step', 'check_inputs', 'check_floating', 'check_carry', 'cast_floating',
      'as_lengths', 'zero_padding', 'check_radius', 'host_spectral_radius',
      'not_finite_message'}, 'a public function outside __all__ that is not package plumbing'


@pytest.mark.parametrize('module', MODULES, ids=lambda m: m.__name__)
def test_public_functions_are_documented_and_annotated(module):
  for name in module.__all__:
    value = getattr(module, name)
    if not inspect.isfunction(value):
      continue
    assert value.__doc__ and len(value.__doc__.strip()) > 20, f'{module.__name__}.{name}'
    signature = inspect.signature(value)
    missing = [p for p, parameter in signature.parameters.items()
               if parameter.annotation is inspect.Parameter.empty]
    assert not missing, f'{module.__name__}.{name}: {missing} not annotated'
    assert signature.return_annotation is not inspect.Signature.empty, f'{module.__name__}.{name}'
