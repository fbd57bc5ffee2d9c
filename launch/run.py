"""Runs one experiment run, or one vmapped group of runs, through the run harness.

  python -m launch.run --config=experiments/configs/char_lm.py --workdir=results/char_lm \
      [--config.spectral_radius=1.1 ...] [--overwrite]

The config file's ``get_config()`` names its experiment (``config.experiment``,
the module ``experiments.<name>``); any field can be overridden with
``--config.NAME=VALUE``. Rerunning the same command resumes the run from its
latest checkpoint, or, if it ended, prints its summary and trains nothing; a
config that differs from the folder's config.json is refused (one line naming
the differing fields) unless ``--overwrite``, which clears the folder first.
SIGTERM (and SIGUSR2, Slurm's time-limit warning) checkpoints the run at the
current step before it exits. ``--group=FILE`` trains the runs listed in a
JSON file, ``[{"workdir": ..., "overrides": {field: value}}, ...]``, as one
vmapped program. ``--worker`` (what ``launch.sweep`` starts, one per core)
reads such files' paths from stdin, one a line, and runs each as ``--group``
would, between a line ``JOB_START`` and a line ``JOB_END <status>``; it exits
at the end of its input, or as ``--group`` would for a full disk or a signal
(one that comes after a job's training ends it before the next job).
Its jobs share the process's start, imports and the small programs JAX
compiles on first use (about 2 s a job on 2 CPU cores).

Exit status: 0 when the runs finished or diverged (a diverged run is a
result); 1 with one line on stderr for a bad config, a folder of another
run or in use, or missing data; 128 + the signal's number when stopped by one
(checkpointed): 143 SIGTERM, 140 SIGUSR2, 130 SIGINT.
"""

import copy
import ctypes
import difflib
import errno
import importlib
import importlib.util
import json
import logging as python_logging
import math
import os
import pathlib
import re
import signal
import sys

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

FLAGS = flags.FLAGS
DEFAULT_CONFIG = 'experiments/configs/char_lm.py'
COMPILATION_CACHE_VARIABLE = 'RNNJAX_COMPILATION_CACHE'


def define_flags():
  """Defines the command-line flags (only when run as a program, so the module imports
  cleanly). A ``--config.NAME`` the config lacks exits with one line first: without
  ``--config=``, ml_collections reads the overrides as it defines the flag, and a
  misspelt one was a traceback."""
  unknown_field(config_path_of(sys.argv), sys.argv)
  config_flags.DEFINE_config_file(
      'config', DEFAULT_CONFIG, 'Config file with get_config() (and get_sweep() for sweeps); '
      'override any field with --config.NAME=VALUE.', lock_config=True)
  flags.DEFINE_string('workdir', None, 'The run folder: config.json, metrics.jsonl, '
                      'tensorboard/, checkpoint/, summary.json, timing.json.')
  flags.DEFINE_string('group', None, 'Instead of --workdir: a JSON file listing the runs of one '
                      'vmapped group, [{"workdir": ..., "overrides": {field: value}}, ...].')
  flags.DEFINE_bool('worker', False, 'Instead of --workdir: run the group files whose paths '
                    "come on stdin, one a line, each job's output between JOB_START and JOB_END "
                    'lines.')
  flags.DEFINE_bool('overwrite', False, 'Clear the run folder (checkpoint included) and start '
                    'afresh, instead of resuming or refusing a folder of another config.')


class ConfigError(Exception):
  """A configuration or data error: one line for the user, no traceback."""


def experiment_module(config):
  """The module ``experiments.<config.experiment>``.

  Raises:
    ConfigError: for a config without a known experiment.
  """
  name = config.get('experiment')
  if not (isinstance(name, str) and name.isidentifier() and
          importlib.util.find_spec(f'experiments.{name}')):
    raise ConfigError(f'config.experiment: expected the name of a module in experiments/, '
                      f'got {name!r}')
  return importlib.import_module(f'experiments.{name}')


def load_config_file(path: str):
  """The module of a config file (its ``get_config``, and ``get_sweep`` if any).

  Raises:
    ConfigError: for a missing file or one without ``get_config``.
  """
  spec = importlib.util.spec_from_file_location(pathlib.Path(path).stem, path)
  if spec is None or not pathlib.Path(path).is_file():
    raise ConfigError(f'config: no config file at {path!r}')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, 'get_config'):
    raise ConfigError(f'config: {path} defines no get_config()')
  return module


def enable_compilation_cache() -> str:
  """Turns on JAX's persistent compilation cache in ``$RNNJAX_COMPILATION_CACHE``
  (default ``~/.cache/rnnjax/xla``; empty: off), so a relaunched run or sweep
  compiles nothing it compiled before on this machine. Returns the folder."""
  folder = os.environ.get(COMPILATION_CACHE_VARIABLE,
                          str(pathlib.Path.home() / '.cache' / 'rnnjax' / 'xla'))
  if folder:
    jax.config.update('jax_compilation_cache_dir', folder)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
    jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)
  return folder


def keep_freed_memory() -> bool:
  """Tells glibc's malloc to keep freed memory for reuse instead of handing it back.

  XLA's CPU runtime allocates each executable's temporary buffer (tens of MiB
  for a group step) at every call and frees it after; past glibc's mmap
  threshold (at most 32 MiB) every call maps fresh pages and the kernel zeroes
  each on first touch. On the main job this was 15,000 page faults and a third
  of the wall time per tau-64 group step (34.4 s -> 23.9 s of training steps
  for 300 steps, measured 2026-12-01). Heap allocations up to 2 GiB are reused
  instead, so the process keeps its peak memory until it exits. The heaps
  are two: with the thresholds alone a 600-step run faulted as before (3.6
  million faults against 0.33 million), its threads on heaps of their own,
  which map anything over 64 MiB; with one heap for all threads, contention
  slowed 32 small runs trained one by one 2.7x (``benchmarks.rnn_speed``'s
  sweep, B = 1), with two 1.4x. Returns False where the C library has no
  ``mallopt`` (not glibc); nothing changes there.
  """
  try:
    libc = ctypes.CDLL(None)
    mallopt = libc.mallopt
  except (OSError, AttributeError):
    return False
  most = 2**31 - 1
  return all(mallopt(option, ctypes.c_int(value)) == 1 for option, value in (
      (-8, 2),  # M_ARENA_MAX: the main thread's heap and one for all the others
      (-3, most),  # M_MMAP_THRESHOLD: allocations below it come from the heap
      (-1, most),  # M_TRIM_THRESHOLD: free space at the heap's top kept up to this
  ))


DISTRIBUTED_VARIABLES = ('RNNJAX_COORDINATOR', 'RNNJAX_NUM_PROCESSES', 'RNNJAX_PROCESS_ID')


def initialize_distributed() -> int:
  """Joins this process to the others of its run under ``jax.distributed`` when it is
  one of several, before JAX touches a device.

  Several processes: ``$RNNJAX_COORDINATOR`` (host:port of process 0),
  ``$RNNJAX_NUM_PROCESSES`` and ``$RNNJAX_PROCESS_ID`` (any machines), or a
  Slurm step of several tasks (``srun``, submitit's ``--nodes`` /
  ``--tasks_per_node``), whose variables JAX reads itself. CPU devices talk
  through gloo. Every process then sees every process's devices
  (``jax.devices()``); the harness lets process 0 alone write the run folder.

  Returns:
    the number of processes (1: nothing was done).

  Raises:
    ConfigError: for an incomplete or malformed set of the variables above.
  """
  given = {name: os.environ.get(name, '') for name in DISTRIBUTED_VARIABLES}
  slurm_tasks = os.environ.get('SLURM_STEP_NUM_TASKS', '1')
  if not any(given.values()) and not (slurm_tasks.isdigit() and int(slurm_tasks) > 1):
    return 1
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  if any(given.values()):
    count, index = given['RNNJAX_NUM_PROCESSES'], given['RNNJAX_PROCESS_ID']
    if not (given['RNNJAX_COORDINATOR'] and count.isdigit() and index.isdigit() and
            int(index) < int(count)):
      raise ConfigError(f'{", ".join(DISTRIBUTED_VARIABLES)}: expected host:port, a number '
                        f'of processes and an index below it, got {given}')
    jax.distributed.initialize(given['RNNJAX_COORDINATOR'], int(count), int(index))
  else:
    jax.distributed.initialize()  # JAX's Slurm cluster detection
  return jax.process_count()


def quiet_logs() -> None:
  """Hides log lines a CPU user should not see: JAX's search for a TPU, orbax's chatter,
  and the tracebacks of tensorstore's writes that finish after a failed checkpoint
  closed orbax's event loop ("RuntimeError: Event loop is closed", up to 400 of them
  around a full disk's one line; Python hands them to ``sys.unraisablehook``)."""
  python_logging.getLogger('jax._src.xla_bridge').setLevel(python_logging.WARNING)
  logging.get_absl_handler().addFilter(lambda record: 'orbax' not in record.pathname)
  default_hook = sys.unraisablehook

  def hook(unraisable):
    if not (isinstance(unraisable.exc_value, RuntimeError)
            and str(unraisable.exc_value) == 'Event loop is closed'):
      default_hook(unraisable)
  sys.unraisablehook = hook


def group_runs(config, entries):
  """The (configs, folders, overwrites) of a group: ``entries`` is a list of
  ``{"workdir": ..., "overrides": {field: value}, "overwrite": bool}``, each
  override applied to ``config``; "overwrite" (default false) clears the run's
  folder once the group's checks and data have passed (a sweep's changed runs).

  Raises:
    ConfigError: for an override of a field the config lacks.
  """
  configs, folders = [], []
  for entry in entries:
    run_config = copy.deepcopy(config)
    run_config.lock()  # a field the config lacks is an error, not a new field
    try:
      run_config.update_from_flattened_dict(entry['overrides'])
    except (KeyError, AttributeError, TypeError) as error:
      raise ConfigError(f'--group: {entry["workdir"]}: {error}') from None
    configs.append(run_config)
    folders.append(pathlib.Path(entry['workdir']))
  return configs, folders, [entry.get('overwrite') is True for entry in entries]


def read_group_file(path: pathlib.Path) -> list:
  """The entries of a group file (``group_runs``).

  Raises:
    ConfigError: for an unreadable file, or one that is not a non-empty list of
      such entries.
  """
  try:
    entries = json.loads(pathlib.Path(path).read_text())
  except (OSError, json.JSONDecodeError) as error:
    raise ConfigError(f'--group: cannot read {path}: {error}') from None
  if not (isinstance(entries, list) and entries and all(
      isinstance(entry, dict) and isinstance(entry.get('workdir'), str) and
      isinstance(entry.get('overrides'), dict) for entry in entries)):
    raise ConfigError(f'--group: {path}: expected a non-empty list of {{"workdir": folder, '
                      f'"overrides": {{field: value}}}}, got {str(entries)[:200]}')
  return entries


def provenance() -> dict:
  """Where and when a run was measured: the git commit of the checkout (with
  '+changes' when it has uncommitted changes), the date and the host."""
  import datetime
  import socket
  import subprocess
  root = pathlib.Path(__file__).resolve().parent.parent
  try:
    commit = subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'], cwd=root, text=True,
                            capture_output=True, check=True).stdout.strip()
    changed = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'], cwd=root,
                             text=True, capture_output=True, check=True).stdout.strip()
    commit += '+changes' if changed else ''
  except (OSError, subprocess.CalledProcessError):
    commit = 'unknown'
  return {'commit': commit, 'date': datetime.date.today().isoformat(),
          'host': socket.gethostname()}


def config_fields_help(path: str) -> str:
  """The fields of a config file's ``get_config()``, with their defaults and the
  comments beside them in the file."""
  try:
    config = load_config_file(path).get_config()
  except Exception as error:  # any error of the user's file: show it in the help
    return f'(cannot load {path}: {error})'
  comments = {}
  for line in pathlib.Path(path).read_text().splitlines():
    match = re.match(r'\s*config\.(\w+)\s*=.*?#\s*(.*)$', line)
    if match:
      comments[match.group(1)] = match.group(2)
  lines = [f'Fields of {path} (override with --config.NAME=VALUE):']
  for name, value in config.items():
    lines.append(f'  {name} = {value!r}' + (f'  # {comments[name]}' if name in comments else ''))
  return '\n'.join(lines)


def config_path_of(argv) -> str:
  """The config file the command line names: the last ``--config=FILE`` or
  ``--config FILE`` (one dash too), as absl takes it, else the default."""
  path = DEFAULT_CONFIG
  for i, arg in enumerate(argv[1:], 1):
    match = re.fullmatch(r'--?config(=(.*))?', arg)
    if match and match.group(1):
      path = match.group(2)
    elif match and i + 1 < len(argv):
      path = argv[i + 1]
  return path


def unknown_field(config_path: str, argv) -> None:
  """Exits with one line for a ``--config.NAME=`` (or ``--config.A.B=``) whose
  field the config lacks, naming the closest one."""
  try:
    config = load_config_file(config_path).get_config()
  except Exception:  # a broken config file: absl's parser reports it
    return
  for arg in argv[1:]:
    match = re.match(r'--?config\.([A-Za-z_][\w.]*)', arg)
    if not match:
      continue
    holder, path = config, []
    for name in match.group(1).split('.'):
      fields = list(holder.keys()) if hasattr(holder, 'keys') else []
      if name not in fields:
        where = f'{config_path} has no field {".".join(path + [name])!r}'
        if not hasattr(holder, 'keys'):
          hint = f' (config.{".".join(path)} is {holder!r}, which has no fields)'
        else:
          close = difflib.get_close_matches(name, fields, n=1)
          hint = (f'; did you mean {".".join(path + [close[0]])}?' if close else
                  f'; the fields are {fields}')
        print(f'error: --config.{match.group(1)}: {where}{hint}', file=sys.stderr)
        sys.exit(1)
      holder, path = holder[name], path + [name]


def parse_flags(argv, doc: str = __doc__):
  """absl's flag parsing, with --help on stdout (``doc``, the flags, the config's
  fields; exit 0) and a flag error as one line on stderr (exit 1)."""
  config_path = config_path_of(argv)
  if any(arg in ('--help', '-h', '--helpshort', '-?') for arg in argv[1:]):
    print(doc)
    print(FLAGS.main_module_help())
    print()
    print(config_fields_help(config_path))
    sys.exit(0)
  if not pathlib.Path(config_path).is_file():
    print(f'error: --config: no config file at {config_path!r}', file=sys.stderr)
    sys.exit(1)
  unknown_field(config_path, argv)
  try:
    return FLAGS(argv)
  except (flags.Error, KeyError, AttributeError, TypeError, ValueError) as error:
    message = ' '.join(str(error).replace('\\n', ' ').split())
    print(f'error: {message}', file=sys.stderr)
    sys.exit(1)


_STOP = []  # the signal that asked the run to stop, if any


def _request_stop(signum, frame):
  """SIGTERM, SIGUSR2 and a first SIGINT (Ctrl-C, which a terminal sends to a sweep's
  launcher and its runs alike): checkpoint the step in progress and stop. A second
  SIGINT interrupts at once (KeyboardInterrupt)."""
  del frame
  _STOP.append(signum)
  if signum == signal.SIGINT:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def stop_requested() -> bool:
  return bool(_STOP)


def say(line: str) -> None:
  """Writes ``line`` and its newline to stderr in one write, flushed. ``print`` writes
  them in two, and orbax's and TensorBoard's threads, still running when a run fails,
  wrote their own text between the two (CI once saw a full-disk line without its end)."""
  sys.stderr.write(line + '\n')
  sys.stderr.flush()


def _full_disk(error: Exception) -> bool:
  """Whether ``error`` is a write to a full disk: ENOSPC or EDQUOT, or orbax's
  RESOURCE_EXHAUSTED (a ValueError) from a checkpoint."""
  if isinstance(error, OSError):
    return error.errno in (errno.ENOSPC, errno.EDQUOT)
  return 'RESOURCE_EXHAUSTED' in str(error)


def describe(experiment, folder: pathlib.Path, summary: dict) -> str:
  """Lines that tell a user how a run ended: its status and the experiment's report."""
  lines = [f'{folder}: {summary.get("status")} after {summary.get("steps_done")} steps' +
           (f' (diverged at step {summary["diverged_step"]})' if summary.get('diverged_step')
            else '')]
  for name in experiment.REPORT:
    value = summary.get(name, math.nan)
    lines.append(f'  {name}: {value:.4g}' if isinstance(value, float) else f'  {name}: {value}')
  lines += [f'  {name}: {value}' for name, value in summary.items()
            if name.startswith('sample_')]
  return '\n'.join(lines)


JOB_START = '=== launch.run --worker: job taken'
JOB_END = '=== launch.run --worker: job ended with exit status'


def run_group_of(experiment, configs, folders, overwrite: bool | list[bool]) -> int:
  """Trains a group through the harness and prints how each run ended.

  Returns:
    0, or 1 after one 'error:' line on stderr for a bad config, a folder of
    another run or in use, missing data, a file system error (a file where a
    folder should be, say) or XLA running out of memory.
  Exits:
    with 1 at once (``os._exit``) on a full disk, with 128 + the signal number
    when stopped by a signal (checkpointed).
  """
  from rnnjax.data import corpora
  from rnnjax.train import harness
  from rnnjax.train import run_folder
  from rnnjax.train import trainer
  try:
    summaries = harness.run_group(experiment, configs, folders, overwrite, stop_requested,
                                  provenance())
  except (ConfigError, ValueError, run_folder.ConfigMismatch, run_folder.FolderInUse,
          corpora.CorpusError, OSError, jax.errors.JaxRuntimeError) as error:
    full = _full_disk(error)
    if isinstance(error, jax.errors.JaxRuntimeError):
      if 'RESOURCE_EXHAUSTED' not in str(error) and 'Out of memory' not in str(error):
        raise
      say(f'error: out of memory: {str(error).splitlines()[0]}; expected a smaller model or '
          'batch (--config.hidden_size, --config.batch_size), or in a sweep smaller groups '
          '(launch.sweep --max_group_size)')
      return 1
    say(f'error: {error}' + ('; free some space and run the same command again to resume '
                             'from the last checkpoint' if full else ''))
    if full:  # not sys.exit: TensorBoard's and orbax's exit hooks would write to the full disk
      os._exit(1)
    return 1
  except trainer.Interrupted as error:
    say(f'interrupted: {error}; run the same command again to resume')
    sys.exit(128 + _STOP[0])
  if jax.process_index() == 0:
    for folder, summary in zip(folders, summaries):
      print(describe(experiment, folder, summary))
  return 0


def forget_job_programs() -> None:
  """Drops the jitted functions a job's task made: the trainer's steps and diagnostics
  with their executables, evaluation's and sampling's programs (cached per model, and
  a model holds its first run's spectral radius). A worker that kept them grew by
  about 14 MB a job of another radius; a new task compiles its own anyway (or reads
  JAX's persistent cache)."""
  from rnnjax import evaluation
  from rnnjax import sampling
  from rnnjax.train import trainer
  trainer.forget_compiled()
  for cached in (evaluation._windows, evaluation._streaming, sampling._generator):
    cached.cache_clear()


def serve_jobs(config) -> None:
  """``--worker``: for each line of stdin, a group file's path, prints ``JOB_START``,
  runs the group, and prints ``JOB_END <status>``; returns at the end of stdin. A
  worker asked to stop (a signal after its last job's training) exits with 128 + the
  signal's number instead of taking the next job."""
  for line in sys.stdin:
    if not line.strip():
      continue
    if _STOP:
      sys.exit(128 + _STOP[0])
    print(JOB_START, flush=True)
    try:
      configs, folders, overwrites = group_runs(config,
                                                read_group_file(pathlib.Path(line.strip())))
      status = run_group_of(experiment_module(configs[0]), configs, folders, overwrites)
    except ConfigError as error:
      print(f'error: {error}', file=sys.stderr)
      status = 1
    forget_job_programs()
    sys.stderr.flush()
    print(f'{JOB_END} {status}', flush=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  quiet_logs()
  keep_freed_memory()
  enable_compilation_cache()
  for signum in (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT):
    signal.signal(signum, _request_stop)
  try:
    initialize_distributed()
    if (bool(FLAGS.workdir) + bool(FLAGS.group) + FLAGS.worker) != 1:
      raise ConfigError('expected exactly one of --workdir (one run), --group (a group file) '
                        'and --worker (group files named on stdin)')
    if FLAGS.worker:
      serve_jobs(FLAGS.config)
      return
    if FLAGS.group:
      configs, folders, overwrites = group_runs(FLAGS.config,
                                                read_group_file(pathlib.Path(FLAGS.group)))
    else:
      configs, folders, overwrites = [FLAGS.config], [pathlib.Path(FLAGS.workdir)], [False]
    experiment = experiment_module(configs[0])  # a group's overrides may set it
  except (ConfigError, ValueError) as error:
    print(f'error: {error}', file=sys.stderr, flush=True)
    sys.exit(1)
  sys.exit(run_group_of(experiment, configs, folders,
                        [FLAGS.overwrite or overwrite for overwrite in overwrites]))


if __name__ == '__main__':
  define_flags()
  app.run(main, flags_parser=parse_flags)
