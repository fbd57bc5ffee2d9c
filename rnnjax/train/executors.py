"""The Executor interface: what the launcher needs of a place that runs a sweep's jobs.

An executor is made as ``cls(settings)`` before the launcher touches the sweep folder (one that
cannot run as asked raises ValueError naming its flag then). Wherever it runs a job, the job is
``job.run_job`` and writes its result file, the same JSON everywhere (``result_of`` for a job
lost). Executors are found by name in ``EXECUTORS``: adding one is a module with a class of
this shape and a line there; the launcher, the commands and the tests know nothing else.
"""

import contextlib
import pathlib
import pkgutil
import signal
import time
from typing import Any, Callable, ClassVar, Mapping, NamedTuple, Protocol

from rnnjax import checks
from rnnjax.train import run_folder

__all__ = ['Settings', 'Executor', 'EXECUTORS', 'STOP_SECONDS', 'STOP_SIGNALS', 'find',
           'result_of', 'log', 'header']

OnEnd = Callable[[dict, dict], None]  # on_end(job, result)
OnProgress = Callable[[dict, int], None]  # on_progress(job, step)
Say = Callable[[str], None]  # say(line): a warning for the user
STOP_SECONDS = 60.0  # after ``stop``, what the running jobs have to checkpoint and end
# The signals that ask a command, a launcher or a job to stop at a checkpoint: SIGTERM (kill,
# Slurm, Ray), SIGINT (Ctrl-C) and SIGHUP (the terminal closed, ssh lost): none loses a step.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Settings(NamedTuple):
  """The sweep's flags, which the launcher gives every executor; each takes what applies."""
  folder: pathlib.Path  # the sweep's job folder (<workdir>/.jobs): result files, logs
  processes: int = 0  # --processes: jobs at a time on this machine (0: one per core)
  threads_per_run: int = 0  # --threads_per_run: cores of each (0: the cores / processes)
  stall_seconds: float = 1800.0  # --stall_minutes: a job silent this long is named, then killed
  options: Mapping[str, Any] = {}  # its own --NAME.FIELD values (its ``OPTIONS``)


class Executor(Protocol):
  """Runs the jobs of a sweep (``job`` names their JSON objects)."""
  OPTIONS: ClassVar[Mapping[str, Any]]  # its --NAME.FIELD flags and their defaults ({}: none)
  where: str  # the launcher's words for where the jobs run ('on Slurm')
  parts: int  # how many jobs each vmapped group is cut into: as many as run at once

  def __init__(self, settings: Settings) -> None: ...

  def run(self, jobs: list[dict], on_end: OnEnd, on_progress: OnProgress, say: Say) -> None:
    """Runs every job, calling ``on_end(job, result)`` once a job (``result_of``),
    ``on_progress(job, step)`` as it trains (where heard of) and ``say(line)`` for a warning."""

  def stop(self) -> None:
    """Safe in a signal handler: no job starts after it, the running ones are asked to
    checkpoint and end, and what still runs ``STOP_SECONDS`` later is killed."""


EXECUTORS: dict[str, str | Callable[[Settings], Executor]] = {  # name -> 'module:class'
    'local': 'rnnjax.train.local_executor:Local',
    'slurm': 'rnnjax.train.slurm_executor:Slurm',
    'ray': 'rnnjax.train.ray_executor:Ray',
}


def find(name: str) -> Any:
  """The executor class registered as ``name`` (ValueError naming --executor for none)."""
  entry = EXECUTORS[checks.one_of('--executor', name, sorted(EXECUTORS))]
  return pkgutil.resolve_name(entry) if isinstance(entry, str) else entry


def result_of(job: dict, why: str, status: str = 'failed') -> dict:
  """The job's result file, or (a job lost, killed, never started) its runs' ``status``, ``why``."""
  result = run_folder.read_json(pathlib.Path(job['result']))
  if result is not None and result.get('id') == job['id']:
    return result
  return {'id': job['id'], 'exit': 'killed', 'runs': [
      {'folder': run['folder'], 'status': status, 'reason': why} for run in job['runs']]}


def log(job: dict, text: str) -> None:
  """Appends ``text`` to each of the job's runs' log.txt (the folders made here); a full disk
  loses it, not the sweep (the job names the disk in its result)."""
  for run in job['runs']:
    with contextlib.suppress(OSError):
      pathlib.Path(run['folder']).mkdir(parents=True, exist_ok=True)
      run_folder.append_text(pathlib.Path(run['folder']) / run_folder.LOG, text)


def header(job: dict, where: str) -> None:
  """The job's first line in its runs' log.txt (``log``), naming the job's log of the lines
  its runs share."""
  log(job, f'\n=== {time.strftime("%Y-%m-%d %H:%M:%S")} job {job["id"]}: '
           f'{len(job["runs"])} run(s) {where}'
           + (f'; the job\'s log: {job["log"]}' if job.get('log') else '') + '\n')
