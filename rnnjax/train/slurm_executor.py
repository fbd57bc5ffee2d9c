"""Slurm: a sweep's jobs as one array job through submitit.

A task that Slurm preempts or requeues (SIGTERM) checkpoints and resumes when it runs again,
one warned of its time limit (SIGUSR2) checkpoints and requeues itself through submitit. The
launcher waits for the tasks to leave the queue (``squeue``: no accounting database needed);
``stop`` cancels them (``scancel``: SIGTERM, so they checkpoint). An ``sbatch`` that refuses the
array job, or does not answer within ``SUBMIT_SECONDS``, is one line (ValueError) naming what it
said and what to do.
"""

import contextlib
import io
import os
import signal
import subprocess
import threading
import time
from typing import Iterator

import submitit

from rnnjax.train import executors
from rnnjax.train import job as jobs

__all__ = ['Slurm', 'SlurmJob', 'SUBMIT_SECONDS']

SUBMIT_SECONDS = 120.0  # what sbatch has to answer (it answers in a second when Slurm is up)


class _Stalled(Exception):
  """sbatch did not answer in time (raised by ``_deadline``)."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
  """Raises ``_Stalled`` within the block once ``seconds`` have passed (SIGALRM: in the main
  thread alone; elsewhere no limit). Submitit, waiting on sbatch, kills it on the exception."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return

  def expire(signum: int, frame: object) -> None:
    del signum, frame
    raise _Stalled()
  previous = signal.signal(signal.SIGALRM, expire)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


class SlurmJob(submitit.helpers.Checkpointable):
  """A submitit callable for one job (``checkpoint`` resubmits the same call): SIGTERM stops
  it at a checkpoint, SIGUSR2 too and then hands the signal to submitit, which requeues it."""

  def __init__(self, job: dict):
    self.job = job

  def __call__(self) -> dict:
    requeue = signal.getsignal(signal.SIGUSR2)  # submitit's
    received = jobs.setup_process(signals=(signal.SIGTERM, signal.SIGHUP, signal.SIGUSR2))
    executors.header(self.job, f'in Slurm job {os.environ.get("SLURM_JOB_ID", "?")}')
    result = jobs.run_job(self.job, received, log_to_runs=True)
    if received and received[0] == signal.SIGUSR2 and callable(requeue):
      requeue(signal.SIGUSR2, None)  # submitit: checkpoint() and requeue
    return result


class Slurm:
  """An array job on a Slurm cluster through submitit (--slurm.NAME: submitit's parameters)."""
  OPTIONS = {'slurm_partition': '', 'timeout_min': 60, 'cpus_per_task': 2,
             'slurm_gpus_per_task': 0, 'mem_gb': 8, 'slurm_account': '', 'slurm_qos': '',
             'slurm_array_parallelism': 16, 'nodes': 1, 'tasks_per_node': 1}
  where, parts = 'on Slurm', 1  # a group's runs share one task

  def __init__(self, settings: executors.Settings, poll_seconds: float = 5.0,
               submit_seconds: float = SUBMIT_SECONDS):
    self.poll_seconds, self.submit_seconds = poll_seconds, submit_seconds
    try:
      self.executor = submitit.AutoExecutor(folder=settings.folder / 'slurm', cluster='slurm')
    except RuntimeError as error:  # no srun on this machine
      raise ValueError(f'--executor=slurm: no Slurm here ({error})') from None
    self.executor.update_parameters(**{k: v for k, v in settings.options.items() if v})
    self.stopping = threading.Event()

  def run(self, jobs: list[dict], on_end: executors.OnEnd, on_progress: executors.OnProgress,
          say: executors.Say) -> None:
    """``executors.Executor.run``: a job's progress shows when it ends."""
    del on_progress, say
    pending: list[tuple[dict, submitit.Job]] = []
    if jobs and not self.stopping.is_set():
      pending = list(zip(jobs, self._submit(jobs)))
    for job in jobs[len(pending):]:
      on_end(job, executors.result_of(job, 'not started: the sweep was interrupted', 'interrupted'))
    deadline = None
    while pending:
      time.sleep(self.poll_seconds)
      if self.stopping.is_set() and deadline is None:
        deadline = time.monotonic() + executors.STOP_SECONDS
        for _, task in pending:
          task.cancel(check=False)
      queued, late = self.queued(), deadline is not None and time.monotonic() > deadline
      if queued is None and not late:
        continue
      for job, task in list(pending):
        if late or task.job_id not in (queued or ()):
          pending.remove((job, task))
          on_end(job, executors.result_of(job, f'Slurm job {task.job_id} ended without a '
                                                f'result; its log: {task.paths.stderr}'))

  def _submit(self, jobs: list[dict]) -> list[submitit.Job]:
    """``jobs`` submitted as one array job; ValueError (one line) where sbatch refuses it or does
    not answer within ``submit_seconds``."""
    said = io.StringIO()  # submitit prints sbatch's errors too: they are in the one line
    try:
      with contextlib.redirect_stderr(said), _deadline(self.submit_seconds):
        with self.executor.batch():
          return [self.executor.submit(SlurmJob(job)) for job in jobs]
    except Exception as error:  # pylint: disable=broad-exception-caught
      chain: list[BaseException] = [error]
      while (cause := chain[-1].__cause__ or chain[-1].__context__) and cause not in chain:
        chain.append(cause)
      if any(isinstance(link, _Stalled) for link in chain):
        raise ValueError(f'--executor=slurm: sbatch did not answer within '
                         f'{self.submit_seconds:.0f} s and was stopped; check that Slurm answers '
                         '(sinfo; squeue lists any job it submitted) and run the same command '
                         'again') from None
      if not isinstance(error, (submitit.core.utils.FailedJobError,
                                submitit.core.utils.FailedSubmissionError, OSError)):
        raise
      message = ' '.join((str(error) or said.getvalue() or type(error).__name__).split())
      raise ValueError(f'--executor=slurm: sbatch refused the jobs: {message[:400]}; fix what it '
                       'names (--slurm.slurm_partition, --slurm.slurm_account, --slurm.timeout_min,'
                       ' --slurm.mem_gb, ...) and run the same command again') from None

  @staticmethod
  def queued() -> set[str] | None:
    """The ids of the jobs and array tasks Slurm still holds, or None where squeue cannot tell."""
    try:
      result = subprocess.run(['squeue', '-h', '-r', '-o', '%i'], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
      return None
    return set(result.stdout.split()) if result.returncode == 0 else None

  def stop(self) -> None:
    """Submits nothing more; the launcher cancels the submitted tasks (SIGTERM: their runs
    checkpoint) within ``poll_seconds`` and waits for them at most ``executors.STOP_SECONDS``."""
    self.stopping.set()
