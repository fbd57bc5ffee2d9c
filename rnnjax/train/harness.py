"""The run harness: one run (or a vmapped group of runs) of any experiment, start to end.

An experiment is a module with

  VMAPPABLE       its config fields that change no program (e.g. spectral_radius)
  REPORT          the summary fields its sweeps tabulate
  check_config(config)   raises ValueError naming ``config.<field>``
  task(config) -> trainer.Task   its data, model, loss and report; loads and
                  checks the data (the config is the group's first)

and everything else (the loop, the run folder, checkpoints, metrics,
TensorBoard, summary.json) is here. The order is the rule of the run
folder: check every config, then each folder's state (read-only), then the
data, and only then lock and write.
"""

import json
import time

from absl import logging
import jax
from jax.experimental import multihost_utils

from rnnjax.train import devices
from rnnjax.train import run_folder
from rnnjax.train import trainer


def config_dict(config) -> dict:
  """The config as config.json holds it (JSON types: tuples become lists)."""
  return json.loads(config.to_json_best_effort())


def check(experiment, configs) -> None:
  """Checks every config of a group and that they can share one program.

  Raises:
    ValueError: naming the field, from the trainer's and the experiment's
      checks, for a config of another experiment than ``experiment``
      (``experiments.<config.experiment>``), or for runs that differ in a field
      that is not vmappable.
  """
  for config in configs:
    if f'experiments.{config.get("experiment")}' != experiment.__name__:
      raise ValueError(f'config.experiment: expected {experiment.__name__.split(".")[-1]!r} (the '
                       f'experiment this group runs), got {config.get("experiment")!r}')
    trainer.check_config(config)
    try:
      experiment.check_config(config)
    except (KeyError, AttributeError) as error:  # a config made for another experiment
      raise ValueError(f'config: the experiment {experiment.__name__!r} reads a field this config '
                       f'lacks ({error}); is config.experiment the one this config is for?'
                       ) from error
  keys = {trainer.group_key(c, experiment.VMAPPABLE) for c in configs}
  if len(keys) > 1:
    fields = sorted({k for key in keys for k, _ in key} - set(experiment.VMAPPABLE))
    raise ValueError(f'configs: runs of one group may differ only in '
                     f'{sorted(set(trainer.VMAPPABLE) | set(experiment.VMAPPABLE))} '
                     f'(clipping none / global_norm); these do not share {fields}')


def check_memory(task, config, runs: int) -> None:
  """Checks that a group's training state (params, optimizer state, carry) fits in
  the device's memory, from its shapes alone (``jax.eval_shape``: nothing is
  allocated), before any folder is touched.

  Raises:
    ValueError: naming the largest array and its shape, with the bytes needed
      and the bytes there are (``devices.memory_bytes``).
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


def run_group(experiment, configs, folders, overwrite: bool | list[bool] = False,
              stop_requested=None,
              provenance: dict | None = None) -> list[dict]:
  """Trains (or resumes) the runs of a group and writes their summaries.

  Args:
    experiment: the experiment module (see the module docstring).
    configs: R ``ml_collections.ConfigDict`` configs.
    folders: R ``pathlib.Path`` run folders.
    overwrite: clear each folder first (its checkpoint included), once the
      checks and the data have passed; or a list of R such flags, one a run.
    stop_requested: passed to ``trainer.train``.
    provenance: what timing.json records of where the run was measured (commit,
      date, host).

  Returns:
    R summaries: the trainer's record and the task's report; for a run that
    had ended already, its summary.json as it is.

  Raises:
    ValueError: a bad config, or a training state larger than the device's
      memory (``check_memory``), before any folder is touched.
    run_folder.ConfigMismatch: a folder holds a run of another config
      (nothing is written).
    run_folder.FolderInUse: another process trains one of the runs.
    trainer.Interrupted: stopped on request (checkpointed).
    corpora.CorpusError and other errors of the experiment's data.
  """
  check(experiment, configs)
  dicts = [config_dict(c) for c in configs]
  overwrites = list(overwrite) if isinstance(overwrite, (list, tuple)) else [overwrite] * len(
      folders)
  statuses = [run_folder.status(f, d, o) for f, d, o in zip(folders, dicts, overwrites)]
  summaries = [run_folder.read_json(f / run_folder.SUMMARY) if s == 'ended' else None
               for f, s in zip(folders, statuses)]
  todo = [i for i, s in enumerate(statuses) if s != 'ended']
  if not todo:
    return summaries
  started = time.perf_counter()
  task = experiment.task(configs[todo[0]])
  task_seconds = time.perf_counter() - started
  check_memory(task, configs[todo[0]], len(todo))
  layout = configs[todo[0]].get('layout', 'auto')
  if layout != 'auto':  # its errors (devices, runs, batch) before any folder is touched
    devices.placement(layout, len(todo), task.batch(1))
  writer = jax.process_index() == 0
  locks = [run_folder.lock(folders[i]) for i in todo] if writer else []
  try:
    if writer:
      for i in todo:
        run_folder.start(folders[i], dicts[i], overwrites[i])
        for name, data in task.artifacts.items():
          run_folder.write_bytes(folders[i] / name, data)
    if jax.process_count() > 1:  # the others read the folders only once process 0 set them up
      multihost_utils.sync_global_devices('rnnjax: run folders ready')
    params, records, timer = trainer.train(task, [configs[i] for i in todo],
                                           [folders[i] for i in todo], writer, stop_requested)
    timer.seconds['task'] = task_seconds
    for i, run_params, record in zip(todo, params, records):
      begun = time.perf_counter()
      report = task.report(configs[i], run_params) if task.report else {}
      summary = dict(record, **report)
      seconds = dict(timer.seconds, report=time.perf_counter() - begun)
      seconds['total'] = sum(seconds.values())
      if writer:
        run_folder.write_json(folders[i] / run_folder.TIMING, dict(
            provenance or {}, group_size=len(todo),
            seconds={k: round(v, 3) for k, v in seconds.items()}))
        run_folder.write_json(folders[i] / run_folder.SUMMARY, summary)
      summaries[i] = summary
      logging.info('%s: %s; seconds %s', folders[i], summary['status'],
                   ', '.join(f'{k} {v:.1f}' for k, v in seconds.items()))
  finally:
    for handle in locks:
      handle.close()
  return summaries
