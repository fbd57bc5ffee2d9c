"""The gradient-norm table: the seed's numbers through the library, a trained run's table,
and the measurement experiment over radii and seeds."""

import csv
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
