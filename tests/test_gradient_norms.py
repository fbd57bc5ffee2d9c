"""The gradient-norm table: the seed's numbers through the library, a trained run's table,
and the measurement experiment over radii and seeds."""

import csv
import math
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import gradient_norms
from rnnjax import diagnostics
from rnnjax import gradient_tables
from rnnjax import models
from rnnjax.train import checkpoints
from rnnjax.train import report

# The table of docs/reference_numbers.md (the linearised protocol, numpy default_rng(1)).
SEED_TABLE = {0.7: ('8.05e-05', '1.40e-08', '2.28e-12'),
              1.0: ('6.18e-02', '7.61e-03', '1.41e-03'),
              1.3: ('2.43e+01', '7.53e+02', '3.03e+04')}


def test_the_linearised_protocol_gives_the_seed_table_digit_for_digit():
  table = gradient_tables.gradient_norm_table(protocol='linearised')
  assert {rho: tuple(f'{table[rho][k]:.2e}' for k in (20, 40, 60)) for rho in table
          } == SEED_TABLE


def test_a_real_network_vanishes_faster_and_larger_radii_vanish_slower():
  network = gradient_tables.gradient_norm_table((0.7, 1.0, 1.3), (1, 5, 20), 'network',
                                                hidden_size=32, sequences=16)
  linearised = gradient_tables.gradient_norm_table((0.7, 1.0, 1.3), (1, 5, 20), 'linearised',
                                                   hidden_size=32)
  for rho in (0.7, 1.0, 1.3):
    assert network[rho][20] < linearised[rho][20]  # saturated states: tanh' well below 1
    assert network[rho][1] > network[rho][5] > network[rho][20]
  assert network[0.7][20] < network[1.0][20] < network[1.3][20]


def test_given_params_make_one_row_keyed_by_the_requested_radius(monkeypatch):
  """Params whose W_hh measures 1.0000001 in float32: row 1.0 (the radius asked for, or the
  measured one rounded), the measured radius in the row, the row computed once."""
  from rnnjax import cells
  params = cells.init_elman(jax.random.key(3), 8, 8, 'orthogonal', radius=1.0)
  calls = []
  real = diagnostics.state_gradients
  monkeypatch.setattr(diagnostics, 'state_gradients',
                      lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
  for radii in (None, (1.0,)):
    calls.clear()
    table = gradient_tables.gradient_norm_table(radii, (1, 5), params=params, sequences=4)
    assert list(table) == [1.0] and len(calls) == 1
    assert abs(table[1.0]['measured_spectral_radius'] - 1.0) < 1e-6
  with pytest.raises(ValueError, match=r'^radii: expected one radius with params'):
    gradient_tables.gradient_norm_table((0.7, 1.0), (1, 5), params=params)


@pytest.mark.parametrize('kwargs, message', [
    (dict(protocol='exact'), "protocol: expected one of \\('linearised', 'network'\\)"),
    (dict(distances=(0, 5)), r'distances\[0\]: expected an int >= 1, got 0'),
    (dict(distances=()), 'distances: expected at least one distance'),
    (dict(seed=-1), r'^seed: expected an int in \[0, 9223372036854775807\], got -1$'),
    (dict(seed=1.0), r'^seed: expected an int in'),
    (dict(transient=np.int64(-2)), r'^transient: expected an int >= 0, got np.int64\(-2\)$'),
    (dict(radii=(-1.0,)), 'radii'),
    (dict(hidden_size=0), 'hidden_size: expected an int >= 1, got 0'),
])
def test_bad_arguments_are_named(kwargs, message):
  with pytest.raises(ValueError, match=message):
    gradient_tables.gradient_norm_table(**kwargs)


def test_numpy_integers_are_ints_and_a_whole_models_params_are_named():
  table = gradient_tables.gradient_norm_table(
      (1.0,), np.arange(1, 3), protocol='linearised', hidden_size=np.int64(8),
      seed=np.int64(1))
  assert list(table[1.0]) == [1, 2] and all(type(k) is int for k in table[1.0])
  assert table == gradient_tables.gradient_norm_table((1.0,), (1, 2), protocol='linearised',
                                                      hidden_size=8, seed=1)
  model = models.LanguageModel(vocab_size=5, hidden_size=4, embedding_size=3)
  params = model.init(jax.random.key(0), jnp.zeros((1, 2), jnp.int32),
                      model.initial_state(1))['params']
  with pytest.raises(ValueError, match=r"^params: expected an Elman cell's \{'W_xh': \[d, H\], "
                                       r"'W_hh': \[H, H\], 'b': \[H\]\} \(a model's cell: e.g. "
                                       r"params\['recurrence'\]\['cell'\] .*\), got \['embedding', "
                                       r"'head', 'recurrence'\]$"):
    gradient_tables.gradient_norm_table(distances=(1,), params=params)
  cell = params['recurrence']['cell']
  row, = gradient_tables.gradient_norm_table(distances=(np.int64(1),), params=cell,
                                             sequences=np.int64(2)).values()
  assert list(row) == [1, 'measured_spectral_radius'] and np.isfinite(row[1])


@pytest.mark.slow
def test_the_sweep_measures_a_trained_run_and_every_radius(tmp_path, trained_char_lm):
  run_dir = trained_char_lm
  _, params = checkpoints.final_params(run_dir)
  trained = gradient_tables.gradient_norm_table(distances=(1, 5), params=params['recurrence'][
      'cell'], sequences=8)
  (radius, row), = trained.items()
  assert 0 < radius < 2 and 0 < row[5] < row[1]
  assert radius == round(row['measured_spectral_radius'], 6)
  config = tmp_path / 'small.py'
  config.write_text('from experiments.configs.gradient_norms import get_config\n\n'
                    'def get_sweep():\n'
                    '  return [{"protocol": p, "spectral_radius": r, "seed": s, '
                    '"hidden_size": 16, "sequences": 8}\n'
                    '          for p in ("linearised", "network") for r in (0.5, 1.5) '
                    'for s in (0, 1)]\n')
  result = subprocess.run([sys.executable, '-m', 'launch.sweep', f'--config={config}',
                           f'--workdir={tmp_path / "sweep"}'], capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = list(csv.DictReader(open(tmp_path / 'sweep' / 'results_over_seeds.csv')))
  assert [(row['protocol'], row['spectral_radius']) for row in rows] == [
      ('linearised', '0.5'), ('linearised', '1.5'), ('network', '0.5'), ('network', '1.5')]
  median = {(row['protocol'], row['spectral_radius']): float(row['ratio_k10 median'])
            for row in rows}
  assert median['linearised', '0.5'] < 1e-2 < 1 < median['linearised', '1.5']
  assert median['network', '0.5'] < median['network', '1.5']


def test_mean_field_rate_against_monte_carlo_and_its_limits():
  """rho sqrt(E[tanh'(sqrt(q) z)^2]) by quadrature equals a 10^6-sample Monte Carlo mean; at
  q = 0 it is rho (tanh'(0) = 1); without a drive the variance map's fixed point below rho = 1
  is 0, so the rate there is rho and crosses 1 at rho = 1."""
  z = np.random.default_rng(0).standard_normal(1_000_000)
  for rho, q in ((1.0, 0.09), (0.7, 1.3), (1.5, 0.4)):
    sampled = rho * np.sqrt(np.mean((1 - np.tanh(np.sqrt(q) * z) ** 2) ** 2))
    assert gradient_tables.mean_field_rate(rho, q) == pytest.approx(sampled, rel=2e-3)
  assert gradient_tables.mean_field_rate(0.8, 0.0) == pytest.approx(0.8, rel=1e-12)
  assert gradient_tables.mean_field_variance(0.8, 0.0) < 1e-10
  q = gradient_tables.mean_field_variance(1.2, 0.5)  # the fixed point of the map
  mapped = 1.2 ** 2 * np.mean(np.tanh(np.sqrt(q) * z) ** 2) + 0.5 ** 2
  assert mapped == pytest.approx(q, rel=2e-3)
  with pytest.raises(ValueError, match='input_scale: expected'):
    gradient_tables.mean_field_variance(1.0, -0.1)


def test_the_network_protocol_measures_mean_fields_rate_at_a_thousand_units():
  """At H = 1,024 and sigma_in = 0.5 the fitted per-step rate (k = 10 ... 60) is within 3% of
  mean field's (measured: 0.752 against 0.762 at rho = 1, H = 256)."""
  from experiments import gradient_norms
  config = gradient_norms.EXPERIMENT.config(protocol='network', hidden_size=1024,
                                            input_scale=0.5, spectral_radius=1.0, transient=50,
                                            sequences=8, seed=0)
  report = gradient_norms.measure(config)
  assert report['rate'] == pytest.approx(report['mean_field_rate'], rel=0.03)
  assert report['mean_field_rate'] == pytest.approx(0.7615, abs=1e-3)
  assert report['sigma_max'] == pytest.approx(2.0, rel=0.05)  # about 2 rho at large H


def test_crossings_give_the_median_and_the_quartile_curves_radius_of_rate_one(tmp_path):
  rows = [{'protocol': 'network', 'hidden_size': 64, 'input_scale': 0.18, 'seeds': 8,
           'spectral_radius': rho, 'rate': report.Spread(*rate, 8),
           'sigma_max': report.Spread(*rate, 8), 'rate / mean field - 1': deviation}
          for rho, rate, deviation in ((1.0, (0.5, 0.4, 0.8), -0.1), (2.0, (1.5, 1.2, 1.8), 0.2))]
  gradient_norms.crossings(rows, tmp_path, '')
  row, = csv.DictReader((tmp_path / 'gradient_crossings.csv').open())
  assert float(row['measured rate = 1 at rho']) == 1.5  # 1 + 0.5 / 1.0
  assert float(row["upper quartile's rate = 1 at rho"]) == 1.2  # 1 + 0.2 / 1.0
  assert float(row["lower quartile's rate = 1 at rho"]) == 1.75  # 1 + 0.6 / 0.8
  assert float(row['mean field rate = 1 at rho']) == pytest.approx(1.284, abs=5e-4)
  assert (row['seeds'], float(row['sigma_max = 1 at rho'])) == ('8', 1.5)
  assert float(row['largest |rate / mean field - 1|']) == 0.2


# Issue 49: a row is a function of what it names.

def test_a_linearised_row_is_the_same_whatever_else_is_asked():
  """Given radii, each is drawn afresh from ``default_rng(seed)``: a row equals itself asked
  alone (radius alone, distance alone, in another order), exactly; the seed note's one
  stream (radii None) is the exception, and it too is the same for fewer distances."""
  table = gradient_tables.gradient_norm_table
  for seed in (1, 7):
    full = table((0.7, 1.0, 1.3), (20, 40, 60), 'linearised', seed=seed)
    for rho in (0.7, 1.0, 1.3):
      assert table((rho,), (20, 40, 60), 'linearised', seed=seed)[rho] == full[rho]
      for k in (20, 40, 60):
        assert table((rho,), (k,), 'linearised', seed=seed)[rho][k] == full[rho][k]
    assert table((1.3, 0.7), (60, 20), 'linearised', seed=seed)[1.3][20] == full[1.3][20]
  # The three numbers: 6.18e-02 (the note's stream), 1.009e-01 (1.0 drawn afresh),
  # and no longer 3.73e-02 (the note's stream with 20 steps a radius).
  assert f"{table(protocol='linearised')[1.0][20]:.2e}" == '6.18e-02'
  assert table(protocol='linearised', distances=(20,))[1.0][20] == table(
      protocol='linearised')[1.0][20]
  assert f"{table((1.0,), (20,), 'linearised')[1.0][20]:.3e}" == '1.009e-01'
  assert table((0.7,), (20, 40, 60), 'linearised') == {0.7: table(protocol='linearised')[0.7]}


def test_a_network_row_is_the_same_whatever_else_is_asked():
  """Every radius draws the same keys: a row equals itself asked alone; with the same T =
  transient + max(distances) + 1, fewer distances give the same ratios, exactly."""
  def table(radii, distances, transient=0, seed=2):
    return gradient_tables.gradient_norm_table(radii, distances, 'network', hidden_size=12,
                                               seed=seed, sequences=4, transient=transient)
  full = table((0.5, 1.0, 1.5), (3, 8))
  fewer = table((1.5, 0.5), (8, 3))  # fewer radii, in another order
  assert fewer == {rho: full[rho] for rho in (1.5, 0.5)}
  alone = table((0.5,), (3,), transient=5)[0.5]  # T = 9, as for distances (3, 8)
  assert alone == {3: full[0.5][3],
                   'measured_spectral_radius': full[0.5]['measured_spectral_radius']}


def test_the_spread_is_finite_and_brackets_the_median():
  spread = gradient_tables.gradient_norm_spread(12, 5, protocol='linearised', radii=(1.0, 1.3),
                                                distances=(10, 20), hidden_size=16)
  draws = [gradient_tables.gradient_norm_table((1.0, 1.3), (10, 20), 'linearised', 16, s)
           for s in range(5, 17)]
  for rho in (1.0, 1.3):
    for k in (10, 20):
      median, low, high = spread[rho][k]
      assert all(np.isfinite((median, low, high))) and low < median < high
      values = [draw[rho][k] for draw in draws]
      assert median == np.median(values)
      assert (low, high) == tuple(np.percentile(values, (10, 90)))
  alone = gradient_tables.gradient_norm_spread(12, 5, protocol='linearised', radii=(1.3,),
                                               distances=(20,), hidden_size=16)
  assert alone[1.3][20] == spread[1.3][20]  # a row's spread is the same whatever else is asked
  network = gradient_tables.gradient_norm_spread(2, protocol='network', radii=(1.0,),
                                                 distances=(2,), hidden_size=8, sequences=2)
  median, low, high = network[1.0][2]
  assert 0 < low <= median <= high < 10
  assert set(network[1.0]) == {2, 'measured_spectral_radius'}
  default = gradient_tables.gradient_norm_spread(2, protocol='linearised', distances=(5,),
                                                 hidden_size=8)
  assert list(default) == [0.7, 1.0, 1.3]  # radii None: the note's radii, each drawn afresh
  assert default[1.0] == gradient_tables.gradient_norm_spread(
      2, protocol='linearised', radii=(1.0,), distances=(5,), hidden_size=8)[1.0]


def test_the_committed_spread_table_is_what_spread_table_writes():
  """docs/results/gradient_norm_spread.md, included by docs/reference_numbers.md: the seed
  note's nine numbers beside the median and 10-90% over 200 seeds."""
  path = pathlib.Path(__file__).resolve().parent.parent / 'docs/results/gradient_norm_spread.md'
  text = gradient_tables.spread_table()
  assert path.read_text() == text
  rows = {(float(cells[0]), int(cells[1])): cells[2:]
          for line in text.splitlines()[4:]
          for cells in [[c.strip() for c in line.strip('|').split('|')]]}
  assert {rho: tuple(rows[rho, k][0] for k in (20, 40, 60)) for rho in SEED_TABLE} == SEED_TABLE
  for note, afresh, median, low, high in rows.values():
    assert float(low) < float(median) < float(high)
    assert float(low) < float(note) < float(high)
  assert rows[1.0, 20][1:] == ['1.01e-01', '9.52e-02', '3.20e-02', '1.73e-01']
  assert rows[1.3, 60][1:] == ['3.09e+04', '1.88e+04', '6.15e+03', '4.31e+04']


@pytest.mark.parametrize('kwargs, message', [
    (dict(radii=1.0), r'^radii: expected a sequence of spectral radii such as \(1.0,\), got '
                      r'the float 1.0; pass radii=\(1.0,\) for one$'),
    (dict(radii='1.0'), r"^radii: expected a sequence of spectral radii such as \(1.0,\), got "
                        r"the str '1.0'"),
    (dict(radii=np.float64(1.0)), r'^radii: expected a sequence .* got the float64'),
    (dict(radii=()), r'^radii: expected at least one spectral radius, got \(\); pass'),
    (dict(radii=(1.0, -0.5)), r'^radii\[1\]: expected a finite value >= 0, got -0.5$'),
    (dict(distances=20), r'^distances: expected a sequence of distances k >= 1 in steps such '
                         r'as \(20, 40, 60\), got the int 20; pass distances=\(20,\) for one$'),
    (dict(dtype=jnp.int32), r"^dtype: expected a floating dtype such as jnp.float32 .*, got "
                            r"<class 'jax.numpy.int32'>; pass dtype=jnp.float32"),
    (dict(dtype='no such dtype'), r"^dtype: expected a floating dtype .* got 'no such dtype'"),
    (dict(dtype=jnp.float64), r'^dtype: expected a dtype JAX holds \(float64 needs x64: .*'
                              r'jax.enable_x64\(True\):`\), got float64; or pass dtype=jnp.float32$'),
    (dict(protocol='linearised', params={'W_xh': np.zeros((2, 2)), 'W_hh': np.zeros((2, 2))}),
     r"^params: expected None with protocol 'linearised' .*pass protocol='network'"),
])
def test_bad_input_names_the_argument_the_value_and_the_fix(kwargs, message):
  with pytest.raises(ValueError, match=message) as error:
    gradient_tables.gradient_norm_table(**{'distances': (1,), **kwargs})
  assert '\n' not in str(error.value)


def test_the_spread_refuses_bad_seeds_and_unknown_arguments():
  with pytest.raises(ValueError, match=r'^seeds: expected an int >= 1, got 0$'):
    gradient_tables.gradient_norm_spread(0, protocol='linearised')
  with pytest.raises(ValueError, match=r'^seed: expected an int in \[0, '):
    gradient_tables.gradient_norm_spread(2, 2 ** 63 - 1, protocol='linearised')
  with pytest.raises(ValueError, match=r"^table_arguments: expected gradient_norm_table's "
                                       r"arguments but seed, got \['radius'\]"):
    gradient_tables.gradient_norm_spread(2, radius=(1.0,))
  with pytest.raises(ValueError, match=r'^radii: expected a sequence'):
    gradient_tables.gradient_norm_spread(2, radii=1.0, protocol='linearised')


# The mean-field functions against mpmath (30 digits), or, without it, scipy's quad over z
# with its own splits: independent of the library's Gauss-Legendre pieces in a.

def _reference_mean(function_name: str, q: float) -> float:
  """E[tanh(sqrt(q) z)^2] or E[tanh'(sqrt(q) z)^2], z ~ N(0, 1), integrated over z."""
  s = math.sqrt(q)
  cuts = sorted({0.0, *(c / s for c in (0.5, 2.0, 8.0) if c / s < 12), 12.0})  # tanh's scale
  try:
    import mpmath
  except ImportError:
    from scipy import integrate
    f = ((lambda z: math.tanh(s * z) ** 2) if function_name == 'tanh2' else
         (lambda z: (1 - math.tanh(s * z) ** 2) ** 2))
    pieces = [integrate.quad(lambda z: f(z) * math.exp(-z * z / 2), a, b, epsabs=0,
                             epsrel=1e-13, limit=500)[0] for a, b in zip(cuts, cuts[1:])]
    return 2 * math.fsum(pieces) / math.sqrt(2 * math.pi)
  with mpmath.workdps(30):
    s = mpmath.sqrt(mpmath.mpf(q))
    f = ((lambda z: mpmath.tanh(s * z) ** 2) if function_name == 'tanh2' else
         (lambda z: mpmath.sech(s * z) ** 4))
    value = 2 * mpmath.quad(lambda z: f(z) * mpmath.npdf(z), [*cuts, mpmath.inf])
    return float(value)


@pytest.mark.parametrize('q', [1e-4, 0.01, 1.0, 10.0, 100.0, 1e4])
def test_mean_field_rate_against_a_high_precision_integral(q):
  want = 1.3 * math.sqrt(_reference_mean('sech4', q))
  assert gradient_tables.mean_field_rate(1.3, q) == pytest.approx(want, rel=1e-9)
  if q == 100.0:  # 101-node Gauss-Hermite gave 0.353 at rho 1
    assert gradient_tables.mean_field_rate(1.0, q) == pytest.approx(0.23045, abs=1e-5)


@pytest.mark.parametrize('radius', [0.5, 1.0, 1.5, 3.0, 10.0])
@pytest.mark.parametrize('input_scale', [0.0, 0.3, 1.0])
def test_mean_field_variance_is_the_fixed_point_of_a_high_precision_map(radius, input_scale):
  """q* = rho^2 E[tanh(sqrt(q*) z)^2] + sigma_in^2 to 1e-9 relative, with the mean
  integrated independently; without a drive q* is 0 at rho <= 1 and the map's attracting
  positive fixed point above (the map at q* +- 1% moves towards q*)."""
  q = gradient_tables.mean_field_variance(radius, input_scale)
  if input_scale == 0 and radius <= 1:
    assert q == 0.0
    return
  mapped = radius ** 2 * _reference_mean('tanh2', q) + input_scale ** 2
  assert mapped == pytest.approx(q, rel=1e-9)
  for off in (0.99, 1.01):
    moved = radius ** 2 * _reference_mean('tanh2', q * off) + input_scale ** 2
    assert abs(moved - q) < abs(q * off - q)
  if (radius, input_scale) == (10.0, 0.0):  # 101-node Gauss-Hermite gave 87.28
    assert q == pytest.approx(91.7051, abs=1e-3)
