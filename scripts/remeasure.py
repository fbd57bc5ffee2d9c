"""Re-measures the results tables of the README and the docs, each with its study's budget.

  python scripts/remeasure.py [--studies=char_lm,temporal_order] [--workdir=results/remeasure]
  python scripts/remeasure.py --settings_only   # docs/results/<study>/settings.json alone

Each study is its config's sweep (``python -m launch.sweep``, with the budget its config's
docstring states); its page's table, headed by the commit and date it was measured at, is
copied to docs/results/<study>.md, and every table (Markdown and CSV, the analyses' too, but
a file over ``LARGEST`` bytes) and plot the sweep wrote to docs/results/<study>/; the main
job's table also into the README, once every study has run (a table copied in earlier would
mark the next study's commit '+changes'). A study whose sweep fails keeps its old tables.
Beside them, ``settings.json`` holds the settings the study ran with: its config's fields
and, for each field its sweep varies, the values it takes (the numbers a page's protocol
quotes).
Studies that ended are not trained again when the command is run again (the sweep's own
rule), so a long study can be measured in pieces, and its tables written anew by the code of
today.
"""

import csv
import datetime
import importlib
import json
import math
import pathlib
import re
import shutil
import subprocess
import sys

from absl import app
from absl import flags

FLAGS = flags.FLAGS
ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's experiments package (not installed)
# study -> (config file, extra sweep flags, the table its page shows)
STUDIES = {
    'char_lm': ('char_lm.py', (), 'results.md'),
    'char_lm_seeds': ('char_lm_seeds.py', (), 'results_over_seeds.md'),
    'gradient_norms': ('gradient_norms.py', ('--max_group_size=64',), 'gradient_theory.md'),
    'long_range': ('long_range.py', (), 'results_over_seeds.md'),
    'adding_irnn': ('adding_irnn.py', ('--max_group_size=1',), 'results_over_seeds.md'),
    'temporal_order': ('temporal_order.py', ('--max_group_size=1',), 'results_over_seeds.md'),
    'temporal_order_to_200': ('temporal_order_to_200.py', ('--max_group_size=1',),
                              'results_over_seeds.md'),
    'temporal_order_generalization': ('temporal_order_generalization.py', (),
                                      'generalization.md'),
    'temporal_order_omega': ('temporal_order_omega.py', ('--max_group_size=1',),
                             'omega_weights.md'),
    'flossing': ('flossing.py', ('--max_group_size=1',), 'results_over_seeds.md'),
    'ptb_chars_learning_rate': ('ptb_chars_learning_rate.py', (), 'results.md'),
    'ptb_chars': ('ptb_chars.py', (), 'results_over_seeds.md'),
    'ptb_words': ('ptb_words.py', (), 'results_over_seeds.md'),
    'bpe_lm': ('bpe_lm.py', (), 'results_over_seeds.md'),
    'classify': ('classify.py', (), 'results_over_seeds.md'),
    'seq2seq': ('seq2seq.py', (), 'results_over_seeds.md'),
    'parallel_in_time': ('parallel_in_time.py', ('--max_group_size=64',), 'predictability.md'),
    'parallel_in_time_new_seeds': ('parallel_in_time_new_seeds.py', ('--max_group_size=64',),
                                   'criteria.md'),
}
flags.DEFINE_list('studies', list(STUDIES), f'Which studies, of {", ".join(STUDIES)}.')
flags.DEFINE_string('workdir', 'results/remeasure', 'Where the studies\' sweeps run.')
flags.DEFINE_bool('settings_only', False, 'Write each study\'s settings.json and run nothing.')


LARGEST = 400_000  # bytes: a larger file stays in the workdir (a per-run CSV of 1,000s of runs)


def publish(study: str, workdir: pathlib.Path, table: str) -> None:
  """Copies a study's tables and plots into docs/results (and the main job's into the README)."""
  text = (workdir / table).read_text()
  (ROOT / 'docs' / 'results' / f'{study}.md').write_text(text)
  files = ROOT / 'docs' / 'results' / study
  shutil.rmtree(files, ignore_errors=True)
  for path in sorted(workdir.iterdir()):
    if path.suffix in ('.png', '.md', '.csv') and path.stat().st_size <= LARGEST:
      files.mkdir(exist_ok=True)
      shutil.copy(path, files / path.name)
  if study == 'char_lm':
    readme = ROOT / 'README.md'
    readme.write_text(re.sub(r'(<!-- main job table -->\n).*?(<!-- end of the main job table -->)',
                             lambda match: match.group(1) + text + match.group(2),
                             readme.read_text(), flags=re.S))


def run_seconds(log: pathlib.Path) -> float:
  """A run's share of its jobs' wall time over every launch that trained it, in seconds, from
  its log.txt: each job's first line (``=== <date> <time> job <id>: <R> run(s) ...``) to the
  run's last timestamped line before the next job's, divided by the job's R runs. A launch
  killed mid-run counts to its last line; a resumed run's earlier launches count too (the
  ``seconds`` column of a table is the last launch's alone); 0 without a log.txt."""
  total, start, runs, last = 0.0, None, 1, None
  lines = log.read_text(errors='replace').splitlines() if log.is_file() else []
  for line in lines + ['=== end']:
    if line.startswith('=== '):
      if start is not None and last is not None:
        total += max((last - start).total_seconds(), 0.0) / runs
      match = re.match(r'=== (\S+ \S+) job \S+: (\d+) run', line)
      start = datetime.datetime.fromisoformat(match.group(1)) if match else None
      runs, last = int(match.group(2)) if match else 1, None
    elif start is not None and (stamp := re.match(r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d', line)):
      last = datetime.datetime.fromisoformat(stamp.group(0))
  return total


def write_settings(study: str, workdir: pathlib.Path | None = None) -> pathlib.Path:
  """Writes docs/results/<study>/settings.json from the study's config file: ``config`` (its
  get_config(), every field) and ``swept`` (each field its get_sweep() sets: its distinct
  values, in order); with the sweep's ``workdir``, also ``run_hours``: the sum over its runs,
  in hours, of the larger of ``run_seconds`` (every launch through a sweep) and the table's
  ``seconds`` (the last launch, a ``launch.run`` of the folder too), the CPU time the study
  took on a machine that runs one job at a time. Returns the file's path."""
  module = importlib.import_module(f'experiments.configs.{STUDIES[study][0][:-3]}')
  runs = module.get_sweep()
  swept = {key: list(dict.fromkeys(run[key] for run in runs if key in run))
           for key in dict.fromkeys(key for run in runs for key in run)}
  path = ROOT / 'docs' / 'results' / study / 'settings.json'
  path.parent.mkdir(parents=True, exist_ok=True)
  settings = {'config': module.get_config().to_dict(), 'runs': len(runs), 'swept': swept}
  if workdir is not None and (workdir / 'results.csv').is_file():
    with open(workdir / 'results.csv') as file:
      last = {row['run_folder']: float(row.get('seconds') or 0) for row in csv.DictReader(file)}
    settings['run_hours'] = round(sum(
        max(run_seconds(workdir / name / 'log.txt'), seconds if math.isfinite(seconds) else 0)
        for name, seconds in last.items()) / 3600, 2)
  path.write_text(json.dumps(settings, indent=1, default=str) + '\n')
  return path


def main(argv):
  del argv
  unknown = sorted(set(FLAGS.studies) - set(STUDIES))
  if unknown:
    raise app.UsageError(f'--studies: expected some of {list(STUDIES)}, got {unknown}')
  if FLAGS.settings_only:
    for study in FLAGS.studies:
      print(write_settings(study))
    return
  failed, measured = [], []
  for study in FLAGS.studies:
    config, extra, table = STUDIES[study]
    workdir = pathlib.Path(FLAGS.workdir) / study
    print(f'=== {study}', flush=True)
    result = subprocess.run([sys.executable, '-m', 'launch.sweep',
                             f'--config={ROOT / "experiments" / "configs" / config}',
                             f'--workdir={workdir}', *extra], cwd=ROOT)
    if result.returncode == 0:
      measured.append((study, workdir, table))
    else:
      failed.append(study)
  for study, workdir, table in measured:
    publish(study, workdir, table)
    write_settings(study, workdir)
  if failed:
    print(f'failed, their tables kept: {", ".join(failed)}', file=sys.stderr)
    sys.exit(1)


if __name__ == '__main__':
  app.run(main)
