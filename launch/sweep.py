"""Runs a config's sweep on a local pool of processes and tabulates it.

  python -m launch.sweep --config=experiments/configs/char_lm.py \
      --workdir=results/char_lm_sweep

``get_sweep()`` in the config file gives one dict of overrides per run, and
each run gets the folder ``<workdir>/<run name>``. Runs that the experiment
says can share one program (its ``group_key``: they differ only in its
``VMAPPABLE_KEYS``, such as spectral radius, learning rate or clip
threshold) go to one process as a group, ``python -m experiments.<config
name> --config=<file> --group=<workdir>/groups/<n>.json``, and train
together in one vmapped program (at most --max_group_size runs); a run
alone is ``python -m experiments.<name> --config=<file> --config.KEY=VALUE
... --workdir=<run folder>``. Each run's output is in ``<run
folder>/log.txt``. A run whose summary.json says finished or diverged is
skipped on relaunch; when a group's process fails, its runs are tried one
by one, and a run that fails is marked failed in its summary while the
others go on. At the end the sweep writes ``results.md``, ``results.csv``
and ``gradient_profile.png`` to the workdir and prints the Markdown table.
"""

import concurrent.futures
import copy
import csv
import importlib
import importlib.util
import json
import math
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading

from absl import app
from absl import flags
from absl import logging
import tqdm

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (only when run as a program, so the module imports cleanly)."""
  flags.DEFINE_string(
      'config', 'experiments/configs/char_lm.py',
      'Config file with get_config() and get_sweep(); experiments/configs/NAME.py runs '
      'experiments.NAME.')
  flags.DEFINE_string('workdir', 'results/char_lm_sweep',
                                 'Sweep folder: one subfolder per run, plus the tables and plot.')
  flags.DEFINE_integer('processes', os.cpu_count() or 1,
                                    'Runs at a time (default: the number of cores).')
  flags.DEFINE_integer('max_group_size', 10,
                       'Most runs vmapped into one process; 1 runs every run alone.')
  flags.DEFINE_integer(
      'threads_per_run', 0, 'CPU threads each run may use; 0: cores / processes (at least 1).')

ENDED = ('finished', 'diverged')
PROFILE_COLUMNS = ('1', '2', '5', '10', '20', '40')


def load_config_module(path: str):
  """Imports a config file as a module (it must define get_config and get_sweep)."""
  spec = importlib.util.spec_from_file_location(pathlib.Path(path).stem, path)
  if spec is None or not pathlib.Path(path).is_file():
    raise FileNotFoundError(f'config: no config file at {path!r}')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  for name in ('get_config', 'get_sweep'):
    if not hasattr(module, name):
      raise ValueError(f'config: {path} defines no {name}()')
  return module


def swept_keys(sweep: list[dict]) -> list[str]:
  """Keys whose value differs between runs, in first-seen order."""
  keys = list(dict.fromkeys(k for overrides in sweep for k in overrides))
  return [k for k in keys if len({repr(o.get(k)) for o in sweep}) > 1]


def run_name(overrides: dict, keys: list[str]) -> str:
  return ','.join(f'{k}={overrides[k]}' for k in keys) or 'run'


def read_summary(folder: pathlib.Path) -> dict | None:
  try:
    return json.loads((folder / 'summary.json').read_text())
  except (FileNotFoundError, json.JSONDecodeError):
    return None


_CHILDREN = set()  # experiment processes running now
_STOPPING = threading.Event()  # set on SIGINT / SIGTERM: start nothing more


class Interrupted(Exception):
  """The sweep was interrupted; the runs that ended are kept, a relaunch resumes."""


def _run_process(command: list[str], log_path: pathlib.Path, threads: int) -> int:
  """Runs one experiment process; raises ``Interrupted`` if the sweep is stopping."""
  if _STOPPING.is_set():
    raise Interrupted()
  env = dict(os.environ, XLA_FLAGS=(os.environ.get('XLA_FLAGS', '') +
                                    f' --xla_cpu_multi_thread_eigen={str(threads > 1).lower()}'
                                    f' intra_op_parallelism_threads={threads}').strip())
  with open(log_path, 'w') as log:
    # Its own session: a Ctrl-C reaches the sweep, which stops the children itself.
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    _CHILDREN.add(process)
    try:
      returncode = process.wait()
    finally:
      _CHILDREN.discard(process)
  if _STOPPING.is_set():
    raise Interrupted()
  return returncode


def _stop(signum, frame):
  del frame
  _STOPPING.set()
  for process in list(_CHILDREN):
    process.terminate()
  raise KeyboardInterrupt(f'signal {signum}')


def launch_run(module: str, config_path: str, overrides: dict, folder: pathlib.Path,
               threads: int) -> dict:
  """Runs one experiment process; returns its summary (status 'failed' on error)."""
  folder.mkdir(parents=True, exist_ok=True)
  command = [sys.executable, '-m', module, f'--config={config_path}', f'--workdir={folder}']
  command += [f'--config.{k}={v}' for k, v in overrides.items()]
  returncode = _run_process(command, folder / 'log.txt', threads)
  summary = read_summary(folder)
  if returncode != 0 or summary is None:
    tail = (folder / 'log.txt').read_text().strip().splitlines()[-5:]
    summary = {'status': 'failed', 'returncode': returncode, 'error': '\n'.join(tail)}
    (folder / 'summary.json').write_text(json.dumps(summary, indent=2) + '\n')
  return summary


def launch_group(module: str, config_path: str, members: list[tuple[dict, pathlib.Path]],
                 group_file: pathlib.Path, threads: int) -> list[dict]:
  """Runs several runs in one vmapped process; if it fails, runs them one by one."""
  if len(members) == 1:
    return [launch_run(module, config_path, *members[0], threads)]
  group_file.parent.mkdir(parents=True, exist_ok=True)
  group_file.write_text(json.dumps([{'workdir': str(folder), 'overrides': overrides}
                                    for overrides, folder in members], indent=2) + '\n')
  log_path = group_file.with_suffix('.log')
  command = [sys.executable, '-m', module, f'--config={config_path}', f'--group={group_file}']
  returncode = _run_process(command, log_path, threads)
  summaries = [read_summary(folder) for _, folder in members]
  if returncode != 0 or any(s is None for s in summaries):
    logging.warning('group %s failed (exit %d, log %s); running its %d runs one by one',
                    group_file.name, returncode, log_path, len(members))
    return [launch_run(module, config_path, overrides, folder, threads)
            for overrides, folder in members]
  for _, folder in members:
    shutil.copyfile(log_path, folder / 'log.txt')
  return summaries


def run_configs(base_config, sweep: list[dict]) -> list:
  """The full config of every run: ``base_config`` with the run's overrides.

  Raises:
    ValueError: for a run that sets a field the config does not have (a
      misspelt key would otherwise leave every run the same), before any run.
  """
  configs = []
  for i, overrides in enumerate(sweep):
    config = copy.deepcopy(base_config)
    config.lock()
    try:
      config.update_from_flattened_dict(overrides)
    except (KeyError, AttributeError) as error:
      unknown = sorted(set(overrides) - set(base_config.keys()))
      raise ValueError(f'get_sweep: run {i} sets {unknown or list(overrides)}, which the config '
                       f'does not have (fields: {sorted(base_config.keys())})') from error
    configs.append(config)
  return configs


def plan_jobs(experiment, configs: list, todo: list[int], max_group_size: int
              ) -> list[list[int]]:
  """Runs to do, in jobs: runs with one ``experiment.group_key`` share a job of at
  most ``max_group_size``; an experiment without ``group_key`` runs each alone."""
  if not hasattr(experiment, 'group_key') or max_group_size < 2:
    return [[i] for i in todo]
  groups = {}
  for i in todo:
    groups.setdefault(experiment.group_key(configs[i]), []).append(i)
  return [members[start:start + max_group_size] for members in groups.values()
          for start in range(0, len(members), max_group_size)]


def table_rows(runs: list[tuple[dict, dict]], keys: list[str]) -> list[dict]:
  """One row per run: swept values, bits per char, clipping, spectral radius of W_hh at
  the end, divergence, profiles."""
  rows = []
  for overrides, summary in runs:
    row = {k: overrides[k] for k in keys}
    row['status'] = summary.get('status', 'missing')
    row['train_bpc'] = summary.get('final_train_bits_per_char', math.nan)
    row['validation_bpc'] = summary.get('validation_bits_per_char', math.nan)
    row['clipped_fraction'] = summary.get('clipped_fraction', math.nan)
    row['max_grad_norm'] = summary.get('max_grad_norm', math.nan)
    row['final_spectral_radius'] = summary.get('final_spectral_radius', math.nan)
    row['diverged'] = summary.get('diverged', False)
    for when in ('first', 'last'):
      profile = summary.get(f'{when}_profile') or {}
      for k in PROFILE_COLUMNS:
        row[f'{when}_profile_k{k}'] = profile.get(k, math.nan)
    rows.append(row)
  return rows


def format_value(value) -> str:
  if isinstance(value, float):
    if math.isnan(value):
      return '-'
    return f'{value:.3g}' if abs(value) < 1e-2 or abs(value) >= 1e4 else f'{value:.3f}'
  return str(value)


def markdown_table(rows: list[dict]) -> str:
  """The rows as Markdown; each profile becomes one column of space-separated values."""
  def merged(row):
    out = {c: format_value(v) for c, v in row.items() if '_profile_k' not in c}
    for when, step in (('first', 'first step'), ('last', 'last step')):
      values = [row[f'{when}_profile_k{k}'] for k in PROFILE_COLUMNS]
      out[f'profile at {step}, k = {", ".join(PROFILE_COLUMNS)}'] = ' '.join(
          format_value(v) for v in values if not math.isnan(v))
    return out

  cells = [merged(row) for row in rows]
  columns = list(cells[0])
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell[c] for c in columns) + ' |' for cell in cells]
  return '\n'.join(lines) + '\n'


def plot_profiles(rows: list[dict], keys: list[str], path: pathlib.Path) -> None:
  """||dL/dh_{T-k}|| / ||dL/dh_T|| against k (log scale), one curve per spectral radius,
  one panel per combination of the other swept values; solid: last step, dashed: first."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

  curve_key = 'spectral_radius' if 'spectral_radius' in keys else keys[0]
  panel_keys = [k for k in keys if k != curve_key]
  panels = list(dict.fromkeys(tuple(row[k] for k in panel_keys) for row in rows))
  figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False,
                              sharey=True)
  colors = plt.get_cmap('viridis')
  curves = list(dict.fromkeys(row[curve_key] for row in rows))
  for axis, panel in zip(axes[0], panels):
    for row in rows:
      if tuple(row[k] for k in panel_keys) != panel:
        continue
      color = colors(curves.index(row[curve_key]) / max(len(curves) - 1, 1))
      for when, style in (('last', '-'), ('first', '--')):
        points = [(int(k), row[f'{when}_profile_k{k}']) for k in PROFILE_COLUMNS
                  if math.isfinite(row[f'{when}_profile_k{k}'])]
        if points:
          axis.plot(*zip(*points), style, color=color, marker='o', markersize=3,
                    label=f'{curve_key}={row[curve_key]}' if when == 'last' else None)
    axis.set_yscale('log')
    axis.set_xlabel('distance k (steps)')
    axis.set_title(', '.join(f'{k}={v}' for k, v in zip(panel_keys, panel)), fontsize=9)
    axis.grid(True, which='both', alpha=0.3)
  axes[0][0].set_ylabel('||dL/dh_{T-k}|| / ||dL/dh_T||')
  axes[0][-1].legend(fontsize=7)
  figure.suptitle('gradient-norm profile (solid: last step, dashed: first step)', fontsize=10)
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config_path = FLAGS.config
  config_module = load_config_module(config_path)
  sweep = config_module.get_sweep()
  if not sweep:
    raise app.UsageError(f'config: get_sweep() in {config_path} returned no runs')
  try:
    configs = run_configs(config_module.get_config(), sweep)
  except ValueError as error:
    raise app.UsageError(str(error)) from error
  module = 'experiments.' + pathlib.Path(config_path).stem
  keys = swept_keys(sweep)
  workdir = pathlib.Path(FLAGS.workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  processes = max(1, FLAGS.processes)
  threads = FLAGS.threads_per_run or max(1, (os.cpu_count() or 1) // processes)

  folders = [workdir / run_name(o, keys) for o in sweep]
  summaries = [read_summary(f) for f in folders]
  todo = [i for i, s in enumerate(summaries) if not (s and s.get('status') in ENDED)]
  jobs = plan_jobs(importlib.import_module(module), configs, todo, FLAGS.max_group_size)
  logging.info('%d runs, %d ended already, %d to run in %d jobs on %d processes', len(sweep),
               len(sweep) - len(todo), len(todo), len(jobs), processes)
  signal.signal(signal.SIGTERM, _stop)
  signal.signal(signal.SIGINT, _stop)
  try:
    run_jobs(module, config_path, sweep, folders, summaries, jobs, todo, workdir, processes,
             threads)
  except (KeyboardInterrupt, Interrupted):
    _STOPPING.set()
    for process in list(_CHILDREN):
      process.terminate()
    ended = sum(1 for f in folders if (read_summary(f) or {}).get('status') in ENDED)
    print(f'\ninterrupted: {ended} of {len(sweep)} runs have ended and are kept; run the same '
          f'command again to resume')
    sys.exit(130)
  write_results(sweep, summaries, keys, workdir)


def run_jobs(module, config_path, sweep, folders, summaries, jobs, todo, workdir, processes,
             threads):
  """Runs the jobs on a pool of ``processes``, filling ``summaries`` as they end."""
  with concurrent.futures.ThreadPoolExecutor(processes) as pool, \
      tqdm.tqdm(total=len(sweep), initial=len(sweep) - len(todo), desc='runs', unit='run',
                file=sys.stdout) as progress:
    futures = {pool.submit(launch_group, module, config_path,
                           [(sweep[i], folders[i]) for i in job],
                           workdir / 'groups' / f'group_{n}.json', threads): job
               for n, job in enumerate(jobs)}
    for future in concurrent.futures.as_completed(futures):
      for i, summary in zip(futures[future], future.result()):
        summaries[i] = summary
        progress.update(1)
        progress.write(f'{folders[i].name}: {summary["status"]}, validation '
                       f'{format_value(summary.get("validation_bits_per_char", math.nan))} '
                       f'bits/char')


def write_results(sweep, summaries, keys, workdir):
  """Writes results.csv, results.md and gradient_profile.png; prints the table."""
  rows = table_rows(list(zip(sweep, summaries)), keys)
  with open(workdir / 'results.csv', 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  table = markdown_table(rows)
  (workdir / 'results.md').write_text(table)
  plot_profiles(rows, keys, workdir / 'gradient_profile.png')
  failed = sum(row['status'] == 'failed' for row in rows)
  print(table)
  print(f'{len(rows)} runs ({failed} failed); table: {workdir / "results.md"} and '
        f'{workdir / "results.csv"}; plot: {workdir / "gradient_profile.png"}')


if __name__ == '__main__':
  define_flags()
  app.run(main)
