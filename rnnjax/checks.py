"""The checks of the library's small arguments: one rule, one message.

A public function refuses an argument outside its set before any work, in one line that
names the argument, what it expects and what it was given::

  family: expected one of ('global_norm', 'elementwise'), got 'elementwize'
  threshold: expected a value > 0 (inf allowed), got -1
  num_layers: expected an int >= 1, got 0

* ``one_of``: an option string (or any value of a small fixed set). Nothing outside the set
  is taken as a default: a typo is an error, not the other branch.
* ``integer``: a count, an index, a seed. A Python int, a numpy integer (``np.int64(3)``) or
  a concrete 0-d integer array counts as its int; a bool, a float (3.0) or a string does not.
* ``number``: a threshold, a bound, a rate. A real number (numpy's and 0-d arrays' too, or a
  concrete array, every entry checked) within an interval; NaN is outside every interval. A
  traced value (under ``jit``, ``vmap`` or ``inject_hyperparams``) is not known until the
  program runs: it passes if it is a real array, and the function must compute correctly
  with any value it may hold.
* ``flag``: a bool option (``reverse``, ``time_major``): True or False (a numpy bool too);
  a string ('False', truthy) or an int is refused, never taken by its truth value.
* ``unroll``: a loop's unroll factor: an int >= 1, or a bool where the loop takes one.
* ``cell``: a cell ``cell(params, carry, x) -> (carry, y)``; the factory ``rnnjax.elman``,
  a layer (``rnnjax.elman_layer``), an initializer or a recurrence passed in its place is
  named with the call that makes a cell, and so is a callable that cannot take the three
  arguments (``recurrence.with_initial_state``, the common entry of every path that takes a
  cell, applies it).
* ``arrays``: params (or a state) whose leaves are arrays: numbers inside a list or a tuple
  (an array written as nested lists) are refused, naming where, with the conversion.
"""

import functools
import inspect
import math
from collections.abc import Callable, Iterable
import numbers
from typing import Any, TypeVar

import jax
import numpy as np

__all__ = ['arrays', 'cell', 'flag', 'integer', 'number', 'one_of', 'shown', 'unroll']

T = TypeVar('T')


def shown(value: Any, limit: int = 120) -> str:
  """``repr(value)`` on one line (an array's rows joined), cut to ``limit`` characters."""
  text = ' '.join(repr(value).split())
  return text if len(text) <= limit else text[:limit - 3] + '...'


def _equal(value: Any, option: Any) -> bool:
  """``value == option`` as a bool, False where that is not a bool (an array) or where one
  side is a bool and the other not (True is not 1 here)."""
  if isinstance(value, (bool, np.bool_)) != isinstance(option, (bool, np.bool_)):
    return False
  if isinstance(value, (np.ndarray, jax.Array)):
    return False
  try:
    return bool(value == option)
  except (TypeError, ValueError):
    return False


def one_of(name: str, value: T, options: Iterable[Any]) -> T:
  """``value`` if it equals one of ``options`` (a bool never equals an int here).

  Raises:
    ValueError: ``'{name}: expected one of {options}, got {value!r}'``.
  """
  options = tuple(options)
  if not any(_equal(value, option) for option in options):
    raise ValueError(f'{name}: expected one of {options}, got {shown(value)}')
  return value


def _as_int(value: Any) -> int | None:
  """``value`` as a Python int if it is an int, a numpy integer or a concrete 0-d integer
  array (not a bool); else None."""
  if isinstance(value, (bool, np.bool_, jax.core.Tracer)):
    return None
  if isinstance(value, (int, np.integer)):
    return int(value)
  if isinstance(value, (np.ndarray, jax.Array)) and value.shape == () and np.issubdtype(
      value.dtype, np.integer):
    return int(value)
  return None


def integer(name: str, value: Any, low: int | None = None, high: int | None = None,
            what: str = 'an int') -> int:
  """``value`` as a Python int, checked to lie in [low, high] (either bound optional).

  Args:
    name: the argument's name, for the message.
    value: an int, a numpy integer or a concrete 0-d integer array.
    low, high: inclusive bounds (None: unbounded).
    what: how the message calls it (e.g. 'an int tau', 'a seed').

  Raises:
    ValueError: ``'{name}: expected {what} >= {low}, got {value!r}'`` (or ``in [low,
      high]``, ``<= high``).
  """
  number_ = _as_int(value)
  if number_ is None or (low is not None and number_ < low) or (
      high is not None and number_ > high):
    bound = (f' in [{low}, {high}]' if low is not None and high is not None else
             f' >= {low}' if low is not None else f' <= {high}' if high is not None else '')
    raise ValueError(f'{name}: expected {what}{bound}, got {shown(value)}')
  return number_


def _interval(low: float, high: float, low_open: bool, high_open: bool) -> str:
  """The interval in words: 'a value > 0 (inf allowed)', 'a finite value >= 0', 'a
  value in [0, 1)'."""
  kind = 'a finite value' if high == math.inf and high_open else 'a value'
  if high == math.inf:
    if low == -math.inf:
      return kind
    return f'{kind} {">" if low_open else ">="} {low:g}' + ('' if high_open else ' (inf allowed)')
  if low == -math.inf:
    return f'{kind} {"<" if high_open else "<="} {high:g}'
  return f'{kind} in {"(" if low_open else "["}{low:g}, {high:g}{")" if high_open else "]"}'


def number(name: str, value: Any, low: float = -math.inf, high: float = math.inf,
           low_open: bool = False, high_open: bool = False, note: str = '') -> None:
  """Checks that ``value`` (a real number, or every entry of a real array) lies between
  ``low`` and ``high``, each end closed unless ``*_open``: ``low=0, low_open=True`` is c > 0
  with inf allowed, ``high_open=True`` with the default high refuses inf. NaN lies in no
  interval. A traced value passes if its dtype is real (module docstring).

  Raises:
    ValueError: ``'{name}: expected a value > 0 (inf allowed){note}, got -1.0'``.
  """
  interval = _interval(low, high, low_open, high_open)
  message = f'{name}: expected {interval}{note}, got {shown(value)}'
  if isinstance(value, jax.core.Tracer):
    if not (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer)):
      raise ValueError(message)
    return
  if isinstance(value, (bool, np.bool_)) or not isinstance(
      value, (numbers.Real, np.ndarray, jax.Array, np.generic)):
    raise ValueError(message)
  values = np.asarray(value)
  if not (np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)):
    raise ValueError(message)
  values = values.astype(np.float64)
  above = values > low if low_open else values >= low
  below = values < high if high_open else values <= high
  if not np.all(above & below):  # NaN fails both
    raise ValueError(message)


def flag(name: str, value: Any) -> bool:
  """``value`` as a Python bool: True or False (or a numpy bool).

  Raises:
    ValueError: ``'{name}: expected a bool (True or False), got 'False''`` for anything else
      (a string is truthy whatever it says; an int is not a flag here).
  """
  if not isinstance(value, (bool, np.bool_)):
    raise ValueError(f'{name}: expected a bool (True or False), got {shown(value)}')
  return bool(value)


def unroll(name: str, value: Any, bools: bool = True) -> int | bool:
  """A loop's unroll factor: an int >= 1 (a numpy integer too), or with ``bools`` a bool
  (``jax.lax.scan``'s: True unrolls the whole loop, False is 1).

  Raises:
    ValueError: ``'{name}: expected an int >= 1 or a bool, got 2.0'`` (without ``bools``:
      ``'expected an int >= 1'``).
  """
  if bools and isinstance(value, (bool, np.bool_)):
    return bool(value)
  factor = _as_int(value)
  if factor is None or factor < 1:
    raise ValueError(f'{name}: expected an int >= 1{" or a bool" if bools else ""}, '
                     f'got {shown(value)}')
  return factor


_CELL = "rnnjax.elman('tanh')"
_LAYER = f'a layer, which runs a whole sequence; a cell runs one step: {_CELL}'
_INIT = f'an initializer, which makes params; pass its result as params and a cell: {_CELL}'
# Callables of the package that are not cells, by module and qualified name (through
# ``functools.partial``): what each is, and the call that makes a cell instead.
_NOT_CELLS = {
    ('rnnjax.cells', 'elman'): f'the factory rnnjax.elman; call it for a cell: {_CELL}',
    ('rnnjax.cells', 'ElmanCell'): f'the class rnnjax.cells.ElmanCell; make a cell: {_CELL}',
    ('rnnjax.cells', 'init_elman'): f'rnnjax.init_elman, {_INIT}',
    ('rnnjax.cells', 'init_gru'): 'rnnjax.init_gru, an initializer, which makes params; '
                                  'pass its result as params and the cell rnnjax.gru_cell',
    ('rnnjax.cells', 'init_lstm'): 'rnnjax.init_lstm, an initializer, which makes params; '
                                   'pass its result as params and the cell rnnjax.lstm_cell',
    ('rnnjax.fused', 'elman_layer'): f'rnnjax.elman_layer, {_LAYER}',
    ('rnnjax.fused', 'checkpointed_elman_layer'): f'rnnjax.checkpointed_elman_layer, {_LAYER}',
    ('rnnjax.fused', 'elman_layer_with'): f'rnnjax.elman_layer_with, which makes {_LAYER}',
    ('rnnjax.fused', 'ElmanLayer'): f'the class rnnjax.fused.ElmanLayer, {_LAYER}',
    ('rnnjax.fused', 'ElmanLayer()'): f'an rnnjax.fused.ElmanLayer, {_LAYER}',
    ('rnnjax.parallel', 'elman_deer'): f'rnnjax.elman_deer, {_LAYER}',
    ('rnnjax.recurrence', 'scan'): f'rnnjax.scan, the recurrence, which takes a cell: {_CELL}',
    ('rnnjax.recurrence', 'truncated_scan'): f'rnnjax.truncated_scan, the recurrence, which '
                                             f'takes a cell: {_CELL}',
    ('rnnjax.combinators', 'stack'): f'rnnjax.stack, {_LAYER}',
    ('rnnjax.combinators', 'bidirectional'): f'rnnjax.bidirectional, {_LAYER}',
}


def _qualified(value: Any) -> tuple[str, str]:
  """``(module, qualified name)`` of a function or class, ``(module, 'Class()')`` of an
  instance, through ``functools.partial``."""
  while isinstance(value, functools.partial):
    value = value.func
  if inspect.isfunction(value) or inspect.isclass(value):
    return getattr(value, '__module__', ''), getattr(value, '__qualname__', '')
  kind = type(value)
  return getattr(kind, '__module__', ''), f'{kind.__qualname__}()'


def cell(name: str, value: Any) -> Callable[..., Any]:
  """``value`` if it can be a cell ``cell(params, carry, x) -> (carry, y)``: callable, with
  three positional arguments, and none of the package's callables that are not cells
  (``_NOT_CELLS``: the factory ``rnnjax.elman``, the layers, the initializers, the
  recurrences). A callable whose signature cannot be read (a builtin) passes.

  Raises:
    ValueError: ``"{name}: expected a cell, a function (params, carry, x) -> (carry, y), got
      the factory rnnjax.elman; call it for a cell: rnnjax.elman('tanh')"``, one line.
  """
  expected = f'{name}: expected a cell, a function (params, carry, x) -> (carry, y)'
  known = _NOT_CELLS.get(_qualified(value))
  if known is not None:
    raise ValueError(f'{expected}, got {known}')
  if not callable(value):
    raise ValueError(f'{expected} (e.g. {_CELL}), got {shown(value)}')
  try:
    signature = inspect.signature(value)
  except (TypeError, ValueError):  # no signature to read: the call will tell
    return value
  try:
    signature.bind(None, None, None)
  except TypeError:
    raise ValueError(f'{expected}, got {shown(value, 60)} of signature {signature}, which '
                     f'cannot take (params, carry, x); for the Elman cell: {_CELL}') from None
  return value


def arrays(name: str, tree: Any) -> None:
  """Checks that no number of ``tree`` (params, a state) sits in a list or a tuple: an array
  written as nested lists, which JAX takes as a pytree of scalars, one leaf each (a Python
  number, or a 0-d tracer where the list was traced). Lists of arrays (a stack's params,
  ``[[{'W_xh': ...}]]``) pass.

  Raises:
    ValueError: ``"{name}: expected arrays, got a nested list of numbers at ['W_xh'];
      convert them: jax.tree.map(jnp.asarray, params, is_leaf=lambda v: isinstance(v,
      list))"``, one line.
  """
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    if not path or not isinstance(path[-1], jax.tree_util.SequenceKey) or np.ndim(leaf):
      continue
    start = len(path)
    while start and isinstance(path[start - 1], jax.tree_util.SequenceKey):
      start -= 1
    where = jax.tree_util.keystr(path[:start]) or 'the top'
    raise ValueError(f'{name}: expected arrays, got a nested list of numbers at {where}; '
                     f'convert them: jax.tree.map(jnp.asarray, {name}, is_leaf=lambda v: '
                     f'isinstance(v, list))')
