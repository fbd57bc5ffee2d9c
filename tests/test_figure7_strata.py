"""Figure 7 (Pascanu et al., 2013) per initialization: docs/results/temporal_order/methods_by_init
and methods_stratified, recomputed from the committed results.csv, and the exact stratified
test (``temporal_order.exact_stratified``) on tables computed by hand."""

import csv
import fractions
import math
import pathlib

import pytest
from scipy import stats

from experiments import temporal_order

FOLDER = pathlib.Path(__file__).resolve().parent.parent / 'docs' / 'results' / 'temporal_order'
TABLES = ('methods_by_init', 'methods_stratified')


def test_exact_stratified_of_two_hand_computed_strata():
  """Two strata, each 2/2 solved against 0/2: with every margin 2 of 4, a stratum's a is 0, 1
  or 2 with P = C(2, x) C(2, 2 - x) / C(4, 2) = 1/6, 4/6, 1/6; S = a_1 + a_2 is 0..4 with
  P = (1, 8, 18, 8, 1) / 36; S = 4 was observed, and the values as unlikely are 0 and 4:
  p = 2/36 = 1/18 (one stratum alone: Fisher's two-sided p of 2/2 against 0/2, 1/3)."""
  assert temporal_order.exact_stratified([(2, 0, 0, 2), (2, 0, 0, 2)]) == pytest.approx(1 / 18)
  assert temporal_order.exact_stratified([(2, 0, 0, 2)]) == pytest.approx(1 / 3)
  # a stratum that no run solved (or every run) has one table given its margins: no evidence
  assert temporal_order.exact_stratified([(2, 0, 0, 2), (0, 3, 0, 3)]) == pytest.approx(1 / 3)
  assert temporal_order.exact_stratified([(0, 5, 0, 5)]) == 1.0


def test_exact_stratified_of_one_stratum_is_fishers_two_sided_test():
  for table in [(0, 5, 3, 2), (4, 1, 0, 5), (5, 0, 2, 3), (3, 7, 6, 4), (1, 9, 1, 9)]:
    a, b, c, d = table
    assert temporal_order.exact_stratified([table]) == pytest.approx(
        stats.fisher_exact([[a, b], [c, d]]).pvalue, rel=1e-9)


def test_exact_stratified_of_the_figure_7_counts_by_hand():
  """T = 50, MSGD-CR against MSGD-C: basic 5/5 against 2/5 (a in 2..5, P = 21, 105, 105, 21
  over 252), smart 5/5 against 4/5 (a = 4 or 5, 1/2 each); S = 10 observed, P(S = 6) =
  P(S = 10) = 21/504 and every other S more likely: p = 42/504 = 1/12. T = 100, MSGD-CR
  against MSGD-C: 5/5 against 0/5 (P(a = 5) = P(a = 0) = 1/252) and 5/5 against 3/5 (P(a = 3)
  = P(a = 5) = 56/252): p = 2 x 56 / 252^2 = 112/63504. T = 100, MSGD-C against MSGD: the
  basic stratum (0/5 against 0/5) adds nothing: the smart one's Fisher's p, 1/6."""
  assert temporal_order.exact_stratified([(5, 0, 2, 3), (5, 0, 4, 1)]) == pytest.approx(1 / 12)
  assert temporal_order.exact_stratified([(5, 0, 0, 5), (5, 0, 3, 2)]) == pytest.approx(
      float(fractions.Fraction(112, 63504)))
  assert temporal_order.exact_stratified([(0, 5, 0, 5), (3, 2, 0, 5)]) == pytest.approx(1 / 6)
  # T = 50, MSGD-C against MSGD: 2/5 and 4/5 against 0/5: P(S = 6) = P(S = 0) = 56 x 6 / 252^2
  assert temporal_order.exact_stratified([(2, 3, 0, 5), (4, 1, 0, 5)]) == pytest.approx(2 / 189)


@pytest.fixture(scope='module')
def recomputed(tmp_path_factory):
  folder = tmp_path_factory.mktemp('strata')
  temporal_order.strata_from_csv(FOLDER / 'results.csv', folder)
  return folder


@pytest.mark.parametrize('name', TABLES)
def test_committed_tables_are_those_of_the_committed_results_csv(recomputed, name):
  """The tables (their rows and the CSV) as results.csv gives them today; the heading names
  results.csv and the commit its runs were measured at."""
  committed, fresh = (FOLDER / f'{name}.md').read_text(), (recomputed / f'{name}.md').read_text()
  rows = lambda text: [line for line in text.splitlines() if line.startswith('|')]
  assert rows(committed) == rows(fresh)
  assert (FOLDER / f'{name}.csv').read_text() == (recomputed / f'{name}.csv').read_text()
  commits = {row['commit'] for row in csv.DictReader((FOLDER / 'results.csv').open())}
  assert 'Computed from `results.csv`' in committed
  assert all(f'commit {commit}' in committed for commit in commits)


def test_per_init_counts_and_p_values(recomputed):
  by_init = {(int(r['length']), r['init'], r['method']): r
             for r in csv.DictReader((recomputed / 'methods_by_init.csv').open())}
  solved = {key: f"{r['solved yes']}/{r['solved of']}" for key, r in by_init.items()}
  assert [solved[(50, init, m)] for init in ('basic_tanh', 'smart_tanh')
          for m in ('MSGD', 'MSGD-C', 'MSGD-CR')] == ['0/5', '2/5', '5/5', '0/5', '4/5', '5/5']
  assert [solved[(100, init, m)] for init in ('basic_tanh', 'smart_tanh')
          for m in ('MSGD', 'MSGD-C', 'MSGD-CR')] == ['0/5', '0/5', '5/5', '0/5', '3/5', '5/5']
  basic = by_init[(50, 'basic_tanh', 'MSGD-C')]  # solved at 71,000 and 171,000 updates
  assert [float(basic[f'updates to solve: {s}']) for s in ('median', 'min', 'max')] == [
      121000, 71000, 171000]
  tests = {(int(r['length']), r['test']): r
           for r in csv.DictReader((recomputed / 'methods_stratified.csv').open())}
  p = lambda length, test, column: float(tests[(length, test)][column])
  expected = {  # (T, test): (basic Fisher, smart Fisher, stratified, pooled Fisher), by hand
      (50, 'MSGD-C against MSGD'): (4 / 9, 1 / 21, 2 / 189, 0.01084),
      (50, 'MSGD-CR against MSGD-C'): (1 / 6, 1.0, 1 / 12, 0.08669),
      (100, 'MSGD-C against MSGD'): (1.0, 1 / 6, 1 / 6, 0.2105),
      (100, 'MSGD-CR against MSGD-C'): (2 / 252, 4 / 9, 112 / 63504, 0.003096)}
  for (length, test), values in expected.items():
    got = [p(length, test, c) for c in ("basic_tanh: Fisher's p", "smart_tanh: Fisher's p",
                                        'exact stratified p (both inits)', "pooled: Fisher's p")]
    assert got == pytest.approx(values, rel=1e-3), (length, test)
  # the pooled p reproduce methods.md's
  for row in csv.DictReader((FOLDER / 'methods.csv').open()):
    for test in ('MSGD-C against MSGD', 'MSGD-CR against MSGD-C'):
      assert math.isclose(p(int(row['length']), test, "pooled: Fisher's p"),
                          float(row[f"Fisher's p, {test}"]), rel_tol=1e-12)


def test_the_sweep_analysis_writes_the_same_tables_from_runs(tmp_path):
  """``strata`` (an analysis of the sweep) from runs whose summaries are results.csv's rows."""
  runs = []
  for row in csv.DictReader((FOLDER / 'results.csv').open()):
    runs.append({'status': row['status'], 'values': {k: row[k] for k in (
        'length', 'method', 'init', 'seed')}, 'config': {
            'mode': 'fixed', 'length': int(row['length']), 'method': row['method'],
            'init': row['init']}, 'summary': {
                'success': row['success'] == 'True',
                'solved_step': float(row['solved_step']) if row['solved_step'] else None,
                **{name: float(row[name]) for name in (
                    'train_loss_nats', 'test_error', 'final_measured_spectral_radius',
                    'max_grad_norm')}}})
  keys = ['length', 'method', 'init', 'seed']
  temporal_order.strata(runs, keys, tmp_path, 'Measured.')
  for name in TABLES:
    assert (tmp_path / f'{name}.csv').read_text() == (FOLDER / f'{name}.csv').read_text()
  temporal_order.strata(runs, ['length', 'method', 'seed'], tmp_path / 'one', '')
  assert not (tmp_path / 'one').exists()  # the init not swept: no table
