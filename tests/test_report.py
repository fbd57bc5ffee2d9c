"""The statistics of a sweep's tables: intervals, quartiles, bounds for underflow, escaping;
the layout of its plots."""

import csv
import math
import struct

import pytest

from rnnjax.train import experiment
from rnnjax.train import report


def test_wilson_interval_of_4_of_5_and_of_none():
  rate = report.wilson(4, 5)
  assert (rate.successes, rate.trials) == (4, 5)
  assert (round(rate.low, 2), round(rate.high, 2)) == (0.38, 0.96)  # the textbook interval
  assert report.wilson(0, 5).low == 0.0 and round(report.wilson(0, 5).high, 3) == 0.434
  assert math.isnan(report.wilson(0, 0).low)


def test_spread_is_over_the_finite_numbers():
  assert report.spread([1.0, 2.0, 3.0, 4.0, math.nan, None, math.inf]) == report.Spread(
      2.5, 1.75, 3.25, 4)
  assert report.spread([]).finite == 0


def test_fisher_exact_test():
  # 5/5 against 0/5: p = 2 / C(10, 5) = 0.00794
  assert report.fisher(report.wilson(5, 5), report.wilson(0, 5)) == pytest.approx(0.0079365,
                                                                                   rel=1e-4)
  assert report.fisher(report.wilson(3, 5), report.wilson(3, 5)) == pytest.approx(1.0)


def test_an_underflowed_ratio_prints_as_a_bound_never_0():
  assert report._format(0.0, report.bound()) == '< 1.2e-38'
  assert report._format(0.0, report.bound('float64')) == '< 2.2e-308'
  assert report._format(0.0) == '0'  # a count or a fraction: 0 is 0
  assert report._format(report.Spread(0.0, 0.0, 1e-3, 5), report.bound()) == (
      '< 1.2e-38 [< 1.2e-38, 0.001]')


def test_a_table_prints_an_underflowed_profile_as_its_dtypes_bound():
  rows = [{'name': name, 'dtype': dtype, 'first_profile_k1': 0.5, 'first_profile_k2': 0.0}
          for name, dtype in (('single', 'float32'), ('double', 'float64'))]
  table = report._markdown(rows, '')
  assert table.splitlines()[2:] == ['| single | float32 | 0.500 < 1.2e-38 |',
                                    '| double | float64 | 0.500 < 2.2e-308 |']


def test_cells_that_would_break_a_markdown_row_are_escaped():
  table = report._markdown([{'name': 'a|b\nc', 'value': 1.0}], '')
  assert table.splitlines()[2] == '| a\\|b c | 1.000 |'


def test_a_rate_and_a_spread_in_markdown_and_csv():
  rows = [{'T': 50, 'seeds': 5, 'success': report.wilson(4, 5),
           'error': report.Spread(0.01, 0.005, 0.02, 5)}]
  table = report._markdown(rows, '')
  assert '| T | seeds | success: k of n (95% CI) | error: median [IQR] |' in table
  assert '| 50 | 5 | 4/5 (0.38-0.96) | 0.010 [0.005, 0.020] |' in table
  flat, = csv.DictReader(report._csv(rows).splitlines())
  assert (flat['success yes'], flat['success of'], flat['success rate']) == ('4', '5', '0.8')
  assert flat['error median'] == '0.01' and flat['error q3'] == '0.02'


@pytest.mark.parametrize('kind, name', [('fields', 'seconds'), ('fields', 'status'),
                                        ('report', 'seconds')])
def test_an_experiment_cannot_name_a_column_the_harness_writes(kind, name):
  fields = {name: experiment.Field(0)} if kind == 'fields' else {}
  report_fields = (name,) if kind == 'report' else ()
  with pytest.raises(ValueError, match=f"'{name}' is a column the harness writes itself"):
    experiment.Experiment(name='mine', task=None, fields=fields, report=report_fields)


def test_a_swept_key_empty_in_every_run_that_ended_still_groups_the_seeds():
  """A partly-run sweep: the swept key is '' in every run that has ended (its column dropped)."""
  rows = [{'radius': 1.0, 'seed': seed, 'status': 'finished', 'rate': 0.5 + seed}
          for seed in range(3)]
  aggregated = report._over_seeds(rows, ['radius', 'trained_run', 'seed'], ['rate'], [])
  assert len(aggregated) == 1 and aggregated[0]['seeds'] == 3
  assert aggregated[0]['trained_run'] is None and aggregated[0]['rate'].median == 1.5


def test_a_runs_seconds_are_its_share_of_the_group_and_its_own_report():
  """A group of 4 spends 8 s together; each run's report (its measurement) takes 1 s more."""
  timing = {'group_size': 4, 'seconds': {'setup': 2.0, 'train_steps': 6.0, 'report': 1.0,
                                         'total': 9.0}}
  run = {'name': 'a', 'values': {}, 'config': {}, 'summary': {}, 'timing': timing,
         'status': 'finished'}
  row, = report._rows([run], [], [], {})
  assert row['seconds'] == 8.0 / 4 + 1.0


def test_a_sweep_of_seeds_alone_has_its_row_over_seeds(tmp_path):
  """Three seeds and nothing else swept: one row over them, the median and quartiles."""
  kind = experiment.load('experiments.char_lm')
  runs = [{'name': f'seed={seed}', 'values': {'seed': seed}, 'config': {'seed': seed},
           'summary': {'status': 'finished', 'validation_bits_per_char': 2.0 + seed},
           'timing': None, 'status': 'finished'} for seed in range(3)]
  report.write(runs, ['seed'], kind, tmp_path)
  rows = list(csv.DictReader(open(tmp_path / 'results_over_seeds.csv')))
  assert len(rows) == 1 and rows[0]['seeds'] == '3'
  assert '3.000 [2.500, 3.500]' in (tmp_path / 'results_over_seeds.md').read_text()


def test_a_figure_of_many_settings_wraps_its_panels_into_rows(tmp_path):
  """Five panels: two rows of at most ``_PANELS_A_ROW`` (4.5 in a panel, 4 in a row, 120 dpi)."""
  panels = {f'setting {i}': [([1, 2], [1.0, 0.5], {})] for i in range(5)}
  report._draw(tmp_path / 'plot.png', panels, 'k', 'ratio')
  width, height = struct.unpack('>II', (tmp_path / 'plot.png').read_bytes()[16:24])
  assert report._PANELS_A_ROW == 4
  assert (width, height) == ((4.5 * 4 + 1.5) * 120, 2 * 4.0 * 120)
