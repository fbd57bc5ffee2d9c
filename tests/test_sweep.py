"""The sweep launcher: runs in processes, a failed run does not stop the others,
ended runs are skipped on relaunch, and the table and plot are written."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from launch import sweep

TINY_CONFIG = '''
from experiments.configs.char_lm import get_config

def get_sweep():
  fixed = dict(hidden_size=8, embedding_size=4, batch_size=4, truncation=8, steps=3,
               log_every=1, sample_length=5)
  return [dict(fixed, spectral_radius=0.5), dict(fixed, spectral_radius=1.5),
          dict(fixed, spectral_radius=-1.0)]
'''


def run_sweep(config, workdir):
  return subprocess.run(
      [sys.executable, '-m', 'launch.sweep', f'--config={config}', f'--workdir={workdir}',
       '--processes=2'], capture_output=True, text=True, check=True).stdout


def test_sweep_runs_skips_and_tabulates(tmp_path, shared_data_dir):
  config = tmp_path / 'char_lm.py'  # the file name picks experiments.char_lm
  config.write_text(TINY_CONFIG)
  workdir = tmp_path / 'sweep'
  output = run_sweep(config, workdir)
  assert '3 runs (1 failed)' in output
  summaries = {f.name: json.loads((f / 'summary.json').read_text())
               for f in workdir.iterdir() if f.is_dir() and f.name != 'groups'}
  # The three runs went to one vmapped group, which failed on the bad radius; its runs were
  # then tried one by one.
  assert 'radius: expected a finite value >= 0' in (workdir / 'groups' / 'group_0.log').read_text()
  assert sorted(summaries) == ['spectral_radius=-1.0', 'spectral_radius=0.5',
                               'spectral_radius=1.5']
  assert summaries['spectral_radius=-1.0']['status'] == 'failed'
  assert 'radius: expected a finite value >= 0, got -1.0' in summaries['spectral_radius=-1.0']['error']
  for name in ('spectral_radius=0.5', 'spectral_radius=1.5'):
    assert summaries[name]['status'] == 'finished'
    assert summaries[name]['steps_done'] == 3
    assert (workdir / name / 'config.json').exists()
    assert len((workdir / name / 'metrics.jsonl').read_text().splitlines()) == 3
  rows = list(csv.DictReader(open(workdir / 'results.csv')))
  assert [r['spectral_radius'] for r in rows] == ['0.5', '1.5', '-1.0']
  assert [r['status'] for r in rows] == ['finished', 'finished', 'failed']
  assert float(rows[0]['first_profile_k1']) == pytest.approx(
      summaries['spectral_radius=0.5']['first_profile']['1'])
  assert (workdir / 'gradient_profile.png').stat().st_size > 10_000
  table = (workdir / 'results.md').read_text()
  assert table in output

  # Relaunch: the finished runs are not run again, the failed one is; same table.
  finished_log = workdir / 'spectral_radius=0.5' / 'log.txt'
  before = finished_log.stat().st_mtime_ns
  again = run_sweep(config, workdir)
  assert finished_log.stat().st_mtime_ns == before
  assert (workdir / 'results.md').read_text() == table
  assert '3 runs (1 failed)' in again


def test_runs_that_differ_in_vmappable_keys_share_a_group(tmp_path, shared_data_dir):
  config = tmp_path / 'char_lm.py'
  config.write_text(TINY_CONFIG.replace('-1.0', '1.0'))
  workdir = tmp_path / 'sweep'
  output = run_sweep(config, workdir)
  assert '3 runs (0 failed)' in output
  group = json.loads((workdir / 'groups' / 'group_0.json').read_text())
  assert [entry['overrides']['spectral_radius'] for entry in group] == [0.5, 1.5, 1.0]
  summaries = [json.loads((workdir / f'spectral_radius={r}' / 'summary.json').read_text())
               for r in (0.5, 1.5, 1.0)]
  assert [s['group_size'] for s in summaries] == [3, 3, 3]
  # Each run's own init: the spectral radius at step 1 follows its config.
  first_radii = [json.loads((workdir / f'spectral_radius={r}' / 'metrics.jsonl').read_text()
                            .splitlines()[0])['spectral_radius'] for r in (0.5, 1.5, 1.0)]
  assert first_radii[0] < first_radii[2] < first_radii[1]


def test_a_misspelt_sweep_key_is_an_error_before_any_run(tmp_path):
  config = tmp_path / 'char_lm.py'
  config.write_text(TINY_CONFIG.replace('spectral_radius=1.5', 'spectral_radus=1.5'))
  result = subprocess.run([sys.executable, '-m', 'launch.sweep', f'--config={config}',
                           f'--workdir={tmp_path / "sweep"}'], capture_output=True, text=True)
  assert result.returncode != 0
  assert "get_sweep: run 1 sets ['spectral_radus'], which the config does not have" in result.stderr
  assert not any((tmp_path / 'sweep').glob('*/summary.json'))


def test_interrupted_sweep_stops_its_runs_and_resumes(tmp_path, shared_data_dir):
  config = tmp_path / 'char_lm.py'
  config.write_text(TINY_CONFIG.replace('steps=3', 'steps=100000').replace('-1.0', '1.0'))
  workdir = tmp_path / 'sweep'
  sweep_process = subprocess.Popen(
      [sys.executable, '-m', 'launch.sweep', f'--config={config}', f'--workdir={workdir}'],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  deadline = time.time() + 120
  while not list(workdir.glob('*/metrics.jsonl')) and time.time() < deadline:
    time.sleep(0.5)
  sweep_process.send_signal(signal.SIGTERM)
  output, _ = sweep_process.communicate(timeout=60)
  assert sweep_process.returncode == 130
  assert 'interrupted: 0 of 3 runs have ended and are kept' in output
  children = subprocess.run(['pgrep', '-f', f'--group={workdir}'], capture_output=True, text=True)
  assert children.stdout == ''  # no experiment process left behind


def test_swept_keys_and_names():
  runs = [{'a': 1, 'b': 'x', 'c': 0}, {'a': 2, 'b': 'x', 'c': 0}, {'a': 2, 'b': 'y', 'c': 0}]
  assert sweep.swept_keys(runs) == ['a', 'b']
  assert sweep.run_name(runs[2], ['a', 'b']) == 'a=2,b=y'


def test_default_sweep_is_the_main_job():
  module = sweep.load_config_module(os.path.join('experiments', 'configs', 'char_lm.py'))
  runs = module.get_sweep()
  assert len(runs) == 20
  assert sweep.swept_keys(runs) == ['spectral_radius', 'clipping', 'truncation']
  assert sorted({r['spectral_radius'] for r in runs}) == [0.5, 0.9, 1.0, 1.1, 1.5]
  assert {r['clipping'] for r in runs} == {'none', 'global_norm'}
  assert {r['truncation'] for r in runs} == {16, 64}


def test_missing_config_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match='config: no config file at'):
    sweep.load_config_module(str(tmp_path / 'nope.py'))
