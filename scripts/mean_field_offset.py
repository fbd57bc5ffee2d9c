"""Why the measured gradient rate lies below mean field's: the gradient-norm study's offset.

  python scripts/mean_field_offset.py [RESULTS_FOLDER]

Reads the gradient-norm study's per-run table (``RESULTS_FOLDER/results.md``, default
docs/results/gradient_norms; the network protocol's 1,296 runs) and writes
``mean_field_offset.md`` / ``.csv`` beside it: one row per size H and drive sigma_in, over
the runs of every radius and seed whose rate was fitted; every run's numbers in
``mean_field_offset_runs.csv``.

Mean field (Poole et al. 2016, eq. 3 and 5) takes W_hh's entries with variance sigma_w^2 / H;
the protocol draws a Gaussian W_hh and rescales it to the spectral radius rho exactly
(``initializers.gaussian_at_radius``). Its entries' scale is then

    sigma_eff = ||W_hh||_F / sqrt(H),  sigma_eff / rho = ||G||_F / (sqrt(H) rho(G))

for the draw G, one number a seed and size (the radius only scales it), below 1: a finite
Gaussian matrix's spectral radius exceeds its entries' scale by a term of order
sqrt(log H / H) (Rider 2003, the complex Ginibre ensemble), which shrinks slowly with H. The columns, each a
median over the rows' runs unless said:

- ``rate / MF(rho) - 1``: the study's offset (its ``rate`` over ``mean_field_rate``).
- ``rate k>=20 / MF(rho) - 1``: the rate refitted over k = 20, 40 and 60 (the published
  ratios; the study fits k = 10 ... 60), against the same.
- ``sigma_eff / rho``: the entries' scale over the radius.
- ``rate / MF(sigma_eff) - 1``, its quartiles and its largest absolute value: mean field
  evaluated at the entries' scale, q* at sigma_eff.
- ``corr(offset, sigma_eff / rho)``: Pearson's r over the rows' runs.
- ``phi'^2 / MF(rho) - 1`` and ``phi'^2 / MF(sigma_eff) - 1``: the mean of tanh'(a)^2 =
  (1 - h^2)^2 over every unit, step and sequence of the run's probe (its inputs, cell and
  zero initial state, as ``gradient_tables.gradient_norm_table`` draws them) against mean
  field's E[tanh'(sqrt(q*) z)^2].
"""

import csv
import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

from experiments import gradient_norms
from rnnjax import cells
from rnnjax import gradient_tables
from rnnjax import recurrence

ROOT = pathlib.Path(__file__).resolve().parent.parent
REFIT = (20, 40, 60)
COLUMNS = ('hidden_size', 'input_scale', 'runs', 'rate / MF(rho) - 1',
           'rate k>=20 / MF(rho) - 1', 'sigma_eff / rho', 'rate / MF(sigma_eff) - 1',
           'rate / MF(sigma_eff) - 1 q1', 'rate / MF(sigma_eff) - 1 q3',
           'largest |rate / MF(sigma_eff) - 1|', 'corr(offset, sigma_eff / rho)',
           "phi'^2 / MF(rho) - 1", "phi'^2 / MF(sigma_eff) - 1")


def _number(text: str) -> float:
  """A table cell as a float: ``< 1.2e-38`` (below the dtype's smallest normal) is 0."""
  return 0.0 if text.startswith('<') else float(text)


def network_runs(results: pathlib.Path) -> list[dict]:
  """The per-run table's rows of the network protocol at a fresh W_hh (not a trained cell)."""
  lines = results.read_text().splitlines()
  header = [c.strip() for c in next(l for l in lines if l.startswith('| protocol')).strip(
      '|').split('|')]
  rows = [dict(zip(header, (c.strip() for c in line.strip('|').split('|'))))
          for line in lines if line.startswith('| network')]
  return [r for r in rows if r['trained_run'] in ('', '-')]


def refitted_rate(row: dict) -> float:
  """The study's ``fitted_rate`` over k in ``REFIT`` only (NaN where one ratio is 0)."""
  ratios = [_number(row[f'ratio_k{k}']) for k in REFIT]
  if min(ratios) <= 0:
    return math.nan
  return gradient_norms.fitted_rate(dict(zip(REFIT, ratios)))


def config_of(row: dict):
  """The run's config (the experiment's defaults with the row's swept values)."""
  return gradient_norms.EXPERIMENT.config(
      protocol='network', spectral_radius=float(row['spectral_radius']),
      hidden_size=int(row['hidden_size']), dtype=row['dtype'],
      sequences=int(row['sequences']), input_scale=float(row['input_scale']),
      seed=int(row['seed']))


@jax.jit
def _mean_derivative_squared(params: dict, inputs: jax.Array) -> jax.Array:
  states, _ = recurrence.scan(cells.elman('tanh'), params, inputs,
                              jnp.zeros((inputs.shape[0], inputs.shape[2]), inputs.dtype))
  return jnp.mean((1 - states ** 2) ** 2)


def mean_derivative_squared(config, unit_cell: dict) -> float:
  """The mean of (1 - h_t^2)^2 over the probe's states (module docstring), in float64;
  ``unit_cell``: the run's cell at radius 1 (its W_hh times the radius is the run's)."""
  with jax.enable_x64(True):
    params = {k: jnp.asarray(v, jnp.float64) for k, v in unit_cell.items()}
    params['W_hh'] = params['W_hh'] * config.spectral_radius
    hidden = params['W_hh'].shape[0]
    steps = config.transient + max(gradient_norms.DISTANCES) + 1
    key_inputs = jax.random.split(jax.random.key(config.seed), 3)[0]
    inputs = jax.random.normal(key_inputs, (config.sequences, steps, hidden), jnp.float64)
    return float(_mean_derivative_squared(params, inputs))


def unit_cell(hidden_size: int, seed: int, input_scale: float) -> dict:
  """The seed's cell at this size and drive at spectral radius 1, float64 host copies."""
  config = gradient_norms.EXPERIMENT.config(protocol='network', spectral_radius=1.0,
                                            hidden_size=hidden_size, seed=seed,
                                            input_scale=input_scale)
  return {k: np.asarray(v, np.float64) for k, v in gradient_norms.cell_of(config).items()}


def scale_ratio(cell: dict) -> float:
  """sigma_eff / rho of a cell's W_hh (module docstring)."""
  w = cell['W_hh']
  return float(np.linalg.norm(w) / math.sqrt(w.shape[0]) / np.max(np.abs(np.linalg.eigvals(w))))


def offsets(rows: list[dict]) -> list[dict]:
  """One dict per run with a fitted rate: its offsets and scales (module docstring)."""
  units: dict[tuple, dict] = {}
  ratios: dict[tuple, float] = {}
  out = []
  for row in rows:
    rate, mean_field = _number(row['rate']), _number(row['mean_field_rate'])
    if not (math.isfinite(rate) and rate > 0 and mean_field > 0):
      continue
    config = config_of(row)
    size, seed, rho, drive = (config.hidden_size, config.seed, config.spectral_radius,
                              config.input_scale)
    if (size, seed, drive) not in units:
      units[size, seed, drive] = unit_cell(size, seed, drive)
    if (size, seed) not in ratios:  # W_hh is the same at every drive
      ratios[size, seed] = scale_ratio(units[size, seed, drive])
    effective = rho * ratios[size, seed]
    q_rho = gradient_tables.mean_field_variance(rho, drive)
    q_effective = gradient_tables.mean_field_variance(effective, drive)
    derivative = mean_derivative_squared(config, units[size, seed, drive])
    out.append({
        'hidden_size': size, 'input_scale': drive, 'seed': seed, 'spectral_radius': rho,
        'offset': rate / mean_field - 1, 'refitted offset': refitted_rate(row) / mean_field - 1,
        'scale ratio': ratios[size, seed],
        'effective offset': rate / gradient_tables.mean_field_rate(effective, q_effective) - 1,
        # mean_field_rate(1, q)^2 = E[tanh'(sqrt(q) z)^2]
        'derivative offset': derivative / (gradient_tables.mean_field_rate(1.0, q_rho) ** 2) - 1,
        'effective derivative offset': derivative / (
            gradient_tables.mean_field_rate(1.0, q_effective) ** 2) - 1})
  return out


def table(runs: list[dict]) -> list[dict]:
  """The rows of ``COLUMNS``: one per size and drive."""
  rows = []
  for size, drive in sorted({(r['hidden_size'], r['input_scale']) for r in runs}):
    members = [r for r in runs if (r['hidden_size'], r['input_scale']) == (size, drive)]
    column = lambda name: np.array([r[name] for r in members])
    effective = column('effective offset')
    rows.append({
        'hidden_size': size, 'input_scale': drive, 'runs': len(members),
        'rate / MF(rho) - 1': float(np.median(column('offset'))),
        'rate k>=20 / MF(rho) - 1': float(np.nanmedian(column('refitted offset'))),
        'sigma_eff / rho': float(np.median(column('scale ratio'))),
        'rate / MF(sigma_eff) - 1': float(np.median(effective)),
        'rate / MF(sigma_eff) - 1 q1': float(np.quantile(effective, 0.25)),
        'rate / MF(sigma_eff) - 1 q3': float(np.quantile(effective, 0.75)),
        'largest |rate / MF(sigma_eff) - 1|': float(np.max(np.abs(effective))),
        'corr(offset, sigma_eff / rho)': float(np.corrcoef(column('offset'),
                                                           column('scale ratio'))[0, 1]),
        "phi'^2 / MF(rho) - 1": float(np.median(column('derivative offset'))),
        "phi'^2 / MF(sigma_eff) - 1": float(np.median(column('effective derivative offset')))})
  return rows


def markdown(rows: list[dict]) -> str:
  cell = lambda v: f'{v:.4f}' if isinstance(v, float) else str(v)
  lines = ['| ' + ' | '.join(COLUMNS) + ' |', '|' + '---|' * len(COLUMNS)]
  return '\n'.join(lines + ['| ' + ' | '.join(cell(r[c]) for c in COLUMNS) + ' |'
                            for r in rows])


def main(argv: list[str]) -> None:
  folder = pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / 'docs/results/gradient_norms'
  runs = offsets(network_runs(folder / 'results.md'))
  rows = table(runs)
  with open(folder / 'mean_field_offset_runs.csv', 'w', newline='') as out:
    writer = csv.DictWriter(out, list(runs[0]))
    writer.writeheader()
    writer.writerows(runs)
  with open(folder / 'mean_field_offset.csv', 'w', newline='') as out:
    writer = csv.DictWriter(out, COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
  text = ('Mean field against the measured rate, per size and drive over every radius and '
          'seed with a fitted rate (`scripts/mean_field_offset.py`, from `results.md`): '
          'medians and quartiles over the runs (8 seeds x 18 radii, less those without a '
          'rate), every run in `mean_field_offset_runs.csv`; MF(sigma_eff) is mean field at the entries\' scale '
          '||W_hh||_F / sqrt(H) instead of the spectral radius.\n\n' + markdown(rows) + '\n')
  (folder / 'mean_field_offset.md').write_text(text)
  print(text)


if __name__ == '__main__':
  main(sys.argv)
