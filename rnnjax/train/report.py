"""The tables and plots of a sweep, from its runs' summaries.

``results.md`` / ``.csv``: one row per run: its swept values, status, the experiment's
``report`` fields, the gradient-norm profiles at the first step and of the final params, and
its seconds. When the seed is swept with other keys, ``results_over_seeds.md`` / ``.csv`` give
one row per setting: runs, diverged, failed, the rate of each yes/no field and the median of
each number where finite. Each Markdown table opens with the commit and date of its runs.

Plots (an experiment's ``plots``): ``('curve', metric)`` a metrics.jsonl metric against the
step, one curve a run; ``('rate', field, budgets, panel_key)`` the fraction of a setting's runs
whose field is at most each budget (also columns of the seed table); ``('profile', key)`` the
profiles, one curve per value of ``key``; ``('heatmap', value, x, panels)`` the seed-averaged
``value`` with ``x`` across and the other settings down, one picture per ``panels`` value;
``('points', y, x, series_key, panel_key)`` one run's ``y`` against its ``x``, a point a run.
"""

import csv
import io
import math
import pathlib
import statistics
from typing import Any, Sequence

from rnnjax import diagnostics
from rnnjax.train import experiment as experiments
from rnnjax.train import folder as run_folder
from rnnjax.train import records

__all__ = ['write']

PROFILE_DISTANCES = tuple(str(k) for k in diagnostics.PROFILE_DISTANCES)


def _rows(runs: Sequence[dict], keys: Sequence[str], reported: Sequence[str],
          defaults: dict) -> list[dict]:
  """One row per run (``write``'s ``runs``): folder, swept values, status, reported fields,
  the profiles, its share of its job's seconds, commit and date, its seed and its other
  fields that differ from ``defaults`` (flat); NaN where missing."""
  rows = []
  for run in runs:
    summary, timing = run['summary'] or {}, run['timing'] or {}
    row = {'run_folder': run['name'], **{k: run['values'].get(k) for k in keys},
           'status': run['status'], **{name: summary.get(name, math.nan) for name in reported}}
    for when in ('first', 'final'):
      profile = summary.get(f'{when}_profile') or {}
      row.update({f'{when}_profile_k{k}': profile.get(k, math.nan) for k in PROFILE_DISTANCES})
    total = (timing.get('seconds') or {}).get('total', math.nan)
    row['seconds'] = total / timing.get('group_size', 1) if isinstance(total, float) else total
    row['commit'], row['date'] = timing.get('commit', ''), timing.get('date', '')
    row.update({name: value for name, value in experiments.flat(run['config'] or {}).items()
                if name not in row and (name == 'seed' or value != defaults.get(name, ...))})
    rows.append(row)
  empty = lambda v: v is None or v == '' or (isinstance(v, float) and math.isnan(v))
  columns = [c for c in dict.fromkeys(c for row in rows for c in row)
             if not all(empty(row.get(c)) for row in rows)]
  return [{c: row.get(c) for c in columns} for row in rows]


def _over_seeds(rows: list[dict], keys: Sequence[str], reported: Sequence[str],
                budgets: Sequence[tuple[str, float]]) -> list[dict]:
  """One row per combination of the swept keys but the seed; for each ``(field, budget)``
  the fraction of runs whose ``field`` is at most the budget."""
  settings = [k for k in keys if k != 'seed']
  groups: dict[tuple, list[dict]] = {}
  for row in rows:
    groups.setdefault(tuple(repr(row[k]) for k in settings), []).append(row)
  aggregated = []
  for members in groups.values():
    out = {k: members[0][k] for k in settings}
    out['runs'] = len(members)
    out['diverged'] = sum(m['status'] == 'diverged' for m in members)
    out['failed'] = sum(m['status'] not in run_folder.ENDED for m in members)
    for name in reported:  # .get: a field no run has a value of has no column
      values = [m.get(name) for m in members if m['status'] in run_folder.ENDED]
      if values and all(isinstance(v, bool) for v in values):
        out[f'{name} rate'] = sum(bool(v) for v in values) / len(values)
      else:
        finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
        out[f'{name} median'] = statistics.median(finite) if finite else math.nan
    for name, budget in budgets:
      reached = [m[name] for m in members if isinstance(m.get(name), (int, float))
                 and math.isfinite(m[name]) and m[name] <= budget]
      out[f'{name} <= {budget}'] = len(reached) / len(members)
    aggregated.append(out)
  return aggregated


def _format(value: Any) -> str:
  if isinstance(value, bool):
    return 'yes' if value else 'no'
  if isinstance(value, float):
    if math.isnan(value):
      return '-'
    if math.isinf(value):
      return 'inf' if value > 0 else '-inf'
    return f'{value:.3g}' if abs(value) < 1e-2 or abs(value) >= 1e4 else f'{value:.3f}'
  return str(value)


def _markdown(rows: list[dict], heading: str) -> str:
  """The rows as Markdown; each profile becomes one column of space-separated values."""
  measured = {when: [k for k in PROFILE_DISTANCES
                     if any(f'{when}_profile_k{k}' in row for row in rows)]
              for when in ('first', 'final')}
  cells = []
  for row in rows:
    cell = {c: _format(v) for c, v in row.items() if '_profile_k' not in c}
    for when, where in (('first', 'at the first step'), ('final', 'of the final params')):
      values = [row.get(f'{when}_profile_k{k}', math.nan) for k in measured[when]]
      if any(not math.isnan(v) for v in values):
        cell[f'profile {where}, k = {", ".join(measured[when])}'] = ' '.join(
            _format(v) for v in values if not math.isnan(v))
    cells.append(cell)
  columns = list(dict.fromkeys(c for cell in cells for c in cell))
  lines = ([heading, ''] if heading else []) + [
      '| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell.get(c, '') for c in columns) + ' |' for cell in cells]
  return '\n'.join(lines) + '\n'


def _csv(rows: list[dict]) -> str:
  out = io.StringIO()
  writer = csv.DictWriter(out, fieldnames=list(dict.fromkeys(c for row in rows for c in row)))
  writer.writeheader()
  writer.writerows(rows)
  return out.getvalue()


def _save(figure: Any, path: pathlib.Path) -> None:
  """Writes the figure as PNG (120 dpi) atomically (``folder.write``) and closes it."""
  import matplotlib.pyplot as plt
  data = io.BytesIO()
  figure.tight_layout()
  figure.savefig(data, dpi=120, format='png')
  run_folder.write(path, data.getvalue())
  plt.close(figure)


def _pyplot() -> Any:
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def _draw(path: pathlib.Path, panels: dict[str, list], xlabel: str, ylabel: str,
          log: str = '', title: str = '') -> None:
  """One row of panels sharing y: ``panels`` maps a panel's title to its curves
  ``(xs, ys, matplotlib style)``; ``log``: the axes ('x', 'y') on a log scale."""
  figure, axes = _pyplot().subplots(1, len(panels), figsize=(4.5 * len(panels) + 1.5, 4.0),
                                    squeeze=False, sharey=True)
  for axis, (name, curves) in zip(axes[0], panels.items()):
    for xs, ys, style in curves:
      axis.plot(xs, ys, **style)
    axis.set_xscale('log' if 'x' in log else 'linear')
    axis.set_yscale('log' if 'y' in log else 'linear')
    axis.set_xlabel(xlabel)
    axis.set_title(name, fontsize=9)
    axis.grid(True, which='both', alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
      axis.legend(fontsize=7)
  axes[0][0].set_ylabel(ylabel)
  if title:
    figure.suptitle(title, fontsize=10)
  _save(figure, path)


def _plot_profiles(rows: list[dict], keys: Sequence[str], curve_key: str,
                   folder: pathlib.Path) -> None:
  """||dL/dh_{T-k}|| / ||dL/dh_T|| against k, one curve per value of ``curve_key``, one panel
  per combination of the other swept values; solid: final params, dashed: the first step."""
  panel_keys = [k for k in keys if k != curve_key]
  curves = list(dict.fromkeys(row[curve_key] for row in rows))
  panels: dict[str, list] = {}
  for row in rows:
    panel = panels.setdefault(', '.join(f'{k}={row[k]}' for k in panel_keys), [])
    color = _pyplot().get_cmap('viridis')(curves.index(row[curve_key]) / max(len(curves) - 1, 1))
    for when, style in (('final', '-'), ('first', '--')):
      values = [(int(k), row.get(f'{when}_profile_k{k}', math.nan)) for k in PROFILE_DISTANCES]
      points = [(k, v) for k, v in values if math.isfinite(v) and v > 0]
      if points:
        panel.append((*zip(*points), dict(
            linestyle=style, color=color, marker='o', markersize=3,
            label=f'{curve_key}={row[curve_key]}' if when == 'final' else None)))
  _draw(folder / 'gradient_profile.png', panels, 'distance k (steps)',
        '||dL/dh_{T-k}|| / ||dL/dh_T||', 'y',
        'gradient-norm profile (solid: last step, dashed: first step)')


def _plot_heatmaps(rows: list[dict], keys: Sequence[str], value: str, x: str,
                   panels: Sequence[str], folder: pathlib.Path) -> None:
  """The seed-averaged ``value``, ``x`` across and the other settings down:
  ``heatmap_<panel values>.png`` per combination of ``panels``."""
  panels = [k for k in panels if k in keys]
  down = [k for k in keys if k not in (x, 'seed', *panels)]
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
    name = ','.join(f'{k}={v}' for k, v in zip(panels, panel)) or 'all'
    path = folder / f'heatmap_{name}.png'
    figure, axis = _pyplot().subplots(figsize=(1.2 * len(columns) + 3.5, 0.45 * len(labels) + 1.5))
    image = axis.imshow(grid, vmin=0, vmax=1, cmap='viridis', aspect='auto')
    axis.set_xticks(range(len(columns)), [str(c) for c in columns])
    axis.set_yticks(range(len(labels)), [' '.join(map(str, label)) for label in labels],
                    fontsize=8)
    axis.set_xlabel(x)
    for i, grid_row in enumerate(grid):
      for j, mean in enumerate(grid_row):
        axis.text(j, i, '-' if math.isnan(mean) else f'{mean:.2f}', ha='center', va='center',
                  color='white' if math.isnan(mean) or mean < 0.5 else 'black', fontsize=8)
    axis.set_title(f'{value} (mean over seeds), {name}', fontsize=9)
    figure.colorbar(image, ax=axis, fraction=0.04)
    _save(figure, path)


def _plot_rates(aggregated: list[dict], keys: Sequence[str], name: str,
                budgets: Sequence[float], panel_key: str, folder: pathlib.Path) -> None:
  """The fraction of runs whose ``name`` is at most each budget, against the budget: one
  curve per setting, one panel per value of ``panel_key``; ``rate_<name>.png``."""
  panels: dict[str, list] = {}
  for row in aggregated:
    label = ', '.join(str(row[k]) for k in keys if k != panel_key)
    panels.setdefault(f'{panel_key}={row.get(panel_key)}', []).append(
        (budgets, [row[f'{name} <= {b}'] for b in budgets], dict(marker='o', label=label)))
  _draw(folder / f'rate_{name}.png', panels, f'{name} at most (budget)', 'fraction of runs',
        'x')


def _plot_curves(runs: Sequence[dict], keys: Sequence[str], name: str,
                 folder: pathlib.Path) -> None:
  """The metric ``name`` of each run's metrics.jsonl against the step, one curve a run
  labelled by its swept values; ``curve_<name>.png``."""
  curves = []
  for run in runs:
    lines = [line for line in records.read_metrics(folder / run['name']) if name in line]
    if lines:
      curves.append(([line['step'] for line in lines], [line[name] for line in lines],
                     dict(label=', '.join(f'{k}={run["values"].get(k)}' for k in keys))))
  _draw(folder / f'curve_{name}.png', {'': curves}, 'step', name)


def _plot_points(rows: list[dict], y: str, x: str, series_key: str, panel_key: str,
                 folder: pathlib.Path) -> None:
  """``y`` against ``x``, a point a run, one series per value of ``series_key`` and one panel
  per value of ``panel_key`` (y on a log scale where every y is positive); runs where either
  is not a finite number are left out. ``points_<y>.png``."""
  panels: dict[str, dict[Any, list]] = {}
  for row in rows:
    try:
      point = (float(row[x]), float(row[y]))
    except (KeyError, TypeError, ValueError):
      continue
    if all(math.isfinite(v) for v in point):
      panel = panels.setdefault(f'{panel_key}={row.get(panel_key)}', {})
      panel.setdefault(row.get(series_key), []).append(point)
  if not panels:  # no run measured both (e.g. no Lyapunov exponent without measure_lyapunov)
    return
  _draw(folder / f'points_{y}.png',
        {name: [(*zip(*sorted(points)), dict(marker='o', linestyle='',
                                             label=f'{series_key}={value}'))
                for value, points in series.items()] for name, series in panels.items()},
        x, y, 'y' if all(p[1] > 0 for series in panels.values() for points in series.values()
                         for p in points) else '')


def write(runs: Sequence[dict], keys: Sequence[str], experiment: experiments.Experiment,
          folder: pathlib.Path, command_line: dict | None = None) -> str:
  """Writes the tables (atomically) and plots of a sweep; returns the per-run table.

  Args:
    runs: per run, a dict of its folder's ``name``, ``values`` (its swept values),
      ``config`` (as config.json holds it), ``summary`` and ``timing`` (None where
      missing) and ``status``.
    keys: the swept keys, in order.
    experiment: the ``Experiment`` (its ``report`` fields and ``plots``).
    folder: the sweep folder.
    command_line: the fields set for every run by ``--config.NAME=VALUE``, named
      under the Markdown tables' provenance line.

  Raises:
    OSError: a table or plot cannot be written.
  """
  reported = experiment.report
  rows = _rows(runs, keys, reported, experiments.flat(experiments.as_dict(experiment.config())))
  timings = [run['timing'] for run in runs if run['timing']]
  heading = '' if not timings else 'Measured at commit {} on {} (host {}).'.format(
      *(', '.join(sorted({t.get(k, 'unknown') for t in timings}))
        for k in ('commit', 'date', 'host')))
  if command_line:
    heading += ('\n\nSet for every run on the command line: '
                + ', '.join(f'{name}={value!r}' for name, value in command_line.items()) + '.')
  shown = {'status', 'seconds', *keys, *reported}
  table = _markdown([{c: v for c, v in row.items() if c in shown or '_profile_k' in c}
                     for row in rows], heading)
  run_folder.write(folder / 'results.md', table)
  run_folder.write(folder / 'results.csv', _csv(rows))
  if 'seed' in keys and len(keys) > 1:
    budgets = [(plot[1], budget) for plot in experiment.plots if plot[0] == 'rate'
               for budget in plot[2]]
    aggregated = _over_seeds(rows, keys, reported, budgets)
    run_folder.write(folder / 'results_over_seeds.md', _markdown(aggregated, heading))
    run_folder.write(folder / 'results_over_seeds.csv', _csv(aggregated))
    for plot in experiment.plots:
      if plot[0] == 'rate':
        _plot_rates(aggregated, [k for k in keys if k != 'seed'], plot[1], plot[2], plot[3],
                    folder)
  for plot in experiment.plots:
    if plot[0] == 'curve':
      _plot_curves(runs, keys, plot[1], folder)
    elif plot[0] == 'profile' and plot[1] in keys:
      _plot_profiles(rows, keys, plot[1], folder)
    elif plot[0] == 'heatmap' and plot[2] in keys:
      _plot_heatmaps(rows, keys, plot[1], plot[2], plot[3], folder)
    elif plot[0] == 'points':
      _plot_points(rows, plot[1], plot[2], plot[3], plot[4], folder)
  return table
