"""The tables and plots of a sweep, from its runs' summaries, with their statistics over seeds.

``results.md`` / ``.csv``: one row per run: its swept values, status, the experiment's ``report``
fields, the gradient-norm profiles at the first step and of the final params, and its seconds. When
the seed is swept, ``results_over_seeds.md`` / ``.csv`` give one row per setting
(the swept values but the seed): the number of seeds, how many diverged and failed, for each yes/no
field the count of yes with its 95% Wilson interval, for each number the median and interquartile
range over the seeds where it is finite, and for each budget of a ``rate`` plot the runs whose field
is within it. Each Markdown table opens with the commit and date of its runs and says what its
columns hold. A ratio that underflowed (a gradient-norm profile, an experiment's ``positive`` field,
exactly 0) prints as a bound, ``< 1.2e-38`` (the smallest normal number of the run's dtype), never
as 0. An experiment's ``analyses`` write its own tables from the same runs.

Plots (an experiment's ``plots``): ``('curve', metric)`` a metrics.jsonl metric against the
step, one curve a setting (the median over its seeds, the interquartile range shaded);
``('rate', field, budgets, panel_key)`` the fraction of a setting's runs whose field is at most
each budget; ``('profile', key)`` the profiles, one curve per value of ``key`` (over seeds:
median and band); ``('heatmap', value, x, panels)`` the seed-averaged ``value`` with ``x``
across and the other settings down, one picture per ``panels`` value; ``('points', y, x,
series_key, panel_key)`` one run's ``y`` against its ``x``, a point a run.

References:
  Wilson (1927), "Probable inference, the law of succession, and statistical inference", JASA 22
  (the interval, ``scipy.stats.binomtest``); Fisher's exact test (``scipy.stats.fisher_exact``).
"""

import csv
import io
import math
import pathlib
from typing import Any, NamedTuple, Sequence

import numpy as np

from rnnjax import diagnostics
from rnnjax.train import experiment
from rnnjax.train import records
from rnnjax.train import run_folder

__all__ = ['Rate', 'Spread', 'wilson', 'spread', 'fisher', 'bound', 'pyplot', 'save', 'table',
           'write']

PROFILE_DISTANCES = tuple(str(k) for k in diagnostics.PROFILE_DISTANCES)
_PANELS_A_ROW = 4  # a figure of many settings wraps into rows, readable on a page


class Rate(NamedTuple):
  """k of n runs, with the 95% Wilson interval of the rate k / n."""
  successes: int
  trials: int
  low: float
  high: float


class Spread(NamedTuple):
  """The median and the quartiles of a number over the n runs where it is finite."""
  median: float
  q1: float
  q3: float
  finite: int


def wilson(successes: int, trials: int) -> Rate:
  """``Rate`` of ``successes`` of ``trials`` (NaN bounds for no trials; Wilson (1927))."""
  if not trials:
    return Rate(successes, trials, math.nan, math.nan)
  from scipy import stats
  interval = stats.binomtest(successes, trials).proportion_ci(0.95, method='wilson')
  return Rate(successes, trials, float(interval.low), float(interval.high))


def spread(values: Sequence[Any]) -> Spread:
  """``Spread`` of the finite numbers among ``values`` (quartiles by linear interpolation,
  numpy's default; NaN for none)."""
  finite = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)]
  if not finite:
    return Spread(math.nan, math.nan, math.nan, 0)
  median, q1, q3 = np.percentile(finite, [50, 25, 75])
  return Spread(float(median), float(q1), float(q3), len(finite))


def fisher(first: Rate, second: Rate) -> float:
  """The two-sided p-value of Fisher's exact test that two rates are equal
  (``scipy.stats.fisher_exact`` on the 2 x 2 table of yes and no)."""
  from scipy import stats
  table = [[first.successes, first.trials - first.successes],
           [second.successes, second.trials - second.successes]]
  return float(stats.fisher_exact(table).pvalue)


def bound(dtype: str = 'float32') -> str:
  """How a ratio that underflowed to 0 prints: below the dtype's smallest normal number."""
  return f'< {np.finfo(np.dtype(dtype)).tiny:.2g}'


def _rows(runs: Sequence[dict], keys: Sequence[str], reported: Sequence[str],
          defaults: dict) -> list[dict]:
  """One row per run: the module docstring's columns and the config fields not at ``defaults``."""
  rows = []
  for run in runs:
    summary, timing = run['summary'] or {}, run['timing'] or {}
    row = {'run_folder': run['name'], **{k: run['values'].get(k) for k in keys},
           'status': run['status'], 'regrouped': 'yes' if run.get('regrouped') else '',
           **{name: summary.get(name, math.nan) for name in reported}}
    for when in ('first', 'final'):
      profile = summary.get(f'{when}_profile') or {}
      row.update({f'{when}_profile_k{k}': profile.get(k, math.nan) for k in PROFILE_DISTANCES})
    seconds = timing.get('seconds') or {}
    total, own = seconds.get('total', math.nan), seconds.get('report', 0.0)
    # the group's shared seconds split over its runs, plus the run's own report (measurement)
    row['seconds'] = ((total - own) / timing.get('group_size', 1) + own
                      if isinstance(total, float) else total)
    row['commit'], row['date'] = timing.get('commit', ''), timing.get('date', '')
    row.update({name: value for name, value in experiment.flat(run['config'] or {}).items()
                if name not in row and (name == 'seed' or value != defaults.get(name, ...))})
    rows.append(row)
  empty = lambda v: v is None or v == '' or (isinstance(v, float) and math.isnan(v))
  columns = [c for c in dict.fromkeys(c for row in rows for c in row)
             if not all(empty(row.get(c)) for row in rows)]
  return [{c: row.get(c) for c in columns} for row in rows]


def _settings(rows: Sequence[dict], keys: Sequence[str]) -> list[list[dict]]:
  """The rows by their swept values but the seed (compared by repr), in first-seen order."""
  groups: dict[tuple, list[dict]] = {}
  for row in rows:
    groups.setdefault(tuple(repr(row.get(k)) for k in keys if k != 'seed'), []).append(row)
  return list(groups.values())


def _over_seeds(rows: list[dict], keys: Sequence[str], reported: Sequence[str],
                budgets: Sequence[tuple[str, float]]) -> list[dict]:
  """One row per setting: a ``Rate`` of each yes/no field and budget, else a ``Spread``."""
  profiles = [c for c in dict.fromkeys(c for row in rows for c in row) if '_profile_k' in c]
  aggregated = []
  for members in _settings(rows, keys):
    # .get: a key empty in every row that ended has no column (``_rows``)
    out: dict[str, Any] = {k: members[0].get(k) for k in keys if k != 'seed'}
    ended = [m for m in members if m['status'] in run_folder.ENDED]
    out.update(seeds=len(members), diverged=sum(m['status'] == 'diverged' for m in members),
               failed=len(members) - len(ended))
    for name in reported:  # .get: a field no run has a value of has no column
      values = [m.get(name) for m in ended]
      if values and all(isinstance(v, bool) for v in values):
        out[name] = wilson(sum(bool(v) for v in values), len(values))
      elif any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        out[name] = spread(values)
    for name, budget in budgets:
      out[f'{name} <= {budget}'] = wilson(
          sum(isinstance(m.get(name), (int, float)) and math.isfinite(m[name])
              and m[name] <= budget for m in members), len(members))
    for column in profiles:
      out[column] = spread([m.get(column) for m in ended])
    aggregated.append(out)
  return aggregated


def _format(value: Any, underflow: str = '') -> str:
  """A table cell: '-', a bound, k/n (low-high), median [q1, q3], yes/no or escaped text."""
  if value is None or (isinstance(value, float) and math.isnan(value)) or (
      isinstance(value, Rate) and not value.trials):
    return '-'
  if isinstance(value, Rate):
    return f'{value.successes}/{value.trials} ({value.low:.2f}-{value.high:.2f})'
  if isinstance(value, Spread):
    median, q1, q3 = (_format(v, underflow) for v in (value.median, value.q1, value.q3))
    return median if value.finite < 2 else f'{median} [{q1}, {q3}]'
  if isinstance(value, bool):
    return 'yes' if value else 'no'
  if isinstance(value, float):  # inf prints as inf by .3g
    if value == 0 and underflow:
      return underflow
    return f'{value:.3g}' if abs(value) < 1e-2 or abs(value) >= 1e4 else f'{value:.3f}'
  return ' '.join(str(value).replace('|', '\\|').splitlines())


def _markdown(rows: list[dict], heading: str, positive: Sequence[str] = ()) -> str:
  """The rows as Markdown, a profile one column, an exact 0 of ``positive`` fields a bound."""
  measured = {when: [k for k in PROFILE_DISTANCES
                     if any(f'{when}_profile_k{k}' in row for row in rows)]
              for when in ('first', 'final')}
  cells: list[dict[str, str]] = []
  names: dict[str, str] = {}
  for row in rows:
    dtype = row['dtype'] if row.get('dtype') in ('float64', 'float16', 'bfloat16') else 'float32'
    cell = {}
    for column, value in row.items():
      if '_profile_k' not in column:
        # a statistic over seeds says what it holds (a budget's column says it itself)
        names.setdefault(column, column + (
            ': k of n (95% CI)' if isinstance(value, Rate) and ' <= ' not in column
            else ': median [IQR]' if isinstance(value, Spread) else ''))
        cell[column] = _format(value, bound(dtype) if column in positive else '')
    for when, where in (('first', 'at the first step'), ('final', 'of the final params')):
      values = [row.get(f'{when}_profile_k{k}', math.nan) for k in measured[when]]
      values = [v.median if isinstance(v, Spread) else v for v in values]
      if any(not math.isnan(v) for v in values):
        column = f'{when} profile'
        names.setdefault(column, f'profile {where}, k = {", ".join(measured[when])}' + (
            ' (medians)' if isinstance(row.get(f'{when}_profile_k1'), Spread) else ''))
        cell[column] = ' '.join(_format(v, bound(dtype)) for v in values if not math.isnan(v))
    cells.append(cell)
  columns = list(dict.fromkeys(c for cell in cells for c in cell))
  lines = ([heading, ''] if heading else []) + [
      '| ' + ' | '.join(_format(names[c]) for c in columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell.get(c, '') for c in columns) + ' |' for cell in cells]
  return '\n'.join(lines) + '\n'


def _csv(rows: list[dict]) -> str:
  """The rows as CSV: '<name> rate|yes|of|low|high' of a Rate, 'median|q1|q3|n' of a Spread."""
  flat: list[dict[str, Any]] = [{} for _ in rows]
  for row, cells in zip(rows, flat):
    for column, value in row.items():
      if isinstance(value, Rate):
        value = {'rate': value.successes / value.trials if value.trials else math.nan,
                 'yes': value.successes, 'of': value.trials, 'low': value.low, 'high': value.high}
      elif isinstance(value, Spread):
        value = dict(zip(('median', 'q1', 'q3', 'n'), value))
      cells.update({f'{column} {part}': v for part, v in value.items()}
                   if isinstance(row[column], (Rate, Spread)) else {column: value})
  out = io.StringIO()
  writer = csv.DictWriter(out, fieldnames=list(dict.fromkeys(c for row in flat for c in row)))
  writer.writeheader()
  writer.writerows(flat)
  return out.getvalue()


def save(figure: Any, path: pathlib.Path) -> None:
  """Writes the figure as PNG (120 dpi) atomically (``run_folder.write``) and closes it."""
  import matplotlib.pyplot as plt  # not pyplot(): a switch to Agg closes every figure
  data = io.BytesIO()
  figure.tight_layout()
  figure.savefig(data, dpi=120, format='png')
  run_folder.write(path, data.getvalue())
  plt.close(figure)


def table(rows: list[dict], heading: str, folder: pathlib.Path, name: str,
          positive: Sequence[str] = ()) -> str:
  """Writes ``rows`` (values, ``Rate``s and ``Spread``s) as ``<name>.md`` and ``<name>.csv``
  in ``folder`` (atomically); returns the Markdown. For an experiment's ``analyses``."""
  markdown = _markdown(rows, heading, positive)
  run_folder.write(folder / f'{name}.md', markdown)
  run_folder.write(folder / f'{name}.csv', _csv(rows))
  return markdown


def pyplot() -> Any:
  """matplotlib.pyplot on its file-only backend (Agg), imported when a plot is drawn."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  return plt


def _draw(path: pathlib.Path, panels: dict[str, list], xlabel: str, ylabel: str,
          log: str = '', title: str = '') -> None:
  """Panels sharing y, ``_PANELS_A_ROW`` a row: title -> curves ``(xs, ys, style[, (lows,
  highs)])``; ``log``: 'x', 'y'."""
  columns = min(len(panels), _PANELS_A_ROW)
  rows = -(-len(panels) // columns)
  figure, axes = pyplot().subplots(rows, columns, figsize=(4.5 * columns + 1.5, 4.0 * rows),
                                    squeeze=False, sharey=True)
  for axis in axes.flat[len(panels):]:
    axis.set_visible(False)
  for axis, (name, curves) in zip(axes.flat, panels.items()):
    for xs, ys, style, *band in curves:
      line, = axis.plot(xs, ys, **style)
      if band:
        axis.fill_between(xs, *band[0], color=line.get_color(), alpha=0.2, linewidth=0)
    axis.set_xscale('log' if 'x' in log else 'linear')
    axis.set_yscale('log' if 'y' in log else 'linear')
    axis.set_xlabel(xlabel)
    axis.set_title(name, fontsize=9)
    axis.grid(True, which='both', alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
      axis.legend(fontsize=7)
  for axis in axes[:, 0]:
    axis.set_ylabel(ylabel)
  if title:
    figure.suptitle(title, fontsize=10)
  save(figure, path)


def _median_curve(xs: Sequence[float], series: list[list[float]], style: dict, band: bool,
                  positive: bool = False) -> list[tuple]:
  """The median of ``series`` at ``xs``, its IQR the band (finite positive ones: ``positive``)."""
  points = [(x, s.median, s.q1, s.q3) for x, s in zip(xs, map(spread, zip(*series)))
            if not positive or (math.isfinite(s.median) and s.median > 0)]
  if not points:
    return []
  xs, medians, lows, highs = zip(*points)
  return [(xs, medians, style, *([(lows, highs)] if band else []))]


def _plot_profiles(rows: list[dict], keys: Sequence[str], curve_key: str,
                   folder: pathlib.Path) -> None:
  """``gradient_profile.png``: a panel a setting (solid: the final params, dashed: step 1)."""
  panel_keys = [k for k in keys if k not in (curve_key, 'seed')]
  curves = list(dict.fromkeys(row[curve_key] for row in rows))
  panels: dict[str, list] = {}
  for members in _settings(rows, keys):
    values = members[0]
    panel = panels.setdefault(', '.join(f'{k}={values[k]}' for k in panel_keys), [])
    color = pyplot().get_cmap('viridis')(curves.index(values[curve_key]) / max(len(curves) - 1, 1))
    for when, dashes in (('final', '-'), ('first', '--')):
      series = [[m.get(f'{when}_profile_k{k}', math.nan) for k in PROFILE_DISTANCES]
                for m in members if m['status'] in run_folder.ENDED]
      style = dict(linestyle=dashes, color=color, marker='o', markersize=3,
                   label=f'{curve_key}={values[curve_key]}' if when == 'final' else None)
      panel += _median_curve(diagnostics.PROFILE_DISTANCES, series, style, len(members) > 1,
                             positive=True)
  _draw(folder / 'gradient_profile.png', panels, 'distance k (steps)',
        '||dL/dh_{T-k}|| / ||dL/dh_T||', 'y', 'gradient-norm profile (solid: last step, dashed: '
        'first step; over seeds: median, interquartile range shaded)')


def _plot_heatmaps(rows: list[dict], keys: Sequence[str], value: str, x: str,
                   panels: Sequence[str], folder: pathlib.Path) -> None:
  """The ``('heatmap', value, x, panels)`` plots: ``heatmap_<panel values>.png``."""
  panels = [k for k in panels if k in keys]
  down = [k for k in keys if k not in (x, 'seed', *panels)]
  for panel in dict.fromkeys(tuple(row[k] for k in panels) for row in rows):
    members = [row for row in rows if tuple(row[k] for k in panels) == panel]
    columns = list(dict.fromkeys(row[x] for row in members))
    labels = list(dict.fromkeys(tuple(row[k] for k in down) for row in members))
    cells: dict[tuple, list[float]] = {}  # (label, column) -> the finite values of its runs
    for row in members:
      if row['status'] in run_folder.ENDED and not math.isnan(float(row[value])):
        cells.setdefault((tuple(row[k] for k in down), row[x]), []).append(float(row[value]))
    grid = [[sum(cells[label, column]) / len(cells[label, column]) if (label, column) in cells
             else math.nan for column in columns] for label in labels]
    name = ','.join(f'{k}={v}' for k, v in zip(panels, panel)) or 'all'
    figure, axis = pyplot().subplots(figsize=(1.2 * len(columns) + 3.5, 0.45 * len(labels) + 1.5))
    image = axis.imshow(grid, vmin=0, vmax=1, cmap='viridis', aspect='auto')
    axis.set_xticks(range(len(columns)), [str(c) for c in columns])
    axis.set_yticks(range(len(labels)), [' '.join(map(str, label)) for label in labels], fontsize=8)
    axis.set_xlabel(x)
    for i, grid_row in enumerate(grid):
      for j, mean in enumerate(grid_row):
        axis.text(j, i, '-' if math.isnan(mean) else f'{mean:.2f}', ha='center', va='center',
                  color='white' if math.isnan(mean) or mean < 0.5 else 'black', fontsize=8)
    axis.set_title(f'{value} (mean over seeds), {name}', fontsize=9)
    figure.colorbar(image, ax=axis, fraction=0.04)
    save(figure, folder / f'heatmap_{name}.png')


def _plot_rates(aggregated: list[dict], keys: Sequence[str], name: str,
                budgets: Sequence[float], panel_key: str, folder: pathlib.Path) -> None:
  """``rate_<name>.png``: a curve a setting, its 95% Wilson interval shaded."""
  panels: dict[str, list] = {}
  for row in aggregated:
    label = ', '.join(str(row[k]) for k in keys if k != panel_key)
    rates = [row[f'{name} <= {b}'] for b in budgets]
    panels.setdefault(f'{panel_key}={row.get(panel_key)}', []).append(
        (budgets, [r.successes / r.trials for r in rates], dict(marker='o', label=label),
         ([r.low for r in rates], [r.high for r in rates])))
  _draw(folder / f'rate_{name}.png', panels, f'{name} at most (budget)', 'fraction of runs', 'x')


def _plot_curves(runs: Sequence[dict], keys: Sequence[str], name: str,
                 folder: pathlib.Path) -> None:
  """The ``('curve', name)`` plot, a curve labelled by its setting: ``curve_<name>.png``."""
  curves = []
  for members in _settings([dict(run['values'], run=run) for run in runs], keys):
    series = [{line['step']: line[name] for line in records.read_metrics(folder / m['run']['name'])
               if name in line} for m in members]
    steps = sorted({step for values in series for step in values})
    label = ', '.join(f'{k}={members[0][k]}' for k in keys if k != 'seed')
    curves += _median_curve(steps, [[values.get(step, math.nan) for step in steps]
                                    for values in series], dict(label=label), len(members) > 1)
  _draw(folder / f'curve_{name}.png', {'': curves}, 'step', name)


def _plot_points(rows: list[dict], y: str, x: str, series_key: str, panel_key: str,
                 folder: pathlib.Path) -> None:
  """``points_<y>.png``: y on a log scale where all are positive; runs without both left out."""
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


def write(runs: Sequence[dict], keys: Sequence[str], kind: experiment.Experiment,
          folder: pathlib.Path, command_line: dict | None = None) -> str:
  """Writes the tables (atomically) and plots of a sweep; returns the per-run table.

  Args:
    runs: per run, a dict of its folder's ``name``, ``values`` (its swept values), ``config`` (as
      config.json holds it), ``summary`` and ``timing`` (None where missing), ``status`` and
      optionally ``regrouped`` (True: a column and a note say so).
    keys: the swept keys, in order.
    kind: the ``Experiment`` (its ``report`` fields and ``plots``).
    folder: the sweep folder.
    command_line: the fields set for every run by ``--config.NAME=VALUE``, named
      under the Markdown tables' provenance line.

  Raises:
    OSError: a table or plot cannot be written.
  """
  rows = _rows(runs, keys, kind.report, experiment.flat(experiment.as_dict(kind.config())))
  timings = [run['timing'] for run in runs if run['timing']]
  heading = '' if not timings else 'Measured at commit {} on {} (host {}).'.format(
      *(', '.join(sorted({t.get(k, 'unknown') for t in timings}))
        for k in ('commit', 'date', 'host')))
  if command_line:
    heading += ('\n\nSet for every run on the command line: '
                + ', '.join(f'{name}={value!r}' for name, value in command_line.items()) + '.')
  if any(run.get('regrouped') for run in runs):
    heading = '\n\n'.join(filter(None, [heading, 'A run marked regrouped trained part of its steps in another vmapped group '
                'than its first (its group changed or failed, or --max_group_size shrank): its '
                'floats may differ from those of an uninterrupted sweep.']))
  shown = {'status', 'regrouped', 'seconds', *keys, *kind.report}
  seeds = len({row.get('seed') for row in rows})
  markdown = _markdown(
      [{c: v for c, v in row.items() if c in shown or '_profile_k' in c} for row in rows],
      '\n\n'.join(filter(None, [heading, f'One run a row ({seeds} seed(s)).'])), kind.positive)
  run_folder.write(folder / 'results.md', markdown)
  run_folder.write(folder / 'results.csv', _csv(rows))
  aggregated: list[dict] | None = None  # the rows over seeds, where the seed is swept
  if 'seed' in keys:
    budgets = [(plot[1], budget) for plot in kind.plots if plot[0] == 'rate' for budget in plot[2]]
    aggregated = _over_seeds(rows, keys, kind.report, budgets)
    table(aggregated, '\n\n'.join(filter(None, [
        heading, 'One setting a row, over its seeds: a number is the median [interquartile '
        'range] of the seeds where it is finite, a yes/no field the count of yes with its 95% '
        'Wilson interval.'])), folder, 'results_over_seeds', kind.positive)
  for plot in kind.plots:
    if plot[0] == 'rate' and aggregated is not None:
      _plot_rates(aggregated, [k for k in keys if k != 'seed'], plot[1], plot[2], plot[3], folder)
    elif plot[0] == 'curve':
      _plot_curves(runs, keys, plot[1], folder)
    elif plot[0] == 'profile' and plot[1] in keys:
      _plot_profiles(rows, keys, plot[1], folder)
    elif plot[0] == 'heatmap' and plot[2] in keys:
      _plot_heatmaps(rows, keys, plot[1], plot[2], plot[3], folder)
    elif plot[0] == 'points':
      _plot_points(rows, plot[1], plot[2], plot[3], plot[4], folder)
  for analysis in kind.analyses:
    analysis(runs, keys, folder, heading)
  return markdown
