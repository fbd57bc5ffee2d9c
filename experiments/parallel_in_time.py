"""Where parallel-in-time evaluation (DEER, quasi-DEER) of the Elman recurrence converges.

  python -m experiments.parallel_in_time --run=results/char_lm    # the sweep + a trained net
  python -m experiments.parallel_in_time --radii=0.5,1.5 --lengths=64 --hidden_sizes=4

``parallel.elman_deer`` solves all T steps of h_t = tanh(x_t W_xh + h_{t-1} W_hh + b)
at once by Newton's method (DEER: full [H, H] Jacobians, O(T H^3) work per
iteration) or its diagonal approximation (quasi-DEER, O(T H) plus the O(T H^2)
residual), each iteration a parallel prefix scan. Gonzalez et al. (2025) argue
that the iterations needed are few where the recurrence is contractive
(predictable) and up to T where it is chaotic. This experiment counts them on
a grid of spectral radius rho (Gaussian W_hh, ``cells.init_elman``), sequence
length T and hidden size H at initialization, and for the Elman cell of
trained char_lm networks (``--run``), beside the per-step growth rate of the
Jacobian products dh_t/dh_{t-n} (``diagnostics.jacobian_product_norms``: below
1 contractive, above 1 expanding) and the measured wall time of DEER,
quasi-DEER and the sequential ``fused.elman_layer``.

Inputs (``--inputs``):
  text    Tiny Shakespeare's held-out 10% (char_lm's split): --sequences
          streams of it (``text.stream_windows``), looked up in an embedding
          table [V, d] drawn as char_lm's model draws it at initialization
          (flax's default, N(0, 1/d)), so with W_xh ~ N(0, 1/d) the drive
          x_t W_xh of each unit is about N(0, 0.125^2) at d = 64: a weakly
          driven network, as a character LM is at initialization.
  normal  x_t ~ N(0, I_d): the drive is about N(0, 1), which saturates tanh
          more and makes every rho more contractive.
A trained network always reads the held-out text of its own run through its
own embedding. Every sequence starts from h_0 = 0 with the zero initial guess.

Per cell (network, H, rho, T) the median over --sequences sequences (the lower
median: one sequence's count) of the Newton iterations to the residual test
of ``elman_deer`` (tolerance --tolerance), for each method with a cap:

  quasi-DEER: min(T, --max_iterations);
  DEER:       min(T, --max_iterations, --deer_work / (B T H^3)), where B T H^3
              is one iteration's multiply-adds over the prefix scan's ~T
              matrix products per sequence; a cap below 3 skips the cell.

At the defaults (B = 3, --deer_work 6.4e10) DEER runs up to 19 iterations at
H = 64, T = 4096 (about 0.7 s each on 2 CPU cores), 79 at T = 1024, and for
H = 256 (a default char_lm) 19 at T = 64, 4 at T = 256 and is skipped beyond.
A sequence not converged at the cap is '>cap' in the table (its iterations
count as infinite in the median); one whose iterate overflowed float32 (the
products of Jacobians linearised at the zero guess pass float32's range when
rho well above 1; see ``parallel``) is 'overflow'; 'k/B' follows a count
reached by fewer than all B sequences.

Times are wall-clock seconds for the batch of B sequences, with compilation
done ahead of time (``jit(...).lower(...).compile()``): a run shorter than
1 s is repeated 3 times and the fastest kept; the sequential layer is warmed
up once and timed as the fastest of 3. A capped run's time is the time to its
cap ('DEER/fused', their ratio, is shown only where the median sequence
converged). 'dev' is max |h_t - h_t(sequential)| over the sequences that
converged.

Writes parallel_in_time.md (headed by the commit and date), .csv (one row per cell, numbers only; iterations
inf where the median sequence did not converge) and .png (heatmaps of the
iterations: T across, rho down, one panel per method and H) to --workdir,
and prints the Markdown table.

References:
  Gonzalez, Kozachkov, Warrington, Smith & Linderman (2025), "Predictability
  enables parallelization of nonlinear state space models".
  Lim, Zhu, Selfridge & Kasim (2024) (DEER); Gonzalez, Warrington, Smith &
  Linderman (2024) (quasi-DEER).
"""

import functools
import math
import pathlib
import time

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from launch import report
from launch import run
from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import fused
from rnnjax import initializers
from rnnjax import parallel
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import run_folder

FLAGS = flags.FLAGS

RADII = (0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5)
LENGTHS = (64, 256, 1024, 4096)
HIDDEN_SIZES = (4, 16, 64)
SEQUENCES = 3
INPUT_SIZE = 64  # char_lm's embedding size
CORPUS, VALIDATION_FRACTION = 'tinyshakespeare', 0.1  # char_lm's
MAX_ITERATIONS = 1024
DEER_WORK = 6.4e10
SMALLEST_DEER_CAP = 3
GROWTH_DISTANCE = 64
TOLERANCE = 1e-5
REPEAT_BELOW_S = 1.0  # runs shorter than this are timed 3 times, the fastest kept
METHODS = parallel.METHODS  # ('deer', 'quasi')
METHOD_NAMES = {'deer': 'DEER', 'quasi': 'quasi-DEER'}


def define_flags():
  """Defines the command-line flags (only when run as a program, so the module imports cleanly)."""
  flags.DEFINE_string('workdir', 'results/parallel_in_time',
                      'Folder for parallel_in_time.md, .csv (the table) and .png (the heatmaps).')
  flags.DEFINE_list('radii', [str(r) for r in RADII],
                    'Spectral radii of the Gaussian W_hh at initialization.')
  flags.DEFINE_list('lengths', [str(t) for t in LENGTHS],
                    'Sequence lengths T (>= 2), for the initial and the trained networks.')
  flags.DEFINE_list('hidden_sizes', [str(h) for h in HIDDEN_SIZES],
                    'Hidden sizes H of the networks at initialization (none: only --run).')
  flags.DEFINE_enum('inputs', 'text', ['text', 'normal'],
                    'Inputs at initialization: text = held-out Tiny Shakespeare through an '
                    'embedding drawn as char_lm draws it (N(0, 1/d)); normal = N(0, 1) vectors.')
  flags.DEFINE_integer('input_size', INPUT_SIZE, 'd, the input (embedding) size at '
                       'initialization.')
  flags.DEFINE_integer('sequences', SEQUENCES, 'B, sequences per cell (a batch); iterations '
                       'are their lower median.')
  flags.DEFINE_list('run', [], 'Folders of ended char_lm runs whose trained Elman cell is '
                    'evaluated on their held-out text (comma-separated; none: only the sweep).')
  flags.DEFINE_float('tolerance', TOLERANCE, 'The residual test of parallel.elman_deer: '
                     '|h_t - F_t(h_{t-1})| <= tolerance (1 + |h_t|) at every step and unit.')
  flags.DEFINE_integer('max_iterations', MAX_ITERATIONS, 'Cap on the Newton iterations of '
                       'either method, besides T.')
  flags.DEFINE_float('deer_work', DEER_WORK, 'DEER multiply-adds per cell: its cap is at most '
                     'deer_work / (B T H^3); below 3 the cell is skipped.')
  flags.DEFINE_integer('growth_distance', GROWTH_DISTANCE, 'The longest product n of Jacobians '
                       'whose norm^(1/n) is the growth rate (at most T - 1).')
  flags.DEFINE_integer('seed', 0, 'Seed of W_hh, W_xh and the embedding or the inputs.')


class SetupError(Exception):
  """A run, a corpus or a split that cannot give the inputs asked for (one line)."""


_jacobian_product_norms = jax.jit(diagnostics.jacobian_product_norms, static_argnums=(2, 3))


def cap(method: str, batch: int, steps: int, hidden: int, max_iterations: int = MAX_ITERATIONS,
        deer_work: float = DEER_WORK):
  """The iteration cap of a cell (module docstring), or None where DEER is skipped."""
  limit = min(steps, max_iterations)
  if method == 'quasi':
    return limit
  limit = min(limit, int(deer_work // (batch * steps * hidden ** 3)))
  return limit if limit >= min(SMALLEST_DEER_CAP, steps) else None


def held_out_ids(config: dict, batch: int, steps: int):
  """``(<int32>[B, T] held-out ids, vocabulary)``: the first T characters of B streams of
  the run's validation split (``text.stream_windows``, window 0).

  Raises:
    corpora.CorpusError, ValueError: no corpus, or too short a split for B x T.
  """
  corpus = corpora.read_text(config['corpus'], config.get('data_dir') or None)
  vocabulary = text.char_vocabulary(corpus)
  _, held_out = text.split_train_validation(text.encode(corpus, vocabulary),
                                            config['validation_fraction'])
  inputs, _ = text.stream_windows(held_out, batch, steps)
  return inputs[0], vocabulary


def initial_inputs(kind: str, key, batch: int, steps: int, input_size: int):
  """``<float32>[B, T, d]`` inputs at initialization (module docstring, --inputs)."""
  if kind == 'normal':
    return jax.random.normal(key, (batch, steps, input_size), jnp.float32)
  ids, vocabulary = held_out_ids({'corpus': CORPUS, 'validation_fraction': VALIDATION_FRACTION},
                                 batch, steps)
  import flax.linen as nn  # the default of nn.Embed, as models.LanguageModel draws it
  table = nn.initializers.variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)(
      key, (len(vocabulary), input_size), jnp.float32)
  return table[jnp.asarray(ids)]


def trained_problem(run, batch: int, steps: int):
  """The Elman cell of an ended char_lm run and its held-out text.

  Returns:
    ``(cell params, <float32>[B, T, E] inputs, activation, spectral radius)``.

  Raises:
    FileNotFoundError: no ended run there (``run_folder.final_params``).
    ValueError: not a char_lm run.
  """
  config, params = run_folder.final_params(pathlib.Path(run))
  if config.get('experiment') != 'char_lm':
    raise ValueError(f'{run}: expected a char_lm run, got experiment '
                     f'{config.get("experiment")!r}')
  cell = jax.tree.map(jnp.asarray, params['recurrence']['cell'])
  ids, vocabulary = held_out_ids(config, batch, steps)
  if config['embedding_size']:
    table = jnp.asarray(params['embedding']['embedding'])
  else:
    table = jnp.eye(len(vocabulary), dtype=jnp.float32)
  radius = float(initializers.spectral_radius(cell['W_hh']))
  return cell, table[jnp.asarray(ids)], config['activation'], radius


class Compiled:
  """Ahead-of-time compiled functions, one per (name, static options, argument shapes)."""

  def __init__(self):
    self.executables = {}

  def __call__(self, name, function, *args, **static):
    shapes = jax.tree.map(lambda x: (x.shape, str(x.dtype)), args)
    key = (name, tuple(sorted(static.items())), str(shapes))
    if key not in self.executables:
      self.executables[key] = jax.jit(functools.partial(function, **static)).lower(
          *args).compile()
    return self.executables[key]


def timed(executable, *args, repeats: int = 3):
  """``(outputs, seconds)``: one run, and the fastest of ``repeats`` if it was short."""
  best, outputs = math.inf, None
  for i in range(repeats):
    start = time.perf_counter()
    outputs = jax.block_until_ready(executable(*args))
    best = min(best, time.perf_counter() - start)
    if i == 0 and best >= REPEAT_BELOW_S:
      break
  return outputs, best


def growth(states, w_hh, activation: str, longest: int) -> float:
  """Median over sequences of ||dh_t/dh_{t-n}||^(1/n) at the last step t = T - 1 and the
  longest n <= ``longest`` (and <= T - 1) whose norm is in float32's range (in 1e-30..1e30).
  """
  longest = min(longest, states.shape[1] - 1)
  distances = tuple(sorted({2 ** i for i in range(int(math.log2(longest)) + 1)} | {longest}))
  norms, _ = _jacobian_product_norms(
      states[:, -(longest + 1):], w_hh, distances, activation)
  rates = np.asarray(diagnostics.growth_rate(norms, distances), np.float64)
  norms = np.asarray(norms, np.float64)
  usable = np.isfinite(norms) & (norms > 1e-30) & (norms < 1e30)
  per_sequence = [row[np.flatnonzero(ok)[-1]] if ok.any() else math.nan
                  for row, ok in zip(rates, usable)]
  return float(np.median(per_sequence))


def lower_median(values) -> float:
  """The lower median: one of the values (an iteration count, or inf)."""
  return float(np.sort(np.asarray(values, np.float64))[(len(values) - 1) // 2])


def measure(compiled, params, inputs, activation='tanh', tolerance=TOLERANCE,
            max_iterations=MAX_ITERATIONS, deer_work=DEER_WORK,
            growth_distance=GROWTH_DISTANCE) -> dict:
  """One cell: the growth rate, and per method the iterations, convergence and times.

  Returns:
    ``{'growth', 'fused_seconds', 'deer': outcome or None (skipped), 'quasi': outcome}``
    with ``outcome = {'iterations' <int>[B], 'converged' <bool>[B], 'overflowed' <bool>[B],
    'cap', 'seconds', 'max_dev'}``.
  """
  batch, steps, _ = inputs.shape
  hidden = params['W_hh'].shape[0]
  initial = jnp.zeros((batch, hidden), jnp.float32)
  sequential = compiled('fused', fused.elman_layer, params, inputs, initial,
                        activation=activation)
  jax.block_until_ready(sequential(params, inputs, initial))  # warm-up
  (states, _), fused_seconds = timed(sequential, params, inputs, initial)
  result = {'growth': growth(states, params['W_hh'], activation, growth_distance),
            'fused_seconds': fused_seconds}
  for method in METHODS:
    limit = cap(method, batch, steps, hidden, max_iterations, deer_work)
    if limit is None:
      result[method] = None
      continue
    solve = compiled('deer', parallel.elman_deer, params, inputs, initial, activation=activation,
                     method=method, tolerance=tolerance, max_iterations=limit)
    (solved, _, info), seconds = timed(solve, params, inputs, initial)
    converged = np.asarray(info['converged'])
    deviation = np.abs(np.asarray(solved) - np.asarray(states)).max(axis=(1, 2))
    result[method] = {
        'iterations': np.asarray(info['iterations']), 'converged': converged,
        'overflowed': ~np.isfinite(np.asarray(info['residual'])), 'cap': limit,
        'seconds': seconds,
        'max_dev': float(deviation[converged].max()) if converged.any() else math.nan}
  return result


def sweep(radii=RADII, lengths=LENGTHS, hidden_sizes=HIDDEN_SIZES, inputs='text', runs=(),
          sequences=SEQUENCES, input_size=INPUT_SIZE, seed=0, log=print, **options) -> list:
  """The whole grid: initialization (H x rho x T), then each trained run (x T).

  Args:
    radii, lengths, hidden_sizes, inputs, sequences, input_size, seed: as the flags.
    runs: folders of ended char_lm runs.
    log: called with one line per cell as it is done.
    **options: tolerance, max_iterations, deer_work, growth_distance (``measure``).

  Returns:
    a list of ``{'network', 'hidden', 'radius', 'steps', **measure(...)}``.

  Raises:
    SetupError: a run that is not an ended char_lm run, no corpus, too short a split.
  """
  compiled = Compiled()
  rows = []
  longest = max(lengths)

  def record(row):
    rows.append(row)
    log(f'{row_label(row)}: ' + ', '.join(
        f'{METHOD_NAMES[m]} {iterations_text(row[m], sequences)}' for m in METHODS))

  problems = []
  key_inputs, key_params = jax.random.split(jax.random.key(seed))
  try:
    for folder in runs:  # read (and checked) first: a wrong --run fails before the sweep
      problems.append((pathlib.Path(folder).name, *trained_problem(folder, sequences, longest)))
    if hidden_sizes:
      all_inputs = initial_inputs(inputs, key_inputs, sequences, longest, input_size)
  except (FileNotFoundError, ValueError, corpora.CorpusError) as error:
    raise SetupError(str(error).splitlines()[0]) from None
  for hidden in hidden_sizes:
    for radius in radii:
      params = cells.init_elman(jax.random.fold_in(key_params, hidden), input_size, hidden,
                                'gaussian', radius=radius)
      for steps in lengths:
        record({'network': 'init', 'hidden': hidden, 'radius': radius, 'steps': steps,
                **measure(compiled, params, all_inputs[:, :steps], **options)})
  for name, params, run_inputs, activation, radius in problems:
    for steps in lengths:
      record({'network': f'trained {name}', 'hidden': params['W_hh'].shape[0],
              'radius': radius, 'steps': steps,
              **measure(compiled, params, run_inputs[:, :steps], activation, **options)})
  return rows


def row_label(row) -> str:
  return f'{row["network"]} H={row["hidden"]} rho={row["radius"]:.3g} T={row["steps"]}'


def median_iterations(outcome) -> float:
  """Lower median over sequences, a sequence that did not converge counting as inf."""
  return lower_median(np.where(outcome['converged'], outcome['iterations'], np.inf))


def iterations_text(outcome, sequences: int) -> str:
  """'7', '7 (2/3)' (converged sequences), '>64', 'overflow' or 'skipped'."""
  if outcome is None:
    return 'skipped'
  median = median_iterations(outcome)
  if math.isfinite(median):
    text_ = str(int(median))
  elif outcome['overflowed'].sum() > (~outcome['converged'] & ~outcome['overflowed']).sum():
    text_ = 'overflow'
  else:
    text_ = f'>{outcome["cap"]}'
  converged = int(outcome['converged'].sum())
  return text_ if converged in (0, sequences) else f'{text_} ({converged}/{sequences})'


def tables(rows, sequences: int) -> tuple[str, str]:
  """``(markdown, csv)`` of the rows (``diagnostics.norm_table``)."""
  markdown_columns = ['growth', 'DEER iters', 'quasi iters', 'DEER s', 'quasi s', 'fused s',
                      'DEER/fused', 'DEER dev']
  markdown_rows, csv_rows = {}, {}
  for row in rows:
    deer, quasi = row['deer'], row['quasi']
    markdown_rows[row_label(row)] = {
        'growth': f'{row["growth"]:.3f}',
        'DEER iters': iterations_text(deer, sequences),
        'quasi iters': iterations_text(quasi, sequences),
        'DEER s': '-' if deer is None else f'{deer["seconds"]:.3g}',
        'quasi s': f'{quasi["seconds"]:.3g}',
        'fused s': f'{row["fused_seconds"]:.3g}',
        'DEER/fused': '-' if deer is None or not math.isfinite(median_iterations(deer)) else
                      f'{deer["seconds"] / row["fused_seconds"]:.0f}x',
        'DEER dev': '-' if deer is None or math.isnan(deer['max_dev']) else
                    f'{deer["max_dev"]:.1e}'}
    values = {'H': row['hidden'], 'rho': row['radius'], 'T': row['steps'],
              'growth': row['growth'], 'fused_seconds': row['fused_seconds']}
    for method in METHODS:
      outcome = row[method]
      if outcome is not None:
        values.update({f'{method}_iterations': median_iterations(outcome),
                       f'{method}_converged': int(outcome['converged'].sum()),
                       f'{method}_overflowed': int(outcome['overflowed'].sum()),
                       f'{method}_cap': outcome['cap'],
                       f'{method}_seconds': outcome['seconds'],
                       f'{method}_max_dev': outcome['max_dev']})
    csv_rows[row_label(row)] = values
  csv_columns = ['H', 'rho', 'T', 'growth'] + [
      f'{method}_{field}' for method in METHODS
      for field in ('iterations', 'converged', 'overflowed', 'cap', 'seconds', 'max_dev')] + [
          'fused_seconds']
  markdown, _ = diagnostics.norm_table('setting', markdown_rows, markdown_columns)
  _, csv = diagnostics.norm_table('setting', csv_rows, csv_columns)
  return markdown, csv


def heatmap(rows, path: pathlib.Path, sequences: int, title: str) -> None:
  """log2 of the median iterations: T across, rho (and trained networks) down; a panel
  per method (rows of panels) and H (columns); grey where skipped or overflowed."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

  hidden_sizes = sorted({row['hidden'] for row in rows})
  lengths = sorted({row['steps'] for row in rows})
  most_rows = max(len({(row['network'], row['radius']) for row in rows if row['hidden'] == h})
                  for h in hidden_sizes)
  figure, axes = plt.subplots(len(METHODS), len(hidden_sizes), squeeze=False,
                              layout='constrained',
                              figsize=(1.6 + (1.3 + 0.55 * len(lengths)) * len(hidden_sizes),
                                       1.0 + (0.8 + 0.36 * most_rows) * len(METHODS)))
  colormap = plt.get_cmap('viridis').copy()
  colormap.set_bad('0.8')
  limit = math.log2(max(lengths))
  for i, method in enumerate(METHODS):
    for j, hidden in enumerate(hidden_sizes):
      axis = axes[i, j]
      settings = list(dict.fromkeys((row['network'], row['radius']) for row in rows
                                    if row['hidden'] == hidden))
      grid = np.full((len(settings), len(lengths)), np.nan)
      for row in rows:
        if row['hidden'] != hidden:
          continue
        y, x = settings.index((row['network'], row['radius'])), lengths.index(row['steps'])
        outcome = row[method]
        if outcome is not None:
          median = median_iterations(outcome)
          if math.isfinite(median):
            grid[y, x] = math.log2(max(median, 1))
          elif not outcome['overflowed'].all():
            grid[y, x] = math.log2(outcome['cap'])
        axis.text(x, y, iterations_text(outcome, sequences).replace(' (', '\n('),
                  ha='center', va='center', fontsize=6.5,
                  color='white' if np.isfinite(grid[y, x]) and grid[y, x] < 0.6 * limit
                  else 'black')
      image = axis.imshow(np.ma.masked_invalid(grid), cmap=colormap, vmin=0, vmax=limit,
                          aspect='auto')
      axis.set_xticks(range(len(lengths)), [str(t) for t in lengths], fontsize=7)
      axis.set_yticks(range(len(settings)), [
          f'rho={r:g}' if network == 'init' else f'{network.split()[-1]}\nrho={r:.2f}'
          for network, r in settings], fontsize=6.5)
      axis.set_title(f'{METHOD_NAMES[method]}, H = {hidden}', fontsize=9)
      if i == len(METHODS) - 1:
        axis.set_xlabel('T', fontsize=8)
  bar = figure.colorbar(image, ax=axes, shrink=0.8)
  bar.set_label('log2 iterations (median)', fontsize=8)
  figure.suptitle(title, fontsize=9)
  figure.savefig(path, dpi=130)
  plt.close(figure)


def write_outputs(rows, workdir: pathlib.Path, sequences: int, title: str) -> str:
  """parallel_in_time.md, .csv, .png in ``workdir``; returns the Markdown."""
  workdir.mkdir(parents=True, exist_ok=True)
  markdown, csv = tables(rows, sequences)
  markdown = report.provenance_line([run.provenance()]) + '\n\n' + markdown
  (workdir / 'parallel_in_time.md').write_text(markdown)
  (workdir / 'parallel_in_time.csv').write_text(csv)
  heatmap(rows, workdir / 'parallel_in_time.png', sequences, title)
  return markdown


def _numbers(flag: str, values, kind, minimum):
  try:
    numbers = tuple(kind(v) for v in values)
  except ValueError:
    raise SystemExit(f'error: --{flag}: expected {kind.__name__}s, got {",".join(values)}'
                     ) from None
  if any(not (minimum <= v < math.inf) for v in numbers):
    raise SystemExit(f'error: --{flag}: expected finite values >= {minimum}, got {numbers}')
  return numbers


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  run.quiet_logs()  # no TPU line, no orbax chatter
  radii = _numbers('radii', FLAGS.radii, float, 0.0)
  lengths = _numbers('lengths', FLAGS.lengths, int, 2)
  hidden_sizes = _numbers('hidden_sizes', FLAGS.hidden_sizes, int, 1)
  if not (hidden_sizes and radii) and not FLAGS.run:
    raise SystemExit('error: nothing to do: give --hidden_sizes and --radii, or --run')
  for flag in ('sequences', 'input_size', 'max_iterations', 'growth_distance'):
    if getattr(FLAGS, flag) < 1:
      raise SystemExit(f'error: --{flag}: expected an int >= 1, got {getattr(FLAGS, flag)}')
  if not FLAGS.tolerance > 0 or not FLAGS.deer_work > 0:
    raise SystemExit(f'error: --tolerance and --deer_work: expected > 0, got {FLAGS.tolerance} '
                         f'and {FLAGS.deer_work}')
  workdir = pathlib.Path(FLAGS.workdir)
  started = time.perf_counter()
  try:
    rows = sweep(radii, lengths, hidden_sizes if radii else (), FLAGS.inputs, FLAGS.run,
                 FLAGS.sequences, FLAGS.input_size, FLAGS.seed,
                 log=lambda line: logging.info('%s', line), tolerance=FLAGS.tolerance,
                 max_iterations=FLAGS.max_iterations, deer_work=FLAGS.deer_work,
                 growth_distance=FLAGS.growth_distance)
  except SetupError as error:
    raise SystemExit(f'error: {error}') from None
  title = (f'Newton iterations to tolerance {FLAGS.tolerance:g}, median of {FLAGS.sequences} '
           f'sequences (grey: overflow or skipped)\ninit: Gaussian W_hh, tanh, {FLAGS.inputs} '
           f'inputs (d = {FLAGS.input_size}); trained: char_lm on held-out text')
  markdown = write_outputs(rows, workdir, FLAGS.sequences, title)
  print(markdown)
  print(f'wrote {workdir / "parallel_in_time"}.md, .csv and .png '
        f'({time.perf_counter() - started:.0f} s)')


if __name__ == '__main__':
  define_flags()
  app.run(main)
