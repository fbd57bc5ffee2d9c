"""The two commands: train one run, or sweep a config's ``get_sweep()``.

  rnnjax-run --config=CONFIG.py --workdir=results/one_run [--config.NAME=VALUE ...] [--overwrite]
  rnnjax-sweep --config=CONFIG.py --workdir=results/sweep [--config.NAME=VALUE ...]
      [--executor=NAME --NAME.FIELD=VALUE ...]

(``python -m launch.run`` and ``python -m launch.sweep`` in a checkout.) A config file defines
``get_config()``, whose ``experiment`` field names the module of an ``Experiment`` on the Python
path (the working directory is on it), and for a sweep ``get_sweep()``: one dict of field values per
run. ``--config.NAME=VALUE`` sets a field (for a sweep: for every run, in place of the value
``get_sweep()`` gives them all; a field the sweep varies is refused). The config file is executed
once.

run: rerunning the same command resumes the run from its latest checkpoint, or, if it ended, prints
its summary and trains nothing; a config that differs from the folder's config.json is refused (one
line naming the differing fields) unless ``--overwrite``, which clears the folder first (never a
folder that holds another run or sweep below it: refused). SIGTERM, SIGHUP (the terminal closed),
SIGUSR2 (Slurm's time-limit warning) and Ctrl-C checkpoint the run at the current step before it
exits. Exit status: 0 when the run finished or diverged (a diverged run is a result); 1 with one
line on stderr for a bad config, a folder of another run or in use, missing data, a full disk or
a file-size limit; 128 + the signal's number when stopped by one.

sweep: every run of ``get_sweep()`` is planned, trained in vmapped groups by an executor
(``--executor``: local processes, a cluster), and tabulated (``rnnjax.train.sweep``); exit
status 0, 1 when a run failed (each reason printed), 128 + the signal's number when stopped by
one (130 at Ctrl-C, 129 when the terminal closed).
"""

import math
import os
import pathlib
import re
import runpy
import sys
from typing import Any, NoReturn

from absl import flags
import ml_collections
from ml_collections import config_flags

from rnnjax.train import executors
from rnnjax.train import experiment

__all__ = ['run_main', 'sweep_main']

FLAGS = flags.FLAGS
Options = dict[str, ml_collections.ConfigDict]  # an executor's name -> its --NAME.FIELD flags
HELP = ('--help', '-h', '--helpshort', '-?', '--helpfull')  # absl's help flags, all one page


def _say(line: str) -> None:
  """One line on stderr in one write (other threads write to stderr too)."""
  sys.stderr.write(line + '\n')
  sys.stderr.flush()


def _fail(line: str) -> NoReturn:
  _say(f'error: {line}')
  sys.exit(1)


def _config_path(argv: list[str], options: Options) -> tuple[str, list[str]]:
  """The config file the command line names (absl's ``--config``) and the other arguments."""
  named = flags.FlagValues()
  flags.DEFINE_string('config', None, 'the config file', flag_values=named)
  try:
    rest = named(argv, known_only=True)
  except flags.Error:  # --config without a value
    rest = argv
  path = named['config'].value
  if path is None and any(arg in HELP for arg in argv[1:]):
    _help(None, options)
  if path is None:
    _fail('--config: expected a config file (--config=path/to/config.py)')
  return path, rest


def _help(fields: str | None, options: Options) -> NoReturn:
  """Prints the command's use, its flags, the executors' options and ``fields``; exits 0."""
  print(__doc__.replace('``', ''))
  print(FLAGS.module_help(__name__))
  for name, fields_of in options.items():
    print(f'  --{name}.NAME=VALUE: {name}: ' + ', '.join(
        f'{field}={value!r}' for field, value in fields_of.items()))
  print(fields or '\nWith --config=CONFIG.py, --help also lists the fields of its config.')
  sys.exit(0)


def _load(argv: list[str], sweep: bool, options: Options | None = None
          ) -> tuple[experiment.Experiment, ml_collections.ConfigDict, list[dict], str]:
  """Loads the config file once, defines its flags, parses ``argv``: (kind, config, runs, path)."""
  options = options or {}
  path, rest = _config_path(argv, options)
  if not (path.endswith('.py') and pathlib.Path(path).is_file()):
    _fail(f'--config: no config file at {path!r}')
  sys.path.insert(0, os.getcwd())  # as `python -m` does: the user's modules import
  module = runpy.run_path(path)
  if 'get_config' not in module or (sweep and 'get_sweep' not in module):
    _fail(f'--config: {path} defines no {"get_sweep()" if sweep else "get_config()"}')
  base = module['get_config']()
  if not isinstance(base, ml_collections.ConfigDict):
    _fail(f'--config: get_config() in {path} returned a {type(base).__name__}; expected an '
          'ml_collections.ConfigDict (EXPERIMENT.config(...))')
  try:
    kind = experiment.load(base.get('experiment'))
  except ValueError as error:
    _fail(str(error))
  runs = _runs(module['get_sweep'](), path) if sweep else []
  if any(arg in HELP for arg in argv[1:]):
    swept = ', '.join(dict.fromkeys(name for run in runs for name in run))
    _help(f'\nFields of {path} (--config.NAME=VALUE), as its get_config() sets them'
          + (f' (get_sweep() gives {len(runs)} runs, which set {swept})' if runs else '')
          + f':\n{kind.help(base)}', options)
  dicts = {'config': (base, path), **{name: (fields, f'--{name}')
                                      for name, fields in options.items()}}
  overrides = []  # (flag, field, value or None, the field's value in the config)
  for arg in argv[1:]:  # a field the config lacks: one line naming the closest
    match = re.match(r'--?(\w+)\.([A-Za-z_][\w.]*)(?:=(.*))?', arg)
    if match and match.group(1) in dicts:
      flag, name, value = match.groups()
      fields, where = dicts[flag]
      try:
        holder, key = experiment.locate(fields, name)
      except ValueError as error:
        _fail(f'--{flag}.{name}: {where} has no field {str(error).split("no field ", 1)[1]}')
      overrides.append((flag, name, value, holder[key]))
  config_flags.DEFINE_config_dict('config', base, "The config file's get_config(); override a "
                                  'field with --config.NAME=VALUE.', lock_config=True,
                                  sys_argv=rest)
  for name, fields in options.items():
    config_flags.DEFINE_config_dict(name, fields, f'--executor={name}: its fields '
                                    f'(--{name}.NAME=VALUE).', sys_argv=rest)
  try:
    FLAGS(rest)
  except (flags.Error, KeyError, AttributeError, TypeError, ValueError) as error:
    for flag, name, value, default in overrides:  # a value of another type than the default's
      if value is not None:
        try:
          FLAGS[f'{flag}.{name}'].parser.parse(value)
        except (ValueError, TypeError):
          words = {bool: 'true or false', int: 'an int', float: 'a number', str: 'a string'}.get(
              type(default), f'a {type(default).__name__}')
          _fail(f'--{flag}.{name}: expected {words} (the type of its value {default!r}), got '
                f'{value!r}')
    _fail(' '.join(str(error).replace('\\n', ' ').split()))
  return kind, FLAGS.config, runs, path


def _runs(runs: Any, path: str) -> list[dict]:
  """The config file's ``get_sweep()``, checked: a list of dicts of field values, one a run,
  each listing its fields in one order (the order they first appear in), whatever the order of
  its own dict."""
  if isinstance(runs, list) and runs and all(isinstance(run, dict) for run in runs):
    order = list(dict.fromkeys(name for run in runs for name in run))
    return [{name: run[name] for name in order if name in run} for run in runs]
  odd = [run for run in runs if not isinstance(run, dict)] if isinstance(runs, list) else []
  what = (f'a {type(runs).__name__}' if not isinstance(runs, list) else 'no runs' if not runs
          else f'a list holding a {type(odd[0]).__name__}')
  _fail(f'--config: get_sweep() in {path} returned {what}; expected a list of dicts of field '
        'values, one a run')


def run_main(received: list[int] | None = None) -> None:
  """``rnnjax-run`` (``python -m launch.run``); ``received``: the signals received before, each
  a request to stop (``rnnjax.extras``)."""
  flags.DEFINE_string('workdir', None, 'The run folder: config.json, metrics.jsonl, '
                      'tensorboard/, checkpoint/, summary.json, timing.json, log.txt.')
  flags.DEFINE_bool('overwrite', False, 'Clear the run folder (checkpoint included) and start '
                    'afresh, instead of resuming or refusing a folder of another config.')
  kind, config, _, _ = _load(sys.argv, sweep=False)
  if not FLAGS.workdir:
    _fail('--workdir: expected the run folder')
  from absl import logging
  from rnnjax.train import job as jobs
  from rnnjax.train import sweep
  logging.use_absl_handler()
  try:
    received = jobs.setup_process(verbosity=FLAGS.verbosity, received=received)
  except ValueError as error:  # the distributed variables, named before any folder is touched
    _fail(str(error))
  result = jobs.run_job({'id': 'run', 'experiment': config.experiment,
                         'overwrite': 'all' if FLAGS.overwrite else 'none',
                         'provenance': sweep.provenance(),
                         'runs': [{'folder': FLAGS.workdir,
                                   'config': experiment.as_dict(config)}]}, received)
  run = result['runs'][0]
  if result['exit'] == 'interrupted':
    _say(run['reason'])
    sys.exit(128 + received[0])
  if result['exit'] != 'ok':
    _say(f'error: {run["reason"]}')
    if result['exit'] == 'full_disk':  # not sys.exit: exit hooks would write to the full disk
      os._exit(1)
    sys.exit(1)
  import jax
  from rnnjax.train import run_folder
  if jax.process_index() != 0:  # process 0 alone writes the folder and reports
    return
  summary = run_folder.read_json(pathlib.Path(FLAGS.workdir) / run_folder.SUMMARY) or {}
  print(f'{FLAGS.workdir}: {summary.get("status")} after {summary.get("steps_done")} steps' + (
      f' (diverged at step {summary["diverged_step"]})' if summary.get('diverged_step') else ''))
  for name in [*kind.report, *(name for name in summary if name.startswith('sample_'))]:
    value = summary.get(name, math.nan)
    print(f'  {name}: {value:.4g}' if isinstance(value, float) else f'  {name}: {value}')


def sweep_main(received: list[int] | None = None) -> None:
  """``rnnjax-sweep`` (``python -m launch.sweep``); ``received`` as ``run_main``'s."""
  flags.DEFINE_string('workdir', None, 'Sweep folder: one subfolder per run, plus the tables '
                      'and plots.')
  classes = {name: executors.find(name) for name in executors.EXECUTORS}
  flags.DEFINE_enum('executor', 'local', list(classes), 'Where the jobs run: ' + '; '.join(
      f'{name}: {cls.__doc__.splitlines()[0].rstrip(".")}' for name, cls in classes.items()))
  flags.DEFINE_bool('overwrite', False, 'Clear every run folder and train every run again.')
  flags.DEFINE_multi_string('overwrite_run', [], 'Clear the run folder of this name and train '
                            'its run again (repeat the flag for several).')
  flags.DEFINE_integer('max_group_size', 0, 'Most runs vmapped into one job (0: each group cut '
                       'into as many jobs as the executor runs at once; 1: every run alone).',
                       lower_bound=0)
  flags.DEFINE_integer('processes', 0, 'local: jobs at a time (0: one per core).', lower_bound=0)
  flags.DEFINE_integer('threads_per_run', 0, 'local: cores each job may use (0: the cores / '
                       '--processes).', lower_bound=0)
  flags.DEFINE_float('stall_minutes', 30.0, 'local: a job that reports no progress for this '
                     'long is named, and killed a minute later.', lower_bound=0.05)
  kind, config, overrides, path = _load(sys.argv, True, {
      name: ml_collections.ConfigDict(cls.OPTIONS) for name, cls in classes.items() if cls.OPTIONS})
  if not FLAGS.workdir:
    _fail('--workdir: expected the sweep folder')
  from rnnjax.train import run_folder
  from rnnjax.train import sweep
  command_line = dict(config_flags.get_override_values(FLAGS['config']))
  try:
    configs = sweep.run_configs(config, overrides, command_line, path)
    status = sweep.sweep(kind, configs, overrides, pathlib.Path(FLAGS.workdir), command_line,
                         FLAGS.executor, FLAGS.overwrite or FLAGS.overwrite_run,
                         FLAGS.max_group_size, FLAGS.processes, FLAGS.threads_per_run,
                         FLAGS.stall_minutes * 60, dict(getattr(FLAGS, FLAGS.executor, None) or {}),
                         FLAGS.verbosity, received)
  except (sweep.SweepError, run_folder.FolderInUse, ValueError, OSError) as error:
    _fail(str(error))
  sys.exit(status)
