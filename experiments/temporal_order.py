"""Pascanu, Mikolov & Bengio (2013): the temporal order problem, MSGD, MSGD-C and MSGD-CR.

The task as the reference code draws it (``synthetic.temporal_order_pascanu``:
six one-hot symbols, A or B at a step in [T/10, 2T/10) and another in
[5T/10, 6T/10), distractors elsewhere; four classes read from the last
state) and the network of the paper (``init_pascanu``): an Elman
layer of 50 tanh units, a softmax readout of the last state, trained by SGD
without momentum (lr 0.01, batch 20) with one of the methods of
``experiments.pascanu`` (MSGD, MSGD-C, MSGD-CR), and the 'basic_tanh' or
'smart_tanh' initialization of RNN.py lines 115-140.

Mode 'fixed' trains every batch at T = ``length`` (Figure 7: success rate
against T); mode 'range' draws one length per batch in [min_length,
max_length) as RNN.py line 321 (the generalization experiment). Each step
draws a fresh batch from the run's key (runs of one seed see the same data).
The training loss logged is the cross-entropy alone (nats): the Omega term
enters the loss as alpha (Omega - stop_gradient(Omega)), which adds its
gradient and not its value (``pascanu_loss``).

The report: the error rate on ``test_size`` fresh sequences (key
fold_in(seed, 3); mode range: in chunks of ``test_chunk`` sequences, each
chunk at a length drawn as in training, as RNN.py lines 351-356), success
(error < ``success_threshold``, 1% in the paper), and the error at each of
``test_lengths`` (the generalization test). The gradient-norm profile
(``diagnostics.Probe``) is measured on 100 fixed sequences (key 0) at the
training length (range: at max_length - 1), the loss of the last state.

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks", section 5.1 and Figure 7; github.com/pascanur/trainingRNNs
  (RNN.py, tempOrder.py).
"""

import fractions
import math
import operator
import statistics

import jax
import jax.numpy as jnp
import optax

from experiments import pascanu
from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import fused
from rnnjax import initializers
from rnnjax import recurrence
from rnnjax import regularizers
from rnnjax.data import synthetic
from rnnjax.train import experiment
from rnnjax.train import report
from rnnjax.train import trainer

# The network of Pascanu et al. (2013): one tanh Elman layer, a softmax of the last state.

PASCANU_INITS = ('basic_tanh', 'smart_tanh')
BASIC_SCALE = 0.1  # RNN.py lines 116-121: W_uh, W_hh, W_hy ~ N(0, 0.1^2)
SMART_SCALE = 0.01  # RNN.py lines 126-137: W_uh, W_hy ~ N(0, 0.01^2)
SMART_NONZEROS = 15  # RNN.py line 132: non-zeros per row of W_hh (at most H)
SMART_RADIUS = 0.95  # RNN.py line 134


def init_pascanu(key: jax.Array, init: str, input_size: int, hidden_size: int,
                 num_classes: int) -> dict:
  """Params of the network of Pascanu et al., as the reference code initializes them.

  'basic_tanh': W_xh, W_hh, W_out ~ N(0, 0.1^2); 'smart_tanh': W_xh, W_out ~
  N(0, 0.01^2) and W_hh ``initializers.sparse_at_radius`` (min(15, H) non-zeros
  per row, spectral radius 0.95); biases 0. (``jax.jit`` it with ``init`` and
  the sizes static: its eager ops compile one by one.)

  Args:
    key: a ``jax.random`` key.
    init: one of ``PASCANU_INITS``.
    input_size: d (6 one-hot symbols for the temporal order problem).
    hidden_size: H.
    num_classes: K.

  Returns:
    ``{'cell': {'W_xh': <float32>[d, H], 'W_hh': [H, H], 'b': [H]}, 'W_out':
    <float32>[H, K], 'b_out': [K]}``.

  Raises:
    ValueError: for an ``init`` not in ``PASCANU_INITS``.

  References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training
    recurrent neural networks", section 5.1; github.com/pascanur/trainingRNNs,
    RNN.py lines 115-140.
  """
  if init not in PASCANU_INITS:
    raise ValueError(f'init: expected one of {PASCANU_INITS}, got {init!r}')
  key_x, key_h, key_out = jax.random.split(key, 3)
  scale = BASIC_SCALE if init == 'basic_tanh' else SMART_SCALE
  if init == 'basic_tanh':
    w_hh = BASIC_SCALE * jax.random.normal(key_h, (hidden_size, hidden_size), jnp.float32)
  else:
    w_hh = initializers.sparse_at_radius(key_h, hidden_size, min(SMART_NONZEROS, hidden_size),
                                         SMART_RADIUS)
  return {'cell': {'W_xh': scale * jax.random.normal(key_x, (input_size, hidden_size),
                                                     jnp.float32),
                   'W_hh': w_hh, 'b': jnp.zeros((hidden_size,), jnp.float32)},
          'W_out': scale * jax.random.normal(key_out, (hidden_size, num_classes), jnp.float32),
          'b_out': jnp.zeros((num_classes,), jnp.float32)}


def last_states(states: jax.Array, lengths: jax.typing.ArrayLike | None) -> jax.Array:
  """The state at each sequence's last step: ``[B, T, H]``, ``<int32>[B]`` (values in
  [1, T]) or None (every sequence T steps) -> ``[B, H]``."""
  if lengths is None:
    return states[:, -1]
  return jnp.take_along_axis(states, (jnp.asarray(lengths) - 1)[:, None, None], axis=1)[:, 0]


def pascanu_readout_loss(params: dict, last: jax.Array, targets: jax.typing.ArrayLike
                         ) -> jax.Array:
  """Mean cross-entropy (nats, ``<float32>[]``) of the softmax readout of the last
  states ``<float32>[B, H]`` against ``targets <int32>[B]`` in [0, K)."""
  logits = last @ params['W_out'] + params['b_out']
  return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def pascanu_loss(params: dict, inputs: jax.Array, targets: jax.typing.ArrayLike,
                 lengths: jax.typing.ArrayLike | None = None,
                 omega_weight: float = 0.0) -> jax.Array:
  """The training loss of a batch: ``(value, gradient source)`` in one scalar.

  The value is the cross-entropy of the last state's prediction (nats,
  ``pascanu_readout_loss``); with ``omega_weight`` alpha > 0 the gradient
  adds alpha times Omega's (``regularizers.omega_penalty`` with dE/dh_t of
  this cross-entropy, W_hh only), the value does not: the loss is
  ``E + alpha (Omega - stop_gradient(Omega))``.

  Args:
    params: ``init_pascanu`` params.
    inputs: ``<float32>[B, T, d]``.
    targets: ``<int32>[B]`` classes in [0, K).
    lengths: optional ``<int32>[B]`` in [1, T] (the state after each sequence's
      last step is read); None: every sequence T steps.
    omega_weight: alpha >= 0, a Python number (0: no Omega term is traced).

  Returns:
    ``<float32>[]`` nats.

  References:
    Pascanu, Mikolov & Bengio (2013), eq. 9-10; RNN.py line 217 (the Omega
    gradient added before clipping).
  """
  hidden = params['cell']['W_hh'].shape[0]
  initial = jnp.zeros((inputs.shape[0], hidden), jnp.float32)
  states, last = fused.elman_layer(params['cell'], inputs, initial, lengths)
  loss = pascanu_readout_loss(params, last, targets)
  if omega_weight:
    omega = regularizers.omega_penalty(
        params['cell'], inputs, initial,
        lambda s: pascanu_readout_loss(params, last_states(s, lengths), targets), 'tanh',
        lengths, states)
    loss = loss + omega_weight * (omega - jax.lax.stop_gradient(omega))
  return loss


def pascanu_errors(params: dict, inputs: jax.Array, targets: jax.typing.ArrayLike,
                   lengths: jax.typing.ArrayLike | None = None) -> jax.Array:
  """The number of sequences whose last state's argmax class is wrong, forward only.

  The recurrence is ``recurrence.scan`` of ``cells.elman('tanh')``: the final
  state is its carry, so under ``jax.jit`` no ``[B, T, H]`` buffer of states
  is kept (any T fits in memory).

  Args:
    params: ``init_pascanu`` params.
    inputs: ``<float32>[B, T, d]``.
    targets: ``<int32>[B]``.
    lengths: optional ``<int32>[B]`` in [1, T]; None: every sequence T steps.

  Returns:
    ``<float32>[]``: the count of errors, in [0, B].
  """
  initial = jnp.zeros((inputs.shape[0], params['cell']['W_hh'].shape[0]), jnp.float32)
  _, last = recurrence.scan(cells.elman('tanh'), params['cell'], inputs, initial, lengths)
  logits = last @ params['W_out'] + params['b_out']
  return jnp.sum(jnp.argmax(logits, -1) != targets).astype(jnp.float32)


MODES = ('fixed', 'range')
PROBE_SEQUENCES = 100
PROBE_KEY = 0
TEST_KEY_FOLD = 3


def steps_of(config) -> int:
  """The padded number of steps T of a training batch (``temporal_order_pascanu_range``)."""
  if config.mode == 'fixed':
    return config.length
  return max(config.min_length, config.max_length - 1)


def work(config) -> float:
  """A step's cost, relative (for a sweep's progress): B T H (H + 6) multiply-adds, times 3
  with Omega (the state gradients' forward and backward pass)."""
  return (config.batch_size * steps_of(config) * config.hidden_size *
          (config.hidden_size + synthetic.TEMPORAL_ORDER_SYMBOLS) *
          (3 if config.omega_weight > 0 else 1))


def draw(config, key, batch_size: int):
  """A training batch: ``(inputs <float32>[B, T, 6], targets <int32>[B], lengths)``;
  mode fixed: every sequence at T = length and lengths None, mode range: lengths
  ``<int32>[B]`` (all equal, one drawn per batch) and T = max_length - 1."""
  if config.mode == 'fixed':
    return (*synthetic.temporal_order_pascanu(key, batch_size, config.length), None)
  return synthetic.temporal_order_pascanu_range(key, batch_size, config.min_length,
                                                config.max_length)


def _test_errors(params, key, chunk: int, min_length: int, max_length: int):
  """Errors (a count, float32) on ``chunk`` fresh sequences drawn as
  ``temporal_order_pascanu_range(key, chunk, min_length, max_length)``."""
  return pascanu_errors(params, *synthetic.temporal_order_pascanu_range(
      key, chunk, min_length, max_length))


def task(config) -> trainer.Task:
  """The task's generator, the network and its loss, probe and report."""
  omega_weight = float(config.omega_weight)
  probe_inputs, probe_targets = jax.jit(synthetic.temporal_order_pascanu, static_argnums=(1, 2))(
      jax.random.key(PROBE_KEY), PROBE_SEQUENCES, steps_of(config))
  init_params = jax.jit(init_pascanu, static_argnums=(1, 2, 3, 4))
  test_errors = jax.jit(_test_errors, static_argnums=(2, 3, 4))

  def init(run_config, key):
    return init_params(key, run_config.init, synthetic.TEMPORAL_ORDER_SYMBOLS,
                       run_config.hidden_size, synthetic.TEMPORAL_ORDER_CLASSES)

  def loss(params, carry, batch, key):
    del batch
    return pascanu_loss(params, *draw(config, key, config.batch_size),
                               omega_weight), carry

  def probe(params, carry, batch):
    """The loss of the last state's prediction, as a function of the states."""
    del carry, batch
    return diagnostics.Probe(
        cells.elman('tanh'), params['cell'], probe_inputs,
        jnp.zeros((PROBE_SEQUENCES, params['cell']['W_hh'].shape[0])),
        lambda states: pascanu_readout_loss(params, states[:, -1], probe_targets))

  def test_error(params, key, size: int, chunk: int, min_length: int, max_length: int) -> float:
    """The error rate on ``size`` fresh sequences, ``chunk`` at a time, chunk i from
    fold_in(key, i), each chunk at one length in [min_length, max_length) (min_length
    = max_length: that length)."""
    errors = [test_errors(params, jax.random.fold_in(key, i), chunk, min_length, max_length)
              for i in range(size // chunk)]
    return float(sum(float(e) for e in jax.device_get(errors))) / size

  def trained_lengths(run_config) -> tuple[int, int]:
    if run_config.mode == 'fixed':
      return run_config.length, run_config.length
    return run_config.min_length, run_config.max_length

  def solved(run_config, params) -> bool:
    """Whether the run succeeded: its error on the test sequences (the report's) is
    below success_threshold; a screen of their first chunk comes first, and the whole
    test only where the screen's error is below twice the threshold."""
    key = jax.random.fold_in(jax.random.key(run_config.seed), TEST_KEY_FOLD)
    chunk, lengths = run_config.test_chunk, trained_lengths(run_config)
    if test_error(params, key, chunk, chunk, *lengths) >= 2 * run_config.success_threshold:
      return False
    return test_error(params, key, run_config.test_size, chunk, *lengths) < (
        run_config.success_threshold)

  def report(run_config, params) -> dict:
    key = jax.random.fold_in(jax.random.key(run_config.seed), TEST_KEY_FOLD)
    size, chunk = run_config.test_size, run_config.test_chunk
    error = test_error(params, key, size, chunk, *trained_lengths(run_config))
    summary = {'test_error': error,
               'success': bool(math.isfinite(error) and error < run_config.success_threshold)}
    if run_config.test_lengths:
      summary['test_error_by_length'] = {
          str(n): test_error(params, jax.random.fold_in(key, n), size, chunk, n, n)
          for n in run_config.test_lengths}
    return summary

  return trainer.Task(init=init, loss=loss, batch=lambda step: {}, probe=probe,
                      recurrent_weight=lambda params: params['cell']['W_hh'], report=report,
                      solved=solved, solved_every=config.solved_every)


GENERALIZED = 0.01  # error rate below which a network solves a length (the paper's success)
PREDICTABLE, UNPREDICTABLE = -0.05, -0.01  # lambda_1 bounds of the generalization criterion
DISTRACTOR_STREAMS, TRANSIENT, COUNTED = 8, 1024, 4096
RELAXED_STEPS, FIXED_TOLERANCE, SAME_POINT = 3000, 1e-6, 1e-3


def _ended(runs):
  return [run for run in runs if run['summary'] and run['status'] in ('finished', 'diverged')]


def distractor_exponent(cell) -> float:
  """The largest Lyapunov exponent (nats a step) of the network on distractor-only streams:
  the median over ``DISTRACTOR_STREAMS`` streams of uniform distractors (key 0) of the
  exponent over ``COUNTED`` steps after a transient of ``TRANSIENT``."""
  from rnnjax import lyapunov
  symbols = jax.random.randint(jax.random.key(0), (DISTRACTOR_STREAMS, TRANSIENT + COUNTED),
                               2, synthetic.TEMPORAL_ORDER_SYMBOLS)
  inputs = jax.nn.one_hot(symbols, synthetic.TEMPORAL_ORDER_SYMBOLS)
  initial = jnp.zeros((DISTRACTOR_STREAMS, cell['W_hh'].shape[0]))
  exponents = jax.jit(lambda p, x, h: lyapunov.lyapunov_spectrum(
      cells.elman('tanh'), p, x, h, 1, transient=TRANSIENT))(cell, inputs, initial)
  return float(jnp.median(exponents[:, 0]))


def fixed_points(params, key) -> tuple[int, int]:
  """``(stable fixed points, of them reached from the task's sequences)`` of the network
  under the mean distractor input (1/4 on each distractor), h -> tanh(x W_xh + h W_hh + b):
  the end points after ``RELAXED_STEPS`` steps from 256 uniform states in [-1, 1]^H and from
  the last states of 512 test sequences of T = 200, those within ``FIXED_TOLERANCE`` of a
  fixed point, merged within ``SAME_POINT``, stable where the Jacobian's spectral radius is
  below 1."""
  import numpy as np
  cell = params['cell']
  hidden = cell['W_hh'].shape[0]
  mean_input = jnp.zeros(synthetic.TEMPORAL_ORDER_SYMBOLS).at[2:].set(0.25)
  drive = mean_input @ cell['W_xh'] + cell['b']
  step = lambda h: jnp.tanh(drive + h @ cell['W_hh'])
  inputs, _ = synthetic.temporal_order_pascanu(key, 512, 200)
  _, task_states = recurrence.scan(cells.elman('tanh'), cell, inputs, jnp.zeros((512, hidden)))
  starts = jnp.concatenate([jax.random.uniform(jax.random.fold_in(key, 1), (256, hidden),
                                               minval=-1.0, maxval=1.0), task_states])
  ends = jax.jit(lambda h: jax.lax.fori_loop(0, RELAXED_STEPS, lambda i, h: step(h), h))(starts)
  ends, moved = np.asarray(ends), np.asarray(jnp.max(jnp.abs(step(ends) - ends), axis=1))
  points, reached = [], set()
  for i, (end, change) in enumerate(zip(ends, moved)):
    if change > FIXED_TOLERANCE:
      continue
    index = next((j for j, point in enumerate(points)
                  if np.max(np.abs(point - end)) < SAME_POINT), None)
    if index is None:
      points.append(end)
      index = len(points) - 1
    if i >= 256:
      reached.add(index)
  w_hh = np.asarray(cell['W_hh'])
  stable = [j for j, point in enumerate(points) if np.max(np.abs(np.linalg.eigvals(
      (1 - point ** 2)[:, None] * w_hh.T))) < 1]
  return len(stable), len(reached & set(stable))


def generalization(runs, keys, folder, heading) -> None:
  """The tables of a sweep in mode 'range' with ``test_lengths``: ``generalization.md`` /
  ``.csv``, a row a run (its error at each length with the 95% Wilson interval over the
  10,000 test sequences, lambda_1 on distractors, fixed points), ``generalization.png`` (the
  error rate against T, a line a run) and ``criteria.md`` / ``.csv`` (``criteria``)."""
  from rnnjax.train import checkpoints
  del keys
  measured = [run for run in _ended(runs) if run['config'].get('mode') == 'range'
              and run['config'].get('test_lengths')]
  if not measured:
    return
  rows = []
  for run in measured:
    summary, config = run['summary'], run['config']
    _, params = checkpoints.final_params(folder / run['name'])
    params = jax.tree_util.tree_map(jnp.asarray, params)
    errors = {int(n): e for n, e in summary['test_error_by_length'].items()}
    stable, reached = fixed_points(params, jax.random.key(1))
    rows.append({'method': config['method'], 'omega_weight': config['omega_weight'],
                 'flossing_weight': config['flossing_weight'], 'seed': config['seed'],
                 'solved_step': summary.get('solved_step'),
                 **{f'error T={n}': report.wilson(round(e * config['test_size']),
                                                  config['test_size'])
                    for n, e in sorted(errors.items())},
                 'generalizes': all(e < GENERALIZED for e in errors.values()),
                 'distractor lambda_1': distractor_exponent(params['cell']),
                 'stable fixed points': stable, 'of them reached by the task': reached})
  report.table(rows, '\n\n'.join(filter(None, [
      heading, 'One run a row. error T=n: the test sequences of length n misclassified, of '
      'all tested, with the 95% Wilson interval of the rate; generalizes: under 1% at every '
      'length; distractor lambda_1: nats a step on distractor-only streams (4,096 steps '
      'after 1,024); fixed points: of the map under the mean distractor input.'])), folder,
      'generalization')
  lengths = sorted(int(c.split('=')[1]) for c in rows[0] if c.startswith('error T='))
  plt = report.pyplot()
  from matplotlib import ticker
  figure, axes = plt.subplots(figsize=(6, 4))
  colours = {}
  for row in rows:
    arm = f"{row['method']} (Omega {row['omega_weight']:g}, flossing {row['flossing_weight']:g})"
    rates = [row[f'error T={n}'].successes / row[f'error T={n}'].trials for n in lengths]
    line, = axes.plot(lengths, rates, marker='o', color=colours.get(arm),
                      label=None if arm in colours else arm)
    colours.setdefault(arm, line.get_color())
  axes.axhline(GENERALIZED, color='grey', linestyle=':', label='1% (the success bound)')
  axes.set_yscale('symlog', linthresh=GENERALIZED)  # linear below 1%, where 0 errors lie
  axes.set(xscale='log', xlabel='test length T (steps)', ylim=(0, 1), ylabel='test error rate',
           title=f"One line a run ({measured[0]['config']['test_size']:,} sequences a length)")
  axes.set_xticks(lengths, [str(n) for n in lengths])
  axes.xaxis.set_minor_locator(ticker.NullLocator())
  axes.yaxis.set_major_formatter(ticker.PercentFormatter(1.0))
  axes.legend(fontsize='small')
  report.save(figure, folder / 'generalization.png')
  report.table(criteria(rows), '\n\n'.join(filter(None, [heading, 'The criteria of the page.'])),
               folder, 'criteria')


def criteria(rows: list[dict]) -> list[dict]:
  """The rows of ``criteria.md`` from ``generalization``'s rows (a run each): per arm with
  Omega, whether at least 4 of 5 runs generalize; whether every generalizing network has
  distractor lambda_1 < ``PREDICTABLE`` and every other one >= ``UNPREDICTABLE`` (None where
  there is none); and, with two arms, Fisher's exact test of their runs under 1% at the
  longest length (docs/studies/generalization.md)."""
  arms = {}
  for row in rows:
    arms.setdefault((row['method'], row['omega_weight'], row['flossing_weight']), []).append(row)
  longest = max(int(c.split('=')[1]) for c in rows[0] if c.startswith('error T='))
  solved_longest = {arm: report.wilson(sum(r[f'error T={longest}'].successes <
                                           GENERALIZED * r[f'error T={longest}'].trials
                                           for r in members), len(members))
                    for arm, members in arms.items()}
  verdicts = [{'criterion': f'{arm[0]} (Omega {arm[1]:g}, flossing {arm[2]:g}): under 1% '
                           'at every length in at least 4 of 5 runs', 'runs': report.wilson(
                               sum(r['generalizes'] for r in members), len(members)),
              'held': sum(r['generalizes'] for r in members) >= 4}
             for arm, members in arms.items() if arm[1] > 0]
  for which, members, test, bound in (
      ('generalizing networks', [r for r in rows if r['generalizes']], operator.lt, PREDICTABLE),
      ('the others', [r for r in rows if not r['generalizes']], operator.ge, UNPREDICTABLE)):
    passed = sum(test(r['distractor lambda_1'], bound) for r in members)
    verdicts.append({'criterion': f'{which}: distractor lambda_1 '
                                  f'{"<" if test is operator.lt else ">="} {bound:g}, every one',
                     'runs': report.wilson(passed, len(members)),
                     'held': passed == len(members) if members else None})
  if len(solved_longest) == 2:
    (first, a), (second, b) = solved_longest.items()
    verdicts.append({'criterion': f'under 1% at T = {longest}: {first[0]} {a.successes}/'
                                  f'{a.trials} against {second[0]} {b.successes}/{b.trials}, '
                                  "Fisher's exact test", 'p': report.fisher(a, b)})
  return verdicts


def methods(runs, keys, folder, heading) -> None:
  """``methods.md`` / ``.csv`` of a sweep in mode 'fixed' whose arms differ by method alone:
  per T, the runs each method solved within the budget, both initializations and every seed
  pooled (95% Wilson interval), and Fisher's exact test (two-sided) of each method against
  the one before it in ``pascanu.METHODS``' order (MSGD, MSGD-C, MSGD-CR)."""
  # the method sets clipping and omega_weight; any other swept field must be one value
  arm_keys = [k for k in keys
              if k not in ('length', 'init', 'seed', 'method', 'clipping', 'omega_weight')]
  solved: dict[int, dict[str, list[bool]]] = {}
  arms: dict[str, set] = {}
  for run in _ended(runs):
    config = run['config']
    if config.get('mode') == 'fixed':
      arms.setdefault(config['method'], set()).add(tuple(run['values'].get(k) for k in arm_keys))
      solved.setdefault(config['length'], {}).setdefault(config['method'], []).append(
          bool(run['summary'].get('success')))
  if len(arms) < 2 or len(set().union(*arms.values())) > 1:
    return  # one method, or arms that another field tells apart (flossing)
  order = [m for m in pascanu.METHODS if m in arms]
  rows = []
  for length, by_method in sorted(solved.items()):
    rates = {m: report.wilson(sum(by_method.get(m, [])), len(by_method.get(m, [])))
             for m in order}
    row: dict = {'length': length, **{f'solved by {m}': rates[m] for m in order}}
    for before, after in zip(order, order[1:]):
      row[f"Fisher's p, {after} against {before}"] = (
          report.fisher(rates[after], rates[before])
          if rates[after].trials and rates[before].trials else None)
    rows.append(row)
  report.table(rows, '\n\n'.join(filter(None, [
      heading, 'Runs solved within the budget by each method, both initializations and every '
      "seed pooled, with the 95% Wilson interval; Fisher's exact test (two-sided) of each "
      'method against the one before it.'])), folder, 'methods')


FEW_SEEDS = 5  # at most this many runs a cell: the median and the range, not the IQR


def exact_stratified(tables: list[tuple[int, int, int, int]]) -> float:
  """The two-sided p of the exact conditional test that K 2 x 2 tables share an odds ratio of 1.

  Each table ``(a, b, c, d)`` is one stratum: row 1 (a method) a yes and b no, row 2 (the
  one it is tested against) c yes and d no. Conditional on every margin (n1 = a + b,
  m1 = a + c, N = a + b + c + d), a is hypergeometric under the null,
  P(a = x) = C(m1, x) C(N - m1, n1 - x) / C(N, n1), independently across strata; the
  statistic S = sum_k a_k (the Cochran-Mantel-Haenszel statistic's numerator) has the
  convolution of those distributions, and p = sum of P(S = s) over the s with
  P(S = s) <= P(S = S_observed): the two-sided rule of Fisher's exact test
  (``scipy.stats.fisher_exact``, ``report.fisher``), to which the test reduces for K = 1. A
  stratum with no yes or no no (m1 = 0 or m1 = N) has one value of a and adds nothing.
  Exact rational arithmetic (``fractions.Fraction``), so equal probabilities tie exactly.

  Sources: Birch (1964), "The detection of partial association, I: the 2 x 2 case", JRSS B
  26; Mehta, Patel & Gray (1985), JASA 80 (the distribution of S); Agresti (2002),
  "Categorical Data Analysis", 2nd ed., chapter 6 (exact inference for 2 x 2 x K tables); R's
  ``mantelhaen.test(exact = TRUE)``, whose two-sided p this is.

  Args:
    tables: K tuples of non-negative ints (a, b, c, d), K >= 1.

  Returns:
    p in (0, 1].
  """
  distribution = {0: fractions.Fraction(1)}  # P(S = s) over the strata so far
  observed = 0
  for a, b, c, d in tables:
    n1, m1, total = a + b, a + c, a + b + c + d
    stratum = {x: fractions.Fraction(math.comb(m1, x) * math.comb(total - m1, n1 - x),
                                     math.comb(total, n1))
               for x in range(max(0, n1 + m1 - total), min(n1, m1) + 1)}
    combined: dict[int, fractions.Fraction] = {}
    for s, p in distribution.items():
      for x, q in stratum.items():
        combined[s + x] = combined.get(s + x, fractions.Fraction(0)) + p * q
    distribution, observed = combined, observed + a
  return float(sum(p for p in distribution.values() if p <= distribution[observed]))


def _few(values: list) -> tuple[float, float, float]:
  """(median, min, max) of ``values`` (NaNs for none); of ints, a whole median an int."""
  if not values:
    return math.nan, math.nan, math.nan
  median = statistics.median(values)
  if all(isinstance(v, int) for v in values) and float(median).is_integer():
    median = int(median)
  return median, min(values), max(values)


def strata_tables(rows: list[dict], folder, heading: str) -> tuple[str, str]:
  """``methods_by_init.md`` / ``.csv`` and ``methods_stratified.md`` / ``.csv``: Figure 7's runs
  per initialization, and the tests of each method against the one before it within them.

  ``methods_by_init``: per (T, init, method), the runs solved (``report.wilson``: k of n, the
  95% Wilson interval) and, over at most ``FEW_SEEDS`` runs, the median, min and max of the
  updates to solve (the runs that solved), the final training loss (nats; at the update that
  solved, else after the budget), the final test error, the final spectral radius of W_hh and
  the largest gradient norm of the run; over more runs, the median
  [IQR] (``report.spread``). ``methods_stratified``: per T and pair of consecutive methods
  (``pascanu.METHODS``' order), each init's counts and Fisher's exact test (two-sided,
  ``report.fisher``), the exact conditional test over the inits (``exact_stratified``) and, for
  comparison with ``methods.md``, the pooled counts and their Fisher's test.

  Args:
    rows: a dict a run: 'length' (int), 'init', 'method', 'success' (bool), 'solved_step'
      (a number, or None where unsolved), 'train_loss_nats', 'test_error',
      'final_measured_spectral_radius', 'max_grad_norm'.
    folder: where the tables are written (a ``pathlib.Path``).
    heading: the tables' first paragraph (their source).

  Returns:
    (the Markdown of methods_by_init, that of methods_stratified).
  """
  cells: dict[tuple, list[dict]] = {}
  for row in rows:
    cells.setdefault((row['length'], row['init'], row['method']), []).append(row)
  order = [m for m in pascanu.METHODS if any(key[2] == m for key in cells)]
  inits = sorted({key[1] for key in cells})
  few = max(len(members) for members in cells.values()) <= FEW_SEEDS
  by_init = []
  for (length, init, method), members in sorted(
      cells.items(), key=lambda item: (item[0][0], item[0][1], order.index(item[0][2]))):
    solved = [r for r in members if r['success']]
    row: dict = {'length': length, 'init': init, 'method': method, 'seeds': len(members),
                 'solved': report.wilson(len(solved), len(members))}
    for name, values in (('updates to solve', [int(r['solved_step']) for r in solved]),
                         ('final training loss (nats)', [r['train_loss_nats'] for r in members]),
                         ('final test error', [r['test_error'] for r in members]),
                         ('final spectral radius of W_hh',
                          [r['final_measured_spectral_radius'] for r in members]),
                         ('largest gradient norm', [r['max_grad_norm'] for r in members])):
      if few:
        row.update(zip((f'{name}: median', f'{name}: min', f'{name}: max'), _few(values)))
      else:
        row[name] = report.spread(values)
    by_init.append(row)
  kept = 'the median, min and max' if few else 'the median [interquartile range]'
  first = report.table(by_init, '\n\n'.join(filter(None, [
      heading, 'One row per length, initialization and method, over its seeds: the runs '
      f'solved within the budget, k of n with the 95% Wilson interval; {kept} of the updates '
      'to solve (over the runs that solved), of the final training loss (at the update that '
      'solved, else after the budget), of the final test error, of the final spectral radius '
      'of W_hh and of the largest gradient norm (before clipping) of the run.'])), folder,
      'methods_by_init')
  tests = []
  for length in sorted({key[0] for key in cells}):
    for before, after in zip(order, order[1:]):
      counts = {}
      for init in inits:
        yes = [sum(bool(r['success']) for r in cells.get((length, init, m), []))
               for m in (after, before)]
        runs = [len(cells.get((length, init, m), [])) for m in (after, before)]
        counts[init] = (yes[0], runs[0] - yes[0], yes[1], runs[1] - yes[1])
      row = {'length': length, 'test': f'{after} against {before}'}
      for init, (a, b, c, d) in counts.items():
        row[f'{init}: solved'] = f'{a}/{a + b} against {c}/{c + d}'
        row[f"{init}: Fisher's p"] = report.fisher(report.wilson(a, a + b),
                                                   report.wilson(c, c + d))
      row["exact stratified p (both inits)"] = exact_stratified(list(counts.values()))
      a, b, c, d = (sum(t[i] for t in counts.values()) for i in range(4))
      row['pooled: solved'] = f'{a}/{a + b} against {c}/{c + d}'
      row["pooled: Fisher's p"] = report.fisher(report.wilson(a, a + b), report.wilson(c, c + d))
      tests.append(row)
  second = report.table(tests, '\n\n'.join(filter(None, [
      heading, 'Each method against the one before it, per length, over the seeds of each '
      'initialization (k of n solved; their 95% Wilson intervals are in `methods_by_init.md`): '
      "Fisher's exact test (two-sided, as in `methods.md`) "
      'within each initialization; the exact conditional test of a common odds ratio of 1 '
      'over the two initializations as strata (the exact form of the Cochran-Mantel-Haenszel '
      "test, two-sided by Fisher's rule: `experiments.temporal_order.exact_stratified`); and "
      "the pooled counts with Fisher's test, as `methods.md` gives them. No correction for "
      'the number of tests.'])), folder, 'methods_stratified')
  return first, second


def strata(runs, keys, folder, heading) -> None:
  """``strata_tables`` of a sweep in mode 'fixed' whose arms differ by method alone and whose
  init is swept (the sweep of Figure 7); nothing for another sweep."""
  arm_keys = [k for k in keys
              if k not in ('length', 'init', 'seed', 'method', 'clipping', 'omega_weight')]
  rows, arms = [], {}
  for run in _ended(runs):
    config, summary = run['config'], run['summary']
    if config.get('mode') == 'fixed':
      arms.setdefault(config['method'], set()).add(tuple(run['values'].get(k) for k in arm_keys))
      rows.append({'length': config['length'], 'init': config['init'],
                   'method': config['method'], 'success': bool(summary.get('success')),
                   'solved_step': summary.get('solved_step'),
                   **{name: summary.get(name, math.nan) for name in (
                       'train_loss_nats', 'test_error', 'final_measured_spectral_radius',
                       'max_grad_norm')}})
  if 'init' not in keys or len(arms) < 2 or len(set().union(*arms.values())) > 1:
    return  # one method, one init, or arms that another field tells apart (flossing)
  strata_tables(rows, folder, '\n\n'.join(filter(None, [heading, 'Both initializations apart.'])))


def strata_from_csv(path, folder=None) -> tuple[str, str]:
  """``strata_tables`` of a sweep's committed ``results.csv`` (the runs that ended), written
  beside it (or in ``folder``), headed by the commits and dates its runs were measured at: the
  Figure 7 tables of docs/results/temporal_order/ with no new run.

  Args:
    path: a ``pathlib.Path`` to the results.csv of the Figure 7 sweep.
    folder: where to write the tables (default: ``path``'s folder).

  Returns:
    ``strata_tables``' Markdown.
  """
  import csv
  with open(path, newline='') as file:
    table = [r for r in csv.DictReader(file) if r['status'] in ('finished', 'diverged')]
  number = lambda text: float(text) if text not in ('', None) else math.nan
  rows = [{'length': int(r['length']), 'init': r['init'], 'method': r['method'],
           'success': r['success'] == 'True',
           'solved_step': number(r['solved_step']) if r['solved_step'] else None,
           **{name: number(r[name]) for name in ('train_loss_nats', 'test_error',
                                                 'final_measured_spectral_radius',
                                                 'max_grad_norm')}}
          for r in table]
  commits = ', '.join(sorted({r['commit'] for r in table}))
  dates = ', '.join(sorted({r['date'] for r in table}))
  heading = (f'Computed from `results.csv` beside it, no new runs: its {len(rows)} runs, measured '
             f'at commit {commits} on {dates} (`experiments.temporal_order.strata_from_csv`). '
             'Both initializations apart.')
  return strata_tables(rows, path.parent if folder is None else folder, heading)


def omega_weights(runs, keys, folder, heading) -> None:
  """``omega_weights.md`` / ``.csv`` of a sweep in mode 'fixed' with MSGD-CR at several
  weights: per T and init, the runs solved at each weight (95% Wilson interval) and Fisher's
  exact test of the first two weights."""
  del keys
  cells: dict[tuple, dict[float, list[bool]]] = {}
  for run in _ended(runs):
    config = run['config']
    if config.get('mode') == 'fixed' and config['method'] == 'MSGD-CR':
      cells.setdefault((config['length'], config['init']), {}).setdefault(
          config['omega_weight'], []).append(bool(run['summary'].get('success')))
  if len({w for weights in cells.values() for w in weights}) < 2:
    return
  rows = []
  for (length, init), by_weight in sorted(cells.items()):
    rates = {w: report.wilson(sum(v), len(v)) for w, v in sorted(by_weight.items())}
    row = {'length': length, 'init': init,
           **{f'solved at Omega {w:g}': rate for w, rate in rates.items()}}
    if len(rates) >= 2:
      first, second = list(rates.values())[:2]
      row["Fisher's exact test p"] = report.fisher(first, second)
    rows.append(row)
  report.table(rows, '\n\n'.join(filter(None, [
      heading, 'MSGD-CR at each weight of Omega: runs solved within the budget of the '
      "5 seeds, with the 95% Wilson interval; Fisher's exact test (two-sided) of the two "
      'weights.'])), folder, 'omega_weights')


def check(config) -> None:
  """The rules between fields: max_length >= min_length, test_size a multiple of
  test_chunk, the method's clipping and omega_weight (``pascanu.check_method``).

  Raises:
    ValueError: naming ``config.<field>``.
  """
  value = config.max_length
  if isinstance(value, bool) or not isinstance(value, int) or value < config.min_length:
    raise ValueError(f'config.max_length: expected an int >= {config.min_length}, got {value!r}')
  if config.test_size % config.test_chunk:
    raise ValueError(f'config.test_size: expected a multiple of config.test_chunk = '
                     f'{config.test_chunk}, got {config.test_size!r}')
  pascanu.check_method(config)


def _lengths(value) -> bool:
  return isinstance(value, tuple) and all(
      isinstance(n, int) and not isinstance(n, bool) and n >= 10 for n in value)


def _error_rate(value) -> bool:
  return isinstance(value, (int, float)) and 0 < value <= 1


Field, Check = experiment.Field, experiment.Check
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, work=work, check=check,
    fields={
        'seed': experiment.TRAINER_FIELDS['seed']._replace(
            help='init, every training batch and the test sequences'),
        **pascanu.FIELDS,
        'mode': Field('fixed', experiment.one_of(MODES),
                      'fixed: every batch at T = length (Figure 7) | range: as RNN.py'),
        'length': Field(50, experiment.integer(10), 'T (mode fixed)'),
        'min_length': Field(50, experiment.integer(10),
                            'mode range: each batch at a length in [min_length, max_length)'),
        'max_length': Field(200, None, 'mode range: an int >= min_length'),
        'hidden_size': Field(50, experiment.integer(1)),
        'init': Field('smart_tanh', experiment.one_of(PASCANU_INITS),
                      'smart_tanh (sparse W_hh, rho 0.95) | basic_tanh (N(0, 0.1^2))'),
        'batch_size': Field(20, experiment.integer(1)),
        'test_size': Field(10000, experiment.integer(1),
                           "fresh test sequences (RNN.py state['ebs'])"),
        'test_chunk': Field(1000, experiment.integer(1),
                            "of them at a time (RNN.py state['cbs'])"),
        'test_lengths': Field((), Check('a tuple of ints >= 10', _lengths),
                              'also test at these lengths (the generalization test)'),
        'success_threshold': Field(0.01, Check('an error rate in (0, 1]', _error_rate),
                                   'test error rate below which a run succeeded'),
        'solved_every': Field(0, experiment.integer(0),
                              'steps between success checks; a run that succeeded stops, '
                              'as the reference code (0: never checked)'),
    },
    report=('test_error', 'success', 'solved_step', 'steps_done', 'train_loss_nats',
            'clipped_fraction', 'max_grad_norm', 'final_measured_spectral_radius',
            'first_largest_lyapunov_exponent', 'final_largest_lyapunov_exponent'),
    vmappable=('seed', 'init'),  # both inits are tanh networks of the same shapes
    plots=(('heatmap', 'success', 'length', ('init',)), ('profile', 'method'),
           ('rate', 'solved_step', (10_000, 25_000, 50_000, 100_000, 200_000), 'length')),
    analyses=(generalization, omega_weights, methods, strata))
