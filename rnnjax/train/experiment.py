"""One kind of experiment: its config fields with their checks, its task and its report.

An experiment is the ``Experiment`` named ``EXPERIMENT`` of a module anywhere on ``sys.path``;
a config names it by the module's path (``config.experiment = 'experiments.char_lm'``). Its
config is ``TRAINER_FIELDS`` plus its own ``fields``; ``override`` is the one way a config gets
values (from a sweep, a group or the command line).
"""

import copy
import dataclasses
import decimal
import difflib
import importlib
import json
import math
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from flax import traverse_util
import ml_collections
import numpy as np

from rnnjax.train import devices
from rnnjax.train import optimizers

__all__ = ['Check', 'Field', 'Experiment', 'TRAINER_FIELDS', 'HARNESS_COLUMNS', 'integer',
           'number', 'one_of', 'check', 'load', 'locate', 'override', 'as_dict', 'from_dict',
           'flat', 'group_key']


class Check(NamedTuple):
  """A test of one field's value and the words for what it expects."""
  expected: str  # e.g. 'an int >= 1', completing "config.<field>: expected ..."
  test: Callable[[Any], bool]


def integer(low: int) -> Check:
  """An int >= ``low``."""
  return Check(f'an int >= {low}', lambda v: isinstance(v, int) and not isinstance(v, bool)
               and v >= low)


def number(low: float = 0.0, strict: bool = False, high: float = math.inf) -> Check:
  """A finite number >= ``low`` (> with ``strict``) and below ``high``."""
  expected = (f'a value in {"(" if strict else "["}{low:g}, {high:g})' if high < math.inf
              else f'a finite value {">" if strict else ">="} {low:g}')
  return Check(expected, lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool)
                                    and (low < v if strict else low <= v) and v < high))


def one_of(choices: Sequence[str]) -> Check:
  """One of ``choices`` (shown as given: a tuple or a sorted list)."""
  return Check(f'one of {choices!r}', lambda v: isinstance(v, str) and v in choices)


class Field(NamedTuple):
  """A config field of an experiment."""
  default: Any
  check: Check | None = None  # None: any value
  help: str = ''


TRAINER_FIELDS = {
    'seed': Field(0, Check('an int < 2**32 (a larger seed gives the key of seed % 2**32)',
                           lambda v: integer(0).test(v) and v < 2**32),
                  'init, data order, dropout: one seed fixes a run'),
    'steps': Field(1000, integer(1), 'training steps (updates)'),
    'optimizer': Field('sgd', one_of(sorted(optimizers.OPTIMIZERS)),
                       'sgd | adagrad | adam | adamw'),
    'learning_rate': Field(0.01, number(0.0, strict=True), 'of the optimizer'),
    'clipping': Field('none', one_of(optimizers.CLIPPINGS),
                      'none | global_norm | elementwise | pascanu (global norm with the '
                      'reference fallback of Pascanu et al.)'),
    'clip_threshold': Field(1.0, None, 'c of the clipping (ignored for none)'),
    'learning_rate_decay': Field(1.0, number(0.0, strict=True),
                                 'the learning rate times this every decay_every steps'),
    'decay_every': Field(0, integer(0), 'steps between two decays (0: a constant rate)'),
    'decay_begin': Field(0, integer(0), 'steps before the first decay'),
    'flossing_weight': Field(0.0, number(0.0), 'weight of gradient flossing, sum of the top '
                             'Lyapunov exponents squared (0: off)'),
    'flossing_exponents': Field(1, integer(1), 'k, the Lyapunov exponents flossing pushes to 0'),
    'flossing_steps': Field(0, integer(0), 'flossing in the first N steps only (0: every step)'),
    'measure_lyapunov': Field(False, Check('a bool', lambda v: isinstance(v, bool)),
                              'log the largest Lyapunov exponent beside the gradient-norm profile'),
    'on_divergence': Field('stop', one_of(('stop', 'skip')),
                           'a NaN/Inf step: stop the run, or skip its update'),
    'layout': Field('auto', one_of(devices.LAYOUTS),
                    'over several devices: split the batch (data) or the runs'),
    'validate_every': Field(0, integer(0), 'steps between validation checks (0: none; a task '
                            'with a validation set)'),
    'plateau_decay': Field(1.0, Check('a value in (0, 1]',
                                      lambda v: number(0.0, strict=True).test(v) and v <= 1),
                           'the learning rate times this at each validation check from the '
                           'first that improved by less than plateau_threshold; the next such '
                           "check ends the run (Mikolov's RNNLM: 0.5; 1: off)"),
    'plateau_threshold': Field(0.003, number(0.0), 'relative improvement of the validation loss '
                               "that counts (Mikolov's RNNLM: 0.003)"),
    'log_every': Field(100, integer(1), 'steps between metrics lines'),
    'checkpoint_every': Field(0, integer(0), 'steps between checkpoints (0: only at the end)'),
}
# The columns a sweep's tables write beside an experiment's fields and report fields.
HARNESS_COLUMNS = ('run_folder', 'status', 'seconds', 'commit', 'date', 'seeds', 'diverged',
                   'failed')
# Fields whose values change no program (clipping: within its ``optimizers.family``).
TRAINER_VMAPPABLE = ('learning_rate', 'clip_threshold', 'clipping', 'flossing_weight')


@dataclasses.dataclass(frozen=True)
class Experiment:
  """What an experiment is made of; the trainer, the run folder and the sweep do the rest.

  Attributes:
    name: its module's path (``__name__`` where it is defined).
    task: ``task(config) -> trainer.Task`` of a group (its first config): data, model, loss.
      Raises ValueError naming ``config.<field>``.
    fields: its own config fields (one may replace a trainer field's default or check).
    report: the summary fields a sweep tabulates.
    check: cross-field rules beyond each field's ``Check`` (ValueError naming the field).
    vmappable: its fields that change no program (with ``TRAINER_VMAPPABLE``).
    plots: as ``report.write`` draws them.
    work: a step's relative cost, for a sweep's progress and order.
    positive: its report fields that are positive ratios (an exact 0 underflowed: a bound).
    analyses: ``analysis(runs, keys, folder, heading)`` of a sweep's runs (``report.write``'s
      arguments), each writing its own tables and plots into the sweep folder after the sweep's.

  Raises:
    ValueError: a field or report field named as a column the harness writes (``HARNESS_COLUMNS``).
  """
  name: str
  task: Callable[[ml_collections.ConfigDict], Any]
  fields: Mapping[str, Field]
  report: tuple[str, ...] = ()
  check: Callable[[ml_collections.ConfigDict], None] | None = None
  vmappable: tuple[str, ...] = ()
  plots: tuple[tuple, ...] = ()
  work: Callable[[ml_collections.ConfigDict], float] = lambda config: 1.0
  positive: tuple[str, ...] = ()
  analyses: tuple[Callable, ...] = ()

  def __post_init__(self) -> None:
    for kind, names in (('field', self.fields), ('report field', self.report)):
      taken = sorted(set(names) & set(HARNESS_COLUMNS))
      if taken:
        raise ValueError(f'{self.name}: the {kind} {taken[0]!r} is a column the harness writes '
                         f'itself ({", ".join(HARNESS_COLUMNS)}); give it another name')

  def all_fields(self) -> dict[str, Field]:
    return {**TRAINER_FIELDS, **self.fields}

  def config(self, **values: Any) -> ml_collections.ConfigDict:
    """The default config with ``values`` set (ValueError for a field it lacks)."""
    config = ml_collections.ConfigDict({'experiment': self.name})
    for name, field in self.all_fields().items():
      config[name] = copy.deepcopy(field.default)
    return override(config, values)

  def help(self, config: ml_collections.ConfigDict) -> str:
    """The fields, their values in ``config`` and their help, one a line (and the default of a
    value that differs from it)."""
    lines = []
    for name, field in self.all_fields().items():
      value = config.get(name, field.default)
      notes = [field.help] * bool(field.help) + [f'default {field.default!r}'] * (
          value != field.default)
      lines.append(f'  {name} = {value!r}' + (f'  # {"; ".join(notes)}' if notes else ''))
    return '\n'.join(lines)


def load(name: str) -> Experiment:
  """The ``EXPERIMENT`` of the module at the path ``name``.

  Raises:
    ValueError: naming ``config.experiment``: not a module path, not importable, no Experiment.
  """
  if not (isinstance(name, str) and all(part.isidentifier() for part in name.split('.'))):
    raise ValueError(f'config.experiment: expected the path of a module that defines '
                     f'EXPERIMENT (e.g. experiments.char_lm), got {name!r}')
  try:
    module = importlib.import_module(name)
  except ModuleNotFoundError as error:
    raise ValueError(f'config.experiment: cannot import {name!r} ({error}); is its folder on '
                     'the Python path?') from None
  experiment = getattr(module, 'EXPERIMENT', None)
  if not isinstance(experiment, Experiment):
    raise ValueError(f'config.experiment: {name} defines no EXPERIMENT '
                     '(an rnnjax.train.experiment.Experiment)')
  return experiment


def check(experiment: Experiment, config: ml_collections.ConfigDict) -> None:
  """Checks every field of ``config`` and the experiment's cross-field rules.

  Raises:
    ValueError: ``config.<field>: expected ..., got ...`` for the first field that fails.
  """
  if config.get('experiment') != experiment.name:
    raise ValueError(f'config.experiment: expected {experiment.name!r} (the experiment this '
                     f'group runs), got {config.get("experiment")!r}')
  for name, field in experiment.all_fields().items():
    if name not in config:
      raise ValueError(f'config.{name}: missing; is config.experiment the one this config is for?')
    if field.check is None:
      continue
    try:
      passes = bool(field.check.test(config[name]))
    except TypeError:  # a value of another type than the check compares
      passes = False
    if not passes:
      raise ValueError(f'config.{name}: expected {field.check.expected}, got {config[name]!r}')
  try:  # the optimizer's own rules across its fields (the clip threshold of a clipping)
    optimizers.check(config.optimizer, config.learning_rate, config.clipping, config.clip_threshold)
  except ValueError as error:
    raise ValueError(f'config.{error}') from None
  if experiment.check is not None:
    experiment.check(config)


def _plain(value: Any, name: str) -> Any:
  """``value`` as a config holds it (numpy's as Python's); ValueError naming the field else."""
  if isinstance(value, np.generic):
    return value.item()
  if isinstance(value, np.ndarray):
    return tuple(value.tolist())
  if isinstance(value, (list, tuple)):
    return type(value)(_plain(v, name) for v in value)
  if isinstance(value, dict):
    return {k: _plain(v, f'{name}.{k}') for k, v in value.items()}
  if value is None or isinstance(value, (bool, int, float, str, ml_collections.ConfigDict)):
    return value
  kind = 'a Decimal' if isinstance(value, decimal.Decimal) else f'of type {type(value).__name__}'
  raise ValueError(f'config.{name}: expected a bool, int, float, str, tuple or dict, got '
                   f'{value!r} ({kind})')


def locate(config: ml_collections.ConfigDict, name: str) -> tuple:
  """The ConfigDict that holds the dotted field ``name`` and the field's key in it.

  Raises:
    ValueError: ``config.<name>: the config has no field ...``, naming the closest.
  """
  holder, parts = config, name.split('.')
  for depth, part in enumerate(parts):
    if not (isinstance(holder, ml_collections.ConfigDict) and part in holder):
      fields = list(holder.keys()) if isinstance(holder, ml_collections.ConfigDict) else []
      close = difflib.get_close_matches(part, fields, n=1)
      hint = (f' (config.{".".join(parts[:depth])} is {holder!r}, which has no fields)'
              if not isinstance(holder, ml_collections.ConfigDict)
              else f'; did you mean {".".join(parts[:depth] + close)}?' if close
              else f'; the fields are {fields}')
      raise ValueError(f'config.{name}: the config has no field '
                       f'{".".join(parts[:depth + 1])!r}{hint}')
    parent, holder = holder, holder[part]
  return parent, parts[-1]


def override(config: ml_collections.ConfigDict, values: Mapping[str, Any]
             ) -> ml_collections.ConfigDict:
  """A copy of ``config`` with ``values`` (dotted names, ``{'model.size': 3}``) set.

  Raises:
    ValueError: naming the field: one the config lacks, or a value of a type it cannot hold.
  """
  config = copy.deepcopy(config)
  for name, value in values.items():
    holder, key = locate(config, name)
    value = _plain(value, name)
    try:
      holder[key] = value
    except TypeError:  # ml_collections keeps a field's type
      raise ValueError(f'config.{name}: expected a {type(holder[key]).__name__} (the type of '
                       f'its default {holder[key]!r}), got {value!r}') from None
  return config


def as_dict(config: ml_collections.ConfigDict) -> dict:
  """The config as config.json holds it (JSON types: tuples become lists)."""
  return json.loads(config.to_json_best_effort())


def from_dict(experiment: Experiment, values: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """The config of a JSON dict (``as_dict``, a config.json): the experiment's defaults with
  its values, lists back to tuples where the default is a tuple."""
  if values.get('experiment', experiment.name) != experiment.name:
    raise ValueError(f'config.experiment: expected {experiment.name!r} (the experiment this '
                     f'job runs), got {values["experiment"]!r}')
  defaults = experiment.config()
  return override(defaults, {
      k: tuple(v) if isinstance(v, list) and isinstance(defaults.get(k), tuple) else v
      for k, v in values.items() if k != 'experiment'})


def flat(record: dict) -> dict:
  """A nested dict (a config.json) as one dict of dotted names: ``{'model.size': 3}``."""
  return traverse_util.flatten_dict(record, sep='.')


def group_key(experiment: Experiment, config: ml_collections.ConfigDict) -> tuple:
  """Runs with equal keys can train in one vmapped group: every field but the vmappable
  ones, with clipping reduced to its chain's family and flossing to whether it is on."""
  vmappable = set(TRAINER_VMAPPABLE) | set(experiment.vmappable)
  fixed = sorted((k, repr(v)) for k, v in config.to_dict().items() if k not in vmappable)
  return tuple(fixed) + (('clipping_family', optimizers.family(config.clipping)),
                         ('flossing', config.flossing_weight > 0))
