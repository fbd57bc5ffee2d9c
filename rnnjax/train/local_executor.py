"""Local: a sweep's jobs on worker processes of this machine.

One worker (``python -m rnnjax.train.job``) per ``threads_per_run`` cores, at most
``processes``, each pinned to its cores and killed with the launcher (Linux's parent-death
signal), runs its jobs one after another. A job that sends no event for ``stall_seconds`` is
named, and killed a tenth of that later unless it sends one meanwhile.
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

from rnnjax.train import executors

__all__ = ['Local']


class Local:
  """Worker processes on this machine, --processes at a time, --threads_per_run cores each."""
  OPTIONS: dict = {}

  def __init__(self, settings: executors.Settings):
    cores = sorted(os.sched_getaffinity(0))
    threads = settings.threads_per_run or max(1, len(cores) // (settings.processes or len(cores)))
    processes = settings.processes or max(1, len(cores) // threads)
    if processes * threads > len(cores):
      raise ValueError(f'--processes x --threads_per_run: expected at most the {len(cores)} '
                       f'cores, got {processes} x {threads}')
    self.parts, self.where = processes, f'on {processes} process(es) x {threads} core(s)'
    self.job_folder = pathlib.Path(settings.folder)
    self.stall_seconds, self.grace_seconds = settings.stall_seconds, settings.stall_seconds / 10
    self.slots: queue.Queue[tuple[int, ...]] = queue.Queue()
    for i in range(processes):
      self.slots.put(tuple(cores[i * threads:(i + 1) * threads]))
    self.workers: dict[tuple[int, ...], subprocess.Popen] = {}  # by the cores it is pinned to
    self.stopping = threading.Event()
    self.deadline: float | None = None
    self.say: executors.Say = print

  def _worker(self, cores: tuple[int, ...]) -> subprocess.Popen:
    """The live worker on ``cores``, started if there is none (the module docstring)."""
    process = self.workers.get(cores)
    if process is None or process.poll() is not None:
      parent, paths = os.getpid(), [path or os.getcwd() for path in sys.path]

      def setup() -> None:  # in the child before exec: killed with the thread that started it
        os.sched_setaffinity(0, cores)
        ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the launcher died before prctl
          os._exit(1)
      # bufsize=0: ``_follow`` reads each event line straight from the pipe, so that select()
      # sees every line (a buffered read could hold the job's last event unseen)
      with open(self.job_folder / f'worker-{cores[0]}.log', 'ab') as log:
        process = subprocess.Popen(
            [sys.executable, '-m', 'rnnjax.train.job'], stdin=subprocess.PIPE, bufsize=0,
            stdout=subprocess.PIPE, stderr=log, preexec_fn=setup,
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(paths)))
      self.workers[cores] = process
    return process

  def _follow(self, process: subprocess.Popen, job: dict, on_progress: executors.OnProgress
              ) -> tuple[bool, str | dict | None]:
    """Hands ``job`` to ``process``, follows its events: (taken, its result or why it has none)."""
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None and stdout is not None  # made with pipes (``_worker``)
    with contextlib.suppress(OSError, ValueError):  # the worker is gone or its input closed
      stdin.write((json.dumps(job) + '\n').encode())
      stdin.flush()
    taken, last, warned, killed, asked = False, time.monotonic(), False, None, False
    while True:
      if self.stopping.is_set() and not asked:  # also a worker started after ``stop``
        asked = True
        with contextlib.suppress(ProcessLookupError):
          process.terminate()
          process.send_signal(signal.SIGCONT)  # a stopped worker, too
      if self.deadline is not None and time.monotonic() > self.deadline and process.poll() is None:
        process.kill()
        killed = f'stopped by the launcher {executors.STOP_SECONDS:.0f} s after it was asked to'
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
      elif event['event'] == 'step':
        on_progress(job, event['step'])
      elif event['event'] == 'ended':
        return True, event.get('result')

  def _run(self, job: dict, on_progress: executors.OnProgress) -> dict:
    """Runs one job on its cores' worker, or on a successor of one that ended untaken it."""
    if self.stopping.is_set():
      return executors.result_of(job, 'not started: the sweep was interrupted', 'interrupted')
    cores = self.slots.get()
    try:
      for _ in range(2):
        process = self._worker(cores)
        executors.header(job, f'on cores {list(cores)}: worker python -m rnnjax.train.job (pid '
                                f'{process.pid})')
        taken, outcome = self._follow(process, job, on_progress)
        if isinstance(outcome, str):  # the run's own log says why too
          executors.log(job, f'{outcome}\n')
        if taken or self.stopping.is_set():
          break
    finally:
      self.slots.put(cores)
    if isinstance(outcome, dict):
      return outcome
    return executors.result_of(job, outcome or 'ended without a result',
                               'interrupted' if self.stopping.is_set() else 'failed')

  def run(self, jobs: list[dict], on_end: executors.OnEnd, on_progress: executors.OnProgress,
          say: executors.Say) -> None:
    """``executors.Executor.run``: each job on the worker of free cores."""
    self.say = say
    self.job_folder.mkdir(parents=True, exist_ok=True)
    pool = concurrent.futures.ThreadPoolExecutor(self.parts)
    try:
      futures = {pool.submit(self._run, job, on_progress): job for job in jobs}
      for future in concurrent.futures.as_completed(futures):
        on_end(futures[future], future.result())
    finally:
      workers = list(self.workers.values())  # a job's thread may still start one (an error)
      for process in workers:  # the end of its input ends a worker
        if process.stdin is not None:
          with contextlib.suppress(OSError):
            process.stdin.close()
      for process in workers:  # before its thread ends (and kills it)
        try:
          process.wait(None if self.deadline is None else
                       max(self.deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
          process.kill()
          process.wait()
      pool.shutdown(wait=True, cancel_futures=True)

  def stop(self) -> None:
    """Starts nothing more; each running job's worker is asked to checkpoint and stop (SIGTERM,
    and SIGCONT for a stopped one) within a second, and killed ``executors.STOP_SECONDS`` later."""
    self.stopping.set()
    self.deadline = time.monotonic() + executors.STOP_SECONDS
