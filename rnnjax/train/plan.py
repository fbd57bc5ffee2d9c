"""What each run of a sweep or a group will do, decided once, before any folder is touched.

``plan`` reads each run's folder and config and says, for every run, one of

  new       nothing of a run there: train from step 0
  resume    a run of this config that did not end: train on from its checkpoint
  ended     a run of this config that finished or diverged: nothing to do
  changed   a run of another config (or ``overwrite='all'``): its job clears the folder,
            once its checks and data have passed, and trains from step 0
  refused   a config that fails its checks, or a folder that cannot hold the run (a file
            in the way, links, files of no run, a damaged config.json, or another config
            where ``overwrite='none'``): nothing is done; the reason is one line

The launcher plans a sweep with it and the harness its group; nothing else decides.
``folder_names`` names a sweep's run folders, ``jobs`` cuts the runs to train into groups and
``partition`` keeps the groups an earlier launch of a sweep recorded.
"""

import collections
import hashlib
import pathlib
import re
from typing import Any, NamedTuple, Sequence

import ml_collections

from rnnjax.train import checkpoints
from rnnjax.train import experiment
from rnnjax.train import run_folder

__all__ = ['RunPlan', 'Partition', 'OVERWRITE', 'plan', 'saved_config', 'differing_keys',
           'folder_names', 'jobs', 'partition']

OVERWRITE = ('none', 'changed', 'all')


class RunPlan(NamedTuple):
  """What one run will do."""
  folder: pathlib.Path
  config: ml_collections.ConfigDict
  action: str  # 'new', 'resume', 'ended', 'changed' or 'refused' (the module docstring)
  reason: str = ''  # one line: why refused, what changed
  step: int = 0  # the checkpoint step a resumed run starts from


def differing_keys(old: dict, new: dict) -> str:
  """The dotted keys whose values differ between two configs, as 'key (old -> new), ...'."""
  old, new = experiment.flat(old), experiment.flat(new)
  keys = sorted(k for k in old.keys() | new.keys() if old.get(k, ...) != new.get(k, ...))
  shown = ', '.join(f'{k} ({old.get(k, "absent")!r} -> {new.get(k, "absent")!r})' for k in keys[:8])
  return shown + (' ...' if len(keys) > 8 else '')


def saved_config(kind: experiment.Experiment, folder: pathlib.Path) -> dict | None:
  """The config.json of ``folder`` as the experiment reads it now (None: none, or damaged): a field
  gained since, absent from the file, at its default; a file it cannot read any more as it is."""
  saved = run_folder.read_json(pathlib.Path(folder) / run_folder.CONFIG)
  try:
    return None if saved is None else experiment.as_dict(experiment.from_dict(kind, saved))
  except ValueError:
    return saved


def _plan_one(kind: experiment.Experiment, config: ml_collections.ConfigDict,
              folder: pathlib.Path, overwrite: str) -> RunPlan:
  refused = lambda reason: RunPlan(folder, config, 'refused', reason)
  try:
    experiment.check(kind, config)
    run_folder.check_path(folder, 'run')
    if folder.is_symlink():
      raise ValueError(f'{folder} is a symbolic link; a run folder is a folder of its own')
    run_folder.check_links(folder)
  except ValueError as error:
    return refused(str(error))
  wanted = experiment.as_dict(config)
  saved = saved_config(kind, folder)
  if saved is None and folder.is_dir():
    entries = [entry.name for entry in folder.iterdir()]
    foreign = sorted(name for name in entries if name not in run_folder.RUN_FILES
                     and not (name.startswith('.') and name.endswith('.part')))
    if foreign:  # a sweep's folder, a checkout, somebody's notes: never cleared
      return refused(f'workdir: {folder} holds {", ".join(foreign[:4])}'
                     f'{" ..." if len(foreign) > 4 else ""} and no {run_folder.CONFIG}: not a '
                     'run folder, so nothing in it is cleared; give a new or empty folder')
    leftovers = [name for name in (run_folder.METRICS, run_folder.SUMMARY, run_folder.CHECKPOINTS,
                                   run_folder.TENSORBOARD) if name in entries]
    if leftovers and overwrite != 'all':
      return refused(f'{folder} holds {", ".join(leftovers)} but no readable '
                     f'{run_folder.CONFIG}; pass --overwrite to clear it (a run of a sweep '
                     f'alone: --overwrite_run={folder.name})')
    if leftovers:
      return RunPlan(folder, config, 'changed', 'overwrite')
  if saved is None:
    return RunPlan(folder, config, 'new')
  if saved != wanted:
    change = differing_keys(saved, wanted)
    if overwrite == 'none':
      return refused(f'{folder} holds a run of another config: {change}; pass --overwrite to '
                     'replace it')
    return RunPlan(folder, config, 'changed', change)
  if overwrite == 'all':
    return RunPlan(folder, config, 'changed', 'overwrite')
  summary = run_folder.read_json(folder / run_folder.SUMMARY)
  if summary is not None and summary.get('status') in run_folder.ENDED:
    return RunPlan(folder, config, 'ended', summary['status'])
  steps = checkpoints.saved_steps(folder)
  return RunPlan(folder, config, 'resume', step=steps[-1] if steps else 0)


def plan(kind: experiment.Experiment, configs: Sequence[ml_collections.ConfigDict],
         folders: Sequence[pathlib.Path], overwrite: str | Sequence[str] = 'none'
         ) -> list[RunPlan]:
  """What each run will do (the module docstring), read-only.

  Args:
    kind: the experiment of every config.
    configs: R configs.
    folders: R run folders (a folder named twice refuses both runs).
    overwrite: for every run, or R, one each: 'none' (a folder of another config is refused),
      'changed' (it is cleared and trained again: a sweep's runs) or 'all' (every run is).

  Returns:
    R ``RunPlan``s, in the order of ``configs``.

  Raises:
    ValueError: for an ``overwrite`` not in OVERWRITE.
  """
  modes = [overwrite] * len(configs) if isinstance(overwrite, str) else list(overwrite)
  if any(mode not in OVERWRITE for mode in modes):
    raise ValueError(f'overwrite: expected one of {OVERWRITE}, got {overwrite!r}')
  folders = [pathlib.Path(f) for f in folders]
  counts = collections.Counter(folders)
  return [RunPlan(folder, config, 'refused', f'{folder} is the folder of several runs')
          if counts[folder] > 1 else _plan_one(kind, config, folder, mode)
          for config, folder, mode in zip(configs, folders, modes)]


_PLAIN = re.compile(r'[A-Za-z0-9_][A-Za-z0-9_.,=+-]*')


def folder_names(sweep: Sequence[dict], keys: Sequence[str]) -> list[str]:
  """Each run's folder name: ``key=value,...`` of its swept values where that is a plain file name
  (letters, digits and ``_.,=+-``, at most 200 bytes), else ``run-`` and a hash of it, so that
  every run folder is a child of the workdir (a value ``../../x`` names no other folder)."""
  names = []
  for overrides in sweep:
    name = ','.join(f'{k}={overrides[k]}' for k in keys) or 'run'
    if not (_PLAIN.fullmatch(name) and len(name.encode()) <= 200 and '..' not in name):
      name = 'run-' + hashlib.sha256(name.encode()).hexdigest()[:16]
    names.append(name)
  return names


def _cut(kind: experiment.Experiment, plans: Sequence[RunPlan], runs: Sequence[int],
         max_group_size: int, parts: int) -> list[tuple[Any, list[int]]]:
  """``runs`` cut into ``(program, members)`` jobs by group key and checkpoint step (``jobs``)."""
  groups: dict[Any, list[int]] = {}
  for i in runs:
    key = (experiment.group_key(kind, plans[i].config), plans[i].step)
    groups.setdefault(key if max_group_size != 1 else i, []).append(i)
  cut = []
  for key, members in groups.items():
    count = -(-len(members) // max_group_size) if max_group_size else min(parts, len(members))
    edges = [len(members) * part // count for part in range(count + 1)]
    cut += [((key[0] if max_group_size != 1 else key, end - start), members[start:end])
            for start, end in zip(edges, edges[1:])]
  return cut


def _ordered(kind: experiment.Experiment, plans: Sequence[RunPlan],
             cut: list[tuple[Any, list[int]]], parts: int) -> list[list[int]]:
  """The jobs' members, the most work first, but the first ``parts`` jobs different programs
  where there are enough (``jobs``)."""
  cut = sorted(cut, key=lambda job: -sum(kind.work(plans[i].config) * plans[i].config.steps
                                         for i in job[1]))
  firsts: dict[Any, int] = {}  # each program's first job
  for n, (program, _) in enumerate(cut):
    firsts.setdefault(program, n)
  first = list(firsts.values())[:parts]
  return [cut[n][1] for n in first + [n for n in range(len(cut)) if n not in first]]


def _trains(run: RunPlan) -> bool:
  return run.action in ('new', 'resume', 'changed')


def jobs(kind: experiment.Experiment, plans: Sequence[RunPlan], max_group_size: int = 0,
         parts: int = 1) -> list[list[int]]:
  """The runs to train (new, resume, changed) cut into jobs: lists of indices into ``plans``, in
  the order they start.

  Runs that share a group key and a checkpoint step are cut into the fewest jobs of at most
  ``max_group_size`` runs, or with 0 into ``parts`` jobs (at most one a run), whose sizes differ
  by at most one. Order: the most work first, but the first ``parts`` jobs (those that start
  together) are different programs where there are enough, so that a program one process
  compiled is read from JAX's persistent compilation cache by the next that needs it.
  """
  todo = [i for i, run in enumerate(plans) if _trains(run)]
  return _ordered(kind, plans, _cut(kind, plans, todo, max_group_size, parts), parts)


class Partition(NamedTuple):
  """A launch's jobs and the record of groups a relaunch keeps (``partition``)."""
  jobs: list[list[int]]  # indices into the plans, in the order they start
  groups: list[list[str]]  # every recorded group, as run folder names, after this launch
  regrouped: list[int]  # runs to train in another group than the one they started in
  homeless: list[str]  # runs whose recorded group was broken and that have no new one yet


def partition(kind: experiment.Experiment, plans: Sequence[RunPlan], names: Sequence[str],
              recorded: Sequence[Sequence[str]] | None = (), homeless: Sequence[str] = (),
              max_group_size: int = 0, parts: int = 1) -> Partition:
  """The jobs of a sweep's launch, keeping the groups an earlier launch recorded.

  A run's floats are a function of its config and of the size of the vmapped group it trains
  in (XLA compiles another program for another group size), so the group is part of the plan:
  cut once, recorded, and kept by every relaunch. A recorded group (``recorded``: lists of the
  folder names of ``names``, each name in one) is kept as one job, in its recorded order, when
  one of its runs trains, all of them are runs of ``plans`` planned 'new', 'resume' or 'ended'
  (not 'changed' or 'refused') with one group key, and it fits ``max_group_size`` (0: any
  size); its ended runs ride along (the harness steps a group as a unit, from its runs' newest
  common checkpoint). A recorded group of which a run trains but that cannot be kept is broken:
  its runs that train are cut anew, the others become ``homeless``. The runs to train outside a
  kept group are cut as ``jobs`` cuts them and recorded as new groups; those of them that had a
  recorded group or were homeless (or, with ``recorded`` None, the record lost, that resume from
  a checkpoint), unless trained again from the start ('changed'), are ``regrouped``.

  Args:
    kind: the experiment of every run.
    plans: R ``RunPlan``s.
    names: the R runs' folder names.
    recorded: the groups recorded by earlier launches (``Partition.groups``); None: the
      record is lost (missing or damaged after earlier launches).
    homeless: the runs recorded as homeless by earlier launches (``Partition.homeless``).
    max_group_size, parts: as ``jobs``.

  Returns:
    the ``Partition``.
  """
  where = {name: i for i, name in enumerate(names)}
  kept: list[tuple[Any, list[int]]] = []
  unchanged, broken = [], []
  for group in recorded or ():
    members = [where.get(name) for name in group]
    runs = [plans[i] for i in members if i is not None]
    if not any(_trains(run) for run in runs):
      unchanged.append(list(group))
    elif (all(i is not None for i in members)
          and all(run.action in ('new', 'resume', 'ended') for run in runs)
          and len({experiment.group_key(kind, run.config) for run in runs}) == 1
          and not 0 < max_group_size < len(runs)):
      kept.append(((experiment.group_key(kind, runs[0].config), len(runs)),
                   [i for i in members if i is not None]))
      unchanged.append(list(group))
    else:
      broken.append(list(group))
  held = {names[i] for _, members in kept for i in members}
  rest = [i for i, run in enumerate(plans) if _trains(run) and names[i] not in held]
  fresh = _cut(kind, plans, rest, max_group_size, parts)
  placed = {names[i] for _, members in fresh for i in members}
  had_group = {name for group in recorded or () for name in group} | set(homeless)
  regrouped = [i for i in rest if plans[i].action != 'changed' and (
      names[i] in had_group or (recorded is None and plans[i].action == 'resume'
                                and plans[i].step > 0))]
  left = (set(homeless) | {name for group in broken for name in group}) - placed
  return Partition(_ordered(kind, plans, kept + fresh, parts),
                   unchanged + [[names[i] for i in members] for _, members in fresh],
                   regrouped, sorted(left))
