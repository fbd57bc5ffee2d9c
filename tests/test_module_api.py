"""Each library module names its public API in ``__all__``; every public function there has a
docstring and a full annotation (the type checker, ``python -m mypy``, checks the rest). The
top level ``rnnjax`` re-exports the names a researcher needs; each of those documents its
shapes."""

import importlib
import importlib.metadata
import importlib.util
import inspect
import pathlib
import pkgutil
import re
import sys
import tomllib
import types

import pytest

import rnnjax


def _library_modules(package: types.ModuleType) -> list[types.ModuleType]:
  """Every module and subpackage under ``package`` but ``rnnjax.train`` (the run harness,
  checked on its own), imported; a module added to the package is covered by itself."""
  modules = []
  for info in pkgutil.iter_modules(package.__path__, package.__name__ + '.'):
    if info.name == 'rnnjax.train':
      continue
    module = importlib.import_module(info.name)
    modules.append(module)
    if info.ispkg:
      modules.extend(_library_modules(module))
  return modules


MODULES = [rnnjax] + _library_modules(rnnjax)

# A docstring states shapes: a bracket ``[B, T, H]`` or the words shape, scalar, pytree.
STATES_SHAPES = re.compile(r'\[|\b(shapes?|scalars?|pytrees?)\b', re.IGNORECASE)


def _resolves(module: types.ModuleType, name: str) -> bool:
  """``name`` is an attribute of ``module`` or one of its submodules."""
  return hasattr(module, name) or (
      hasattr(module, '__path__') and
      importlib.util.find_spec(f'{module.__name__}.{name}') is not None)


def test_modules_are_found():
  names = {module.__name__ for module in MODULES}
  assert {'rnnjax', 'rnnjax.cells', 'rnnjax.diagnostics', 'rnnjax.parallel', 'rnnjax.data',
          'rnnjax.data.text', 'rnnjax.gradient_tables'} <= names
  assert not any(name.startswith('rnnjax.train') for name in names)


@pytest.mark.parametrize('module', MODULES, ids=lambda m: m.__name__)
def test_all_names_the_public_api(module):
  assert module.__all__ and len(set(module.__all__)) == len(module.__all__)
  for name in module.__all__:
    assert _resolves(module, name), f'{module.__name__}.{name}'
  functions = [name for name, value in vars(module).items()
               if inspect.isfunction(value) and value.__module__ == module.__name__
               and not name.startswith('_')]
  assert set(functions) - set(module.__all__) <= {
      'check_step', 'check_inputs', 'check_floating', 'check_carry', 'cast_floating',
      'as_lengths', 'zero_padding', 'check_radius', 'host_spectral_radius',
      'not_finite_message', 'with_initial_state'
  }, 'a public function outside __all__ that is not package plumbing'


@pytest.mark.parametrize('module', MODULES, ids=lambda m: m.__name__)
def test_public_functions_are_documented_and_annotated(module):
  for name in module.__all__:
    value = getattr(module, name, None)
    if not inspect.isfunction(value):
      continue
    assert value.__doc__ and len(value.__doc__.strip()) > 20, f'{module.__name__}.{name}'
    signature = inspect.signature(value)
    missing = [p for p, parameter in signature.parameters.items()
               if parameter.annotation is inspect.Parameter.empty]
    assert not missing, f'{module.__name__}.{name}: {missing} not annotated'
    assert signature.return_annotation is not inspect.Signature.empty, f'{module.__name__}.{name}'


def test_top_level_all():
  """``rnnjax.__all__``: no name twice, each one resolves; a module it names is a library
  module, a function or class is the same object as in its module and public there."""
  names = rnnjax.__all__
  assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)
  assert {'elman_cell', 'scan', 'elman_layer', 'state_gradients', 'gradient_norm_profile',
          'jacobian_product_norms', 'gradient_norm_table', 'omega_penalty', 'elman_deer',
          '__version__'} <= set(names)
  library = {module.__name__ for module in MODULES}
  for name in names:
    assert hasattr(rnnjax, name), f'rnnjax.{name}'
    value = getattr(rnnjax, name)
    if inspect.ismodule(value):
      assert value.__name__ == f'rnnjax.{name}' and value.__name__ in library, name
    elif inspect.isfunction(value) or inspect.isclass(value):
      home = sys.modules[value.__module__]
      assert getattr(home, name) is value and name in home.__all__, f'{home.__name__}.{name}'


PUBLIC = [name for name in rnnjax.__all__
          if inspect.isfunction(getattr(rnnjax, name)) or inspect.isclass(getattr(rnnjax, name))]


@pytest.mark.parametrize('name', PUBLIC)
def test_top_level_names_state_shapes_and_are_annotated(name):
  """Each function and class of ``rnnjax.__all__`` has a docstring that states shapes (a
  ``[...]`` shape or the word shape, scalar or pytree) and a full annotation."""
  value = getattr(rnnjax, name)
  doc = inspect.getdoc(value)
  assert doc and STATES_SHAPES.search(doc), f'rnnjax.{name}: no shapes in its docstring'
  signature = inspect.signature(value)
  missing = [p for p, parameter in signature.parameters.items()
             if parameter.annotation is inspect.Parameter.empty]
  assert not missing, f'rnnjax.{name}: {missing} not annotated'
  if inspect.isfunction(value):
    assert signature.return_annotation is not inspect.Signature.empty, f'rnnjax.{name}'


def test_top_level_names_are_not_few():
  assert len(PUBLIC) >= 30 and {'elman_layer', 'state_gradients', 'elman_deer'} <= set(PUBLIC)


def test_shape_pattern():
  """What counts as stating shapes, and what does not."""
  for stated in ('``<float32>[B, T, H]``', 'a scalar >= 0', 'a pytree shaped as params',
                 'of the same shape'):
    assert STATES_SHAPES.search(stated), stated
  for unstated in ('The cell with its activation bound.', 'Returns a shaped callable.'):
    assert not STATES_SHAPES.search(unstated), unstated


def test_version_is_the_package_metadata():
  """``rnnjax.__version__`` is the installed distribution's version (one place: pyproject)."""
  assert rnnjax.__version__ == importlib.metadata.version('rnnjax')
  assert re.fullmatch(r'\d+\.\d+\.\d+', rnnjax.__version__), rnnjax.__version__


def test_installed_version_is_the_checkouts():
  """The installed metadata is the checkout's pyproject.toml version: an editable install made
  before a version bump reports the older one (reinstall: ``pip install -e . --no-deps``)."""
  pyproject = pathlib.Path(rnnjax.__file__).parent.parent / 'pyproject.toml'
  if not pyproject.exists():
    pytest.skip('an installed wheel, not a checkout')
  stated = tomllib.loads(pyproject.read_text())['project']['version']
  assert rnnjax.__version__ == stated, (
      f'rnnjax.__version__ {rnnjax.__version__}, pyproject.toml {stated}: reinstall')
