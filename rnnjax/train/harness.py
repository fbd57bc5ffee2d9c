"""The run harness: one run (or a vmapped group of runs) of any experiment, start to end.

The order is the rule of the run folder: plan every run (``plan.plan``, read-only), then load
the data and the model (``Experiment.task``) and check the memory they need, and only then lock
the folders, plan again under the locks (a plan holds only under the lock that acts on it) and
write. A run whose report fails after training keeps the error in its summary (``report_error``).
A group trains as a unit: when one of its runs has to train, every run of it steps, those that
ended riding along (their summary removed until it is written again with the same values, so
that a stop in between leaves them to resume), so that each run steps in the
program of one group size from start to end (XLA compiles another program for another size, and
its floats differ). The loop, checkpoints, metrics and TensorBoard are the trainer's.
"""

import os
import pathlib
import threading
import time
from typing import Callable, Sequence

from absl import logging
import jax
from jax.experimental import multihost_utils
from ml_collections import ConfigDict

from rnnjax.train import devices
from rnnjax.train import experiment
from rnnjax.train import plan as planning
from rnnjax.train import run_folder
from rnnjax.train import trainer

__all__ = ['check_memory', 'run_group']


def check_memory(task: trainer.Task, config: ConfigDict, runs: int) -> None:
  """Checks that the training state of ``runs`` runs fits in the device's memory, from its shapes
  alone (``jax.eval_shape``: nothing is allocated).

  Raises:
    ValueError: naming the largest array and its shape, the bytes needed and those there are.
  """
  shapes = jax.eval_shape(lambda: trainer.initial_state(task, [config]))
  leaves = jax.tree_util.tree_leaves_with_path(shapes)
  needed = runs * sum(leaf.size * leaf.dtype.itemsize for _, leaf in leaves)
  available = devices.memory_bytes()
  if needed > available:
    path, largest = max(leaves, key=lambda item: item[1].size)
    raise ValueError(
        f'config: the training state of {runs} run(s) alone takes {needed / 2**30:.3g} GiB, more '
        f'than the {available / 2**30:.3g} GiB of memory here (its largest array, '
        f'{jax.tree_util.keystr(path)}, has shape {largest.shape[1:]} a run); expected a smaller '
        'model')


def _plans(kind: experiment.Experiment, configs: Sequence[ConfigDict],
           folders: Sequence[pathlib.Path], overwrite: str | Sequence[str]
           ) -> list[planning.RunPlan]:
  """``plan.plan``; ValueError with the reason of a run it refuses."""
  plans = planning.plan(kind, configs, folders, overwrite)
  for run in plans:
    if run.action == 'refused':
      raise ValueError(run.reason)
  return plans


def _todo(plans: Sequence[planning.RunPlan]) -> list[int]:
  """The runs a group steps: every one when one has not ended (the module docstring), else none."""
  return list(range(len(plans))) if any(run.action != 'ended' for run in plans) else []


def _load(kind: experiment.Experiment, config: ConfigDict, stop_requested: Callable[[], bool]
          ) -> trainer.Task:
  """``kind.task(config)`` in a thread: a stop request ends a job whose data hangs at once."""
  outcome: list = []

  def load() -> None:
    try:
      outcome.append(kind.task(config))
    except BaseException as error:  # raised again by the caller
      outcome.append(error)

  loader = threading.Thread(target=load, name='rnnjax: the task', daemon=True)
  loader.start()
  while loader.is_alive():
    if stop_requested():
      raise trainer.Interrupted('stopped on request while the data loaded')
    loader.join(0.1)
  if isinstance(outcome[0], BaseException):
    raise outcome[0]
  return outcome[0]


def run_group(kind: experiment.Experiment, configs: Sequence[ConfigDict],
              folders: Sequence[pathlib.Path], overwrite: str | Sequence[str] = 'none',
              stop_requested: Callable[[], bool] | None = None, provenance: dict | None = None,
              on_progress: Callable[[int], None] | None = None) -> list[dict]:
  """Trains (or resumes) the runs of a group and writes their summaries.

  Args:
    kind: the ``Experiment`` of every config.
    configs: R configs.
    folders: R run folders.
    overwrite: as ``plan.plan``: 'none', 'changed' or 'all', for every run or one each.
    stop_requested: passed to ``trainer.train``.
    provenance: what timing.json records of where the run was measured (commit, date, host).
    on_progress: ``on_progress(step)``: passed to ``trainer.train``, and called again once each
      run's report is written (a group's reports can outlast an executor's stall watch).

  Returns:
    R summaries: the trainer's record and the task's report; for a group whose runs had all
    ended already, their summary.json as it is.

  Raises:
    ValueError: before any folder is touched: a run the plan refuses (the reason), runs that
      cannot share one program, a training state larger than the memory (``check_memory``).
    run_folder.FolderInUse: another process trains one of the runs.
    trainer.Interrupted: stopped on request (checkpointed).
    corpora.CorpusError and other errors of the experiment's data.
  """
  plans = _plans(kind, configs, folders, overwrite)
  todo = _todo(plans)
  writer = jax.process_index() == 0
  if todo:
    keys = {experiment.group_key(kind, configs[i]) for i in todo}
    if len(keys) > 1:
      sets = [set(key) for key in keys]
      fields = sorted({k for k, _ in set.union(*sets) - set.intersection(*sets)})
      raise ValueError(f'configs: runs of one group may differ only in fields that change no '
                       f'program; these differ in {fields}')
    started = time.perf_counter()
    task = _load(kind, configs[todo[0]], stop_requested or (lambda: False))
    task_seconds = time.perf_counter() - started
    check_memory(task, configs[todo[0]], len(todo))
    layout = configs[todo[0]].get('layout', 'auto')
    if layout != 'auto':  # its errors (devices, runs, batch) before any folder is touched
      devices.placement(layout, len(todo), task.batch(1))
  locks = [run_folder.lock(plans[i].folder) for i in todo] if writer else []
  try:
    if writer:
      plans = _plans(kind, configs, folders, overwrite)
      todo = _todo(plans) and todo
    summaries: list[dict] = [run_folder.read_json(run.folder / run_folder.SUMMARY)
                             if run.action == 'ended' else {} for run in plans]
    if not todo:
      return summaries
    for i in todo if writer else []:
      if plans[i].action in ('new', 'changed'):
        run_folder.clear(plans[i].folder)
      if plans[i].action == 'ended':  # it rides along: until written again it has not ended,
        (plans[i].folder / run_folder.SUMMARY).unlink(missing_ok=True)  # so a stop resumes it
      run_folder.write_json(plans[i].folder / run_folder.CONFIG, experiment.as_dict(configs[i]))
      for name, data in task.artifacts.items():
        run_folder.write(plans[i].folder / name, data)
    if jax.process_count() > 1:  # the others read the folders only once process 0 set them up
      multihost_utils.sync_global_devices('rnnjax: run folders ready')
    params, records, seconds = trainer.train(
        task, [configs[i] for i in todo], [plans[i].folder for i in todo], writer,
        stop_requested, on_progress=on_progress)
    seconds['task'] = task_seconds
    for i, run_params, record in zip(todo, params, records):
      begun = time.perf_counter()
      try:
        report = task.report(configs[i], run_params) if task.report else {}
      except ValueError as error:
        report = {'report_error': ' '.join(str(error).split())}
      summary = dict(record, **report)
      run_seconds = dict(seconds, report=time.perf_counter() - begun)
      run_seconds['total'] = sum(run_seconds.values())
      if writer:
        run_folder.write_json(plans[i].folder / run_folder.TIMING, dict(
            provenance or {}, group_size=len(todo),
            seconds={k: round(v, 3) for k, v in run_seconds.items()}))
        run_folder.write_json(plans[i].folder / run_folder.SUMMARY, summary)
      summaries[i] = summary
      logging.info('%s: %s; seconds %s', plans[i].folder, summary['status'],
                   ', '.join(f'{k} {v:.1f}' for k, v in run_seconds.items()),
                   extra=run_folder.about(plans[i].folder))
      if on_progress is not None:
        on_progress(summary['steps_done'])
  finally:
    for handle in locks:
      os.close(handle)
  return summaries
