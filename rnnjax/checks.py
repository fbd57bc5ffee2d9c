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
"""

import math
from collections.abc import Iterable
import numbers
from typing import Any, TypeVar

import jax
import numpy as np

__all__ = ['one_of', 'integer', 'number', 'shown']

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
