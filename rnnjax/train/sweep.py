"""A sweep: every run of a config's ``get_sweep()``, planned, trained in jobs, tabulated.

Each run gets the folder ``<workdir>/<swept values>`` (``plan.folder_names``; ``runs.json`` maps
folder names to swept values). The runs are planned once, before anything runs (``plan.plan``,
overwrite 'changed', or 'all' for the runs to overwrite). Runs that differ only in values that
change no program train as one vmapped group, cut into jobs for the executor (``executors``).
The groups are part of the plan (a run's floats depend on its group's size): ``groups.json``
records them and every relaunch keeps them (``plan.partition``); a run that must train in another
group is named on the plan line and marked 'regrouped' in results.md. One launcher per sweep
folder (its ``.lock``); a relaunch finds each run's folder by its values in ``runs.json``,
whatever order ``get_sweep()`` lists its keys in now. At the end the sweep writes the tables of
what the run folders hold (``report.write``; a run whose folder has since trained another config
is 'replaced'), prints them and each failed run's reason. A signal (Ctrl-C, SIGTERM, SIGHUP) at
any moment stops it: no job starts after it, the running ones checkpoint, the tables of what
ended are written, and it exits 128 + the signal's number.
"""

import datetime
import os
import pathlib
import signal
import socket
import subprocess
import sys
from typing import Any, Mapping, Sequence

from ml_collections import ConfigDict
import tqdm

from rnnjax.train import executors
from rnnjax.train import experiment
from rnnjax.train import plan as planning
from rnnjax.train import report
from rnnjax.train import run_folder

__all__ = ['SweepError', 'GROUPS', 'swept_keys', 'run_configs', 'provenance', 'sweep']

GROUPS = 'groups.json'  # a sweep's folder: its vmapped groups and regrouped runs (``plan.partition``)


class SweepError(ValueError):
  """A sweep that cannot start: one line for the user."""


def swept_keys(sweep: list[dict]) -> list[str]:
  """Keys whose value differs between runs, in first-seen order."""
  keys = list(dict.fromkeys(k for overrides in sweep for k in overrides))
  return [k for k in keys if len({repr(o.get(k)) for o in sweep}) > 1]


def run_configs(base: ConfigDict, sweep: list[dict], command_line: Mapping[str, Any],
                config_path: str = 'the config') -> list[ConfigDict]:
  """Each run's config: ``base`` (the command line's fields set) with the run's overrides but
  those the command line sets (it replaces the values ``get_sweep()`` gives every run alike).

  Raises:
    SweepError: for a command-line field that ``get_sweep()`` varies (or one inside
      or around it), or a run that sets a field the config lacks.
  """
  for given in command_line:
    for swept in swept_keys(sweep):
      if given == swept or given.startswith(f'{swept}.') or swept.startswith(f'{given}.'):
        raise SweepError(f'--config.{given}: get_sweep() in {config_path} sweeps {swept} (its '
                         'runs differ in it); change its values in get_sweep() instead')
  configs = []
  for i, overrides in enumerate(sweep):
    try:
      configs.append(experiment.override(
          base, {k: v for k, v in overrides.items() if k not in command_line}))
    except ValueError as error:
      raise SweepError(f'get_sweep: run {i}: {error}') from None
  return configs


def provenance() -> dict:
  """Where and when runs are measured: the git commit of the working directory (with
  '+changes' when it has uncommitted changes; outside a git checkout 'rnnjax <version>'), the
  date and the host."""
  try:  # every tag left out: the commit's hash, never a tag's name
    commit = subprocess.run(['git', 'describe', '--always', '--abbrev=12', '--exclude=*',
                             '--dirty=+changes'], text=True, capture_output=True,
                            check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    from rnnjax import __version__  # pylint: disable=import-outside-toplevel
    commit = f'rnnjax {__version__}'
  return {'commit': commit, 'date': datetime.date.today().isoformat(), 'host': socket.gethostname()}


def _value(config: ConfigDict, name: str) -> Any:
  holder, key = experiment.locate(config, name)
  value = holder[key]
  return value.to_dict() if hasattr(value, 'to_dict') else value


def _print(line: str) -> None:
  print(line, flush=True)


def sweep(kind: experiment.Experiment, configs: list[ConfigDict], overrides: list[dict],
          workdir: pathlib.Path, command_line: dict | None = None, executor: str = 'local',
          overwrite: bool | Sequence[str] = False, max_group_size: int = 0, processes: int = 0,
          threads_per_run: int = 0, stall_seconds: float = 1800.0,
          options: Mapping[str, Any] | None = None, verbosity: int = 0,
          received: list[int] | None = None) -> int:
  """Plans, trains and tabulates a sweep (the module docstring).

  Args:
    kind: the experiment of every config.
    configs: each run's full config (``run_configs``).
    overrides: each run's ``get_sweep()`` dict (its swept values name its folder).
    workdir: the sweep folder.
    command_line: the fields set for every run, named under the tables' heading.
    executor: the name of an executor in ``executors.EXECUTORS``.
    overwrite: True: clear every run folder and train every run again; folder names: those.
    max_group_size: most runs a job (0: each group cut into the executor's ``parts``).
    processes, threads_per_run, stall_seconds, options: ``executors.Settings``.
    verbosity: absl's, of the jobs' logs (``job``'s module docstring).
    received: the signals the command received before; those to come are added.

  Returns:
    the exit status: 0, 1 when a run failed (each reason printed), 128 + the first signal's
    number when one came.

  Raises:
    SweepError, run_folder.FolderInUse, OSError, ValueError (the executor's): before any run
      folder is touched.
  """
  received = [] if received is None else received
  runners: list[executors.Executor] = []

  def stop(signum: int, frame: Any) -> None:
    del frame
    received.append(signum)
    for runner in runners:
      runner.stop()

  previous = {s: signal.signal(s, stop) for s in executors.STOP_SIGNALS}
  try:
    run_folder.check_path(workdir, 'sweep')
    keys = swept_keys(overrides)
    overrides = [{key: _value(config, key) for key in dict.fromkeys([*values, *keys])}
                 for values, config in zip(overrides, configs)]  # as the configs hold them
    names, modes, plans, reasons = _plan(kind, configs, overrides, keys, workdir, overwrite)
    runners.append(executors.find(executor)(executors.Settings(
        workdir / '.jobs', processes, threads_per_run, stall_seconds, options or {})))
    if received:
      _print(f'interrupted before any run started; {workdir} is left as it was')
      return 128 + received[0]
    lock = run_folder.lock(workdir)
    launched = (workdir / run_folder.SWEEP_INDEX).exists()  # a sweep's folder before this launch
    run_folder.write_json(workdir / run_folder.SWEEP_INDEX, dict(zip(names, overrides)))
    _note(workdir, names, plans)
    regrouped, groups = _partition(kind, plans, names, workdir, max_group_size, runners[0].parts,
                                   launched)
    statuses: dict[int, str] = {}  # of the runs that did not end: failed, interrupted
    _train(runners[0], kind, plans, names, modes, groups, verbosity, reasons, statuses,
           workdir / '.jobs')
    table, kept = _tables(kind, plans, overrides, names, keys, statuses, workdir, command_line,
                          regrouped)
    _print(table)
    if received:
      _print(f'\ninterrupted: {kept} of {len(plans)} runs have ended and are kept, the others '
             'keep their last checkpoint; run the same command again to resume')
    else:
      _print(f'{len(plans)} runs ({len(reasons)} failed); tables: {workdir / "results.md"}, '
             'results.csv' + (', results_over_seeds.md' if 'seed' in keys else ''))
    os.close(lock)
    for i, why in sorted(reasons.items()):
      print(f'failed: {names[i]}: {why}', file=sys.stderr)
    return 128 + received[0] if received else 1 if reasons else 0
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)


def _plan(kind: experiment.Experiment, configs: list[ConfigDict], overrides: list[dict],
          keys: list[str], workdir: pathlib.Path, overwrite: bool | Sequence[str]
          ) -> tuple[list[str], list[str], list[planning.RunPlan], dict[int, str]]:
  """Each run's folder name, mode, plan and (refused) reason, read-only; SweepError for none."""
  names = planning.folder_names(overrides, keys)
  known = run_folder.read_json(workdir / run_folder.SWEEP_INDEX)
  if isinstance(known, dict):  # a relaunch: a run keeps its folder whatever its keys' order
    names = [next((name for name, values in known.items() if values == run), fresh)
             for run, fresh in zip(overrides, names)]
  if len(set(names)) < len(names):
    twice = next(n for n in names if names.count(n) > 1)
    raise SweepError(f'get_sweep: runs {[i for i, n in enumerate(names) if n == twice]} have '
                     f'the same swept values ({twice}); give each run its own')
  chosen = set(names) if overwrite is True else set(overwrite or ())
  if chosen - set(names):
    raise SweepError(f'--overwrite_run: no run of the sweep has the folder '
                     f'{sorted(chosen - set(names))[0]!r}; its runs: {", ".join(names[:8])}'
                     + (' ...' if len(names) > 8 else ''))
  modes = ['all' if name in chosen else 'changed' for name in names]
  plans = planning.plan(kind, configs, [workdir / name for name in names], modes)
  reasons = {i: run.reason for i, run in enumerate(plans) if run.action == 'refused'}
  if len(reasons) == len(plans):  # a bad --config.NAME, say: no folder made for it
    distinct = set(reasons.values())
    if len(distinct) > 1:
      for i, why in reasons.items():
        print(f'failed: {names[i]}: {why}', file=sys.stderr)
    raise SweepError('every run of the sweep fails its checks' + (
        f': {distinct.pop()}' if len(distinct) == 1 else '') + f'; {workdir} is left as it was')
  return names, modes, plans, reasons


def _note(workdir: pathlib.Path, names: list[str], plans: list[planning.RunPlan]) -> None:
  """Names the run folders of no run of the sweep, and the runs that train again."""
  strays = sorted(path.parent.name for path in workdir.glob(f'*/{run_folder.CONFIG}')
                  if path.parent.name not in names and not path.parent.is_symlink())
  if strays:
    _print(f'note: {len(strays)} run folder(s) in {workdir} belong to no run of this sweep and '
           f'are left as they are: {", ".join(strays)} (a folder is named after its run\'s '
           'swept values: a changed value, or a key swept anew, names another folder)')
  changed = [names[i] for i, run in enumerate(plans)
             if run.action == 'changed' and run.reason != 'overwrite']
  if changed:
    _print(f'{len(changed)} run(s) whose config changed will train again from the start: '
           + ', '.join(changed))


def _record(workdir: pathlib.Path, launched: bool
            ) -> tuple[list[list[str]] | None, list[str], set[str]]:
  """``GROUPS`` as (groups, homeless runs, regrouped runs); groups None where it is damaged (named
  on a line) or missing from a folder ``launched`` before (removed, or a version without it)."""
  if not (workdir / GROUPS).exists():
    return None if launched else [], [], set()
  saved = run_folder.read_json(workdir / GROUPS)
  lists = lambda value: isinstance(value, list) and all(isinstance(n, str) for n in value)
  groups = saved.get('groups') if isinstance(saved, dict) else None
  names = [name for group in groups for name in group] if isinstance(groups, list) and all(
      lists(group) for group in groups) else None
  if (names is None or len(set(names)) < len(names) or not lists(saved.get('homeless', []))
      or not lists(saved.get('regrouped', []))):
    _print(f'note: {workdir / GROUPS} is damaged, so the groups the runs started in are '
           'unknown: the runs to train are grouped anew, and those that resume from a '
           'checkpoint are marked regrouped')
    return None, [], set()
  return groups, saved.get('homeless', []), set(saved.get('regrouped', []))


def _partition(kind: experiment.Experiment, plans: list[planning.RunPlan], names: list[str],
               workdir: pathlib.Path, max_group_size: int, parts: int, launched: bool
               ) -> tuple[set[str], list[list[int]]]:
  """This launch's jobs, keeping the groups of ``GROUPS`` (``plan.partition``), recorded anew;
  the names of the runs that have trained in another group than their first (ever, until
  trained again from the start), those of this launch named on a line. ``launched``: whether
  the folder was a sweep's before this launch (then a missing ``GROUPS`` is a lost record)."""
  recorded, homeless, before = _record(workdir, launched)
  cut = planning.partition(kind, plans, names, recorded, homeless, max_group_size, parts)
  restarted = {names[i] for i, run in enumerate(plans) if run.action == 'changed'}
  regrouped = (before - restarted) | {names[i] for i in cut.regrouped}
  run_folder.write_json(workdir / GROUPS, {'groups': cut.groups, 'homeless': cut.homeless,
                                           'regrouped': sorted(regrouped)})
  if cut.regrouped:
    _print(f'{len(cut.regrouped)} run(s) train in another vmapped group than the one they '
           f'started in (a group mate changed, failed its checks or left the sweep, '
           f'--max_group_size is smaller than the group, or {GROUPS} was lost), so their floats '
           'may differ from an uninterrupted sweep\'s; marked regrouped in results.md: '
           + ', '.join(names[i] for i in cut.regrouped))
  return regrouped, cut.jobs


def _train(runner: executors.Executor, kind: experiment.Experiment,
           plans: list[planning.RunPlan], names: list[str], modes: list[str],
           groups: list[list[int]], verbosity: int, reasons: dict[int, str],
           statuses: dict[int, str], job_folder: pathlib.Path) -> None:
  """Runs ``groups``' jobs on ``runner`` under a progress bar, noting the runs that do not end."""
  where = provenance()
  jobs = [({'id': str(n), 'experiment': kind.name, 'overwrite': [modes[i] for i in group],
            'result': str((job_folder / f'{n}.result.json').absolute()),
            'log': str((job_folder / f'{n}.log').absolute()), 'provenance': where,
            'verbosity': verbosity, 'runs': [{'folder': str(plans[i].folder.absolute()),
                      'config': experiment.as_dict(plans[i].config)} for i in group]}, group)
          for n, group in enumerate(groups)]
  index = {run.folder.absolute(): i for i, run in enumerate(plans)}
  weights = {job['id']: sum(kind.work(plans[i].config) for i in group) for job, group in jobs}
  done = {job['id']: min(plans[i].step for i in group if plans[i].action != 'ended')
          for job, group in jobs}
  total = sum(weights[job['id']] * plans[group[0]].config.steps for job, group in jobs)

  def on_end(job: dict, result: dict) -> None:
    for run in result['runs']:
      i = index[pathlib.Path(run['folder'])]
      if run['status'] in run_folder.ENDED:
        bar.write(f'{names[i]}: {run["status"]}')
        continue
      statuses[i], why = run['status'], run['reason'] or run['status']
      if run['status'] != 'interrupted':
        reasons[i] = why
      bar.write(f'{names[i]}: ' + ('' if run['status'] == 'interrupted' else 'failed: ') + why)

  def on_progress(job: dict, step: int) -> None:
    if step > done[job['id']]:
      bar.update((step - done[job['id']]) * weights[job['id']])
      done[job['id']] = step

  riding = {i for _, group in jobs for i in group if plans[i].action == 'ended'}
  ended = sum(run.action == 'ended' for run in plans) - len(riding)
  resuming = sum(run.action == 'resume' and run.step > 0 for run in plans)
  refused = sum(run.action == 'refused' for run in plans)
  _print(f'{len(plans)} runs: {ended} ended already, {refused} failed their checks, '
         f'{sum(len(group) for _, group in jobs)} to train'
         + (f' ({resuming} from their checkpoints)' if resuming else '')
         + f' in {len(jobs)} job(s) {runner.where}'
         + (f' ({len(riding)} that ended ride along in their recorded groups)' if riding else ''))
  job_folder.mkdir(exist_ok=True)
  for stale in job_folder.glob('*.json'):  # results of an earlier launch
    stale.unlink()
  with tqdm.tqdm(total=total, initial=sum(weights[j] * done[j] for j in done), unit='work',
                 file=sys.stdout, disable=not jobs,
                 bar_format='{l_bar}{bar}| {percentage:3.0f}% [{elapsed}<{remaining}]') as bar:
    runner.run([job for job, _ in jobs], on_end, on_progress, bar.write)


def _tables(kind: experiment.Experiment, plans: list[planning.RunPlan],
            overrides: list[dict], names: list[str], keys: list[str], statuses: dict[int, str],
            workdir: pathlib.Path, command_line: dict | None, regrouped: set[str]
            ) -> tuple[str, int]:
  """Writes the tables (SweepError where it cannot): the per-run table, how many runs ended."""
  runs = []
  for i, (run, values, name) in enumerate(zip(plans, overrides, names)):
    summary = run_folder.read_json(run.folder / run_folder.SUMMARY)
    status = ('failed' if run.action == 'refused' else statuses.get(i)
              or (summary or {}).get('status') or 'missing')
    if status in run_folder.ENDED and (planning.saved_config(kind, run.folder)
                                       != experiment.as_dict(run.config)):
      status = 'replaced'  # its folder trained another config since (rnnjax-run --overwrite)
    runs.append({'name': name, 'values': values, 'config': experiment.as_dict(run.config),
                 'summary': summary if status in run_folder.ENDED else None, 'status': status,
                 'timing': run_folder.read_json(run.folder / run_folder.TIMING),
                 'regrouped': name in regrouped})
  try:
    table = report.write(runs, keys, kind, workdir, command_line)
  except OSError as error:
    raise SweepError(f'cannot write the tables to {workdir}: {error}') from None
  return table, sum(run['status'] in run_folder.ENDED for run in runs)
