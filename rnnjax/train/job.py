"""The job entry every executor calls: a job is one vmapped group of runs.

A job is a JSON object: ``{"id": "3", "experiment": "experiments.char_lm", "overwrite":
["changed", ...] (one a run, or one for all), "runs": [{"folder": ..., "config": {... as
config.json}}, ...], "result": ".../.jobs/3.result.json", "log": ".../.jobs/3.log",
"provenance": {...}, "verbosity": 0}``. ``run_job`` trains it through the harness and writes
its result file: per run its ``status`` (finished, diverged, failed, interrupted) and a
one-line ``reason``, and the job's ``exit`` kind (ok, error, full_disk, out_of_memory,
interrupted). A process calls ``setup_process`` once before its first job.

Logs: a job's own lines at INFO, those of the libraries it runs on (``LIBRARIES``) from WARNING
unless its ``verbosity`` (absl's ``--verbosity``) is 1 (DEBUG) or more. A line about one run goes
to that run's log.txt, the others once to the job's ``log``: a run's log grows with its own lines.

``python -m rnnjax.train.job`` is a worker: jobs come on stdin, one JSON object a line; events
go to stdout, one JSON object a line: ``{"job": id, "event": "taken"}``, ``{"job": id,
"event": "step", "step": n}`` (at most one a second), ``{"job": id, "event": "ended",
"result": {...}}``; all else it prints goes to stderr. Asked to stop (``executors.STOP_SIGNALS``:
SIGTERM, SIGINT, SIGHUP; and SIGUSR2) it checkpoints its job's runs and exits with 128 + the
signal's number; a full disk (or a file-size limit) ends it with status 1.
"""

import contextlib
import ctypes
import errno
import json
import logging as python_logging
import os
import pathlib
import signal
import sys
import time
from typing import Any, BinaryIO, Callable, Iterable, Sequence

from absl import logging
import jax

from rnnjax.train import executors
from rnnjax.train import experiment
from rnnjax.train import harness
from rnnjax.train import run_folder
from rnnjax.train import trainer

__all__ = ['setup_process', 'keep_freed_memory', 'use_compilation_cache', 'run_job', 'failure',
           'serve', 'LIBRARIES']

LIBRARIES = ('orbax', 'absl', 'jax', 'jaxlib', 'flax', 'tensorstore')
"""The packages whose INFO lines a job's logs leave out (below ``--verbosity=1``)."""
DISTRIBUTED_VARIABLES = ('RNNJAX_COORDINATOR', 'RNNJAX_NUM_PROCESSES', 'RNNJAX_PROCESS_ID')


def _quiet(verbosity: int) -> Callable[[python_logging.LogRecord], bool]:
  """Below ``verbosity`` 1, a log filter of ``LIBRARIES``' INFO and of errors ``failure`` names."""
  def keep(record: python_logging.LogRecord) -> bool:
    source = set(pathlib.PurePath(record.pathname).parts[:-1])
    library = record.name.split('.')[0] in LIBRARIES and not (
        record.name == 'absl' and not source & set(LIBRARIES))
    error = record.exc_info[1] if record.exc_info else None
    return verbosity >= 1 or not library or (
        record.levelno >= python_logging.WARNING and (error is None or failure(error) is None))
  return keep


def keep_freed_memory() -> bool:
  """Tells glibc's malloc to keep freed memory for reuse (heap allocations up to 2 GiB, two
  arenas) instead of mapping fresh pages, which the kernel zeroes, for each executable's
  temporary buffer at every call (a third of a step's time for the main job's tau-64 group).
  Returns False where the C library has no ``mallopt`` (not glibc)."""
  try:
    mallopt = ctypes.CDLL(None).mallopt
  except (OSError, AttributeError):
    return False
  most = 2**31 - 1
  return all(mallopt(option, ctypes.c_int(value)) == 1 for option, value in (
      (-8, 2),  # M_ARENA_MAX: the main thread's and one for the others
      (-3, most),  # M_MMAP_THRESHOLD: allocations below it come from the heap
      (-1, most),  # M_TRIM_THRESHOLD: free space at the heap's top kept up to this
  ))


def use_compilation_cache() -> str:
  """Turns on JAX's persistent compilation cache, every program kept however fast it compiled,
  in ``$RNNJAX_COMPILATION_CACHE`` (default ``~/.cache/rnnjax/xla``; empty: off). Call it before
  the process compiles anything. Returns the folder ('' when off)."""
  cache = os.environ.get('RNNJAX_COMPILATION_CACHE',
                         str(pathlib.Path.home() / '.cache' / 'rnnjax' / 'xla'))
  if cache:
    jax.config.update('jax_compilation_cache_dir', cache)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
    jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)
  return cache


def _initialize_distributed() -> None:
  """Joins ``jax.distributed`` by ``DISTRIBUTED_VARIABLES`` or Slurm's (ValueError: a bad set)."""
  given = {name: os.environ.get(name, '') for name in DISTRIBUTED_VARIABLES}
  step_tasks = os.environ.get('SLURM_STEP_NUM_TASKS', '1')
  if not any(given.values()) and not (step_tasks.isdigit() and int(step_tasks) > 1):
    return
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  if not any(given.values()):
    jax.distributed.initialize()  # JAX's Slurm cluster detection
    return
  count, index = given['RNNJAX_NUM_PROCESSES'], given['RNNJAX_PROCESS_ID']
  if not (given['RNNJAX_COORDINATOR'] and count.isdigit() and index.isdigit() and
          int(index) < int(count)):
    raise ValueError(f'{", ".join(DISTRIBUTED_VARIABLES)}: expected host:port, a number of '
                     f'processes and an index below it, got {given}')
  jax.distributed.initialize(given['RNNJAX_COORDINATOR'], int(count), int(index))


def setup_process(signals: Sequence[int] = (*executors.STOP_SIGNALS, signal.SIGUSR2),
                  verbosity: int = 0, received: list[int] | None = None) -> list[int]:
  """What a process that runs jobs does once: logs at ``verbosity`` (module docstring),
  ``keep_freed_memory``, ``use_compilation_cache``, joins
  ``jax.distributed`` as one of several processes, makes ``signals`` requests to stop, and
  ignores SIGXFSZ, so that a write past a file-size limit (``ulimit -f``) fails with EFBIG, a
  one-line error (``failure``), instead of killing the process.

  Returns:
    ``received`` (the signals received before) with those received since, in order; a job's
    runs checkpoint and stop at their next step once it is not empty. A second SIGINT
    interrupts at once.
  """
  logging.set_verbosity(max(verbosity, logging.INFO))
  logging.get_absl_handler().addFilter(_quiet(verbosity))
  default_hook = sys.unraisablehook

  def hook(unraisable: Any) -> None:  # tensorstore writes ending after a failed save's loop
    if not (isinstance(unraisable.exc_value, RuntimeError)
            and str(unraisable.exc_value) == 'Event loop is closed'):
      default_hook(unraisable)
  sys.unraisablehook = hook
  keep_freed_memory()
  use_compilation_cache()
  received = [] if received is None else received

  def request_stop(signum: int, frame: Any) -> None:
    del frame
    received.append(signum)
    if signum == signal.SIGINT:
      signal.signal(signal.SIGINT, signal.default_int_handler)
  for signum in signals:
    signal.signal(signum, request_stop)
  signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # as CPython sets it, whoever started us
  _initialize_distributed()
  return received


def failure(error: BaseException) -> tuple[str, str] | None:
  """The exit kind and one-line reason of an error a job ends with; None: a bug (traceback kept).
  A write the storage has no room for (a full disk, a quota, a file-size limit) is 'full_disk'."""
  from rnnjax.data import corpora
  from rnnjax.train import checkpoints
  text = ' '.join(str(error).split()) or type(error).__name__
  number = run_folder.errno_of(error)
  if number in (errno.ENOSPC, errno.EDQUOT):
    return 'full_disk', (f'{text}; the disk is full; free some space and run the same command '
                         'again to resume from the last checkpoint')
  if number == errno.EFBIG:
    return 'full_disk', (f'{text}; a file-size limit refused the write: raise it (ulimit -f '
                         'unlimited) and run the same command again to resume from the last '
                         'checkpoint')
  if number in (errno.EMFILE, errno.ENFILE):
    return 'error', f'{text}; too many open files: raise the limit (ulimit -n) and run again'
  if isinstance(error, jax.errors.JaxRuntimeError) and ('RESOURCE_EXHAUSTED' in text
                                                       or 'Out of memory' in text):
    return 'out_of_memory', (f'out of memory: {str(error).splitlines()[0]}; expected a smaller '
                             'model or batch (--config.hidden_size, --config.batch_size), or in '
                             'a sweep smaller groups (--max_group_size)')
  if isinstance(error, trainer.Interrupted):
    return 'interrupted', f'interrupted: {text}; run the same command again to resume'
  if isinstance(error, (ValueError, OSError, run_folder.FolderInUse, corpora.CorpusError,
                        checkpoints.CheckpointError)):
    return 'error', text
  return None


class _Logs(python_logging.Handler):
  """Appends a job's records: a run's to its log.txt (``run_folder.about``), others to its log."""

  def __init__(self, job_log: str | None, verbosity: int):
    super().__init__()
    self.job_log = job_log
    self.setFormatter(python_logging.Formatter('%(asctime)s %(levelname)s %(message)s'))
    self.addFilter(_quiet(verbosity))

  def emit(self, record: python_logging.LogRecord) -> None:
    folder = getattr(record, 'run_folder', None)
    path = pathlib.Path(folder) / run_folder.LOG if folder else self.job_log
    if path:
      with contextlib.suppress(OSError):  # a full disk loses the log, not the run
        run_folder.append_text(pathlib.Path(path), self.format(record) + '\n')


def run_job(job: dict, received: list[int] | None = None,
            on_progress: Callable[[int], None] | None = None, log_to_runs: bool = False) -> dict:
  """Trains a job's runs through the harness and writes its result file.

  Args:
    job: as the module docstring.
    received: ``setup_process``'s list of signals (stops the runs when not empty).
    on_progress: ``on_progress(step)`` after every training step.
    log_to_runs: also write the job's log to files (``_Logs``), and the reason it failed to
      its runs' log.txt (a sweep's workers and tasks).

  Returns:
    the result: ``{"id", "exit", "runs": [{"folder", "status", "reason"}]}``.
  """
  folders = [pathlib.Path(run['folder']) for run in job['runs']]
  handler = _Logs(job.get('log'), job.get('verbosity', 0)) if log_to_runs else None
  if handler is not None:
    python_logging.getLogger().addHandler(handler)
    logging.info('=== job %s: %d run(s) in process %d', job.get('id', ''), len(folders),
                 os.getpid())
  exit_kind, reason = 'ok', ''
  summaries: Sequence[dict | None] = [None] * len(folders)
  try:
    kind = experiment.load(job['experiment'])
    configs = [experiment.from_dict(kind, run['config']) for run in job['runs']]
    summaries = harness.run_group(kind, configs, folders, job.get('overwrite', 'none'),
                                  lambda: bool(received), job.get('provenance'), on_progress)
  except Exception as error:  # noqa: BLE001 -- mapped to a result, or raised again
    outcome = failure(error)
    if outcome is None:
      raise
    exit_kind, reason = outcome
    if handler is not None:
      logging.warning('%s', reason)
      executors.log(job, f'{reason}\n')
  finally:
    if handler is not None:
      python_logging.getLogger().removeHandler(handler)
  failed = 'interrupted' if exit_kind == 'interrupted' else 'failed'  # a run without a summary
  result = {'id': job.get('id', ''), 'exit': exit_kind, 'runs': [
      {'folder': str(folder), 'status': (summary or {}).get('status') or failed, 'reason': reason}
      for folder, summary in zip(folders, summaries)]}
  if job.get('result'):
    with contextlib.suppress(OSError):  # a full disk: the launcher names the exit itself
      run_folder.write_json(pathlib.Path(job['result']), result)
  return result


def _program(job: dict) -> tuple | None:
  """What decides a job's compiled programs: its experiment and ``experiment.group_key`` of its
  first run (None for a job whose experiment or config does not load: its own error follows)."""
  try:
    kind = experiment.load(job['experiment'])
    return job['experiment'], experiment.group_key(
        kind, experiment.from_dict(kind, job['runs'][0]['config']))
  except Exception:  # noqa: BLE001 -- run_job names the error
    return None


def serve(jobs: Iterable[str], events: BinaryIO) -> int:
  """The worker's loop (module docstring) over ``jobs`` (lines) writing to ``events``
  (a binary file); returns the exit status.

  JAX's in-memory caches (traces, compiled programs) are kept from one job to the next of the
  same ``_program`` (a sweep's groups: the next job's setup, compile and report take a fraction
  of the first's) and cleared before a job of another, whose executables would otherwise stay
  in memory beside the new ones."""
  received = setup_process()
  last, kept = [0.0], None  # kept: the program whose caches this process holds

  def emit(record: dict) -> None:
    events.write((json.dumps(record) + '\n').encode())
    events.flush()

  for line in jobs:
    if received:
      return 128 + received[0]
    if not line.strip():
      continue
    job = json.loads(line)
    emit({'job': job['id'], 'event': 'taken'})
    wanted = _program(job)
    if wanted is None or wanted != kept:
      jax.clear_caches()
    kept = wanted

    def progress(step: int, job_id: str = job['id']) -> None:
      now = time.monotonic()
      if now - last[0] >= 1.0:
        last[0] = now
        emit({'job': job_id, 'event': 'step', 'step': int(step)})
    result = run_job(job, received, progress, log_to_runs=True)
    emit({'job': job['id'], 'event': 'ended', 'result': result})
    if result['exit'] == 'full_disk':
      os._exit(1)  # not sys.exit: exit hooks of TensorBoard and orbax would write to it
    if received:
      return 128 + received[0]
  return 0


if __name__ == '__main__':
  events = os.fdopen(os.dup(sys.stdout.fileno()), 'wb')
  os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints go to stderr, not the events
  logging.use_absl_handler()
  sys.exit(serve(sys.stdin, events))
