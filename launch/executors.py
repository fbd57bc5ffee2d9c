"""Where a sweep's jobs run: local processes, or a Slurm cluster through submitit.

A job is one vmapped group of runs: on the local machine a job file handed
to a worker process, ``python -m launch.run --config=FILE --worker``, or the
same harness (``run_job``) in a Slurm job. Either way every run holds its own
folder's lock while it trains, so no run ever trains twice at once, and each
run's ``log.txt`` gets the job's output appended (never overwritten).

Local: one worker per ``threads`` cores, at most ``processes`` (processes x
threads never exceeds the cores the launcher may use), each pinned to its
cores, running its jobs one after another, and killed with the launcher
(Linux's parent-death signal), so no orphan goes on training. A worker's jobs
share its start, imports and JAX's first-use programs (about 2 s a job on 2
CPU cores); one that dies (a signal, a full disk) takes only its job with it,
and the next job on its cores starts a new one.

Slurm: one array job, at most ``array_parallelism`` tasks at once; a task
that Slurm preempts or requeues (SIGTERM) checkpoints the step it is at and
resumes from it when it runs again, and one warned of its time limit
(SIGUSR2) checkpoints and requeues itself through submitit.
"""

import concurrent.futures
import ctypes
import datetime
import json
import os
import pathlib
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import NamedTuple

from absl import logging
import submitit

from launch import run


class Job(NamedTuple):
  """One job: the runs of a group (their folders new, or resumed)."""
  entries: list  # [{"workdir": run folder, "overrides": {field: value}}, ...]


def append_log(folders, text: str) -> None:
  """Appends ``text`` to each run's log.txt; a full disk loses the log, not the sweep."""
  for folder in folders:
    try:
      pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
      with open(pathlib.Path(folder) / 'log.txt', 'a') as log:
        log.write(text)
    except OSError:
      pass


def reason(output: str) -> str:
  """The one-line reason a job's output gives for failing: its 'error:' line (without
  the prefix, which the launcher's 'failed:' line replaces) or 'interrupted:' line,
  else its last line."""
  lines = [line.strip() for line in output.splitlines() if line.strip()]
  for line in reversed(lines):
    if line.startswith('error:'):
      return line[len('error:'):].strip()
    if line.startswith('interrupted:') or 'Error:' in line:
      return line
  return lines[-1] if lines else 'no output'


def _child_setup(cores):
  """Runs in the child before exec: pin it to ``cores``, and ask Linux to kill it
  (SIGKILL) when the launcher's thread that started it dies."""
  parent = os.getpid()  # the launcher, the child's parent

  def setup():
    os.sched_setaffinity(0, cores)
    libc = ctypes.CDLL('libc.so.6', use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the launcher died before prctl
      os._exit(1)
  return setup


class Local:
  """Runs jobs on local worker processes, ``processes`` at a time, ``threads`` cores each."""

  def __init__(self, config_path: str, processes: int, threads: int, job_folder: pathlib.Path):
    """``job_folder``: where the job files go, emptied first (the sweep's own, which its
    launcher holds: files a killed launcher left there are of no use)."""
    cores = sorted(os.sched_getaffinity(0))
    if processes * threads > len(cores):
      raise ValueError(f'--processes x --threads_per_run: expected at most the {len(cores)} '
                       f'cores, got {processes} x {threads}')
    self.config_path, self.processes = config_path, processes
    self.job_folder = pathlib.Path(job_folder)
    shutil.rmtree(self.job_folder, ignore_errors=True)
    self.job_folder.mkdir(parents=True)
    self.slots = queue.Queue()
    for i in range(processes):
      self.slots.put(tuple(cores[i * threads:(i + 1) * threads]))
    self.workers = {}  # cores -> the worker process pinned to them
    self.stopping = threading.Event()

  def _worker(self, cores):
    """The live worker on ``cores``, started if there is none."""
    process = self.workers.get(cores)
    if process is None or process.poll() is not None:
      process = subprocess.Popen(
          [sys.executable, '-m', 'launch.run', f'--config={self.config_path}', '--worker'],
          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
          preexec_fn=_child_setup(cores))
      self.workers[cores] = process
    return process

  def _run(self, number: int, job: Job):
    """Runs one job on its cores' worker; returns ``(exit status, reason)``. A worker
    that ends without taking the job (it was stopping: a signal after its last job)
    gets a successor, which is handed the job once more."""
    if self.stopping.is_set():
      return None, 'not started: the sweep was interrupted'
    folders = [entry['workdir'] for entry in job.entries]
    job_file = (self.job_folder / f'{number}.json').absolute()
    job_file.write_text(json.dumps(job.entries, indent=1))
    cores = self.slots.get()
    output = []
    try:
      for _ in range(2):
        process = self._worker(cores)
        append_log(folders, f'\n=== {datetime.datetime.now():%Y-%m-%d %H:%M:%S} launch: '
                            f'{len(folders)} run(s) on cores {list(cores)}: '
                            f'{" ".join(process.args)} (pid {process.pid}) < {job_file}\n')
        taken, status = self._follow(process, job_file, folders, output)
        if taken or self.stopping.is_set():
          break
    finally:
      self.slots.put(cores)
      job_file.unlink(missing_ok=True)
    return status, reason(''.join(output[-50:]))

  @staticmethod
  def _follow(process, job_file, folders, output):
    """Hands ``job_file`` to ``process`` and copies its output to the runs' logs and
    ``output`` up to the job's end; returns ``(whether it took the job, exit status)``."""
    try:
      process.stdin.write(f'{job_file}\n')
      process.stdin.flush()
    except (OSError, ValueError):  # the worker is gone, or its input closed by stop()
      pass
    taken = False
    while True:
      line = process.stdout.readline()
      if line.startswith(run.JOB_START):
        taken = True
      elif line.startswith(run.JOB_END):
        return taken, int(line.split()[-1])
      elif line:
        output.append(line)
        append_log(folders, line)
      else:  # the worker ended: a signal, a full disk, a crash
        status = process.wait()
        why = (f'was killed by signal {-status}' if status < 0 else
               f'ended with exit status {status}')
        line = (f'its process (pid {process.pid}) {why}' +
                ('' if taken else ' before it took the job') + '\n')
        output.append(line)
        append_log(folders, line)
        return taken, status

  def run(self, jobs, on_end) -> None:
    """Runs every job; calls ``on_end(job, returncode, reason)`` as each ends. On
    KeyboardInterrupt the running jobs checkpoint and stop, the others never start."""
    pool = concurrent.futures.ThreadPoolExecutor(self.processes)
    try:
      futures = {pool.submit(self._run, n, job): job for n, job in enumerate(jobs)}
      for future in concurrent.futures.as_completed(futures):
        on_end(futures[future], *future.result())
    except KeyboardInterrupt:
      self.stop()
      raise
    finally:
      for process in self.workers.values():  # the end of its input ends a worker
        try:
          process.stdin.close()
        except OSError:
          pass
      for process in self.workers.values():  # before its thread ends (and kills it)
        process.wait()
      pool.shutdown(wait=True, cancel_futures=True)

  def stop(self) -> None:
    """Starts nothing more and asks the running jobs to checkpoint and stop (SIGTERM)."""
    self.stopping.set()
    for process in list(self.workers.values()):
      process.terminate()


def run_job(config_path: str, entries: list) -> int:
  """A job's work inside a Slurm task: ``launch.run --group`` in this process.

  SIGTERM (Slurm's preemption or ``scontrol requeue``) checkpoints the current
  step and ends the task (Slurm runs it again, and it resumes); SIGUSR2
  (submitit's time-limit warning) checkpoints, then hands the signal to
  submitit, which requeues the task.

  Returns:
    0 when every run ended (finished or diverged).
  """
  from rnnjax.train import harness
  from rnnjax.train import trainer

  logging.set_verbosity(logging.INFO)  # as launch.run's absl app logs
  run.quiet_logs()
  run.keep_freed_memory()
  run.enable_compilation_cache()
  run.initialize_distributed()  # a job of several Slurm tasks: one run over all their devices
  config = run.load_config_file(config_path).get_config()
  configs, folders, overwrites = run.group_runs(config, entries)
  requested = []
  previous = {}
  for signum in (signal.SIGTERM, signal.SIGUSR2):
    previous[signum] = signal.signal(signum, lambda signum, frame: requested.append(signum))
  try:
    harness.run_group(run.experiment_module(configs[0]), configs, folders, overwrites,
                      lambda: bool(requested), run.provenance())
  except trainer.Interrupted:
    print(f'interrupted: signal {requested[0]}; checkpointed', flush=True)
    handler = previous.get(requested[0])
    if requested[0] == signal.SIGUSR2 and callable(handler):
      handler(requested[0], None)  # submitit: checkpoint() and requeue
    raise
  return 0


class SlurmJob(submitit.helpers.Checkpointable):
  """A submitit callable for one job; requeued, it runs again and resumes from its
  runs' checkpoints (``checkpoint`` resubmits the same call)."""

  def __init__(self, config_path: str, entries: list):
    self.config_path, self.entries = config_path, entries

  def __call__(self) -> int:
    return run_job(self.config_path, self.entries)


class Slurm:
  """Submits jobs as one Slurm array through submitit and waits for them to leave the
  queue (``squeue``; this works without Slurm's accounting database)."""

  def __init__(self, config_path: str, folder: pathlib.Path, parameters: dict,
               poll_seconds: float = 5.0):
    self.config_path, self.poll_seconds = config_path, poll_seconds
    self.executor = submitit.AutoExecutor(folder=folder / 'slurm', cluster='slurm')
    self.executor.update_parameters(**{k: v for k, v in parameters.items() if v})
    self.submitted = []

  def run(self, jobs, on_end) -> None:
    with self.executor.batch():
      pending = [(job, self.executor.submit(SlurmJob(self.config_path, job.entries)))
                 for job in jobs]
    self.submitted = [task for _, task in pending]
    while pending:
      time.sleep(self.poll_seconds)
      queued = self.queued()
      if queued is None:
        continue
      for job, task in list(pending):
        if task.job_id in queued:
          continue
        pending.remove((job, task))
        output = _read(task.paths.stdout) + _read(task.paths.stderr)
        append_log([entry['workdir'] for entry in job.entries],
                   f'\n=== Slurm job {task.job_id}\n{output}')
        on_end(job, None, f'Slurm job {task.job_id}: {reason(output)}')

  @staticmethod
  def queued():
    """The ids of the jobs and array tasks Slurm still holds (pending or running), or
    None when squeue cannot be asked."""
    try:
      result = subprocess.run(['squeue', '-h', '-r', '-o', '%i'], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
      return None
    return set(result.stdout.split()) if result.returncode == 0 else None

  def stop(self) -> None:
    """Cancels the submitted jobs (their runs keep their last checkpoints)."""
    for task in self.submitted:
      task.cancel(check=False)


def _read(path) -> str:
  try:
    return pathlib.Path(path).read_text(errors='replace')
  except OSError:
    return ''
