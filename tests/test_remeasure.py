"""scripts/remeasure.py's run hours: every launch of a resumed run counts."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location('remeasure', ROOT / 'scripts' / 'remeasure.py')
remeasure = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(remeasure)

# A run trained in a job of 2 runs, killed after 100.9 s, then resumed alone for 30 s.
LOG = """
=== 2026-12-04 10:00:00 job 0: 2 run(s) on cores [0]: worker python -m rnnjax.train.job (pid 1)
2026-12-04 10:00:10,100 INFO run 0: step 1/100  loss 1.3829 nats
2026-12-04 10:01:40,900 INFO run 0: step 50/100  loss 1.3 nats
  a traceback's line without a time
=== 2026-12-04 11:00:00 job 1: 1 run(s) on cores [1]: worker python -m rnnjax.train.job (pid 2)
2026-12-04 11:00:30,000 INFO run 0: step 100/100  loss 1.2 nats
"""


def test_run_seconds_sums_each_launch_share_of_its_job(tmp_path):
  (log := tmp_path / 'log.txt').write_text(LOG)
  assert remeasure.run_seconds(log) == 100 / 2 + 30  # whole seconds, as the header


def test_run_seconds_of_a_launch_that_logged_nothing_is_zero(tmp_path):
  (log := tmp_path / 'log.txt').write_text('\n=== 2026-12-04 10:00:00 job 0: 1 run(s) on x\n')
  assert remeasure.run_seconds(log) == 0.0
  assert remeasure.run_seconds(tmp_path / 'absent.txt') == 0.0  # a folder only launch.run trained


LONGEST_UNCHECKPOINTED = 10_000  # updates a study's run may train between checkpoints


def test_every_studys_long_runs_checkpoint_so_a_stopped_study_resumes():
  """A study stopped (a killed process, a closed session) resumes each run from its last
  checkpoint: no run trains more than ``LONGEST_UNCHECKPOINTED`` updates without one."""
  import sys
  sys.path.insert(0, str(ROOT))
  for study, (config_file, _, _) in remeasure.STUDIES.items():
    spec = importlib.util.spec_from_file_location(study, ROOT / 'experiments' / 'configs' /
                                                  config_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    steps = max(run.get('steps', config.steps) for run in module.get_sweep())
    every = config.checkpoint_every or steps
    assert steps <= LONGEST_UNCHECKPOINTED or every <= LONGEST_UNCHECKPOINTED, (
        study, steps, config.checkpoint_every)
