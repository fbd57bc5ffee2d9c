"""Measures what a run folder takes on disk, by its parts, and how it grows with steps and runs.

  python scripts/run_disk.py [--workdir=/tmp/run_disk] [--out=docs/results/disk/run_disk.json]

Trains experiments/configs/char_lm.py with small settings (``SETTINGS``) for 1 step and for 100
steps (``python -m launch.run``), and the same 100-step run as a sweep of ``RUNS`` runs
(``python -m launch.sweep``: a sweep's runs also keep log.txt, the sweep its tables and jobs);
``du -b`` (apparent sizes, folders included) of each part of each run folder: checkpoint/ (orbax
keeps the last two steps), metrics.jsonl, tensorboard/, log.txt and the small JSON files; and
from the two runs what each logged step and each kept checkpoint step adds.
Writes the numbers, with the settings and the commit, to ``--out`` (docs/sweeps.md cites it).
"""

import json
import pathlib
import shutil
import subprocess
import sys

from absl import app
from absl import flags

ROOT = pathlib.Path(__file__).resolve().parent.parent
flags.DEFINE_string('workdir', '/tmp/run_disk', 'Where the runs are trained (cleared first).')
flags.DEFINE_string('out', str(ROOT / 'docs' / 'results' / 'disk' / 'run_disk.json'),
                    'The results file.')
FLAGS = flags.FLAGS

SETTINGS = {'hidden_size': 32, 'embedding_size': 8, 'batch_size': 4, 'truncation': 16,
            'sample_length': 10, 'log_every': 10, 'checkpoint_every': 10}
RUNS = 2  # the sweep's runs (seeds)
PARTS = ('checkpoint', 'metrics.jsonl', 'tensorboard', 'log.txt', 'config.json', 'summary.json',
         'timing.json', 'devices.json')
SWEEP_CONFIG = '''
from experiments.configs.char_lm import get_config


def get_sweep():
  return [dict(SETTINGS, steps=100, seed=seed) for seed in range(RUNS)]
'''


def du(path: pathlib.Path) -> int:
  """``du -b -s``: the apparent bytes of a file or a folder and all it holds (0: none)."""
  if not path.exists():
    return 0
  return int(subprocess.run(['du', '-b', '-s', str(path)], capture_output=True, text=True,
                            check=True).stdout.split()[0])


def parts(folder: pathlib.Path) -> dict:
  """A run folder's bytes by part, the rest ('other': the folder itself, its lock) and in all;
  the steps its checkpoint keeps and the lines of its metrics.jsonl."""
  sizes = {name: du(folder / name) for name in PARTS}
  sizes['total'] = du(folder)
  sizes['other'] = sizes['total'] - sum(sizes[name] for name in PARTS)
  sizes['checkpoint_steps_kept'] = sum(path.name.isdigit()
                                       for path in (folder / 'checkpoint').iterdir())
  sizes['metrics_lines'] = len((folder / 'metrics.jsonl').read_text().splitlines())
  return sizes


def growth(one: dict, many: dict) -> dict:
  """What a run adds per logged step (metrics.jsonl, tensorboard/) and per kept checkpoint."""
  lines = many['metrics_lines'] - one['metrics_lines']
  return {'checkpoint_a_kept_step': round(one['checkpoint'] / one['checkpoint_steps_kept']),
          'metrics_a_logged_step': round((many['metrics.jsonl'] - one['metrics.jsonl']) / lines),
          'tensorboard_a_logged_step': round((many['tensorboard'] - one['tensorboard']) / lines)}


def run(*command: str) -> None:
  subprocess.run([sys.executable, '-m', *command], cwd=ROOT, check=True, capture_output=True)


def main(argv: list[str]) -> None:
  del argv
  workdir = pathlib.Path(FLAGS.workdir)
  shutil.rmtree(workdir, ignore_errors=True)
  workdir.mkdir(parents=True)
  flags_of = [f'--config.{name}={value}' for name, value in SETTINGS.items()]
  record = {'settings': dict(SETTINGS, config='experiments/configs/char_lm.py'),
            'commit': subprocess.run(['git', 'describe', '--always', '--dirty=+changes'],
                                     cwd=ROOT, capture_output=True, text=True).stdout.strip(),
            'runs': {}}
  for steps in (1, 100):
    folder = workdir / f'steps_{steps}'
    run('launch.run', '--config=experiments/configs/char_lm.py', f'--workdir={folder}',
        f'--config.steps={steps}', *flags_of)
    record['runs'][f'run_{steps}_steps'] = parts(folder)
  record['growth'] = growth(record['runs']['run_1_steps'], record['runs']['run_100_steps'])
  config = workdir / 'sweep_config.py'
  config.write_text(SWEEP_CONFIG.replace('SETTINGS', repr(SETTINGS)).replace('RUNS', str(RUNS)))
  sweep = workdir / 'sweep'
  run('launch.sweep', f'--config={config}', f'--workdir={sweep}', '--processes=1')
  index = json.loads((sweep / 'runs.json').read_text())
  record['runs']['sweep_run_100_steps'] = parts(sweep / sorted(index)[0])
  record['sweep'] = {'runs': RUNS, 'total': du(sweep), 'jobs': du(sweep / '.jobs'),
                     'run_folders': sum(du(sweep / name) for name in index)}
  record['sweep']['tables_and_index'] = (record['sweep']['total'] - record['sweep']['jobs']
                                         - record['sweep']['run_folders'] - du(sweep / '.lock'))
  out = pathlib.Path(FLAGS.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(record, indent=2) + '\n')
  print(json.dumps(record, indent=2))


if __name__ == '__main__':
  app.run(main)
