"""The tables and plots of a sweep, from its runs' summaries.

``results.md`` / ``results.csv``: one row per run: the swept values, its
status, what the experiment reports (its ``report`` fields), the
gradient-norm profile at the first and the last logged step (where the run
measured one) and the seconds its group took. When the seed is swept,
``results_over_seeds.md`` / ``.csv`` give one row per setting: the number of
runs, how many diverged or failed, the rate of each yes/no field (e.g.
success) and the median of each number over the runs where it is finite.
Each Markdown table opens with the commit and date its runs were measured at.
Plots follow the experiment's ``plots``: ``('curve', metric)`` draws a metric of
metrics.jsonl against the step, one curve a run; ``('rate', field, budgets, panel_key)`` adds to
the seed table the fraction of runs whose field is at most each budget and plots it;
``('profile', key)`` draws the
profiles, one curve per value of ``key``; ``('heatmap', value, x, panels)``
draws the seed-averaged ``value`` with ``x`` across and the other settings
down, one picture per combination of the ``panels`` keys.
"""

import csv
import io
import math
import pathlib
import statistics

from rnnjax import diagnostics
from rnnjax.train import experiment as experiments
from rnnjax.train import folder as run_folder

__all__ = ['table_rows', 'over_seeds', 'markdown', 'csv_text', 'provenance_line',
           'save_figure', 'write']

PROFILE_DISTANCES = tuple(str(k) for k in diagnostics.PROFILE_DISTANCES)


def _flat(record: dict, prefix: str = '') -> dict:
  flat = {}
  for key, value in record.items():
    if isinstance(value, dict):
      flat.update(_flat(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def table_rows(runs, keys, reported, defaults: dict | None = None) -> list[dict]:
  """One row per run.

  Args:
    runs: dicts with the run's ``name`` (its folder's), ``values`` (its swept
      values), ``config`` (as config.json holds it), ``summary`` and ``timing``
      (None where missing) and ``status``.
    keys: the swept keys, in order.
    reported: the experiment's ``report`` fields.
    defaults: the experiment's default config (as config.json would hold it):
      the fields a run's config sets otherwise become columns too.

  Returns:
    dicts of column -> value (floats NaN where missing): the run folder, the
    swept values, status, the reported fields, the first and final profiles,
    the run's seconds (its share of its job's: they add up to the jobs' time),
    the commit and date it was measured at, its seed and its other fields that
    differ from the defaults.
  """
  defaults = _flat(defaults or {})
  rows = []
  for run in runs:
    summary, timing = run['summary'] or {}, run['timing'] or {}
    row = {'run_folder': run['name'], **{k: run['values'].get(k) for k in keys}}
    row['status'] = run['status']
    for name in reported:
      row[name] = summary.get(name, math.nan)
    for when in ('first', 'final'):
      profile = summary.get(f'{when}_profile') or {}
      for k in PROFILE_DISTANCES:
        row[f'{when}_profile_k{k}'] = profile.get(k, math.nan)
    total = (timing.get('seconds') or {}).get('total', math.nan)
    row['seconds'] = total / timing.get('group_size', 1) if isinstance(total, float) else total
    row['commit'], row['date'] = timing.get('commit', ''), timing.get('date', '')
    config = _flat(run['config'] or {})
    row.update({name: value for name, value in config.items() if name not in row and (
        name == 'seed' or value != defaults.get(name, ...))})
    rows.append(row)
  return rows


def _without_empty_columns(rows: list[dict]) -> list[dict]:
  empty = lambda value: value is None or value == '' or (isinstance(value, float) and
                                                         math.isnan(value))
  columns = [c for c in dict.fromkeys(c for row in rows for c in row)
             if not all(empty(row.get(c)) for row in rows)]
  return [{c: row.get(c) for c in columns} for row in rows]


def over_seeds(rows, keys, reported, budgets=()) -> list[dict]:
  """Rows aggregated over the seed: one per combination of the other swept keys; for each
  ``(field, budget)`` of ``budgets`` the fraction of runs whose ``field`` (e.g. the step a
  run was solved at) is at most the budget."""
  settings = [k for k in keys if k != 'seed']
  groups = {}
  for row in rows:
    groups.setdefault(tuple(repr(row[k]) for k in settings), []).append(row)
  aggregated = []
  for members in groups.values():
    out = {k: members[0][k] for k in settings}
    out['runs'] = len(members)
    out['diverged'] = sum(m['status'] == 'diverged' for m in members)
    out['failed'] = sum(m['status'] not in run_folder.ENDED for m in members)
    for name in reported:
      values = [m[name] for m in members if m['status'] in run_folder.ENDED]
      if values and all(isinstance(v, bool) for v in values):
        out[f'{name} rate'] = sum(values) / len(values)
      else:
        finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
        out[f'{name} median'] = statistics.median(finite) if finite else math.nan
    for name, budget in budgets:
      reached = [m[name] for m in members if isinstance(m[name], (int, float))
                 and math.isfinite(m[name]) and m[name] <= budget]
      out[f'{name} <= {budget}'] = len(reached) / len(members)
    aggregated.append(out)
  return aggregated


def format_value(value) -> str:
  if isinstance(value, bool):
    return 'yes' if value else 'no'
  if isinstance(value, float):
    if math.isnan(value):
      return '-'
    if math.isinf(value):
      return 'inf' if value > 0 else '-inf'
    return f'{value:.3g}' if abs(value) < 1e-2 or abs(value) >= 1e4 else f'{value:.3f}'
  return str(value)


def markdown(rows, heading: str = '') -> str:
  """The rows as Markdown; each profile becomes one column of space-separated values."""
  measured = lambda when: [k for k in PROFILE_DISTANCES
                           if any(f'{when}_profile_k{k}' in row for row in rows)]

  def merged(row):
    out = {c: format_value(v) for c, v in row.items() if '_profile_k' not in c}
    for when, where in (('first', 'at the first step'), ('final', 'of the final params')):
      values = [row.get(f'{when}_profile_k{k}', math.nan) for k in measured(when)]
      if any(not math.isnan(v) for v in values):
        out[f'profile {where}, k = {", ".join(measured(when))}'] = ' '.join(
            format_value(v) for v in values if not math.isnan(v))
    return out

  cells = [merged(row) for row in rows]
  columns = list(dict.fromkeys(c for cell in cells for c in cell))
  lines = ([heading, ''] if heading else []) + [
      '| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell.get(c, '') for c in columns) + ' |' for cell in cells]
  return '\n'.join(lines) + '\n'


def csv_text(rows) -> str:
  columns = list(dict.fromkeys(c for row in rows for c in row))
  out = io.StringIO()
  writer = csv.DictWriter(out, fieldnames=columns)
  writer.writeheader()
  writer.writerows(rows)
  return out.getvalue()


def provenance_line(timings) -> str:
  """'Measured at commit(s) ... on ... (host ...)' from the runs' timing.json."""
  found = [t for t in timings if t]
  if not found:
    return ''
  commits = sorted({t.get('commit', 'unknown') for t in found})
  dates = sorted({t.get('date', 'unknown') for t in found})
  hosts = sorted({t.get('host', 'unknown') for t in found})
  return (f'Measured at commit {", ".join(commits)} on {", ".join(dates)} '
          f'(host {", ".join(hosts)}).')


def save_figure(figure, path: pathlib.Path) -> None:
  """Writes a matplotlib figure as PNG (120 dpi) atomically: a full disk left a 0-byte
  plot where ``savefig`` had opened the file itself."""
  data = io.BytesIO()
  figure.savefig(data, dpi=120, format='png')
  run_folder.write_bytes(path, data.getvalue())


def plot_profiles(rows, keys, curve_key: str, path: pathlib.Path) -> None:
  """||dL/dh_{T-k}|| / ||dL/dh_T|| against k (log scale), one curve per value of
  ``curve_key``, one panel per combination of the other swept values; solid: last
  step, dashed: first."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

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
      for when, style in (('final', '-'), ('first', '--')):
        values = [(int(k), row.get(f'{when}_profile_k{k}', math.nan)) for k in PROFILE_DISTANCES]
        points = [(k, v) for k, v in values if math.isfinite(v) and v > 0]
        if points:
          axis.plot(*zip(*points), style, color=color, marker='o', markersize=3,
                    label=f'{curve_key}={row[curve_key]}' if when == 'final' else None)
    axis.set_yscale('log')
    axis.set_xlabel('distance k (steps)')
    axis.set_title(', '.join(f'{k}={v}' for k, v in zip(panel_keys, panel)), fontsize=9)
    axis.grid(True, which='both', alpha=0.3)
  axes[0][0].set_ylabel('||dL/dh_{T-k}|| / ||dL/dh_T||')
  if axes[0][-1].get_legend_handles_labels()[0]:
    axes[0][-1].legend(fontsize=7)
  figure.suptitle('gradient-norm profile (solid: last step, dashed: first step)', fontsize=10)
  figure.tight_layout()
  save_figure(figure, path)
  plt.close(figure)


def plot_heatmaps(rows, keys, value: str, x: str, panels, folder: pathlib.Path) -> list:
  """The seed-averaged ``value`` with ``x`` across and the other swept settings down,
  one PNG per combination of ``panels``; returns the paths."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

  panels = [k for k in panels if k in keys]
  down = [k for k in keys if k not in (x, 'seed', *panels)]
  paths = []
  for panel in dict.fromkeys(tuple(row[k] for k in panels) for row in rows):
    members = [row for row in rows if tuple(row[k] for k in panels) == panel]
    columns = list(dict.fromkeys(row[x] for row in members))
    labels = list(dict.fromkeys(tuple(row[k] for k in down) for row in members))
    grid = [[math.nan] * len(columns) for _ in labels]
    for i, label in enumerate(labels):
      for j, column in enumerate(columns):
        cell = [float(row[value]) for row in members
                if tuple(row[k] for k in down) == label and row[x] == column and
                row['status'] in run_folder.ENDED and not math.isnan(float(row[value]))]
        grid[i][j] = sum(cell) / len(cell) if cell else math.nan
    figure, axis = plt.subplots(figsize=(1.2 * len(columns) + 3.5, 0.45 * len(labels) + 1.5))
    image = axis.imshow(grid, vmin=0, vmax=1, cmap='viridis', aspect='auto')
    axis.set_xticks(range(len(columns)), [str(c) for c in columns])
    axis.set_yticks(range(len(labels)), [' '.join(map(str, label)) for label in labels],
                    fontsize=8)
    axis.set_xlabel(x)
    for i, row in enumerate(grid):
      for j, cell in enumerate(row):
        axis.text(j, i, '-' if math.isnan(cell) else f'{cell:.2f}', ha='center', va='center',
                  color='white' if math.isnan(cell) or cell < 0.5 else 'black', fontsize=8)
    name = ','.join(f'{k}={v}' for k, v in zip(panels, panel)) or 'all'
    axis.set_title(f'{value} (mean over seeds), {name}', fontsize=9)
    figure.colorbar(image, ax=axis, fraction=0.04)
    figure.tight_layout()
    path = folder / f'heatmap_{name}.png'
    save_figure(figure, path)
    plt.close(figure)
    paths.append(path)
  return paths


def plot_rates(aggregated, keys, name: str, budgets, panel_key: str, folder: pathlib.Path):
  """The fraction of runs whose ``name`` is at most each budget, against the budget: one
  curve per setting, one panel per value of ``panel_key``; ``rate_<name>.png``."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  panels = list(dict.fromkeys(row.get(panel_key) for row in aggregated))
  figure, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False,
                              sharey=True)
  for axis, panel in zip(axes[0], panels):
    for row in aggregated:
      if row.get(panel_key) == panel:
        label = ', '.join(str(row[k]) for k in keys if k != panel_key)
        axis.plot(budgets, [row[f'{name} <= {b}'] for b in budgets], marker='o', label=label)
    axis.set_xscale('log')
    axis.set_xlabel(f'{name} at most (budget)')
    axis.set_title(f'{panel_key}={panel}', fontsize=9)
    axis.grid(True, which='both', alpha=0.3)
    axis.legend(fontsize=7)
  axes[0][0].set_ylabel('fraction of runs')
  figure.tight_layout()
  save_figure(figure, folder / f'rate_{name}.png')
  plt.close(figure)


def plot_curves(runs, keys, name: str, folder: pathlib.Path) -> None:
  """The metric ``name`` of each run's metrics.jsonl against the step, one curve a run
  labelled by its swept values; ``curve_<name>.png``."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  from rnnjax.train import records
  figure, axis = plt.subplots(figsize=(6.4, 4.0))
  for run in runs:
    lines = [line for line in records.read_metrics(folder / run['name']) if name in line]
    if lines:
      axis.plot([line['step'] for line in lines], [line[name] for line in lines],
                label=', '.join(f'{k}={run["values"].get(k)}' for k in keys))
  axis.set_xlabel('step')
  axis.set_ylabel(name)
  axis.grid(True, alpha=0.3)
  axis.legend(fontsize=7)
  figure.tight_layout()
  save_figure(figure, folder / f'curve_{name}.png')
  plt.close(figure)


def write(runs, keys, experiment, folder: pathlib.Path, command_line: dict | None = None) -> str:
  """Writes the tables (atomically) and plots of a sweep; returns the per-run table.

  Args:
    runs: as ``table_rows``.
    keys: the swept keys.
    experiment: the ``Experiment`` (its ``report`` fields and ``plots``).
    folder: the sweep folder.
    command_line: the fields set for every run by ``--config.NAME=VALUE``, named
      under the Markdown tables' provenance line.
  """
  reported = experiment.report
  rows = _without_empty_columns(table_rows(runs, keys, reported,
                                           experiments.as_dict(experiment.config())))
  heading = provenance_line([run['timing'] for run in runs])
  if command_line:
    heading += ('\n\nSet for every run on the command line: '
                + ', '.join(f'{name}={value!r}' for name, value in command_line.items()) + '.')
  shown = {'status', 'seconds', *keys, *reported}
  table = markdown([{c: v for c, v in row.items() if c in shown or '_profile_k' in c}
                    for row in rows], heading)
  run_folder.write_text(folder / 'results.md', table)
  run_folder.write_text(folder / 'results.csv', csv_text(rows))
  budgets = [(plot[1], budget) for plot in experiment.plots if plot[0] == 'rate'
             for budget in plot[2]]
  if 'seed' in keys and len(keys) > 1:
    aggregated = over_seeds(rows, keys, reported, budgets)
    run_folder.write_text(folder / 'results_over_seeds.md', markdown(aggregated, heading))
    run_folder.write_text(folder / 'results_over_seeds.csv', csv_text(aggregated))
    for plot in experiment.plots:
      if plot[0] == 'rate':
        plot_rates(aggregated, [k for k in keys if k != 'seed'], *plot[1:], folder)
  for plot in experiment.plots:
    if plot[0] == 'curve':
      plot_curves(runs, keys, plot[1], folder)
    elif plot[0] == 'profile' and plot[1] in keys:
      plot_profiles(rows, keys, plot[1], folder / 'gradient_profile.png')
    elif plot[0] == 'heatmap' and plot[2] in keys:
      plot_heatmaps(rows, keys, *plot[1:], folder)
  return table
