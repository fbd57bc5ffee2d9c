"""Ray: a sweep's jobs as tasks on a Ray cluster (the ``rnnjax[ray]`` extra).

Each job is one Ray task, asking for ``--ray.num_cpus`` and ``--ray.num_gpus``, in a worker of
its own that runs it as a local worker would: in the launcher's working folder, with its Python
path and its ``RNNJAX_``, ``JAX_`` and ``XLA_`` variables. The run folders are those paths on
every node, so they must be on a filesystem the nodes share. A task whose worker dies or whose
node is lost is run again by Ray, at most ``--ray.max_retries`` times, and resumes from its
runs' checkpoints bit for bit; one lost for good is named in its runs' results. ``stop``
cancels the tasks: those not started never start, a running one is asked to checkpoint (Ray
calls its SIGINT handler, ``job.setup_process``'s) and is killed ``executors.STOP_SECONDS``
later.

``--ray.address``: '' starts a Ray runtime on this machine for the sweep, 'auto' joins the
cluster this machine is a node of, ``HOST:PORT`` the cluster whose head is there (its GCS
port, 6379 by default). A ``HOST:PORT`` where nothing answers within ``CONNECT_SECONDS`` is one
line (ValueError) before Ray is started (``ray.init`` itself retries it for minutes).
"""

import contextlib
import logging
import os
import socket
import sys
import threading
import time

from rnnjax.train import executors
from rnnjax.train import job as jobs

__all__ = ['Ray']

_FORWARDED = ('RNNJAX_', 'JAX_', 'XLA_')  # the launcher's variables a task runs with
CONNECT_SECONDS = 10.0  # what a cluster's head has to accept a connection


def _check_address(address: str) -> None:
  """Raises ValueError naming ``--ray.address`` where it is a ``HOST:PORT`` (or
  ``ray://HOST:PORT``) at which nothing accepts a connection within ``CONNECT_SECONDS``."""
  if address in ('', 'auto', 'local'):
    return
  host, _, port = address.removeprefix('ray://').rpartition(':')
  if not (host and port.isdigit() and 0 < int(port) < 65536):
    raise ValueError(f"--ray.address: expected '', 'auto' or HOST:PORT (a Ray head's GCS port, "
                     f'6379 by default), got {address!r}')
  hosts = [host.strip('[]')]
  with contextlib.suppress(Exception):  # Ray reaches a local head at this node's address
    from ray._private import services  # pylint: disable=import-outside-toplevel
    hosts.append(services.resolve_ip_for_localhost(hosts[0]))
  why = ''
  for name in dict.fromkeys(hosts):
    try:
      socket.create_connection((name, int(port)), timeout=CONNECT_SECONDS).close()
      return
    except OSError as error:
      why = f'no answer within {CONNECT_SECONDS:.0f} s' if isinstance(
          error, TimeoutError) else error.strerror or str(error)
  raise ValueError(f'--ray.address: nothing answers at {address} ({why}); expected the HOST:PORT '
                   "of a running Ray cluster's head (ray start --head prints it), 'auto' on a "
                   "node of one, or '' to start Ray on this machine")


def _task(job: dict, launcher: dict) -> dict:
  """Runs ``job`` in a Ray worker where the launcher stands (``launcher``: its ``cwd``,
  ``path`` and ``environment``); returns its result."""
  os.chdir(launcher['cwd'])
  sys.path[:0] = [path for path in launcher['path'] if path not in sys.path]
  os.environ.update(launcher['environment'])
  received = jobs.setup_process(signals=executors.STOP_SIGNALS)
  executors.header(job, f'in a Ray task on {socket.gethostname()} (pid {os.getpid()})')
  return jobs.run_job(job, received, log_to_runs=True)


class Ray:
  """Tasks on a Ray cluster (--ray.address; '': a runtime on this machine)."""
  OPTIONS = {'address': '', 'num_cpus': 1.0, 'num_gpus': 0.0, 'max_retries': 3}

  def __init__(self, settings: executors.Settings):
    self.options = {**self.OPTIONS, **settings.options}
    for name in ('num_cpus', 'num_gpus', 'max_retries'):
      if not self.options[name] >= 0:
        raise ValueError(f'--ray.{name}: expected a value >= 0, got {self.options[name]!r}')
    try:
      import ray
    except ImportError:
      raise ValueError('--executor=ray: Ray is not installed (pip install rnnjax[ray])') from None
    _check_address(self.options['address'])
    try:
      ray.init(address=self.options['address'] or None, log_to_driver=False,
               logging_level=logging.WARNING)
    except ConnectionError as error:
      raise ValueError(f'--ray.address: {error}') from None
    cpus = ray.cluster_resources().get('CPU', 0.0)
    self.parts = max(1, int(cpus // self.options['num_cpus'])) if self.options['num_cpus'] else 1
    self.where = (f'on Ray ({cpus:g} CPUs on {len(ray.nodes())} node(s), '
                  f'{self.options["num_cpus"]:g} a job)')
    self.stopping = threading.Event()

  def run(self, jobs: list[dict], on_end: executors.OnEnd, on_progress: executors.OnProgress,
          say: executors.Say) -> None:
    """``executors.Executor.run``: a job's progress shows when it ends."""
    del on_progress, say
    import ray
    task = ray.remote(num_cpus=self.options['num_cpus'], num_gpus=self.options['num_gpus'],
                      max_retries=self.options['max_retries'], max_calls=1)(_task)
    launcher = {'cwd': os.getcwd(), 'path': [path or os.getcwd() for path in sys.path],
                'environment': {name: value for name, value in os.environ.items()
                                if name.startswith(_FORWARDED)}}
    pending = {} if self.stopping.is_set() else {task.remote(job, launcher): job for job in jobs}
    for job in jobs if not pending else ():
      on_end(job, executors.result_of(job, 'not started: the sweep was interrupted',
                                      'interrupted'))
    deadline, forced = None, False
    while pending:
      if self.stopping.is_set() and deadline is None:
        deadline = time.monotonic() + executors.STOP_SECONDS
        for ref in pending:
          ray.cancel(ref)
      if deadline is not None and time.monotonic() > deadline and not forced:
        forced = True
        for ref in pending:
          ray.cancel(ref, force=True)
      ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=1.0)
      for ref in ready:
        job = pending.pop(ref)
        try:
          result = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
          result = executors.result_of(
              job, f'stopped by the launcher {executors.STOP_SECONDS:.0f} s after it was '
              'asked to' if forced else 'not started: the sweep was interrupted',
              'failed' if forced else 'interrupted')
        except ray.exceptions.RayError as error:
          lines = str(error).strip().splitlines() or [type(error).__name__]
          result = executors.result_of(job, f'its Ray task ended without a result: {lines[-1]}')
        on_end(job, result)

  def stop(self) -> None:
    """Submits nothing more; the launcher cancels the tasks within a second (``run``)."""
    self.stopping.set()
