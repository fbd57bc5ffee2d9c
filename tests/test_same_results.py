"""The same results whatever happens: a sweep killed at several points and launched again ends
with every run's params, metrics and summary bit-equal to those of an uninterrupted sweep.

A run's floats depend on the size of the vmapped group it trains in (XLA compiles another
program for another size): here a run trained alone ends 6e-8 away from the same run trained in
a group of three. So the groups are part of the plan (``plan.partition``, ``groups.json``)."""

import csv
import json
import pathlib
import shutil
import signal

import jax
import numpy as np
import pytest

from rnnjax.train import checkpoints
from rnnjax.train import plan
from rnnjax.train import records
from rnnjax.train import sweep

from test_sweep import launch, run_sweep, wait_until

CONFIG = '''
from experiments.configs.char_lm import get_config

def get_sweep():
  fixed = dict(hidden_size=32, embedding_size=8, batch_size=8, truncation=16, steps=STEPS,
               log_every=10, checkpoint_every=10, sample_length=5)
  return [dict(fixed, spectral_radius=radius) for radius in (0.5, 1.0, 1.5)]
'''
NAMES = [f'spectral_radius={radius}' for radius in (0.5, 1.0, 1.5)]
UNTIMED = ('seconds', 'commit', 'date')  # the columns of results.csv that may differ


def outcome(workdir: pathlib.Path) -> dict:
  """Every run's final params (numpy), metrics lines and summary; the table but its timing."""
  runs = {}
  for name in NAMES:
    _, params = checkpoints.final_params(workdir / name)
    runs[name] = ([np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(params)],
                  records.read_metrics(workdir / name),
                  json.loads((workdir / name / 'summary.json').read_text()))
  with open(workdir / 'results.csv') as table:
    rows = [{k: v for k, v in row.items() if k not in UNTIMED} for row in csv.DictReader(table)]
  return {'runs': runs, 'table': rows}


def assert_bit_equal(got: dict, expected: dict) -> None:
  assert got['table'] == expected['table']
  for name in NAMES:
    params, lines, summary = got['runs'][name]
    want_params, want_lines, want_summary = expected['runs'][name]
    assert all(a.dtype == b.dtype and np.array_equal(a, b)
               for a, b in zip(params, want_params, strict=True)), name
    assert lines == want_lines, name
    assert summary == want_summary, name


@pytest.mark.slow
def test_a_sweep_killed_at_several_points_ends_bit_equal_to_an_uninterrupted_one(
    tmp_path, shared_data_dir):
  config = tmp_path / 'sweep.py'
  config.write_text(CONFIG.replace('STEPS', '300'))
  reference = tmp_path / 'uninterrupted'
  code, _, errors = run_sweep(config, reference, '--processes=2')
  assert code == 0, errors
  groups = json.loads((reference / sweep.GROUPS).read_text())['groups']
  assert sorted(len(group) for group in groups) == [1, 2]  # 3 runs cut for 2 processes
  expected = outcome(reference)

  workdir = tmp_path / 'interrupted'
  first = launch(config, workdir, '--processes=2')  # killed -9 in the middle of its steps
  wait_until(lambda: (workdir / sweep.GROUPS).exists(), 120)
  pair, = [group for group in json.loads((workdir / sweep.GROUPS).read_text())['groups']
           if len(group) == 2]
  wait_until(lambda: all(len(checkpoints.saved_steps(workdir / name)) == 2 for name in pair),
             300)
  first.send_signal(signal.SIGKILL)
  first.communicate()
  # As if the kill had landed while the pair saved: one member has the newer step, one not.
  steps = [checkpoints.saved_steps(workdir / name) for name in pair]
  newest = min(s[-1] for s in steps)
  shutil.rmtree(workdir / pair[1] / checkpoints.CHECKPOINTS / str(newest))
  code, output, errors = run_sweep(config, workdir, '--processes=1')  # other processes: the
  assert code == 0, errors  # recorded groups are kept all the same
  assert 'another vmapped group' not in output
  assert 'regrouped' not in (workdir / 'results.md').read_text()

  # As if killed while the pair wrote its summaries, then while the tables were written.
  (workdir / pair[1] / 'summary.json').unlink()
  (workdir / 'results.md').unlink()
  (workdir / 'results.csv').unlink()
  code, output, errors = run_sweep(config, workdir, '--processes=2')
  assert code == 0, errors
  assert '1 that ended ride along in their recorded groups' in output
  assert_bit_equal(outcome(workdir), expected)


def test_a_relaunch_keeps_the_recorded_groups_and_names_the_runs_it_cannot(tmp_path):
  from experiments import char_lm
  from experiments.configs import char_lm as char_lm_config
  runs = [{'spectral_radius': 0.5 + i / 10} for i in range(5)]
  names = plan.folder_names(runs, ['spectral_radius'])
  configs = sweep.run_configs(char_lm_config.get_config(), runs, {})
  plans = plan.plan(char_lm.EXPERIMENT, configs, [tmp_path / name for name in names])
  cut = lambda plans, recorded, homeless=(), max_group_size=0, parts=1: plan.partition(
      char_lm.EXPERIMENT, plans, names, recorded, homeless, max_group_size, parts)
  first = cut(plans, [], parts=2)
  assert first.jobs == [[2, 3, 4], [0, 1]]  # the most work first
  assert sorted(first.groups) == [names[:2], names[2:]]
  assert first.regrouped == first.homeless == []
  # a relaunch on one process, its runs at other checkpoint steps: the same groups
  resumed = [run._replace(action='resume', step=10 * i) for i, run in enumerate(plans)]
  again = cut(resumed, first.groups)
  assert sorted(again.jobs) == sorted(first.jobs) and again.groups == first.groups
  # a member ended: it rides along; a group whose runs all ended is no job
  ended = [run._replace(action='ended') if i in (0, 1, 2) else run
           for i, run in enumerate(resumed)]
  assert sorted(cut(ended, first.groups).jobs) == [[2, 3, 4]]
  # a changed member: it trains again from the start, its group mates are regrouped
  changed = [run._replace(action='changed') if i == 4 else run for i, run in enumerate(resumed)]
  split = cut(changed, first.groups)
  assert split.regrouped == [2, 3] and [0, 1] in split.jobs and split.homeless == []
  assert sorted(split.groups) == sorted([names[:2], [names[2]], [names[3]], [names[4]]])
  # a smaller --max_group_size than a recorded group: that group is cut anew
  smaller = cut(resumed, first.groups, max_group_size=2)
  assert smaller.regrouped == [2, 3, 4] and [0, 1] in smaller.jobs


def test_what_is_left_of_a_broken_group_is_regrouped_when_it_trains_again(tmp_path):
  """Group [2, 3, 4]: 4 changes while 3 has ended, so 2 and 4 are cut anew and 3 is homeless;
  when 3 trains again later (its summary lost), it is regrouped too, not kept alone."""
  from experiments import char_lm
  from experiments.configs import char_lm as char_lm_config
  runs = [{'spectral_radius': 0.5 + i / 10} for i in range(5)]
  names = plan.folder_names(runs, ['spectral_radius'])
  plans = plan.plan(char_lm.EXPERIMENT, sweep.run_configs(char_lm_config.get_config(), runs, {}),
                    [tmp_path / name for name in names])
  recorded = [names[:2], names[2:]]
  actions = {0: 'ended', 1: 'ended', 2: 'resume', 3: 'ended', 4: 'changed'}
  now = [run._replace(action=actions[i], step=20) for i, run in enumerate(plans)]
  broken = plan.partition(char_lm.EXPERIMENT, now, names, recorded)
  assert broken.regrouped == [2] and broken.homeless == [names[3]]
  assert names[3] not in {name for group in broken.groups for name in group}
  later = [run._replace(action='resume') if i == 3 else run._replace(action='ended')
           for i, run in enumerate(now)]
  again = plan.partition(char_lm.EXPERIMENT, later, names, broken.groups, broken.homeless)
  assert again.regrouped == [3] and again.homeless == [] and again.jobs == [[3]]
  # a lost record (groups.json removed or damaged after a launch): every run that resumes
  # from a checkpoint is regrouped, a run that starts anew is not
  lost = [run._replace(action='resume', step=10 * i) for i, run in enumerate(plans)]
  assert plan.partition(char_lm.EXPERIMENT, lost, names, None).regrouped == [1, 2, 3, 4]


def test_a_regrouped_run_is_marked_in_the_table_and_others_are_not(tmp_path):
  from rnnjax.train import experiment
  from rnnjax.train import report
  kind = experiment.load('experiments.char_lm')
  runs = [{'name': f'seed={seed}', 'values': {'seed': seed}, 'config': {'seed': seed},
           'summary': {'status': 'finished'}, 'timing': None, 'status': 'finished',
           'regrouped': seed == 1} for seed in range(3)]
  (tmp_path / 'marked').mkdir()
  report.write(runs, ['seed'], kind, tmp_path / 'marked')
  rows = list(csv.DictReader(open(tmp_path / 'marked' / 'results.csv')))
  assert [row['regrouped'] for row in rows] == ['', 'yes', '']
  text = (tmp_path / 'marked' / 'results.md').read_text()
  assert 'A run marked regrouped trained part of its steps in another vmapped group' in text
  for run in runs:
    run['regrouped'] = False
  (tmp_path / 'plain').mkdir()
  report.write(runs, ['seed'], kind, tmp_path / 'plain')
  assert 'regrouped' not in (tmp_path / 'plain' / 'results.md').read_text()
  assert 'regrouped' not in (tmp_path / 'plain' / 'results.csv').read_text()


def test_provenance_outside_a_git_checkout_names_the_rnnjax_version(tmp_path, monkeypatch):
  import rnnjax
  monkeypatch.chdir(tmp_path)
  assert sweep.provenance()['commit'] == f'rnnjax {rnnjax.__version__}'


def test_a_ride_along_stopped_midway_leaves_its_run_to_resume(tmp_path, shared_data_dir):
  """A group of two ended; one run's last checkpoint and summary are lost (a kill as the group
  saved): the group steps again from step 10, the ended run riding along. Stopped after a
  step, the rider has no summary
  (so any later launch resumes it, not reports it ended); run again, both summaries are as
  before, bit for bit."""
  from experiments import char_lm
  from experiments.configs import char_lm as char_lm_config
  from rnnjax.train import harness
  from rnnjax.train import trainer
  runs = [dict(hidden_size=8, embedding_size=4, batch_size=4, truncation=8, steps=20,
               log_every=10, checkpoint_every=10, sample_length=5, spectral_radius=r)
          for r in (0.5, 1.5)]
  configs = sweep.run_configs(char_lm_config.get_config(), runs, {})
  folders = [tmp_path / 'rider', tmp_path / 'lost']
  harness.run_group(char_lm.EXPERIMENT, configs, folders)
  before = [(folder / 'summary.json').read_bytes() for folder in folders]
  (folders[1] / 'summary.json').unlink()
  shutil.rmtree(folders[1] / checkpoints.CHECKPOINTS / '20')  # killed while saving step 20
  stepped: list[int] = []
  with pytest.raises(trainer.Interrupted):  # stopped after the group's first step, 11
    harness.run_group(char_lm.EXPERIMENT, configs, folders, stop_requested=lambda: bool(stepped),
                      on_progress=stepped.append)
  assert stepped == [11]
  assert not (folders[0] / 'summary.json').exists()
  assert [run.action for run in plan.plan(char_lm.EXPERIMENT, configs, folders)] == [
      'resume', 'resume']
  harness.run_group(char_lm.EXPERIMENT, configs, folders)
  assert [(folder / 'summary.json').read_bytes() for folder in folders] == before


def test_a_lost_or_damaged_record_of_groups_is_said(tmp_path, capsys):
  assert sweep._record(tmp_path, launched=False) == ([], [], set())  # a first launch
  assert sweep._record(tmp_path, launched=True)[0] is None  # removed since a launch
  for damaged in ('{"groups": [["a", "b"], ["b"]]}', '{"groups": [["a"]', '[1]'):
    (tmp_path / sweep.GROUPS).write_text(damaged)
    assert sweep._record(tmp_path, launched=True)[0] is None
    assert f'note: {tmp_path / sweep.GROUPS} is damaged' in capsys.readouterr().out
  (tmp_path / sweep.GROUPS).write_text(
      '{"groups": [["a", "b"]], "homeless": ["c"], "regrouped": ["d"]}')
  assert sweep._record(tmp_path, launched=True) == ([['a', 'b']], ['c'], {'d'})
