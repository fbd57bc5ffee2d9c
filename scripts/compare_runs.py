"""Compares two measurements of one sweep's table, run by run: what reproduces across machines.

  python scripts/compare_runs.py COMMITTED.csv RERUN.csv OUTPUT.md [--column=NAME ...]

Writes OUTPUT.md: one row per run (joined on ``run_folder``) with each named column (default:
validation_bits_per_char and the profile at initialization at k = 10) in both tables and
their absolute difference ('equal': bit for bit), then per setting group (the runs alike in clipping and
truncation) the largest difference; the heading names both tables' provenance lines.
"""

import csv
import pathlib
import sys

COLUMNS = ('validation_bits_per_char', 'first_profile_k10')
GROUPED_BY = ('clipping', 'truncation')


def _rows(path: pathlib.Path) -> dict[str, dict]:
  with open(path) as table:
    return {row['run_folder']: row for row in csv.DictReader(table)}


def _provenance(path: pathlib.Path) -> str:
  markdown = path.with_suffix('.md')
  if not markdown.exists():
    return str(path)
  return next((line for line in markdown.read_text().splitlines()
               if line.startswith('Measured at')), str(path))


def compare(committed: pathlib.Path, rerun: pathlib.Path,
            columns: tuple[str, ...] = COLUMNS) -> str:
  """The Markdown of the module docstring."""
  first, second = _rows(committed), _rows(rerun)
  names = [name for name in first if name in second]
  header = ['run'] + [f'{c} {which}' for c in columns
                     for which in ('committed', 'rerun', 'difference')]
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
  largest: dict[tuple, dict[str, float]] = {}
  for name in names:
    cells = [name]
    group = tuple(first[name].get(key, '') for key in GROUPED_BY)
    for column in columns:
      a, b = float(first[name][column]), float(second[name][column])
      cells += [f'{a:.6g}', f'{b:.6g}', f'{abs(a - b):.3g}' if a != b else 'equal']
      worst = largest.setdefault(group, {})
      worst[column] = max(worst.get(column, 0.0), abs(a - b))
    lines.append('| ' + ' | '.join(cells) + ' |')
  summary = ['| ' + ' | '.join(GROUPED_BY) + ' | ' + ' | '.join(
      f'largest difference of {c}' for c in columns) + ' |', '|' + '---|' * (len(GROUPED_BY) + len(
          columns))]
  for group, worst in largest.items():
    summary.append('| ' + ' | '.join(group) + ' | ' + ' | '.join(
        f'{worst[c]:.3g}' if worst[c] else 'equal' for c in columns) + ' |')
  return '\n\n'.join([
      f'Committed: {_provenance(committed)} Rerun: {_provenance(rerun)}',
      f'{len(names)} runs in both tables.', '\n'.join(lines), '\n'.join(summary)]) + '\n'


def main(argv: list[str]) -> None:
  if len(argv) < 4:
    sys.exit(__doc__)
  columns = tuple(a.split('=', 1)[1] for a in argv[4:] if a.startswith('--column=')) or COLUMNS
  pathlib.Path(argv[3]).write_text(compare(pathlib.Path(argv[1]), pathlib.Path(argv[2]),
                                           columns))


if __name__ == '__main__':
  main(sys.argv)
