"""Where parallel-in-time evaluation of the Elman recurrence converges, and how fast it is.

A measurement (no training: ``steps`` 0). ``parallel.elman_deer`` solves all T
steps of h_t = tanh(x_t W_xh + h_{t-1} W_hh + b) at once by Newton's method
(DEER: full [H, H] Jacobians, O(T H^3) work an iteration), its diagonal
approximation (quasi-DEER), or either damped (ELK, quasi-ELK: a trust region solved
by a Kalman smoother), each iteration a parallel prefix scan. Gonzalez et al. (2025)
tie the iterations needed to the largest Lyapunov exponent of the recurrence: few
where it is negative (contractive), up to T where it is positive (chaotic). Each run is one method and one
cell: an Elman network at initialization (Gaussian W_hh at ``spectral_radius``,
``cells.init_elman``; H = ``hidden_size``) or the cell of a trained char_lm run
(``trained_run``), on ``sequences`` sequences of T = ``length`` steps from h_0 = 0
and the zero initial guess. Inputs: 'text' (Tiny Shakespeare's held-out 10%
looked up in an embedding table drawn as char_lm's model draws it at
initialization: a weakly driven network) or 'normal' (x_t ~ N(0, I_d)); a
trained network reads its own run's held-out text through its own embedding.

The report: the lower median over the sequences of the Newton iterations to
``elman_deer``'s residual test (inf where the median sequence did not converge
by the cap: min(T, max_iterations), and for DEER also deer_work / (B T H^3); a
cap below 3 skips DEER), how many converged and how many overflowed float32,
the wall time of the solver and of the sequential ``fused.elman_layer``
(compiled first; a run under 1 s is the fastest of 3), their ratio, the largest
deviation from the sequential states, the per-step growth rate of the Jacobian
products dh_t/dh_{t-n} (``diagnostics.jacobian_product_norms``: below 1 contractive,
above 1 expanding) and the largest Lyapunov exponent (``lyapunov.lyapunov_spectrum``,
the median over the sequences after a transient of T/4 steps; nats per step).

References:
  Gonzalez, Kozachkov, Warrington, Smith & Linderman (2025), "Predictability
  enables parallelization of nonlinear state space models"; Lim, Zhu,
  Selfridge & Kasim (2024) (DEER); Gonzalez, Warrington, Smith & Linderman
  (2024) (quasi-DEER, ELK).
"""

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import fused
from rnnjax import initializers
from rnnjax import lyapunov
from rnnjax import parallel
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import checkpoints
from rnnjax.train import experiment
from rnnjax.train import trainer

CORPUS, VALIDATION_FRACTION = 'tinyshakespeare', 0.1  # char_lm's held-out text
SMALLEST_DEER_CAP = 3
REPEAT_BELOW_SECONDS = 1.0


def cap(config, hidden: int) -> int | None:
  """The iteration cap of a run (module docstring), or None where a full-Jacobian method
  (DEER, ELK) is skipped."""
  limit = min(config.length, config.max_iterations)
  if config.method not in ('deer', 'elk'):
    return limit
  limit = min(limit, int(config.deer_work // (config.sequences * config.length * hidden ** 3)))
  return limit if limit >= min(SMALLEST_DEER_CAP, config.length) else None


def held_out_ids(corpus: str, data_dir: str, fraction: float, batch: int, steps: int):
  """``(<int32>[B, T] held-out ids, vocabulary)``: the first T characters of B streams of
  a corpus's validation split (``text.stream_windows``, window 0)."""
  whole = corpora.read_text(corpus, data_dir or None)
  vocabulary = text.char_vocabulary(whole)
  _, held_out = text.split_train_validation(text.encode(whole, vocabulary), fraction)
  inputs, _ = text.stream_windows(held_out, batch, steps)
  return inputs[0], vocabulary


def problem(config):
  """``(cell params, <float32>[B, T, d] inputs, activation)`` of a run."""
  batch, steps = config.sequences, config.length
  key_inputs, key_params = jax.random.split(jax.random.key(config.seed))
  if config.trained_run:
    run_config, params = checkpoints.final_params(config.trained_run)
    cell = jax.tree_util.tree_map(jnp.asarray, params['recurrence']['cell'])
    ids, vocabulary = held_out_ids(run_config['corpus'], run_config.get('data_dir', ''),
                                   run_config['validation_fraction'], batch, steps)
    table = (jnp.asarray(params['embedding']['embedding']) if run_config['embedding_size']
             else jnp.eye(len(vocabulary), dtype=jnp.float32))
    return cell, table[jnp.asarray(ids)], run_config['activation']
  cell = cells.init_elman(jax.random.fold_in(key_params, config.hidden_size), config.input_size,
                          config.hidden_size, 'gaussian', radius=config.spectral_radius)
  if config.inputs == 'normal':
    return cell, jax.random.normal(key_inputs, (batch, steps, config.input_size)), 'tanh'
  ids, vocabulary = held_out_ids(CORPUS, config.data_dir, VALIDATION_FRACTION, batch, steps)
  import flax.linen as nn  # the default of nn.Embed, as models.LanguageModel draws it
  table = nn.initializers.variance_scaling(1.0, 'fan_in', 'normal', out_axis=0)(
      key_inputs, (len(vocabulary), config.input_size), jnp.float32)
  return cell, table[jnp.asarray(ids)], 'tanh'


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


def growth(states, w_hh, activation: str, longest: int) -> float:
  """Median over sequences of ||dh_t/dh_{t-n}||^(1/n) at the last step and the longest
  n <= ``longest`` (and <= T - 1) whose norm is within float32's range."""
  longest = min(longest, states.shape[1] - 1)
  distances = tuple(sorted({2 ** i for i in range(int(math.log2(longest)) + 1)} | {longest}))
  norms, _ = jax.jit(diagnostics.jacobian_product_norms, static_argnums=(2, 3))(
      states[:, -(longest + 1):], w_hh, distances, activation)
  rates = np.asarray(diagnostics.growth_rate(norms, distances), np.float64)
  norms = np.asarray(norms, np.float64)
  usable = np.isfinite(norms) & (norms > 1e-30) & (norms < 1e30)
  return float(np.median([row[np.flatnonzero(ok)[-1]] if ok.any() else math.nan
                          for row, ok in zip(rates, usable)]))


def measure(config) -> dict:
  """One run's report (the module docstring)."""
  params, inputs, activation = problem(config)
  batch, hidden = inputs.shape[0], params['W_hh'].shape[0]
  initial = jnp.zeros((batch, hidden), jnp.float32)
  sequential = jax.jit(lambda p, x, h: fused.elman_layer(p, x, h, activation=activation)).lower(
      params, inputs, initial).compile()
  jax.block_until_ready(sequential(params, inputs, initial))
  (states, _), fused_seconds = timed(sequential, params, inputs, initial)
  exponents = jax.jit(lambda p, x, h: lyapunov.lyapunov_spectrum(
      cells.elman(activation), p, x, h, 1, transient=x.shape[1] // 4))(params, inputs, initial)
  report = {'measured_spectral_radius': float(initializers.spectral_radius(params['W_hh'])),
            'growth': growth(states, params['W_hh'], activation, config.growth_distance),
            'largest_lyapunov_exponent': float(np.median(np.asarray(exponents)[:, 0])),
            'fused_seconds': fused_seconds}
  limit = cap(config, hidden)
  if limit is None:
    return dict(report, skipped=True)
  damping = (config.damping or None) if config.method in parallel.DAMPED_METHODS else None
  solve = jax.jit(lambda p, x, h: parallel.elman_deer(
      p, x, h, activation=activation, method=config.method, tolerance=config.tolerance,
      max_iterations=limit, damping=damping)).lower(params, inputs, initial).compile()
  (solved, _, info), seconds = timed(solve, params, inputs, initial)
  converged = np.asarray(info['converged'])
  iterations = np.where(converged, np.asarray(info['iterations']), np.inf)
  deviation = np.abs(np.asarray(solved) - np.asarray(states)).max(axis=(1, 2))
  median = float(np.sort(iterations)[(len(iterations) - 1) // 2])  # one sequence's count
  return dict(report, skipped=False, cap=limit, iterations=median,
              converged=int(converged.sum()),
              overflowed=int((~np.isfinite(np.asarray(info['residual']))).sum()),
              seconds=seconds, seconds_over_fused=seconds / fused_seconds,
              max_deviation=float(deviation[converged].max()) if converged.any() else math.nan)


def task(config) -> trainer.Task:
  """The measurement as a task that trains nothing: its report is the measurement."""
  if config.trained_run:  # a wrong folder fails before any run folder is touched
    checkpoints.final_params(config.trained_run)
  return trainer.Task(init=lambda config, key: {}, loss=None, batch=lambda step: {},
                      report=lambda run_config, params: measure(run_config))


Field = experiment.Field
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task,
    fields={
        'steps': Field(0, experiment.integer(0), 'a measurement: nothing is trained'),
        'method': Field('deer', experiment.one_of(parallel.METHODS),
                        'deer (Newton) | quasi (diagonal Jacobians) | elk | quasi_elk (damped)'),
        'damping': Field(0.0, experiment.number(0), "elk, quasi_elk: the trust region's "
                         'lambda (0: parallel.DEFAULT_DAMPING)'),
        'spectral_radius': Field(1.0, experiment.number(0.0), 'of W_hh at initialization'),
        'hidden_size': Field(16, experiment.integer(1), 'H'),
        'length': Field(64, experiment.integer(2), 'T, steps of each sequence'),
        'sequences': Field(3, experiment.integer(1), 'B, whose median is reported'),
        'input_size': Field(64, experiment.integer(1), "d (char_lm's embedding size)"),
        'inputs': Field('text', experiment.one_of(('text', 'normal')),
                        "text: held-out Tiny Shakespeare through a fresh embedding | normal"),
        'data_dir': Field('', None, 'empty: $RNNJAX_DATA_DIR, else ./data'),
        'trained_run': Field('', None, "an ended char_lm run's folder ('': a fresh network)"),
        'tolerance': Field(1e-5, experiment.number(0.0, strict=True), "elman_deer's"),
        'max_iterations': Field(1024, experiment.integer(1)),
        'deer_work': Field(6.4e10, experiment.number(0.0, strict=True),
                           'the multiply-adds a DEER run may spend'),
        'growth_distance': Field(64, experiment.integer(1),
                                 'the longest n of dh_t/dh_{t-n} in the growth rate'),
    },
    report=('iterations', 'converged', 'overflowed', 'cap', 'seconds', 'fused_seconds',
            'seconds_over_fused', 'max_deviation', 'growth', 'largest_lyapunov_exponent',
            'measured_spectral_radius'),
    plots=(('points', 'iterations', 'largest_lyapunov_exponent', 'method', 'hidden_size'),),
    vmappable=('seed', 'method', 'damping', 'spectral_radius', 'hidden_size', 'length', 'sequences',
               'input_size', 'inputs', 'trained_run', 'tolerance', 'max_iterations',
               'deer_work', 'growth_distance'))
