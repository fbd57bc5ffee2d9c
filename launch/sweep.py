"""Runs an experiment's sweep, on local processes or on Slurm, and tabulates it.

  python -m launch.sweep --config=experiments/configs/char_lm.py --workdir=results/char_lm_sweep
  python -m launch.sweep --config=experiments/configs/long_range.py --workdir=results/long_range \
      --executor=slurm --partition=debug --time=60
  python -m launch.sweep --config.steps=300 --workdir=results/char_lm_short

``--config.NAME=VALUE`` sets a field for every run of the sweep, in place of
the value ``get_sweep()`` gives them all; a field the sweep varies is refused.

``get_sweep()`` in the config file gives one dict of overrides per run; each
run gets the folder ``<workdir>/<swept values>``. Runs that differ only in
values that change no program (the experiment's ``VMAPPABLE`` fields, the
learning rate, the clip threshold, clipping none / global norm) train
together as one vmapped group: one job.

Skip rule: a run is skipped when its summary.json says it ended (finished or
diverged) and its config.json equals the config the sweep would run now; a
run whose config changed is rerun from the start (the launcher lists them),
and a run that did not end resumes from its latest checkpoint. A config that
fails its checks is reported failed before anything runs; the others go on.

Lock rule: one launcher per sweep folder (``<workdir>/.lock``, flock): a
second exits non-zero naming the first (pid, host). Every run holds its own
folder's lock while it trains, and local jobs die with their launcher, so no
run trains twice at once.

The sweep writes ``results.md`` and ``results.csv`` (and, when the seed is
swept, ``results_over_seeds.md`` / ``.csv``) and the experiment's plots
(``launch/report.py``), prints the table and exits non-zero, printing each
failed run's reason, when any run failed.
"""

import copy
import os
import pathlib
import sys
import threading

from absl import app
from absl import flags
from ml_collections import config_flags
import tqdm

from launch import executors
from launch import report
from launch import run

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (only when run as a program, so the module imports
  cleanly); a misspelt ``--config.NAME`` exits with one line first, as in launch.run."""
  run.unknown_field(run.config_path_of(sys.argv), sys.argv)
  config_flags.DEFINE_config_file(
      'config', run.DEFAULT_CONFIG, 'Config file with get_config() and get_sweep(); '
      '--config.NAME=VALUE sets a field for every run (not one the sweep varies).', lock_config=True)
  flags.DEFINE_string('workdir', 'results/char_lm_sweep',
                      'Sweep folder: one subfolder per run, plus the tables and plots.')
  flags.DEFINE_enum('executor', 'local', ['local', 'slurm'],
                    'local: processes on this machine; slurm: an array job through submitit.')
  flags.DEFINE_bool('overwrite', False, 'Clear every run folder and train every run again.')
  flags.DEFINE_integer('max_group_size', 0,
                       'Most runs vmapped into one job (0: local: each group cut into '
                       '--processes equal jobs; slurm: no limit; 1: every run alone).')
  flags.DEFINE_integer('processes', 0, 'local: jobs at a time (0: one per core, each on a core '
                       'of its own).')
  flags.DEFINE_integer('threads_per_run', 0, 'local: cores each job may use (0: the cores / '
                       '--processes); processes x threads never exceeds the cores.')
  flags.DEFINE_string('partition', None, 'slurm: the partition (--partition).')
  flags.DEFINE_integer('time', 60, 'slurm: minutes each job may run (--time).')
  flags.DEFINE_integer('cpus_per_task', 2, 'slurm: CPUs per job (--cpus-per-task).')
  flags.DEFINE_integer('gpus_per_task', 0, 'slurm: GPUs per job (--gpus-per-task; 0: none).')
  flags.DEFINE_integer('mem_gb', 8, 'slurm: memory per job, GiB (--mem).')
  flags.DEFINE_string('account', None, 'slurm: the account to charge (--account).')
  flags.DEFINE_string('qos', None, 'slurm: the quality of service (--qos).')
  flags.DEFINE_integer('array_parallelism', 16, 'slurm: most jobs of the array at once.')
  flags.DEFINE_integer('nodes', 1, 'slurm: nodes per job; with --tasks_per_node, the job\'s '
                       'processes train its runs together under jax.distributed.')
  flags.DEFINE_integer('tasks_per_node', 1, 'slurm: processes per node (one per GPU, say).')


def swept_keys(sweep: list[dict]) -> list[str]:
  """Keys whose value differs between runs, in first-seen order."""
  keys = list(dict.fromkeys(k for overrides in sweep for k in overrides))
  return [k for k in keys if len({repr(o.get(k)) for o in sweep}) > 1]


def run_name(overrides: dict, keys: list[str]) -> str:
  return ','.join(f'{k}={overrides[k]}' for k in keys) or 'run'


def with_command_line(sweep: list[dict], command_line: dict, config_path: str) -> list[dict]:
  """Each run's overrides from ``get_sweep()``, with the ``--config.NAME=VALUE``
  fields of the command line in place of the values ``get_sweep()`` gives every
  run alike (the main job's ``steps``, say).

  Raises:
    run.ConfigError: for a command-line field that ``get_sweep()`` sweeps (gives
      runs different values: the sweep's folders and table are named after them).
  """
  for given in command_line:
    for swept in swept_keys(sweep):  # the same field, or one inside the other
      if given == swept or given.startswith(f'{swept}.') or swept.startswith(f'{given}.'):
        raise run.ConfigError(
            f'--config.{given}: get_sweep() in {config_path} sweeps {swept} (its runs '
            'differ in it); change its values in get_sweep() instead')
  return [{**run_overrides, **command_line} for run_overrides in sweep]


def run_configs(base_config, sweep: list[dict]) -> list:
  """The full config of every run: ``base_config`` with the run's overrides.

  Raises:
    run.ConfigError: for a run that sets a field the config does not have (a
      misspelt key would otherwise leave every run the same), before any run.
  """
  configs = []
  for i, overrides in enumerate(sweep):
    config = copy.deepcopy(base_config)
    config.lock()  # a field the config lacks is an error, not a new field
    try:
      config.update_from_flattened_dict(overrides)
    except (KeyError, AttributeError) as error:
      unknown = sorted(set(overrides) - set(base_config.keys()))
      raise run.ConfigError(f'get_sweep: run {i} sets {unknown or list(overrides)}, which the '
                            f'config does not have (fields: {sorted(base_config.keys())})'
                            ) from error
    configs.append(config)
  return configs


def plan_jobs(experiment, configs, folders, todo: list[int], max_group_size: int,
              parts: int = 1, fresh: set[int] = frozenset()) -> list[list]:
  """Runs to train, in jobs, in the order they start (``fresh``: the runs whose job
  clears their folder, grouped as from step 0).

  The runs that share a group key and their checkpoint's step are cut into the
  fewest jobs of at most ``max_group_size`` runs, or with 0 into ``parts`` jobs
  (fewer when they are fewer runs), so that ``parts`` processes share the work
  evenly; a group's job sizes differ by at most one. Order: the most work
  first, except that the first ``parts`` jobs (those that start together) are
  different programs where there are enough: a program compiled by one process
  is then read from JAX's persistent compilation cache by the next that needs
  it, instead of being compiled by two processes at once (the main job, cold:
  both processes compiled tau = 64 at the start and tau = 16 after it)."""
  from rnnjax.train import run_folder
  from rnnjax.train import trainer
  groups = {}
  for i in todo:
    steps = run_folder.saved_steps(folders[i]) if i not in fresh else []  # fresh: from 0
    key = (trainer.group_key(configs[i], experiment.VMAPPABLE), steps[-1] if steps else 0)
    groups.setdefault(key if max_group_size != 1 else i, []).append(i)
  jobs = []  # (program, runs)
  for key, members in groups.items():
    count = -(-len(members) // max_group_size) if max_group_size else min(parts, len(members))
    cuts = [len(members) * part // count for part in range(count + 1)]
    jobs += [((key[0] if max_group_size != 1 else key, end - start), members[start:end])
             for start, end in zip(cuts, cuts[1:])]
  jobs.sort(key=lambda job: -sum(work(experiment, configs[i]) * configs[i].steps
                                 for i in job[1]))
  first, programs = [], set()
  for n, (program, _) in enumerate(jobs):
    if len(first) < parts and program not in programs:
      first.append(n)
      programs.add(program)
  return [jobs[n][1] for n in first + [n for n in range(len(jobs)) if n not in first]]


def work(experiment, config) -> float:
  """The experiment's estimate of one step's cost (its ``work``), else 1."""
  return float(experiment.work(config)) if hasattr(experiment, 'work') else 1.0


def last_step(folder: pathlib.Path) -> int:
  """The step of the last complete line of a run's metrics.jsonl (0: none)."""
  try:
    with open(folder / 'metrics.jsonl', 'rb') as f:
      f.seek(0, os.SEEK_END)
      f.seek(max(0, f.tell() - 4096))
      lines = f.read().decode(errors='replace').splitlines()
  except OSError:
    return 0
  for line in reversed(lines):
    if line.startswith('{"step": '):
      try:
        return int(line[9:line.index(',')])
      except ValueError:
        continue
  return 0


def follow(progress, runs, done: dict, stop: threading.Event, seconds: float = 2.0) -> None:
  """Moves ``progress`` (in units of work) as the runs' metrics.jsonl grow past
  ``done`` (run -> steps counted already)."""
  while not stop.wait(seconds):
    for i, (folder, weight, steps) in runs.items():
      step = min(last_step(folder), steps)
      if step > done[i]:
        progress.update((step - done[i]) * weight)
        done[i] = step


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  from rnnjax.train import harness
  from rnnjax.train import run_folder

  run.quiet_logs()
  config_path = config_flags.get_config_filename(FLAGS['config'])
  try:
    module = run.load_config_file(config_path)
    if not hasattr(module, 'get_sweep'):
      raise run.ConfigError(f'config: {config_path} defines no get_sweep()')
    sweep = module.get_sweep()
    if not sweep:
      raise run.ConfigError(f'config: get_sweep() in {config_path} returned no runs')
    base = module.get_config()
    experiment = run.experiment_module(FLAGS.config)
    command_line = dict(config_flags.get_override_values(FLAGS['config']))
    overrides = with_command_line(sweep, command_line, config_path)
    configs = run_configs(base, overrides)
    workdir = pathlib.Path(FLAGS.workdir)
    keys = swept_keys(sweep)
    folders = [workdir / run_name(o, keys) for o in sweep]
    if len(set(folders)) < len(folders):  # they would share a folder and lock each other out
      twice = next(f for f in folders if folders.count(f) > 1)
      raise run.ConfigError(f'get_sweep: runs {[i for i, f in enumerate(folders) if f == twice]} '
                            f'have the same swept values ({twice.name}); give each run its own')
    failures = {}
    for i, config in enumerate(configs):
      try:
        harness.check(experiment, [config])
      except ValueError as error:
        failures[i] = str(error)
    if len(failures) == len(configs):  # a bad --config.NAME, say: no folder made for it
      reasons = set(failures.values())
      if len(reasons) > 1:
        for i, why in failures.items():
          print(f'failed: {folders[i].name}: {why}', file=sys.stderr)
      raise run.ConfigError('every run of the sweep fails its checks'
                            + (f': {reasons.pop()}' if len(reasons) == 1 else '')
                            + f'; {workdir} is left as it was')
    lock = run_folder.lock(workdir)
  except (run.ConfigError, run_folder.FolderInUse, ValueError, OSError) as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(1)
  strays = sorted(path.parent.name for path in workdir.glob(f'*/{run_folder.CONFIG}')
                  if path.parent not in folders and not path.parent.is_symlink())
  if strays:
    print(f'note: {len(strays)} run folder(s) in {workdir} belong to no run of this sweep and '
          f'are left as they are: {", ".join(strays)} (a folder is named after its run\'s swept '
          'values: a changed value, or a key swept anew, names another folder)')
  changed, todo = [], []
  for i, (config, folder) in enumerate(zip(configs, folders)):
    if i in failures:
      continue
    try:
      status = run_folder.status(folder, harness.config_dict(config), FLAGS.overwrite)
    except ValueError as error:
      if isinstance(error, run_folder.ConfigMismatch) and run_folder.read_json(
          folder / run_folder.CONFIG) is not None:  # changed, not damaged: train it again
        changed.append(i)
        todo.append(i)
        continue
      failures[i] = str(error)
      continue
    if status != 'ended':
      todo.append(i)
  fresh = set(changed) | (set(todo) if FLAGS.overwrite else set())  # cleared by their job,
  for i in sorted(fresh):  # once its data and checks passed (a bad --config.data_dir
    try:                   # had cleared every finished run here, then failed)
      run_folder.lock(folders[i]).close()
    except (run_folder.FolderInUse, OSError) as error:
      failures[i] = str(error)
      todo.remove(i)
  if changed:
    print(f'{len(changed)} run(s) whose config changed will train again from the start: '
          + ', '.join(folders[i].name for i in changed))
  cores = len(os.sched_getaffinity(0))
  threads = FLAGS.threads_per_run or (max(1, cores // FLAGS.processes) if FLAGS.processes else 1)
  processes = FLAGS.processes or max(1, cores // threads)
  local = FLAGS.executor == 'local'
  groups = plan_jobs(experiment, configs, folders, todo, FLAGS.max_group_size,
                     processes if local else 1, fresh)
  jobs = [executors.Job([{'workdir': str(folders[i]), 'overrides': overrides[i],
                          'overwrite': i in fresh} for i in group])
          for group in groups]
  resuming = sum(1 for i in todo if i not in fresh and run_folder.saved_steps(folders[i]))
  print(f'{len(sweep)} runs: {len(sweep) - len(todo) - len(failures)} ended already, '
        f'{len(failures)} failed their checks, {len(todo)} to train'
        + (f' ({resuming} from their checkpoints)' if resuming else '') + f' in {len(jobs)} job(s)'
        + (f' on {processes} process(es) x {threads} core(s)' if local else ' on Slurm'),
        flush=True)
  try:
    if local:
      executor = executors.Local(config_path, processes, threads, workdir / '.jobs')
    else:
      executor = executors.Slurm(config_path, workdir, {
          'slurm_partition': FLAGS.partition, 'timeout_min': FLAGS.time,
          'cpus_per_task': FLAGS.cpus_per_task, 'slurm_gpus_per_task': FLAGS.gpus_per_task,
          'mem_gb': FLAGS.mem_gb, 'slurm_account': FLAGS.account, 'slurm_qos': FLAGS.qos,
          'slurm_array_parallelism': FLAGS.array_parallelism, 'nodes': FLAGS.nodes,
          'tasks_per_node': FLAGS.tasks_per_node})
  except ValueError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(1)

  following = {i: (folders[i], work(experiment, configs[i]), configs[i].steps) for i in todo}
  total = sum(weight * steps for _, weight, steps in following.values())
  done = {i: 0 if i in fresh else min(last_step(folder), steps)
          for i, (folder, _, steps) in following.items()}
  initial = sum(weight * done[i] for i, (_, weight, _) in following.items())
  progress = tqdm.tqdm(total=total, initial=initial, unit='work', file=sys.stdout,
                       bar_format='{l_bar}{bar}| {percentage:3.0f}% [{elapsed}<{remaining}]')
  stop = threading.Event()
  follower = threading.Thread(target=follow, args=(progress, following, done, stop),
                              daemon=True)
  follower.start()
  index = {str(folders[i]): i for i in todo}

  def on_end(job, returncode, why):
    for entry in job.entries:
      i = index[entry['workdir']]
      summary = run_folder.read_json(folders[i] / run_folder.SUMMARY)
      saved = run_folder.read_json(folders[i] / run_folder.CONFIG)
      ours = saved is not None and not run_folder.differing_keys(  # not the summary of the
          saved, harness.config_dict(configs[i]))                  # run a failed job kept
      if ours and summary and summary.get('status') in run_folder.ENDED:
        progress.write(f'{folders[i].name}: {summary["status"]}')
      else:
        failures[i] = why if returncode != 0 else f'ended without a summary: {why}'
        progress.write(f'{folders[i].name}: failed: {failures[i]}')

  try:
    executor.run(jobs, on_end)
  except KeyboardInterrupt:
    executor.stop()
    stop.set()
    progress.close()
    ended = sum(1 for f in folders
                if (run_folder.read_json(f / run_folder.SUMMARY) or {}).get('status')
                in run_folder.ENDED)
    print(f'\ninterrupted: {ended} of {len(sweep)} runs have ended and are kept, the others '
          'keep their last checkpoint; run the same command again to resume', flush=True)
    sys.exit(130)
  finally:
    stop.set()
    follower.join()
  progress.close()

  runs = []
  for i, folder in enumerate(folders):
    summary = run_folder.read_json(folder / run_folder.SUMMARY)
    status = (summary or {}).get('status') if i not in failures else 'failed'
    runs.append((sweep[i], summary if status in run_folder.ENDED else None,
                 run_folder.read_json(folder / run_folder.TIMING), status or 'missing'))
  try:
    table = report.write(runs, keys, experiment, workdir, command_line)
  except OSError as error:
    print(f'error: cannot write the tables to {workdir}: {error}', file=sys.stderr)
    sys.exit(1)
  print(table)
  print(f'{len(sweep)} runs ({len(failures)} failed); tables: {workdir / "results.md"}, '
        f'results.csv' + (', results_over_seeds.md' if 'seed' in keys and len(keys) > 1 else ''))
  lock.close()
  if failures:
    for i, why in sorted(failures.items()):
      print(f'failed: {folders[i].name}: {why}', file=sys.stderr)
    sys.exit(1)


def interrupt(signum, frame):
  del signum, frame
  raise KeyboardInterrupt()


if __name__ == '__main__':
  define_flags()
  import signal
  # SIGINT too: a launcher started in the background of a script ignores it (POSIX), while
  # its runs, which set their own handler, would checkpoint and stop, and it went on
  # starting the next jobs (helper-11).
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, interrupt)
  app.run(main, flags_parser=lambda argv: run.parse_flags(argv, __doc__))
