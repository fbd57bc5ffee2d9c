"""How gradient norms vanish or explode with distance, for W_hh at spectral radius rho.

A measurement (no training: ``steps`` 0): each run is one spectral radius, one
protocol, one size, one input scale and one seed of ``rnnjax.gradient_norm_table``,
and reports the ratio ||dL/dh_{T-k}|| / ||dL/dh_T|| at k = 1, 2, 5, 10, 20, 40, 60
(every k from 1 to 60 in its summary), the per-step rate fitted to it, the mean-field
rate (``gradient_tables.mean_field_rate``), W_hh's measured spectral radius and largest
singular value sigma_max. 'linearised' is the backward pass alone in the mild-activation
regime (tanh' near 1); 'network' a real Elman network driven at ``input_scale``, whose
saturating states make the gradient vanish faster. With ``trained_run`` (the folder of an
ended char_lm run) the 'network' protocol measures that run's trained cell instead of a
fresh one. The fitted rate is exp of the least-squares slope of log ratio against k over
k = ``FIT_FROM`` ... 60 (the first steps align dL/dh with W_hh's leading directions).

The sweep's ``gradient_theory.md`` / ``.csv`` (``theory``) set the measured rates over
the seeds (median and interquartile range) beside mean field's, with the radius where
each crosses 1, and ``gradient_theory.png`` draws them.

The table of ``docs/reference_numbers.md`` (rho 0.7: 8.05e-05, 1.40e-08,
2.28e-12 ...) draws the three radii from one random stream:
``rnnjax.gradient_norm_table(protocol='linearised')``; here each run draws its
own, from its seed.
"""

import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import gradient_tables
from rnnjax import initializers
from rnnjax.train import checkpoints
from rnnjax.train import experiment
from rnnjax.train import report
from rnnjax.train import trainer

DISTANCES = (1, 2, 5, 10, 20, 40, 60)
FIT_FROM = 10  # the first k of the fitted rate


def fitted_rate(profile: dict) -> float:
  """exp of the least-squares slope of log ratio against k over k >= ``FIT_FROM`` (profile:
  ``{k: ratio}``; ratios that are 0, not finite or not numbers are left out; NaN with fewer
  than 2 points)."""
  points = [(k, math.log(r)) for k, r in profile.items()
            if k >= FIT_FROM and isinstance(r, float) and math.isfinite(r) and r > 0]
  if len(points) < 2:
    return math.nan
  return float(math.exp(np.polyfit(*zip(*points), 1)[0]))


def cell_of(config):
  """The Elman cell a run measures, float64 host copies: the trained run's, or a fresh
  Gaussian W_hh at the run's radius with W_xh ~ N(0, input_scale^2 / H) (inputs of H
  features), drawn from ``jax.random.key(seed)``."""
  if config.trained_run:
    _, params = checkpoints.final_params(config.trained_run)
    return params['recurrence']['cell']
  key = jax.random.fold_in(jax.random.key(config.seed), config.hidden_size)
  return cells.init_elman(key, config.hidden_size, config.hidden_size, 'gaussian',
                          config.spectral_radius,
                          input_scale=config.input_scale / config.hidden_size ** 0.5)


def measure(config) -> dict:
  """One run's report (the module docstring)."""
  distances = tuple(range(1, max(DISTANCES) + 1))
  if config.protocol == 'linearised':
    (row,) = gradient_tables.gradient_norm_table(
        (config.spectral_radius,), distances, 'linearised', config.hidden_size,
        config.seed).values()
    variance = gradient_tables.LINEARISED_VARIANCE
    w_hh = np.random.default_rng(config.seed).normal(0, 1, (config.hidden_size,) * 2)
    w_hh *= config.spectral_radius / initializers.host_spectral_radius(w_hh)  # the protocol's
  else:
    host = {k: np.asarray(v, np.float64) for k, v in cell_of(config).items()}
    w_hh = host['W_hh']
    with jax.enable_x64(config.dtype == 'float64'):
      dtype = jnp.dtype(config.dtype)
      (row,) = gradient_tables.gradient_norm_table(
          (config.spectral_radius,), distances, 'network', config.hidden_size, config.seed,
          config.sequences,
          {k: jnp.asarray(v, dtype) for k, v in host.items()}, transient=config.transient,
          dtype=dtype).values()
    variance = gradient_tables.mean_field_variance(config.spectral_radius, config.input_scale)
  row = {k: float(v) for k, v in row.items() if k != 'measured_spectral_radius'}  # ratios
  return {'measured_spectral_radius': float(initializers.host_spectral_radius(w_hh)),
          'sigma_max': float(np.linalg.norm(w_hh, 2)),
          **{f'ratio_k{k}': row[k] for k in DISTANCES},
          'rate': fitted_rate(row),
          'mean_field_rate': (gradient_tables.mean_field_rate(config.spectral_radius, variance)
                              if not config.trained_run else math.nan),
          'profile': {str(k): v for k, v in row.items()}}


def crossing(radii, rates) -> float:
  """The radius where ``rates`` (increasing in the radius, roughly) first reach 1, linearly
  interpolated between the two radii around it; NaN where they never do."""
  points = [(r, v) for r, v in zip(radii, rates) if math.isfinite(v)]
  for (r0, v0), (r1, v1) in zip(points, points[1:]):
    if v0 < 1 <= v1:
      return r0 + (1 - v0) * (r1 - r0) / (v1 - v0)
  return math.nan


def mean_field_crossing(input_scale: float, variance: float | None = None) -> float:
  """The radius where mean field's rate is 1 (``variance`` fixed for the linearised
  protocol, else q* at the radius); by bisection on [0.1, 10]."""
  from scipy import optimize

  def excess(rho):
    q = variance if variance is not None else gradient_tables.mean_field_variance(rho,
                                                                                  input_scale)
    return gradient_tables.mean_field_rate(rho, q) - 1.0
  return float(optimize.brentq(excess, 0.1, 10.0, xtol=1e-9))


def theory(runs, keys, folder, heading) -> None:
  """The sweep's measured rates over the seeds beside mean field's: ``gradient_theory.md`` /
  ``.csv`` (a row per protocol, size, input scale and radius), ``gradient_crossings.md`` /
  ``.csv`` (where each crosses 1, and where sigma_max does, Pascanu et al.'s sufficient
  condition for vanishing), ``gradient_trained.md`` / ``.csv`` (the trained cells) and
  ``gradient_theory.png``."""
  del keys
  ended = [run for run in runs if run['status'] in ('finished', 'diverged') and run['summary']]
  fresh = [run for run in ended if not run['config'].get('trained_run')]
  groups: dict[tuple, list[dict]] = {}
  dtypes = {}  # the dtype a setting computed in: an underflow prints as its bound
  for run in fresh:
    c = run['config']
    key = (c['protocol'], c['hidden_size'], c['input_scale'], c['spectral_radius'])
    groups.setdefault(key, []).append(run['summary'])
    dtypes[key] = c['dtype']
  rows = []
  for (protocol, hidden, scale, rho), summaries in sorted(groups.items()):
    rate = report.spread([s['rate'] for s in summaries])
    theory_rate = summaries[0]['mean_field_rate']
    rows.append({'protocol': protocol, 'hidden_size': hidden,
                 'input_scale': scale if protocol == 'network' else '-', 'spectral_radius': rho,
                 'dtype': dtypes[protocol, hidden, scale, rho], 'seeds': len(summaries),
                 'sigma_max': report.spread([s['sigma_max'] for s in summaries]),
                 'rate': rate, 'mean_field_rate': theory_rate,
                 'rate / mean field - 1': rate.median / theory_rate - 1,
                 **{f'ratio_k{k}': report.spread([s[f'ratio_k{k}'] for s in summaries])
                    for k in (10, 20, 40, 60)}})
  note = ('One setting a row, over its seeds: the median [interquartile range]. rate: the '
          'fitted per-step rate of ||dL/dh_{T-k}|| / ||dL/dh_T|| over k = 10 ... 60; '
          'mean_field_rate: rho sqrt(E[tanh\'(sqrt(q*) z)^2]) (q* the fixed point of the '
          'variance map; the linearised protocol: q = 0.09).')
  report.table(rows, '\n\n'.join(filter(None, [heading, note])), folder, 'gradient_theory',
               positive=tuple(f'ratio_k{k}' for k in (10, 20, 40, 60)))
  crossings(rows, folder, heading)
  trained = [{'trained_run': pathlib.PurePath(run['config']['trained_run']).name,
              'dtype': run['config']['dtype'],
              'measured_spectral_radius': run['summary']['measured_spectral_radius'],
              'sigma_max': run['summary']['sigma_max'], 'rate': run['summary']['rate'],
              **{f'ratio_k{k}': run['summary'][f'ratio_k{k}'] for k in (10, 20, 40, 60)}}
             for run in ended if run['config'].get('trained_run')]
  if trained:
    report.table(trained, '\n\n'.join(filter(None, [
        heading, 'The main job\'s trained cells (one seed each), the network protocol: '
        'N(0, 1) inputs through their own W_xh.'])), folder, 'gradient_trained',
        positive=tuple(f'ratio_k{k}' for k in (10, 20, 40, 60)))
  _theory_figure(rows, groups, trained, folder)


def crossings(rows: list[dict], folder, heading) -> None:
  """``gradient_crossings.md`` / ``.csv`` from ``theory``'s rows (one a protocol, size, input
  scale and radius): per protocol, size and input scale, the fewest seeds of its radii, where
  the median rate over the seeds reaches 1, where the curves of the rate's upper and lower
  quartiles do, where mean field's rate does and where the median sigma_max does."""
  out = []
  settings = {(row['protocol'], row['hidden_size'], row['input_scale']) for row in rows}
  for protocol, hidden, scale in sorted(
      settings, key=lambda s: (s[0], s[1], -math.inf if s[2] == '-' else s[2])):
    members = [row for row in rows
               if (row['protocol'], row['hidden_size'], row['input_scale']) == (protocol, hidden,
                                                                                 scale)]
    radii = [row['spectral_radius'] for row in members]
    measured = crossing(radii, [row['rate'].median for row in members])
    early, late = (crossing(radii, [getattr(row['rate'], q) for row in members])
                   for q in ('q3', 'q1'))
    predicted = mean_field_crossing(
        0.0 if scale == '-' else scale,
        gradient_tables.LINEARISED_VARIANCE if protocol == 'linearised' else None)
    out.append({'protocol': protocol, 'hidden_size': hidden, 'input_scale': scale,
                'seeds': min(row['seeds'] for row in members),
                'measured rate = 1 at rho': measured,
                "upper quartile's rate = 1 at rho": early,
                "lower quartile's rate = 1 at rho": late,
                'mean field rate = 1 at rho': predicted,
                'difference': measured - predicted,
                'sigma_max = 1 at rho': crossing(
                    radii, [row['sigma_max'].median for row in members]),
                'largest |rate / mean field - 1|': max(
                    abs(row['rate / mean field - 1']) for row in members)})
  report.table(out, '\n\n'.join(filter(None, [
      heading, 'Where the median rate over the seeds reaches 1 (linear interpolation between '
      'the radii around it), where the curves of its upper and lower quartiles over the seeds '
      'do, where mean field\'s does, and where the median sigma_max(W_hh) does: Pascanu et '
      'al.\'s sufficient condition for vanishing holds below it.'])), folder,
      'gradient_crossings')


TRAINED_AXIS = 3.0  # the rate plots' largest radius: the clipped trained cells end near 2.5,
# the unclipped ones at 10 to 5e4 (their rates are in gradient_trained.md)


def _theory_figure(rows, groups, trained, folder) -> None:
  """gradient_theory.png: top, the median ratio against k at the largest size for six radii
  (interquartile range shaded) with mean field's rate^k; bottom, the rate against rho for
  each size, mean field's curve, and the trained cells."""
  plt = report.pyplot()
  scales = sorted({row['input_scale'] for row in rows if row['protocol'] == 'network'})
  largest = max(row['hidden_size'] for row in rows if row['protocol'] == 'network')
  figure, axes = plt.subplots(2, len(scales), figsize=(5 * len(scales), 8.5), squeeze=False)
  colours = plt.get_cmap('viridis')
  shown = (0.3, 0.6, 0.9, 1.2, 1.5, 1.8)
  for column, scale in enumerate(scales):
    axis = axes[0][column]
    for i, rho in enumerate(shown):
      summaries = groups.get(('network', largest, scale, rho))
      if not summaries:
        continue
      ks = list(range(1, max(DISTANCES) + 1))
      statistics = [report.spread([s['profile'][str(k)] for s in summaries]) for k in ks]
      colour = colours(i / (len(shown) - 1))
      axis.plot(ks, [st.median for st in statistics], color=colour, label=f'rho={rho}')
      axis.fill_between(ks, [st.q1 for st in statistics], [st.q3 for st in statistics],
                        color=colour, alpha=0.25, linewidth=0)
      rate = summaries[0]['mean_field_rate']
      axis.plot(ks, [rate ** k for k in ks], color=colour, linestyle='--', linewidth=0.8)
    axis.set_yscale('log')
    axis.set_xlabel('distance k (steps)')
    axis.set_ylabel('||dL/dh_{T-k}|| / ||dL/dh_T||')
    axis.set_title(f'H = {largest}, sigma_in = {scale} (dashed: mean field)', fontsize=9)
    axis.grid(True, which='both', alpha=0.3)
    axis.legend(fontsize=7)
    axis = axes[1][column]
    for j, hidden in enumerate(sorted({row['hidden_size'] for row in rows
                                       if row['protocol'] == 'network'})):
      members = [row for row in rows if row['protocol'] == 'network'
                 and row['hidden_size'] == hidden and row['input_scale'] == scale]
      axis.errorbar([row['spectral_radius'] for row in members],
                    [row['rate'].median for row in members],
                    yerr=[[row['rate'].median - row['rate'].q1 for row in members],
                          [row['rate'].q3 - row['rate'].median for row in members]],
                    marker='o', markersize=3, linestyle='', label=f'measured, H = {hidden}')
    radii = np.linspace(0.3, TRAINED_AXIS, 136)
    axis.plot(radii, [gradient_tables.mean_field_rate(r, gradient_tables.mean_field_variance(
        r, scale)) for r in radii], color='black', linewidth=1, label='mean field')
    axis.axhline(1.0, color='grey', linewidth=0.8)
    if trained:
      near = [t for t in trained if t['measured_spectral_radius'] <= TRAINED_AXIS]
      axis.plot([t['measured_spectral_radius'] for t in near], [t['rate'] for t in near],
                marker='*', linestyle='', color='red',
                label=f'main job, trained ({len(trained) - len(near)} beyond rho = '
                      f'{TRAINED_AXIS})')
    axis.set_xlim(0.2, TRAINED_AXIS)
    axis.set_xlabel('spectral radius rho of W_hh')
    axis.set_ylabel('per-step rate')
    axis.set_title(f'sigma_in = {scale}', fontsize=9)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
  report.save(figure, folder / 'gradient_theory.png')


def task(config) -> trainer.Task:
  """The measurement as a task that trains nothing: its report is the table's row."""
  return trainer.Task(init=lambda config, key: {}, loss=None, batch=lambda step: {},
                      report=lambda run_config, params: measure(run_config))


def check(config) -> None:
  """Raises ValueError naming ``config.trained_run`` for a run with the 'linearised' protocol
  or a folder that holds no ended run (each run's own check: a sweep measures the others)."""
  if config.trained_run and config.protocol != 'network':
    raise ValueError(f"config.trained_run: expected '' for protocol {config.protocol!r} (a "
                     f"trained cell is measured with protocol 'network'), got "
                     f'{config.trained_run!r}')
  if config.trained_run:
    try:
      checkpoints.final_params(config.trained_run)
    except (OSError, checkpoints.CheckpointError) as error:
      raise ValueError(f'config.trained_run: {error}') from None


Field = experiment.Field
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, check=check,
    fields={
        'steps': Field(0, experiment.integer(0), 'a measurement: nothing is trained'),
        'protocol': Field('linearised', experiment.one_of(gradient_tables.PROTOCOLS),
                          'linearised (mild pre-activations) | network (a real Elman network)'),
        'spectral_radius': Field(1.0, experiment.number(0.0), 'of W_hh'),
        'hidden_size': Field(64, experiment.integer(1)),
        'input_scale': Field(1.0, experiment.number(0.0),
                             "network: sigma_in, the std of each unit's drive x_t W_xh"),
        'transient': Field(0, experiment.integer(0),
                           'network: steps run from the zero state before the measured ones'),
        'dtype': Field('float32', experiment.one_of(('float32', 'float64')),
                       "network: the cell's and the state gradients' (float64: with jax's "
                       'x64 on for the run)'),
        'sequences': Field(64, experiment.integer(1), 'network: the median is over these'),
        'trained_run': Field('', None, "network: an ended char_lm run's folder ('': a fresh "
                             'network)'),
    },
    report=('measured_spectral_radius', 'sigma_max', *(f'ratio_k{k}' for k in DISTANCES),
            'rate', 'mean_field_rate'),
    positive=tuple(f'ratio_k{k}' for k in DISTANCES), analyses=(theory,),
    vmappable=('seed', 'spectral_radius', 'protocol', 'hidden_size', 'sequences',
               'input_scale', 'transient', 'dtype', 'trained_run'))
