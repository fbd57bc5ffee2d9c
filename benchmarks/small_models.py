"""The small models' update: through the run harness, bare, and against a FLOP floor.

  python -m benchmarks.small_models [--quick] [--rows=a,b,c,d,e] [--harness_steps=1000]
      [--bare_updates=200] [--repeats=5] [--output=docs/results/speed/small_models.md]

The rows (each config file's get_config(), seed 0; the overrides named):

  a  experiments/configs/temporal_order_generalization.py, its MSGD-CR arm: lengths drawn
     in [50, 200) (padded to T = 199), H 50, B 20, SGD, Pascanu clipping, Omega at 4.
  b  experiments/configs/temporal_order.py at length 200, method MSGD-C (Pascanu clipping,
     no Omega), the config's default init (smart_tanh).
  c  experiments/configs/adding_irnn.py at length 400, the IRNN (identity W_hh, relu),
     H 100, B 16, Adam, global-norm clipping.
  d  experiments/configs/ptb_chars.py as it is (its default arm, MSGD-CR: Pascanu clipping,
     Omega 2 on a 1/t schedule), H 256, B 32, tau 50, one-hot characters.
  e  experiments/configs/char_lm.py get_sweep()'s 10 runs at tau = 64 (5 spectral radii x
     clipping none / global norm: one vmapped group), H 128, E 32, B 32, SGD.

Columns, each in ms per run-update (a group's step time divided by its runs):

  harness  ``rnnjax.train.harness.run_group`` in this process (what ``launch.run`` and a
           sweep's worker call; ``experiment.load`` and the config's configs with ``steps``
           set), on a fresh temporary workdir: the trainer's own timing.json, train_steps
           seconds / steps done / runs. train_steps is the loop less compilation, metrics
           (logged steps, solved checks), checkpoints and the report; it keeps the host's
           part of every step (``task.batch(t)``, its transfer, dispatch).
  bare     the same update written here: ``task.loss`` of ``kind.task(config)`` (the same
           model, loss, Omega term and in-loss data draw of the synthetic tasks), its
           gradient, ``optimizers.from_config(config)`` (the same clipping and optimizer)
           and ``optax.apply_updates``, from the trainer's initial state, keys folded as
           the trainer folds them; vmapped over a group's runs; ``--bare_updates`` of them
           in one jitted ``lax.scan``, the batches ``task.batch(1..N)`` stacked on the
           device first. Timed after a warm-up call: the median of ``--repeats`` calls.
           Left out against the harness: its finiteness checks and the keep-or-skip of
           every leaf, the metrics' accumulators, the per-step dispatch.
  floor    the update's FLOPs / one core's float32 GEMM rate. FLOPs are counted, not
           measured (``update_flops``): matmul multiply-adds alone, 2 FLOPs each. Forward:
           2 B T (d H + H^2) for the Elman recurrence (d H: the input projection of dense
           inputs, the temporal order's 6 one-hot symbols and the adding problem's 2
           channels; 0 where the inputs are ids that a char LM looks up, W_xh's rows
           gathered) plus 2 B T_out H K for the readout (T_out = 1 for a last-state
           readout, T for a language model; K classes, outputs or characters). Backward:
           2x the forward; the update is 3x the forward. Omega (rows a, d) adds an extra
           backward of the recurrence, 2 x 2 B T H^2 (the state gradients dE/dh_t and
           Omega's W_hh gradient, from the forward's states). Not counted: the
           activations, the softmax and loss, the optimizer, the data draw. T is the
           length actually trained: row a's mean drawn length (the harness and the bare
           update run all 199 padded steps, masked). The rate: a jitted [512, 512] x
           [512, 512] float32 matmul, the fastest of its calls (the ceiling, not a median),
           measured at the start of the same process.
  fixed s  a run's seconds outside its training steps, timing.json total - train_steps
           (task = data and model, setup, compile, metrics, checkpoint, report; for a
           group the shared phases divided by its runs plus a run's own report), at
           ``--harness_steps`` steps (1,000; --quick: fewer, said in the heading), with
           every program compiled anew (JAX's persistent cache empty).
  warm s   the same for a second run of the same configs (``WARM_STEPS`` steps) after
           JAX's in-memory caches are cleared: its programs read from the persistent
           compilation cache that the first filled, as a run reads them in a new process
           (a rerun, a sweep's worker after a job of another program); the task is loaded
           anew (its phase counts).

Below the table, ``padding_row``: the fused layer's forward and backward on a batch of length
60 padded to T = 199 against the same batch cut to 60 (its loops run to the longest length).

Everything runs on one core: the process pins itself to one (``os.sched_setaffinity``,
``--core``; as launch.sweep's local workers, one a core) and starts XLA single-threaded
(``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``), by
re-executing itself before JAX starts (--nopin: as started). JAX's persistent compilation
cache is a fresh temporary folder (a row's first run compiles, its second reads). Prints a
Markdown table under a heading line (commit, date, jax version, host) and writes both to
``--output``. --quick: every row in a few minutes (fewer steps, updates and repeats; the
numbers noisier).
"""

import os
import pathlib
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags
from absl import logging

__all__ = ['ROWS', 'QUICK', 'update_flops', 'row_flops', 'markdown', 'single_core_env',
           'generalization_budget', 'gemm_rate', 'harness_row', 'bare_row', 'measure_row']

ROOT = pathlib.Path(__file__).resolve().parent.parent
PINNED = 'RNNJAX_SMALL_MODELS_PINNED'  # set in the re-executed process
ONE_THREAD = '--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1'
GEMM_SIZE = 512

# name -> (label, config module, overrides of get_config(), which get_sweep() runs or None)
ROWS = {
    'a': ('a: temporal order, T in [50, 200), H 50, B 20, MSGD-CR (Omega 4)',
          'experiments.configs.temporal_order_generalization',
          {'method': 'MSGD-CR', 'clipping': 'pascanu', 'omega_weight': 4.0,
           'flossing_weight': 0.0, 'seed': 0}, None),
    'b': ('b: temporal order, T 200, H 50, B 20, MSGD-C', 'experiments.configs.temporal_order',
          {'length': 200, 'method': 'MSGD-C', 'clipping': 'pascanu', 'omega_weight': 0.0,
           'seed': 0}, None),
    'c': ('c: adding, IRNN, T 400, H 100, B 16, Adam', 'experiments.configs.adding_irnn',
          {'length': 400, 'recurrent_init': 'identity', 'spectral_radius': 1.0,
           'activation': 'relu', 'seed': 0}, None),
    'd': ('d: PTB chars, H 256, B 32, tau 50, MSGD-CR (Omega 2)',
          'experiments.configs.ptb_chars', {'seed': 0}, None),
    'e': ('e: char LM main job, tau 64: 10 runs vmapped, H 128, B 32',
          'experiments.configs.char_lm', {}, {'truncation': 64}),
}
# --quick: (harness steps, bare updates, bare repeats, GEMM calls)
QUICK = (40, 20, 3, 20)
# --quick: smaller reports (test sets, held-out characters) for the harness's runs
QUICK_REPORTS = {'a': {'test_size': 1000}, 'b': {'test_size': 1000},
                 'd': {'max_eval_chars': 20_000}}
COLUMNS = ('config', 'harness ms/update', 'bare ms/update', 'floor ms/update', 'harness/bare',
           'bare/floor', 'fixed s', 'warm s')
WARM_STEPS = 20  # steps of the second, warm-cache run of a row

_QUICK = flags.DEFINE_bool('quick', False, f'A few minutes in all: {QUICK[0]} harness steps, '
                           f'{QUICK[1]} bare updates x {QUICK[2]} repeats.')
_ROWS = flags.DEFINE_list('rows', list(ROWS), f'Rows to measure, of {list(ROWS)}.')
_STEPS = flags.DEFINE_integer('harness_steps', 1000,
                              'Harness steps of a run (fixed s is at these).', lower_bound=2)
_BARE = flags.DEFINE_integer('bare_updates', 200, 'Updates in one bare scan.', lower_bound=1)
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Timed bare scans (the median).', lower_bound=1)
_GEMM_CALLS = flags.DEFINE_integer('gemm_calls', 50, 'Timed GEMM calls (the fastest).',
                                   lower_bound=1)
_OUTPUT = flags.DEFINE_string('output', '', 'Also write the heading and table here.')
_CORE = flags.DEFINE_integer('core', -1, 'The core to pin to: an index into this process\'s '
                             'allowed cores (-1: the last).')
_PIN = flags.DEFINE_bool('pin', True, 'Re-execute pinned to one core with XLA single-threaded.')


# --- Pure parts --------------------------------------------------------------------------

def update_flops(batch: int, steps: float, inputs: int, hidden: int, outputs: int,
                 readout_steps: float, omega: bool = False) -> float:
  """FLOPs of one update of an Elman network (the module docstring's count).

  Args:
    batch: B.
    steps: T, the recurrence's steps (a mean where lengths vary).
    inputs: d of the input projection per step; 0 for looked-up ids.
    hidden: H.
    outputs: K, the readout's width.
    readout_steps: the steps the readout reads (1: the last state; T: every state).
    omega: with Omega's extra backward of the recurrence.
  """
  forward = 2 * batch * steps * (inputs * hidden + hidden * hidden)
  forward += 2 * batch * readout_steps * hidden * outputs
  extra = 2 * (2 * batch * steps * hidden * hidden) if omega else 0
  return 3 * forward + extra


def row_flops(config, params, steps: float) -> float:
  """``update_flops`` of one run of ``config`` from its params' shapes (one run's params),
  at ``steps`` recurrence steps (row a: the mean drawn length)."""
  omega = float(config.get('omega_weight', 0.0)) > 0
  if 'recurrence' in params:  # a models.LanguageModel: ids looked up, a readout every step
    cell = params['recurrence']['cell']
    hidden = cell['W_hh'].shape[0]
    vocab = params['head']['kernel'].shape[-1]
    return update_flops(config.batch_size, steps, 0, hidden, vocab, steps, omega)
  cell = params['cell']
  inputs, hidden = cell['W_xh'].shape
  return update_flops(config.batch_size, steps, inputs, hidden, params['W_out'].shape[-1], 1,
                      omega)


def markdown(rows, columns=COLUMNS) -> str:
  """A Markdown table of ``rows`` (dicts) in ``columns``; floats to 3 significant digits."""
  def cell(v):
    return f'{v:.3g}' if isinstance(v, float) else str(v)
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell(r.get(c, '')) for c in columns) + ' |' for r in rows]
  return '\n'.join(lines)


def single_core_env(environ, core: int) -> dict:
  """``environ`` with XLA single-threaded (``ONE_THREAD`` added to XLA_FLAGS, once) and
  the pinned marker naming ``core``."""
  flags_now = environ.get('XLA_FLAGS', '')
  if ONE_THREAD not in flags_now:
    flags_now = f'{flags_now} {ONE_THREAD}'.strip()
  return dict(environ, XLA_FLAGS=flags_now, **{PINNED: str(core)})


# --- Measurements ------------------------------------------------------------------------

def _block(tree):
  import jax
  return jax.block_until_ready(tree)


def gemm_rate(calls: int, size: int = GEMM_SIZE) -> float:
  """FLOP/s of the fastest of ``calls`` jitted float32 [size, size] x [size, size] matmuls."""
  import jax
  a = jax.random.normal(jax.random.key(0), (size, size), 'float32')
  b = jax.random.normal(jax.random.key(1), (size, size), 'float32')
  matmul = jax.jit(lambda a, b: a @ b)
  _block(matmul(a, b))
  best = float('inf')
  for _ in range(calls):
    started = time.perf_counter()
    _block(matmul(a, b))
    best = min(best, time.perf_counter() - started)
  return 2 * size ** 3 / best


def row_configs(name: str, quick: bool = False) -> tuple:
  """``(label, the Experiment, the row's configs)``; ``quick``: with ``QUICK_REPORTS``."""
  import importlib
  from rnnjax.train import experiment
  from rnnjax.train import sweep
  label, module, overrides, swept = ROWS[name]
  config_module = importlib.import_module(module)
  base = experiment.override(config_module.get_config(),
                             dict(overrides, **(QUICK_REPORTS.get(name, {}) if quick else {})))
  if swept is None:
    configs = [base]
  else:
    runs = [o for o in config_module.get_sweep()
            if all(o.get(k) == v for k, v in swept.items())]
    configs = sweep.run_configs(base, runs, {})
  kind = experiment.load(configs[0].experiment)
  for config in configs:
    experiment.check(kind, config)
  return label, kind, configs


def harness_row(kind, configs, steps: int) -> dict:
  """The harness's columns of a group trained ``steps`` steps on a temporary workdir:
  ``{'ms': train_steps ms per run-update, 'fixed': fixed s a run, 'steps': steps done,
  'seconds': timing.json's phases (run 0), 'group fixed': the group's fixed seconds}``."""
  from rnnjax.train import experiment
  from rnnjax.train import harness
  from rnnjax.train import run_folder
  from rnnjax.train import sweep
  configs = [experiment.override(c, {'steps': steps}) for c in configs]
  with tempfile.TemporaryDirectory(prefix='small_models_') as tmp:
    folders = [pathlib.Path(tmp) / f'run{i}' for i in range(len(configs))]
    summaries = harness.run_group(kind, configs, folders, provenance=sweep.provenance())
    timings = [run_folder.read_json(f / run_folder.TIMING)['seconds'] for f in folders]
  done = max(s['steps_done'] for s in summaries)
  runs = len(configs)
  shared = timings[0]['total'] - timings[0]['report']
  reports = [t['report'] for t in timings]
  group_fixed = shared - timings[0]['train_steps'] + sum(reports)
  return {'ms': 1e3 * timings[0]['train_steps'] / done / runs, 'fixed': group_fixed / runs,
          'group fixed': group_fixed, 'steps': done, 'seconds': timings[0]}


def bare_program(task, config):
  """``run(state, batches, numbers) -> (state, losses)``: the bare update (module docstring)
  of a group, scanned over the stacked batches and their step numbers, jitted."""
  import jax
  import optax
  from rnnjax.train import optimizers
  update = optimizers.from_config(config).update

  def one_run(state, batch, number):
    params, opt_state, carry, key = state
    step_key = jax.random.fold_in(jax.random.wrap_key_data(key), number)
    (value, carry), grads = jax.value_and_grad(task.loss, has_aux=True)(
        params, carry, batch, step_key)
    updates, opt_state = update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state, carry, key), value

  group = jax.vmap(one_run, in_axes=(0, None, None))

  def run(state, batches, numbers):
    return jax.lax.scan(lambda s, xs: group(s, *xs), state, (batches, numbers))

  return jax.jit(run)


def bare_row(task, configs, updates: int, repeats: int) -> dict:
  """``{'ms': bare ms per run-update (median of repeats), 'losses': the last call's,
  'compile': seconds of the warm-up call}``."""
  import jax
  import jax.numpy as jnp
  from rnnjax.train import trainer
  initial = trainer.initial_state(task, configs)
  state = (initial.params, initial.opt_state, initial.carry, initial.key)
  batches = [task.batch(t) for t in range(1, updates + 1)]
  stacked = jax.device_put(jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *batches))
  numbers = jnp.arange(1, updates + 1, dtype=jnp.int32)
  run = bare_program(task, configs[0])
  started = time.perf_counter()
  _block(run(state, stacked, numbers))
  compile_seconds = time.perf_counter() - started
  times = []
  for _ in range(repeats):
    started = time.perf_counter()
    _, losses = _block(run(state, stacked, numbers))
    times.append(time.perf_counter() - started)
  return {'ms': 1e3 * statistics.median(times) / updates / len(configs),
          'losses': losses, 'compile': compile_seconds}


def trained_steps(task, config, count: int) -> float:
  """The mean recurrence length of steps 1..count: a range-mode temporal order run's drawn
  lengths (keys folded as the trainer folds them), else the config's T."""
  import jax
  import numpy as np
  if config.experiment == 'experiments.temporal_order' and config.mode == 'range':
    from experiments import temporal_order
    key = jax.random.wrap_key_data(jax.random.key_data(
        jax.random.split(jax.random.key(config.seed))[1]))
    drawn = jax.jit(jax.vmap(lambda t: temporal_order.draw(
        config, jax.random.fold_in(key, t), config.batch_size)[2]))
    return float(np.mean(drawn(np.arange(1, count + 1, dtype=np.int32))))
  if 'truncation' in config:
    return float(config.truncation)
  return float(config.length)


def measure_row(name: str, steps: int, updates: int, repeats: int, rate: float,
                quick: bool = False) -> dict:
  """One table row (and its notes' numbers)."""
  import dataclasses
  import jax
  label, kind, configs = row_configs(name, quick)
  loaded = []  # the harness loads the task (its 'task' phase); the bare update reuses it

  def task_once(config):
    if not loaded:
      loaded.append(kind.task(config))
    return loaded[0]

  harness = harness_row(dataclasses.replace(kind, task=task_once), configs, steps)
  jax.clear_caches()
  warm = harness_row(kind, configs, min(WARM_STEPS, steps))
  task = loaded[0]
  bare = bare_row(task, configs, updates, repeats)
  params = task.init(configs[0], jax.random.key(0))
  length = trained_steps(task, configs[0], harness['steps'])
  flops = row_flops(configs[0], params, length)
  floor = 1e3 * flops / rate
  return {'config': label, 'harness ms/update': harness['ms'], 'bare ms/update': bare['ms'],
          'floor ms/update': floor, 'harness/bare': harness['ms'] / bare['ms'],
          'bare/floor': bare['ms'] / floor, 'fixed s': harness['fixed'],
          'warm s': warm['fixed'], 'warm seconds': warm['seconds'],
          'runs': len(configs), 'steps': harness['steps'], 'seconds': harness['seconds'],
          'group fixed': harness['group fixed'], 'length': length, 'flops': flops,
          'bare compile': bare['compile']}


def padding_row(rounds: int, calls: int = 20) -> dict:
  """The fused layer's forward and backward (``jax.grad`` of a sum of its states) at B 20,
  d 6, H 50 (the temporal order's sizes) on a batch of length 60 padded to T = 199 (lengths
  all 60) and on the same batch cut to T = 60: ms a call, the medians of ``rounds``
  interleaved rounds of ``calls`` calls each, and their ratio."""
  import jax
  import jax.numpy as jnp
  import rnnjax
  keys = jax.random.split(jax.random.key(0), 2)
  params = rnnjax.init_elman(keys[0], 6, 50, 'orthogonal', radius=1.0)
  padded = jax.random.normal(keys[1], (20, 199, 6))
  lengths = jnp.full((20,), 60)
  grad = jax.jit(jax.grad(lambda p, x: jnp.sum(rnnjax.elman_layer(p, x, lengths=lengths)[0])))
  batches = {'padded': padded, 'cut': padded[:, :60]}
  times: dict[str, list[float]] = {name: [] for name in batches}
  for name, inputs in batches.items():
    _block(grad(params, inputs))
  for _ in range(rounds):
    for name, inputs in batches.items():
      began = time.perf_counter()
      for _ in range(calls):
        out = grad(params, inputs)
      _block(out)
      times[name].append((time.perf_counter() - began) / calls * 1e3)
  padded_ms, cut_ms = (statistics.median(times[name]) for name in ('padded', 'cut'))
  return {'padded': padded_ms, 'cut': cut_ms, 'ratio': padded_ms / cut_ms}


GENERALIZATION = (5, 1_000_000)  # seeds, updates: the generalization study at the budget asked
STUDY_FIGURE = (3.67, 10, 100_000)  # its own run hours, runs and updates a run (generalization.md)


def generalization_budget(ms: float, fixed: float) -> str:
  """The generalization study's run hours at ``GENERALIZATION`` from row a's harness ms a
  run-update and fixed seconds a run, against its own figure (``STUDY_FIGURE``) scaled."""
  seeds, updates = GENERALIZATION
  hours = seeds * (updates * ms / 1e3 + fixed) / 3600
  study_hours, study_runs, study_updates = STUDY_FIGURE
  scaled = study_hours / (study_runs * study_updates) * seeds * updates
  return (f'Generalization (row a) at {updates:,} updates x {seeds} seeds: {hours:.3g} run hours '
          f'at this row\'s harness ms/update, against {scaled:.3g} from the study\'s own '
          f'{study_hours} run hours for {study_runs} runs of {study_updates:,} updates '
          f'({scaled / hours:.2f}x)')


def _phases(seconds: dict) -> str:
  return ', '.join(f'{k} {v:.1f}' for k, v in seconds.items())


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  unknown = [r for r in _ROWS.value if r not in ROWS]
  if unknown:
    raise app.UsageError(f'--rows: unknown {unknown}; expected some of {list(ROWS)}')
  if _PIN.value and PINNED not in os.environ:
    cores = sorted(os.sched_getaffinity(0))
    core = cores[_CORE.value]
    os.sched_setaffinity(0, {core})
    os.execve(sys.executable, [sys.executable, '-m', 'benchmarks.small_models', *sys.argv[1:]],
              single_core_env(os.environ, core))
  import jax
  from rnnjax.train import job
  from rnnjax.train import sweep
  logging.set_verbosity(logging.WARNING)  # not the trainer's lines
  job.keep_freed_memory()  # as a worker does
  jax.config.update('jax_compilation_cache_dir', tempfile.mkdtemp(prefix='small_models_xla_'))
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)
  jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)
  steps, updates, repeats, calls = (QUICK if _QUICK.value else
                                    (_STEPS.value, _BARE.value, _REPEATS.value, _GEMM_CALLS.value))
  where = sweep.provenance()
  began = time.perf_counter()
  rate = gemm_rate(calls)
  cores = sorted(os.sched_getaffinity(0))
  smaller = (f'--quick: reports smaller ({", ".join(f"{k}: {v}" for k, v in QUICK_REPORTS.items())}'
             '), fixed s not that of the configs; ' if _QUICK.value else '')
  heading = (f'Small models, one update ({smaller}{steps} harness steps a run, fixed s at '
             f'{steps} steps, warm s at {min(WARM_STEPS, steps)}; bare: {updates} updates a '
             f'scan, median of {repeats}): commit {where["commit"]}, {where["date"]}, jax '
             f'{jax.__version__}, '
             f'host {where["host"]}, core(s) {cores}, XLA_FLAGS '
             f'"{os.environ.get("XLA_FLAGS", "")}"; float32 GEMM [{GEMM_SIZE}]^2 '
             f'{rate / 1e9:.1f} GFLOP/s; load average '
             f'{" ".join(f"{v:.2f}" for v in os.getloadavg())} at the start')
  print(heading, flush=True)
  rows, notes = [], []
  for name in _ROWS.value:
    row = measure_row(name, steps, updates, repeats, rate, _QUICK.value)
    rows.append(row)
    notes.append(f'{name}: {row["runs"]} run(s), {row["steps"]} steps, T counted '
                 f'{row["length"]:.1f}, {row["flops"] / 1e6:.1f} MFLOP a run-update; '
                 f'timing.json (run 0) {_phases(row["seconds"])}; warm '
                 f'{_phases(row["warm seconds"])}; the group\'s fixed '
                 f'{row["group fixed"]:.1f} s; bare compile + first call '
                 f'{row["bare compile"]:.1f} s')
    print(f'- {notes[-1]}', flush=True)
  table = markdown(rows)
  padding = padding_row(repeats * 4)
  table += ('\n\nPadding (the fused layer\'s forward and backward, B 20, d 6, H 50): a batch of '
            f'length 60 padded to T = 199 {padding["padded"]:.3g} ms, the same batch cut to 60 '
            f'{padding["cut"]:.3g} ms: padded / cut {padding["ratio"]:.2f}')
  for row, name in zip(rows, _ROWS.value):
    if name == 'a':
      table += '\n\n' + generalization_budget(row['harness ms/update'], row['fixed s'])
  tail = (f'{time.perf_counter() - began:.0f} s in all; load average '
          f'{" ".join(f"{v:.2f}" for v in os.getloadavg())} at the end')
  print()
  print(table)
  print()
  print(tail)
  if _OUTPUT.value:
    path = pathlib.Path(_OUTPUT.value)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('\n\n'.join([heading, table, '\n'.join(f'- {n}' for n in notes), tail])
                    + '\n')


if __name__ == '__main__':
  app.run(main)
