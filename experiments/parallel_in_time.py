"""Where parallel-in-time evaluation of the Elman recurrence converges, and how fast, against T.

A measurement (no training: ``steps`` 0). ``parallel.elman_deer`` solves all T
steps of h_t = tanh(x_t W_xh + h_{t-1} W_hh + b) at once by Newton's method
(DEER: full [H, H] Jacobians, O(T H^3) work an iteration), its diagonal
approximation (quasi-DEER), or either damped (ELK, quasi-ELK: a trust region solved
by a Kalman smoother), each iteration a parallel prefix scan. Gonzalez et al. (2025)
tie the iterations needed to the largest Lyapunov exponent lambda_1 of the recurrence:
flat in T where it is negative (predictable), growing like T where it is positive. Each
run is one method and one cell: an Elman network at initialization (Gaussian W_hh at
``spectral_radius``, ``cells.init_elman``; H = ``hidden_size``; in ``dtype``) or the cell
of a trained char_lm or ptb_chars run (``trained_run``), on ``sequences`` sequences from
h_0 = 0 and the zero initial guess. Inputs: 'text' (Tiny Shakespeare's held-out 10%, the
streams ``seed`` x B ... of it, looked up in an embedding table drawn as char_lm's model
draws it at initialization: a weakly driven network) or 'normal' (x_t ~ N(0, I_d)); a
trained network reads its own run's held-out text through its own embedding.

The run solves the first T steps for each T of ``lengths`` up to ``longest``, shortest
first (a length beyond the work cap is not measured); a length at which the method does not
converge (within its cap: min(T, ``max_iterations``) for DEER
and quasi-DEER, min(2 T, ``damped_max_iterations``) for ELK and quasi-ELK, and for the
full-Jacobian methods at most ``deer_work`` / (B T H^3)) ends the run's solves, the longer
ones counted as not converged (the states of a longer sequence are no better determined).
The report: per T the lower median over the sequences of the Newton iterations to
``elman_deer``'s certificate (inf: not converged; absent: not measured) and the solver's own wall time (compiled
first; under 1 s the fastest of 3); ``slope``, the least-squares slope of log iterations
against log T over the converged lengths (NaN for fewer than 3); ``log_fit_residual``, the
relative RMS residual of the line iterations = a + c ln T over them (NaN for fewer than 4);
``largest_lyapunov_exponent`` (``lyapunov.lyapunov_spectrum``, nats per step, the median over
the sequences) over ``lyapunov_steps`` steps after a transient of ``lyapunov_transient``; and,
where ``predictor_length`` is set (DEER on a fresh tanh cell), ``predictors`` along DEER's
iterates from the zero guess.

References:
  Gonzalez, Kozachkov, Warrington, Smith & Linderman (2025), "Predictability
  enables parallelization of nonlinear state space models"; Lim, Zhu,
  Selfridge & Kasim (2024) (DEER); Gonzalez, Warrington, Smith & Linderman
  (2024) (quasi-DEER, ELK).
"""

import math
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import initializers
from rnnjax import lyapunov
from rnnjax import parallel
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import checkpoints
from rnnjax.train import experiment
from rnnjax.train import report
from rnnjax.train import trainer

CORPUS, VALIDATION_FRACTION = 'tinyshakespeare', 0.1  # char_lm's held-out text
SMALLEST_DEER_CAP = 3
REPEAT_BELOW_SECONDS = 1.0
SLOPE_POINTS = 3  # converged lengths a slope needs
LOG_FIT_POINTS = 4  # converged lengths the fit a + c ln T needs (two degrees of freedom left)
REPORTED_LENGTHS = tuple(2 ** k for k in range(4, 13))  # T = 16 ... 4,096: report columns


def cap(config, hidden: int, steps: int) -> int | None:
  """The iteration cap of a solve of T = ``steps`` (module docstring), or None where a
  full-Jacobian method (DEER, ELK) is skipped."""
  if config.method in parallel.DAMPED_METHODS:
    limit = min(2 * steps, config.damped_max_iterations)
  else:
    limit = min(steps, config.max_iterations)
  if config.method not in ('deer', 'elk'):
    return limit
  limit = min(limit, int(config.deer_work // (config.sequences * steps * hidden ** 3)))
  return limit if limit >= min(SMALLEST_DEER_CAP, steps) else None


def held_out_ids(corpus: str, data_dir: str, fraction: float, batch: int, steps: int,
                 first: int = 0):
  """``(<int32>[B, T] held-out ids, vocabulary)``: streams ``first`` ... ``first + B - 1``
  of a corpus's validation split cut into consecutive streams of T characters.

  Raises:
    ValueError: naming ``config.seed`` where the split holds fewer streams.
  """
  whole = corpora.read_text(corpus, data_dir or None)
  vocabulary = text.char_vocabulary(whole)
  _, held_out = text.split_train_validation(text.encode(whole, vocabulary), fraction)
  streams = len(held_out) // steps
  if first + batch > streams:
    raise ValueError(f'config.seed: expected at most {streams // batch - 1} (the held-out text '
                     f'holds {streams} streams of {steps} characters, {batch} a seed), got '
                     f'{first // batch}')
  ids = np.asarray(held_out[:streams * steps]).reshape(streams, steps)[first:first + batch]
  return ids, vocabulary


def steps_needed(config) -> int:
  """The steps of a run's input sequences: its longest T, and the Lyapunov exponent's."""
  return max(max(config.lengths), config.lyapunov_transient + config.lyapunov_steps)


def problem(config):
  """``(cell params, <dtype>[B, T, d] inputs, activation)`` of a run, T = ``steps_needed``;
  call under ``jax.enable_x64`` for float64."""
  batch, steps = config.sequences, steps_needed(config)
  dtype = jnp.dtype(config.dtype)
  key_inputs, key_params = jax.random.split(jax.random.key(config.seed))
  cast = lambda tree: jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), tree)
  if config.trained_run:
    run_config, params = checkpoints.final_params(config.trained_run)
    cell = cast(params['recurrence']['cell'])
    corpus = run_config.get('corpus', 'ptb')
    if corpus == 'ptb':  # ptb_chars: its validation split as characters, one-hot
      from experiments import ptb_chars
      train, valid = (ptb_chars.read_chars(name, run_config.get('data_dir', ''))
                      for name in ptb_chars.SPLITS[:2])
      vocabulary = text.char_vocabulary(train)
      streams = np.asarray(text.encode(valid, vocabulary))
      count = len(streams) // steps
      ids = streams[:count * steps].reshape(count, steps)[config.seed * batch:][:batch]
    else:
      ids, vocabulary = held_out_ids(corpus, run_config.get('data_dir', ''),
                                     run_config['validation_fraction'], batch, steps,
                                     config.seed * batch)
    table = (jnp.asarray(params['embedding']['embedding'], dtype)
             if run_config.get('embedding_size') else jnp.eye(len(vocabulary), dtype=dtype))
    return cell, table[jnp.asarray(ids)], run_config.get('activation', 'tanh')
  cell = cast(cells.init_elman(jax.random.fold_in(key_params, config.hidden_size),
                               config.input_size, config.hidden_size, 'gaussian',
                               radius=config.spectral_radius))
  if config.inputs == 'normal':
    return cell, jax.random.normal(key_inputs, (batch, steps, config.input_size), dtype), 'tanh'
  ids, vocabulary = held_out_ids(CORPUS, config.data_dir, VALIDATION_FRACTION, batch, steps,
                                 config.seed * batch)
  import flax.linen as nn  # the default of nn.Embed, as models.LanguageModel draws it
  table = nn.initializers.variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)(
      key_inputs, (len(vocabulary), config.input_size), jnp.float32)
  return cell, jnp.asarray(table, dtype)[jnp.asarray(ids)], 'tanh'


def timed(executable, *args):
  """``(outputs, seconds)``: one run, and the fastest of 3 if it was short."""
  best, outputs = math.inf, None
  for i in range(3):
    start = time.perf_counter()
    outputs = jax.block_until_ready(executable(*args))
    best = min(best, time.perf_counter() - start)
    if i == 0 and best >= REPEAT_BELOW_SECONDS:
      break
  return outputs, best


def slope(lengths, iterations) -> float:
  """The least-squares slope of log iterations against log T over the finite counts
  (NaN for fewer than ``SLOPE_POINTS``; a count of 0 counts as 1)."""
  points = [(math.log(t), math.log(max(n, 1))) for t, n in zip(lengths, iterations)
            if math.isfinite(n)]
  if len(points) < SLOPE_POINTS:
    return math.nan
  return float(np.polyfit(*zip(*points), 1)[0])


def log_fit_residual(lengths, iterations) -> float:
  """The relative RMS residual of the least-squares line iterations = a + c ln T over the
  finite counts (the RMS of the residuals over the mean count): 0 where the iterations grow
  exactly like c ln T; NaN for fewer than ``LOG_FIT_POINTS`` counts."""
  points = [(math.log(t), n) for t, n in zip(lengths, iterations) if math.isfinite(n)]
  if len(points) < LOG_FIT_POINTS:
    return math.nan
  x, y = (np.asarray(v, np.float64) for v in zip(*points))
  residual = y - np.polyval(np.polyfit(x, y, 1), x)
  return float(np.sqrt(np.mean(residual ** 2)) / np.mean(y))


def log_product_norms(jacobians: jax.Array) -> jax.Array:
  """``ln ||J_1 J_2 ... J_s||_2`` for s = 1 ... T of ``<float>[T, H, H]`` Jacobians of the
  row-vector recurrence (``dh_s = dh_{s-1} J_s``), the product renormalised each step (its
  log scale carried apart); -inf once it is zero."""
  def step(carry, jacobian):
    product, log_scale = carry
    product = product @ jacobian
    size = jnp.max(jnp.abs(product))  # no square to overflow
    product = product / jnp.where(size > 0, size, 1.0)
    log_scale = log_scale + jnp.log(size)
    return (product, log_scale), log_scale + jnp.log(jnp.linalg.norm(product, 2))
  eye = jnp.eye(jacobians.shape[-1], dtype=jacobians.dtype)
  return jax.lax.scan(step, (eye, jnp.zeros((), jacobians.dtype)), jacobians)[1]


def jacobians_along(params: dict, drive: jax.Array, states: jax.Array,
                    initial: jax.Array) -> jax.Array:
  """The Jacobians ``J_t = W_hh diag(tanh'(a_t))`` ``<float>[T, H, H]`` of the tanh recurrence
  at a trajectory ``states <float>[T, H]`` (not necessarily its solution: an iterate), with
  ``a_t = drive_t + h_{t-1} W_hh`` and ``drive <float>[T, H]`` = x_t W_xh + b."""
  previous = jnp.concatenate([initial[None], states[:-1]])
  slope = cells.activation_derivative(jnp.tanh(drive + previous @ params['W_hh']), 'tanh')
  return params['W_hh'][None] * slope[:, None, :]


def predictors(config, params: dict, inputs: jax.Array, initial: jax.Array,
               programs: dict) -> dict:
  """What may predict DEER's iterations, along its iterates from the zero guess on the first
  T = ``config.predictor_length`` steps of the first sequence: ``exponent_zero_guess``, the
  finite-time exponent ln ||J_1 ... J_T||_2 / T at the zero guess (nats a step);
  ``exponent_along_iterates``, its largest value over the iterates h^(0) = 0, h^(1), ... up
  to the certified one (or ``cap``); ``largest_log_product_norm``, the largest
  ln ||J_1 ... J_s||_2 over those iterates and s <= T; ``iterates``, how many there were."""
  steps = config.predictor_length
  x, h0 = inputs[:1, :steps], initial[:1]
  drive = x[0] @ params['W_xh'] + params['b']
  limit = cap(config, params['W_hh'].shape[0], steps) or 1
  one_update = compiled(
      programs, ('one_update', config.tolerance),
      lambda p, x, h, guess: parallel.elman_deer(
          p, x, h, method='deer', initial_guess=guess, tolerance=config.tolerance,
          max_iterations=1), params, x, h0, jnp.zeros((1, steps, h0.shape[-1]), x.dtype))
  iterate = jnp.zeros((1, steps, h0.shape[-1]), x.dtype)
  norms = compiled(programs, ('norms',), lambda p, d, s, h: log_product_norms(
      jacobians_along(p, d, s, h)), params, drive, iterate[0], h0[0])
  exponents, largest = [], -math.inf
  for _ in range(limit + 1):
    logs = np.asarray(norms(params, drive, iterate[0], h0[0]))
    exponents.append(float(logs[-1]) / steps)
    largest = max(largest, float(np.max(logs)))
    following, _, info = one_update(params, x, h0, iterate)
    if int(np.asarray(info['iterations'])[0]) == 0:  # the iterate is certified: the last
      break
    iterate = following
  return {'exponent_zero_guess': exponents[0], 'exponent_along_iterates': max(exponents),
          'largest_log_product_norm': largest, 'iterates': len(exponents)}


def compiled(programs: dict, key: tuple, function, *args):
  """The executable of ``function`` for ``args``, compiled once per ``key`` (the settings
  it closes over) and the arguments' shapes and dtypes, kept in ``programs``."""
  key = (*key, *((np.shape(a), str(a.dtype)) for a in jax.tree_util.tree_leaves(args)))
  if key not in programs:
    programs[key] = jax.jit(function).lower(*args).compile()
  return programs[key]


def measure(config, programs: dict | None = None) -> dict:
  """One run's report (the module docstring); ``programs`` keeps the compiled solvers of
  the runs a process measures."""
  programs = {} if programs is None else programs
  with jax.enable_x64(config.dtype == 'float64'):
    params, inputs, activation = problem(config)
    batch, hidden = inputs.shape[0], params['W_hh'].shape[0]
    initial = jnp.zeros((batch, hidden), inputs.dtype)
    window = inputs[:, :config.lyapunov_transient + config.lyapunov_steps]
    exponents = compiled(programs, ('lyapunov', activation, config.lyapunov_transient),
                         lambda p, x, h: lyapunov.lyapunov_spectrum(
                             cells.elman(activation), p, x, h, 1,
                             transient=config.lyapunov_transient), params, window, initial)(
                                 params, window, initial)
    report = {'measured_spectral_radius': float(initializers.host_spectral_radius(
                  np.asarray(params['W_hh'], np.float64))),
              'largest_lyapunov_exponent': float(np.median(np.asarray(exponents)[:, 0]))}
    damping = (config.damping or None) if config.method in parallel.DAMPED_METHODS else None
    iterations, total, failed = [], 0.0, False
    for steps in config.lengths:
      limit = cap(config, hidden, steps)
      if limit is None or (config.longest and steps > config.longest):
        break  # not measured (NaN): the work cap, or beyond the longest T asked for
      if failed:
        report[f'iterations_T{steps}'] = math.inf
        iterations.append(math.inf)
        continue
      prefix = inputs[:, :steps]
      executable = compiled(
          programs, ('solve', activation, config.method, config.tolerance, limit, damping),
          lambda p, x, h, limit=limit: parallel.elman_deer(
              p, x, h, activation=activation, method=config.method, tolerance=config.tolerance,
              max_iterations=limit, damping=damping), params, prefix, initial)
      (_, _, info), seconds = timed(executable, params, prefix, initial)
      counts = np.where(np.asarray(info['converged']), np.asarray(info['iterations']), np.inf)
      median = float(np.sort(counts)[(batch - 1) // 2])  # one sequence's count
      failed = not math.isfinite(median)
      report[f'iterations_T{steps}'] = median
      report[f'solver_seconds_T{steps}'] = seconds
      iterations.append(median)
      total += seconds
    if (config.predictor_length and config.method == 'deer' and activation == 'tanh'
        and not config.trained_run):
      report.update(predictors(config, params, inputs, initial, programs))
  converged = [t for t, n in zip(config.lengths, iterations) if math.isfinite(n)]
  return dict(report, slope=slope(config.lengths[:len(iterations)], iterations),
              log_fit_residual=log_fit_residual(config.lengths[:len(iterations)], iterations),
              solver_seconds=total,
              longest_converged=max(converged) if converged else 0)


PREDICTABLE, UNPREDICTABLE = -0.02, 0.02  # lambda_1 bounds of the criteria (nats a step)
FLAT, GROWING = 0.2, 0.8  # DEER's slope bounds of the criteria
LOGARITHMIC = 0.15  # the corrected criterion 1's bound on the fit's relative RMS residual
PREDICTORS = ('largest_lyapunov_exponent', 'exponent_zero_guess', 'exponent_along_iterates',
              'largest_log_product_norm')


def predictor_table(cells: list[dict], steps: int) -> list[dict]:
  """A row a predictor over DEER's ``cells`` (run summaries that hold the predictors):
  Spearman's rank correlation with the slope (cells with one) and with ln iterations at
  T = ``steps`` (cells certified there), and the R^2 of the least-squares line of the latter
  on the predictor (``scipy.stats``)."""
  from scipy import stats
  rows = []
  for name in PREDICTORS:
    sloped = [(c[name], c['slope']) for c in cells
              if math.isfinite(c[name]) and math.isfinite(c['slope'])]
    counted = [(c[name], math.log(c[f'iterations_T{steps}'])) for c in cells if math.isfinite(
        c[name]) and math.isfinite(c.get(f'iterations_T{steps}', math.nan))]
    rank = lambda pairs: float(stats.spearmanr(*zip(*pairs))[0]) if len(pairs) > 2 else math.nan
    fit = stats.linregress(*zip(*counted)) if len(counted) > 2 else None
    rows.append({'predictor': name, 'cells with a slope': len(sloped),
                 'spearman with slope': rank(sloped),
                 f'cells certified at T = {steps}': len(counted),
                 'spearman with ln iterations': rank(counted),
                 'r2 of ln iterations': fit.rvalue ** 2 if fit else math.nan})
  return rows


def predictability(runs, keys, folder, heading) -> None:
  """The study's tables from its runs: ``predictability.md`` / ``.csv``, a row per method,
  size and radius over its seeds (lambda_1, slope, longest certified T, solver seconds:
  median [IQR]); ``criteria.md`` / ``.csv``, DEER's slope against lambda_1 as the page's
  criteria state them (a cell is one size, radius and seed, classed by its own lambda_1:
  the share of cells with lambda_1 < -0.02 whose slope is below 0.2, and of those with
  lambda_1 > 0.02 whose slope is above 0.8; a cell with fewer than 3 certified lengths has
  no slope and fails); ``trained.md`` / ``.csv``, the trained cells."""
  del keys
  ended = [run for run in runs if run['summary'] and run['status'] in ('finished', 'diverged')]
  fresh = [run for run in ended if not run['config'].get('trained_run')]
  groups: dict[tuple, list[dict]] = {}
  for run in fresh:
    c = run['config']
    groups.setdefault((c['method'], c['hidden_size'], c['spectral_radius']), []).append(
        run['summary'])
  rows = [{'method': method, 'hidden_size': hidden, 'spectral_radius': rho,
           'seeds': len(summaries),
           **{name: report.spread([s.get(name, math.nan) for s in summaries])
              for name in ('largest_lyapunov_exponent', 'slope', 'longest_converged',
                           'solver_seconds')}}
          for (method, hidden, rho), summaries in sorted(groups.items())]
  report.table(rows, '\n\n'.join(filter(None, [
      heading, 'One method, size and radius a row, over its seeds: the median [interquartile '
      'range]. slope: of log iterations against log T over the certified lengths; '
      'longest_converged: the longest T certified; lambda_1 in nats a step.'])), folder,
      'predictability')
  criteria = []
  for hidden in sorted({run['config']['hidden_size'] for run in fresh}) + ['all']:
    cells = [run['summary'] for run in fresh if run['config']['method'] == 'deer'
             and hidden in ('all', run['config']['hidden_size'])]
    for name, test in (('lambda_1 < -0.02: slope < 0.2', lambda s: (
        s['largest_lyapunov_exponent'] < PREDICTABLE, s['slope'] < FLAT)),
                       ('lambda_1 > 0.02: slope > 0.8', lambda s: (
        s['largest_lyapunov_exponent'] > UNPREDICTABLE, s['slope'] > GROWING))):
      judged = [test(s) for s in cells]
      within = [holds for applies, holds in judged if applies]
      rate = report.wilson(sum(within), len(within))
      criteria.append({'hidden_size': hidden, 'criterion': name, 'cells': rate,
                       'held (at least 4 of 5)': bool(within) and sum(within) >= 0.8 * len(
                           within)})
    corrected = [s['log_fit_residual'] <= LOGARITHMIC for s in cells
                 if 'log_fit_residual' in s and s['largest_lyapunov_exponent'] < PREDICTABLE]
    if corrected:  # the runs that report the fit (the new seeds' sweep)
      criteria.append({
          'hidden_size': hidden, 'criterion': 'lambda_1 < -0.02: a + c ln T fits (relative '
          f'RMS residual <= {LOGARITHMIC})', 'cells': report.wilson(sum(corrected),
                                                                   len(corrected)),
          'held (at least 4 of 5)': sum(corrected) >= 0.8 * len(corrected)})
  report.table(criteria, '\n\n'.join(filter(None, [
      heading, 'DEER: a cell is one size, radius and seed, classed by its own lambda_1; '
      'cells: those meeting the slope bound of all so classed, with the 95% Wilson interval '
      '(a slope needs 3 certified lengths: a cell without is counted as failing).'])),
      folder, 'criteria')
  measured = [run for run in fresh if 'exponent_zero_guess' in run['summary']]
  if measured:
    steps = measured[0]['config']['predictor_length']
    caption = '\n\n'.join(filter(None, [
        heading, f'DEER, what predicts its iterations over the {len(measured)} cells that '
        'measure it (one run each: a size, radius and seed), along its iterates from the zero '
        f'guess on the first {steps} steps: Spearman\'s '
        'rank correlation with the slope and with ln iterations at that T, and the R^2 of the '
        'least-squares line of ln iterations on the predictor.']))
    report.table(predictor_table([run['summary'] for run in measured], steps), caption, folder,
                 'predictors')
  trained = [{'method': run['config']['method'],
              'trained_run': pathlib.PurePath(run['config']['trained_run']).name,
              **{name: run['summary'].get(name, math.nan) for name in (
                  'largest_lyapunov_exponent', 'slope', 'longest_converged', 'solver_seconds',
                  'measured_spectral_radius', *(f'iterations_T{t}' for t in REPORTED_LENGTHS))}}
             for run in ended if run['config'].get('trained_run')]
  if trained:
    report.table(trained, '\n\n'.join(filter(None, [
        heading, 'Trained cells, one run each: lambda_1 over their own held-out text '
        '(nats a step), DEER\'s and the diagonal methods\' iterations at each T.'])), folder,
        'trained')


def check(config) -> None:
  """Raises ValueError naming ``config.trained_run`` for a folder that holds no ended run
  (each run's own check, before any folder is touched: a sweep measures the others)."""
  if config.trained_run:
    try:
      checkpoints.final_params(config.trained_run)
    except (OSError, checkpoints.CheckpointError) as error:
      raise ValueError(f'config.trained_run: {error}') from None


def task(config) -> trainer.Task:
  """The measurement as a task that trains nothing: its report is the measurement."""
  programs: dict = {}  # the compiled solvers, shared by the runs of this process's group
  return trainer.Task(init=lambda config, key: {}, loss=None, batch=lambda step: {},
                      report=lambda run_config, params: measure(run_config, programs))


def _lengths(value) -> bool:
  return (isinstance(value, tuple) and len(value) >= 1 and list(value) == sorted(set(value))
          and all(isinstance(t, int) and not isinstance(t, bool) and t >= 2 for t in value))


Field = experiment.Field
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, check=check,
    fields={
        'steps': Field(0, experiment.integer(0), 'a measurement: nothing is trained'),
        'method': Field('deer', experiment.one_of(parallel.METHODS),
                        'deer (Newton) | quasi (diagonal Jacobians) | elk | quasi_elk (damped)'),
        'damping': Field(0.0, experiment.number(0), "elk, quasi_elk: the trust region's "
                         'lambda (0: parallel.DEFAULT_DAMPING)'),
        'spectral_radius': Field(1.0, experiment.number(0.0), 'of W_hh at initialization'),
        'hidden_size': Field(16, experiment.integer(1), 'H'),
        'dtype': Field('float32', experiment.one_of(('float32', 'float64')),
                       "the cell's and the inputs' (float64: with jax's x64 on for the run)"),
        'lengths': Field((64,), experiment.Check('increasing ints >= 2', _lengths),
                         'T: the first T steps are solved for each, shortest first'),
        'longest': Field(0, experiment.integer(0), 'solve only the lengths up to this T '
                         '(0: all)'),
        'sequences': Field(3, experiment.integer(1), 'B, whose median is reported'),
        'input_size': Field(64, experiment.integer(1), "d (char_lm's embedding size)"),
        'inputs': Field('text', experiment.one_of(('text', 'normal')),
                        "text: held-out Tiny Shakespeare through a fresh embedding | normal"),
        'data_dir': Field('', None, 'empty: $RNNJAX_DATA_DIR, else ./data'),
        'trained_run': Field('', None, "an ended char_lm or ptb_chars run's folder ('': a "
                             'fresh network)'),
        'tolerance': Field(1e-5, experiment.number(0.0, strict=True), "elman_deer's"),
        'max_iterations': Field(1024, experiment.integer(1), 'deer, quasi: the cap'),
        'damped_max_iterations': Field(1024, experiment.integer(1), 'elk, quasi_elk: the cap'),
        'deer_work': Field(6.4e10, experiment.number(0.0, strict=True),
                           'the multiply-adds a solve of DEER or ELK may spend'),
        'lyapunov_transient': Field(16, experiment.integer(0),
                                    'steps before the Lyapunov exponent is counted'),
        'lyapunov_steps': Field(48, experiment.integer(1),
                                'steps the Lyapunov exponent is counted over'),
        'predictor_length': Field(0, experiment.integer(0), 'deer on a fresh tanh cell: T of '
                                  'the predictors along its iterates (0: not measured)'),
    },
    report=('largest_lyapunov_exponent', 'slope', 'log_fit_residual', 'longest_converged',
            'solver_seconds', 'measured_spectral_radius',
            *(f'iterations_T{t}' for t in REPORTED_LENGTHS), *PREDICTORS[1:]),
    plots=(('points', 'slope', 'largest_lyapunov_exponent', 'method', 'hidden_size'),),
    analyses=(predictability,),
    vmappable=('seed', 'method', 'damping', 'spectral_radius', 'hidden_size', 'dtype',
               'lengths', 'longest', 'sequences', 'input_size', 'inputs', 'trained_run', 'tolerance',
               'max_iterations', 'damped_max_iterations', 'deer_work', 'lyapunov_transient',
               'lyapunov_steps', 'predictor_length'))
