"""Where a sweep's jobs run: local worker processes, or a Slurm cluster through submitit.

Either way a job (``job.run_job``) writes its result file, which the launcher reads when the
job ends; a job that ends without one (its process killed, a crash) gets a result made here
from how its process ended. Each run holds its folder's lock while it trains.

Local: one worker (``python -m rnnjax.train.job``) per ``threads`` cores, at most
``processes``, each pinned to its cores and killed with the launcher (Linux's parent-death
signal), running its jobs one after another. A job that sends no event for ``stall_seconds``
is named, and killed ``grace_seconds`` later; ``stop`` asks the running jobs to checkpoint
and kills what still runs ``stop_seconds`` later, so the launcher always ends.

Slurm: one array job; a task that Slurm preempts or requeues (SIGTERM) checkpoints and
resumes when it runs again, one warned of its time limit (SIGUSR2) checkpoints and requeues
itself through submitit.
"""

import concurrent.futures
import contextlib
import ctypes
import json
import os
import pathlib
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

import submitit

from rnnjax.train import folder as run_folder
from rnnjax.train import job as jobs

__all__ = ['Local', 'Slurm', 'SlurmJob', 'read_result']

OnEnd = Callable[[dict, dict], None]  # on_end(job, result)
OnProgress = Callable[[dict, int], None] | None  # on_progress(job, step)


def read_result(job: dict, why: str) -> dict:
  """The job's result file, or (none there, or another job's) a result saying ``why``."""
  result = run_folder.read_json(pathlib.Path(job['result']))
  if result is not None and result.get('id') == job['id']:
    return result
  return {'id': job['id'], 'exit': 'killed',
          'runs': [{'folder': run['folder'], 'status': 'failed', 'reason': why}
                   for run in job['runs']]}


def _header(job: dict, where: str) -> None:
  """The job's first line in each of its runs' log.txt (the folders made here); a full disk
  loses the line, not the sweep (the job names the disk in its result)."""
  for run in job['runs']:
    with contextlib.suppress(OSError):
      pathlib.Path(run['folder']).mkdir(parents=True, exist_ok=True)
      run_folder.append_text(pathlib.Path(run['folder']) / run_folder.LOG,
                             f'\n=== {time.strftime("%Y-%m-%d %H:%M:%S")} job {job["id"]}: '
                             f'{len(job["runs"])} run(s) {where}\n')


def _child_setup(cores: tuple[int, ...]) -> Callable[[], None]:
  """Runs in the child before exec: pin it to ``cores``, and ask Linux to kill it
  (SIGKILL) when the launcher's thread that started it dies."""
  parent = os.getpid()

  def setup() -> None:
    os.sched_setaffinity(0, cores)
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the launcher died before prctl
      os._exit(1)
  return setup


class Local:
  """Runs jobs on local worker processes, ``processes`` at a time, ``threads`` cores each."""

  def __init__(self, processes: int, threads: int, job_folder: pathlib.Path,
               stall_seconds: float = 1800.0, grace_seconds: float = 60.0,
               stop_seconds: float = 60.0):
    cores = sorted(os.sched_getaffinity(0))
    if processes * threads > len(cores):
      raise ValueError(f'--processes x --threads_per_run: expected at most the {len(cores)} '
                       f'cores, got {processes} x {threads}')
    self.processes, self.job_folder = processes, pathlib.Path(job_folder)
    self.job_folder.mkdir(parents=True, exist_ok=True)
    self.stall_seconds, self.grace_seconds = stall_seconds, grace_seconds
    self.stop_seconds = stop_seconds
    self.slots: queue.Queue[tuple[int, ...]] = queue.Queue()
    for i in range(processes):
      self.slots.put(tuple(cores[i * threads:(i + 1) * threads]))
    self.workers: dict[tuple[int, ...], subprocess.Popen] = {}  # by the cores it is pinned to
    self.stopping = threading.Event()
    self.deadline: float | None = None
    self.say = lambda line: print(line, file=sys.stderr, flush=True)

  def _worker(self, cores: tuple[int, ...]) -> subprocess.Popen:
    """The live worker on ``cores``, started if there is none."""
    process = self.workers.get(cores)
    if process is None or process.poll() is not None:
      paths = [path or os.getcwd() for path in sys.path]
      # bufsize=0: ``_follow`` reads each event line straight from the pipe, so that select()
      # sees every line (a buffered read could hold the job's last event unseen)
      log = open(self.job_folder / f'worker-{cores[0]}.log', 'ab')
      process = subprocess.Popen(
          [sys.executable, '-m', 'rnnjax.train.job'], stdin=subprocess.PIPE, bufsize=0,
          stdout=subprocess.PIPE, stderr=log, preexec_fn=_child_setup(cores),
          env=dict(os.environ, PYTHONPATH=os.pathsep.join(paths)))
      log.close()
      self.workers[cores] = process
    return process

  def _follow(self, process: subprocess.Popen, job: dict, on_progress: OnProgress
              ) -> tuple[bool, str | None]:
    """Hands ``job`` to ``process`` and reads its events to the job's end. Returns
    ``(taken, why)``: whether it took the job, and why it ended without one (None when
    it ended the job)."""
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None and stdout is not None  # made with pipes (``_worker``)
    with contextlib.suppress(OSError, ValueError):  # the worker is gone or its input closed
      stdin.write((json.dumps(job) + '\n').encode())
      stdin.flush()
    taken, last, warned, killed, asked = False, time.monotonic(), False, None, False
    while True:
      now = time.monotonic()
      if self.stopping.is_set() and not asked:  # also a worker started after ``stop``
        asked = True
        with contextlib.suppress(ProcessLookupError):
          process.terminate()
          process.send_signal(signal.SIGCONT)  # a stopped worker, too
      if self.deadline is not None and now > self.deadline and process.poll() is None:
        process.kill()
        killed = f'stopped by the launcher {self.stop_seconds:.0f} s after it was asked to'
      if not select.select([stdout], [], [], 1.0)[0]:
        idle = time.monotonic() - last
        if idle > self.stall_seconds and not warned:
          warned = True
          self.say(f'warning: job {job["id"]} ({len(job["runs"])} run(s), first '
                   f'{job["runs"][0]["folder"]}): its process (pid {process.pid}) has sent '
                   f'nothing for {idle:.0f} s; killing it in {self.grace_seconds:.0f} s')
        if idle > self.stall_seconds + self.grace_seconds and process.poll() is None:
          process.kill()
          killed = f'made no progress for {idle:.0f} s and was killed'
        continue
      line = stdout.readline()
      if not line:  # the worker ended: a signal, a full disk, a crash
        status = process.wait()
        why = killed or (f'was killed by signal {-status}' if status < 0 else
                         f'ended with exit status {status}')
        return taken, (f'its process (pid {process.pid}) {why}' +
                       ('' if taken else ' before it took the job') +
                       f'; its log: {self.job_folder}/worker-*.log')
      event = json.loads(line)
      last, warned = time.monotonic(), False
      if event['event'] == 'taken':
        taken = True
      elif event['event'] == 'step' and on_progress is not None:
        on_progress(job, event['step'])
      elif event['event'] == 'ended':
        return True, None

  def _run(self, job: dict, on_progress: OnProgress) -> dict:
    """Runs one job on its cores' worker; a worker that ends without taking the job (it
    was stopping) gets a successor, which is handed the job once more."""
    if self.stopping.is_set():
      return read_result(job, 'not started: the sweep was interrupted')
    cores = self.slots.get()
    try:
      for _ in range(2):
        process = self._worker(cores)
        _header(job, f'on cores {list(cores)}: worker python -m rnnjax.train.job (pid '
                     f'{process.pid})')
        taken, why = self._follow(process, job, on_progress)
        for run in job['runs'] if why is not None else ():  # the run's own log says why too
          with contextlib.suppress(OSError):
            run_folder.append_text(pathlib.Path(run['folder']) / run_folder.LOG, f'{why}\n')
        if taken or self.stopping.is_set():
          break
    finally:
      self.slots.put(cores)
    return read_result(job, why or 'ended without a result')

  def run(self, jobs_to_run: list[dict], on_end: OnEnd, on_progress: OnProgress = None) -> None:
    """Runs every job; calls ``on_end(job, result)`` as each ends. On KeyboardInterrupt
    the running jobs checkpoint and stop, the others never start, and it re-raises."""
    pool = concurrent.futures.ThreadPoolExecutor(self.processes)
    try:
      futures = {pool.submit(self._run, job, on_progress): job for job in jobs_to_run}
      for future in concurrent.futures.as_completed(futures):
        on_end(futures[future], future.result())
    except KeyboardInterrupt:
      self.stop()
      raise
    finally:
      for process in self.workers.values():  # the end of its input ends a worker
        if process.stdin is not None:
          with contextlib.suppress(OSError):
            process.stdin.close()
      for process in self.workers.values():  # before its thread ends (and kills it)
        try:
          process.wait(None if self.deadline is None else
                       max(self.deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
          process.kill()
          process.wait()
      pool.shutdown(wait=True, cancel_futures=True)

  def stop(self) -> None:
    """Starts nothing more; each running job's worker is asked to checkpoint and stop
    (SIGTERM, and SIGCONT for a stopped one) within a second, and killed ``stop_seconds``
    later (``_follow``)."""
    self.stopping.set()
    self.deadline = time.monotonic() + self.stop_seconds


class SlurmJob(submitit.helpers.Checkpointable):
  """A submitit callable for one job; requeued, it runs again and resumes from its
  runs' checkpoints (``checkpoint`` resubmits the same call).

  SIGTERM (Slurm's preemption or ``scontrol requeue``) checkpoints the current
  step and ends the task; SIGUSR2 (submitit's time-limit warning) checkpoints,
  then hands the signal to submitit, which requeues the task.
  """

  def __init__(self, job: dict):
    self.job = job

  def __call__(self) -> dict:
    requeue = signal.getsignal(signal.SIGUSR2)  # submitit's
    received = jobs.setup_process(signals=(signal.SIGTERM, signal.SIGUSR2))
    _header(self.job, f'in Slurm job {os.environ.get("SLURM_JOB_ID", "?")}')
    result = jobs.run_job(self.job, received, log_to_runs=True)
    if received and received[0] == signal.SIGUSR2 and callable(requeue):
      requeue(signal.SIGUSR2, None)  # submitit: checkpoint() and requeue
    return result


class Slurm:
  """Submits jobs as one Slurm array through submitit and waits for them to leave the
  queue (``squeue``; this works without Slurm's accounting database)."""

  def __init__(self, folder: pathlib.Path, parameters: dict, poll_seconds: float = 5.0):
    self.poll_seconds = poll_seconds
    self.executor = submitit.AutoExecutor(folder=folder / 'slurm', cluster='slurm')
    self.executor.update_parameters(**{k: v for k, v in parameters.items() if v})
    self.submitted: list[submitit.Job] = []

  def run(self, jobs_to_run: list[dict], on_end: OnEnd, on_progress: OnProgress = None) -> None:
    del on_progress  # a Slurm job's progress shows when it ends
    with self.executor.batch():
      pending = [(job, self.executor.submit(SlurmJob(job))) for job in jobs_to_run]
    self.submitted = [task for _, task in pending]
    while pending:
      time.sleep(self.poll_seconds)
      queued = self.queued()
      if queued is None:
        continue
      for job, task in list(pending):
        if task.job_id not in queued:
          pending.remove((job, task))
          on_end(job, read_result(job, f'Slurm job {task.job_id} ended without a result; its '
                                       f'log: {task.paths.stderr}'))

  @staticmethod
  def queued() -> set[str] | None:
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
