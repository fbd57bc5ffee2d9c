"""Executors through the one interface: one defined here and registered in one line."""

import signal


from experiments import char_lm
from experiments.configs.char_lm import get_config
from rnnjax.train import executors
from rnnjax.train import job as jobs
from rnnjax.train import sweep


class InProcess:
  """Each job in this process, one after another."""
  OPTIONS: dict = {}
  where, parts = 'in this process', 1

  def __init__(self, settings: executors.Settings):
    self.stopping: list[int] = []

  def run(self, jobs_to_run, on_end, on_progress, say):
    for job in jobs_to_run:
      on_end(job, jobs.run_job(job, self.stopping, lambda step, job=job: on_progress(job, step)))

  def stop(self):
    self.stopping.append(signal.SIGINT)


def test_an_executor_is_a_class_and_a_registry_line(tmp_path, shared_data_dir, monkeypatch,
                                                     capsys):
  monkeypatch.setitem(executors.EXECUTORS, 'in_process', InProcess)
  fixed = dict(hidden_size=8, embedding_size=4, batch_size=4, truncation=8, steps=30,
               log_every=10, checkpoint_every=10, sample_length=5)
  runs = [dict(fixed, spectral_radius=radius) for radius in (0.5, 1.5, -1.0)]
  configs = sweep.run_configs(get_config(), runs, {})
  code = sweep.sweep(char_lm.EXPERIMENT, configs, runs, tmp_path / 'sweep',
                     executor='in_process')
  output = capsys.readouterr()
  assert code == 1 and '2 to train in 1 job(s) in this process' in output.out
  assert 'failed: spectral_radius=-1.0: config.spectral_radius' in output.err
  table = (tmp_path / 'sweep' / 'results.md').read_text()
  assert table.count('| finished |') == 2 and table.count('| failed |') == 1
