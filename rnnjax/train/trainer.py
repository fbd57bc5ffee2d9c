"""The training loop of every experiment: a group of runs stepped together.

An experiment supplies a ``Task`` (its data, model and loss); the trainer owns
the loop. Its state (``TrainState``) is params, optimizer state, recurrent
carry, key and metric accumulators, each with a leading run axis: R runs that
differ only in values that change no program (initial params, seed, learning
rate, clip threshold) train as one ``jax.vmap``ped step on the same batches,
and a single run is a group of one. The step of a run:

  loss, carry' = task.loss(params, carry, batch, key_t)     key_t = fold_in(key, t)
  (+ flossing_weight x the top Lyapunov exponents squared, ``lyapunov.flossing_loss``
     on the task's probe, in its first flossing_steps steps)
  params', opt_state' = optimizer step (clip -> optimizer -> measure)
  finite = loss, the pre-clip gradient norm, params' and carry' all finite
           (clipping 'pascanu', whose fallback turns a non-finite gradient into
           a finite update: loss, params' and carry' all finite)

One divergence rule: a step that is not finite is never applied (params,
optimizer state and carry stay as they were, so params are always the last
finite ones); with ``on_divergence='skip'`` it is counted as skipped and
training goes on, with 'stop' the run stops there (its lane of the vmapped
step runs on, ignored). A task with ``solved`` stops a run once it is solved
(checked on the host every ``solved_every`` steps). The group ends when every
run has stopped or at ``config.steps``.

The data of step t is ``task.batch(t)``, a function of t alone, so the data
position of a resumed run is its step; with the carry and the key in the
checkpoint, a run killed at any moment and rerun gives the same params,
metrics.jsonl and summary.json, bit for bit, as a run never interrupted.

Units: losses in nats; bits = nats / ln 2.
"""

import math
import time
from typing import Any, Callable, NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rnnjax import diagnostics
from rnnjax import initializers
from rnnjax import lyapunov
from rnnjax.train import checkpoints
from rnnjax.train import devices
from rnnjax.train import optimizers
from rnnjax.train import records

__all__ = ['Task', 'TrainState', 'Interrupted', 'Programs', 'initial_state', 'train',
           'host_spectral_radii', 'unstack', 'LOGGED', 'TOTALS']


class Task(NamedTuple):
  """What an experiment gives the trainer: data, model and loss, nothing else.

  ``batch`` must be a function of the step alone (deterministic), and every
  run of a group reads the same batch; randomness of a run (dropout, data
  drawn inside the loss) comes from its ``key``.
  """
  init: Callable  # init(config, key) -> params pytree of one run
  loss: Callable  # loss(params, carry, batch, key) -> (<float32>[] nats, carry)
  batch: Callable  # batch(step >= 1) -> pytree of numpy arrays
  carry: Any = ()  # the initial carry of one run (truncated BPTT's state); () for none
  probe: Callable | None = None  # probe(params, carry, batch) -> diagnostics.Probe
  recurrent_weight: Callable | None = None  # recurrent_weight(params) -> <float32>[H, H]
  report: Callable | None = None  # report(config, params) -> dict for summary.json (evaluation)
  artifacts: dict = {}  # file name -> bytes the run folder keeps (e.g. a tokenizer's model)
  solved: Callable | None = None  # solved(config, params) -> bool: the run stops, solved
  solved_every: int = 0  # steps between the checks of ``solved``


# The metrics of a step, and how each reduces over the steps of a logged interval
# (LOGGED, the metrics.jsonl line) and over the run (TOTALS, the summary): name ->
# (the step's quantity, reduction). Each quantity counts only at the steps where it
# is valid (``_step_quantities``); 'mean' is sum / count, 'max' ignores NaN.
LOGGED = {
    'loss': ('loss', 'mean'),
    'grad_norm': ('grad_norm', 'last'),
    'max_grad_norm': ('grad_norm', 'max'),
    'clipped': ('clipped', 'last'),
    'clipped_fraction': ('clipped', 'mean'),
    'update_norm': ('update_norm', 'last'),
    'skipped': ('skipped', 'sum'),
}
TOTALS = {
    'steps_done': ('taken', 'sum'),
    'skipped_steps': ('skipped', 'sum'),
    'clipped_fraction': ('clipped', 'mean'),
    'max_grad_norm': ('grad_norm', 'max'),
}


class TrainState(NamedTuple):
  """Everything a group's training needs to continue; leaves have a leading run axis R."""
  params: Any
  opt_state: Any
  carry: Any  # the recurrent carry after the last step
  key: jax.Array  # <uint32>[R, 2]: key data of each run's training key
  step: jax.Array  # <int32>[]: steps done (the same for every run of a group)
  stopped: jax.Array  # <int32>[R]: the step a run stopped at (diverged or solved), 0: going on
  diverged: jax.Array  # <bool>[R]: whether it stopped by a non-finite step
  flossing_weight: jax.Array  # <float32>[R]: each run's config.flossing_weight
  interval: dict  # LOGGED accumulators since the last logged step, each [R] or ([R], [R])
  totals: dict  # TOTALS accumulators of the whole run


class Interrupted(Exception):
  """Training stopped on request at a step; a checkpoint of that step was saved."""


def _zero(reduction: str, runs: int):
  zeros = lambda: jnp.zeros((runs,), jnp.float32)  # distinct buffers: the state is donated
  return (zeros(), zeros()) if reduction == 'mean' else zeros()


def _accumulate(accumulators: dict, spec: dict, quantities: dict) -> dict:
  """One step's quantities (name -> (value, valid)) folded into the accumulators."""
  out = {}
  for name, (quantity, reduction) in spec.items():
    value, valid = quantities[quantity]
    value = jnp.asarray(value, jnp.float32)
    old = accumulators[name]
    if reduction == 'mean':
      out[name] = (old[0] + jnp.where(valid, value, 0.0), old[1] + valid)
    elif reduction == 'sum':
      out[name] = old + jnp.where(valid, value, 0.0)
    elif reduction == 'max':
      out[name] = jnp.where(valid & ~jnp.isnan(value), jnp.maximum(old, value), old)
    else:  # 'last'
      out[name] = jnp.where(valid, value, old)
  return out


def _reduced(accumulators: dict, spec: dict, i: int) -> dict:
  """Host values of run i's accumulators: 'mean' as sum / count (NaN for no steps)."""
  out = {}
  for name, (_, reduction) in spec.items():
    value = accumulators[name]
    if reduction == 'mean':
      total, count = float(value[0][i]), float(value[1][i])
      out[name] = total / count if count else math.nan
    else:
      out[name] = float(value[i])
  return out


def _stack(trees):
  return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


def unstack(tree, count: int) -> list:
  """The R pytrees of a pytree whose leaves have a leading run axis."""
  return [jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], tree) for i in range(count)]


def _run(state: TrainState, i: int) -> TrainState:
  """Run i of a group's state (the step is shared)."""
  return jax.tree_util.tree_map(lambda leaf: leaf[i], state._replace(step=None))._replace(
      step=state.step)


def _group(states: list) -> TrainState:
  """The group state of R single-run states at one step."""
  return _stack([s._replace(step=None) for s in states])._replace(step=states[0].step)


def _all_finite(tree) -> jax.Array:
  leaves = jax.tree_util.tree_leaves(tree)
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves])) if leaves else True


def initial_state(task: Task, configs) -> TrainState:
  """The state at step 0 of a group: each run's params from ``task.init`` with its
  own config and seed, its optimizer from its config, the task's initial carry."""
  params, opt_states, keys = [], [], []
  for config in configs:
    init_key, train_key = jax.random.split(jax.random.key(config.seed))
    run_params = task.init(config, init_key)
    params.append(run_params)
    opt_states.append(optimizers.from_config(config).init(run_params))
    keys.append(jax.random.key_data(train_key))
  runs = len(configs)
  carry = jax.tree_util.tree_map(lambda leaf: jnp.stack([jnp.asarray(leaf)] * runs), task.carry)
  return TrainState(
      _stack(params), _stack(opt_states), carry, jnp.stack(keys), jnp.zeros([], jnp.int32),
      jnp.zeros((runs,), jnp.int32), jnp.zeros((runs,), bool),
      jnp.array([c.flossing_weight for c in configs], jnp.float32),
      {name: _zero(reduction, runs) for name, (_, reduction) in LOGGED.items()},
      {name: _zero(reduction, runs) for name, (_, reduction) in TOTALS.items()})


class Programs:
  """The compiled step and diagnostics of one task, owned by whoever trains it.

  ``step(state, batch) -> state`` is the vmapped group step (the module
  docstring's rule), ``measure(state, batch) -> (recurrent weights <float32>[R,
  H, H] (or [R] of NaN), profile <float32>[R, len(PROFILE_DISTANCES)])`` the
  diagnostics on the params and carry a step starts from. Each is compiled once
  per batch shape (``compiled``), the compilation timed; drop the object and the
  programs go with it.
  """

  def __init__(self, task: Task, config):
    self.task = task
    update = optimizers.from_config(config).update
    judge_by_update = optimizers.handles_non_finite(config.clipping)
    flossing = config.flossing_weight > 0
    self.step = jax.jit(_step_function(task, update, config.on_divergence, judge_by_update,
                                       flossing, config.flossing_exponents,
                                       config.flossing_steps), donate_argnums=0)
    self.measure = jax.jit(_measure_function(task.probe, task.recurrent_weight,
                                             config.measure_lyapunov))
    self.executables = {}
    self.compile_seconds = 0.0

  def compiled(self, name: str, state: TrainState, batch):
    """The executable of ``name`` ('step' or 'measure') for this batch's shapes."""
    key = (name, tuple((np.shape(leaf), str(getattr(leaf, 'dtype', type(leaf))),
                        str(getattr(leaf, 'sharding', '')))
                       for leaf in jax.tree_util.tree_leaves(batch)))
    if key not in self.executables:
      started = time.perf_counter()
      self.executables[key] = getattr(self, name).lower(state, batch).compile()
      self.compile_seconds += time.perf_counter() - started
    return self.executables[key]


def _step_function(task, update, on_divergence, judge_by_update, flossing, exponents,
                   flossing_steps):
  """The group step ``step(state, batch) -> state`` of ``task.loss``."""
  def objective(params, carry, batch, key, step, flossing_weight):
    value, new_carry = task.loss(params, carry, batch, key)
    if not flossing:
      return value, (value, new_carry)

    def floss():
      probe = task.probe(params, carry, batch)
      return lyapunov.flossing_loss(probe.cell, probe.params, probe.inputs, probe.initial_state,
                                    exponents, lengths=probe.lengths)
    applies = (step <= flossing_steps) if flossing_steps else True
    term = jax.lax.cond(applies, floss, lambda: jnp.zeros([], jnp.float32))
    return value + flossing_weight * term, (value, new_carry)

  def one_run(params, opt_state, carry, key_data, stopped, diverged, flossing_weight, interval,
              totals, batch, step):
    key = jax.random.fold_in(jax.random.wrap_key_data(key_data), step)
    (_, (value, new_carry)), grads = jax.value_and_grad(objective, has_aux=True)(
        params, carry, batch, key, step, flossing_weight)
    updates, new_opt_state = update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    measured = optimizers.measurements(new_opt_state)
    gradient_finite = True if judge_by_update else jnp.isfinite(measured['grad_norm'])
    finite = (jnp.isfinite(value) & gradient_finite & _all_finite(new_params) &
              _all_finite(new_carry))
    active = stopped == 0
    apply = finite & active
    keep = lambda new, old: jax.tree_util.tree_map(lambda n, o: jnp.where(apply, n, o), new, old)
    stops = active & ~finite & (on_divergence == 'stop')
    taken = active & ~stops  # this step counts as taken (applied or skipped)
    quantities = {'loss': (value, taken & finite),
                  'grad_norm': (measured['grad_norm'], taken),
                  'clipped': (finite & measured['clipped'], taken),
                  'update_norm': (measured['update_norm'], taken),
                  'skipped': (~finite, taken),
                  'taken': (taken, True)}
    return (keep(new_params, params), keep(new_opt_state, opt_state), keep(new_carry, carry),
            jnp.where(stops, step, stopped), diverged | stops,
            _accumulate(interval, LOGGED, quantities), _accumulate(totals, TOTALS, quantities))

  group = jax.vmap(one_run, in_axes=(0, 0, 0, 0, 0, 0, 0, 0, 0, None, None))

  def step(state: TrainState, batch) -> TrainState:
    number = state.step + 1
    params, opt_state, carry, stopped, diverged, interval, totals = group(
        state.params, state.opt_state, state.carry, state.key, state.stopped, state.diverged,
        state.flossing_weight, state.interval, state.totals, batch, number)
    return TrainState(params, opt_state, carry, state.key, number, stopped, diverged,
                      state.flossing_weight, interval, totals)

  return step


def _measure_function(probe_fn, recurrent_weight, measure_lyapunov: bool):
  """``measure(state, batch)`` (see ``Programs``): the spectral radius is solved on the
  host from the weights, after the program (a ``jax.pure_callback`` inside it
  deadlocks a program over several CPU devices)."""
  distances = diagnostics.PROFILE_DISTANCES

  def one_run(params, carry, batch):
    weight = recurrent_weight(params) if recurrent_weight else jnp.float32(jnp.nan)
    if probe_fn is None:
      return weight, jnp.full((len(distances),), jnp.nan, jnp.float32), jnp.float32(jnp.nan)
    probe = probe_fn(params, carry, batch)
    fitting = diagnostics.profile_distances(probe.inputs.shape[1], distances)
    ratios = diagnostics.profile(probe, fitting)
    padding = jnp.full((len(distances) - len(fitting),), jnp.nan, jnp.float32)
    exponent = jnp.mean(lyapunov.lyapunov_spectrum(
        probe.cell, probe.params, probe.inputs, probe.initial_state, 1,
        lengths=probe.lengths)) if measure_lyapunov else jnp.float32(jnp.nan)
    return weight, jnp.concatenate([ratios.astype(jnp.float32), padding]), exponent

  group = jax.vmap(one_run, in_axes=(0, 0, None))
  return lambda state, batch: group(state.params, state.carry, batch)


def host_spectral_radii(weights) -> np.ndarray:
  """``<float32>[R]``: rho of each ``[H, H]`` of ``weights`` (host values, ``[R, H, H]``),
  NaN for one with a NaN or an infinity; ``weights`` of shape ``[R]`` (no recurrent
  weight) come back as they are."""
  weights = np.asarray(weights)
  if weights.ndim == 1:
    return weights.astype(np.float32)
  return np.array([initializers.host_spectral_radius(w) for w in weights], np.float32)


def _line(step: int, interval: dict, i: int, radius, profile, exponent) -> dict:
  """The metrics line of run i at a logged step (host values)."""
  values = _reduced(interval, LOGGED, i)
  line = {'step': step, 'loss': values['loss'], 'bits': values['loss'] / math.log(2)}
  line.update({name: values[name] for name in LOGGED if name != 'loss'})
  line['clipped'] = bool(line['clipped'])
  line['skipped'] = int(line['skipped'])
  line['measured_spectral_radius'] = float(radius[i])
  line['profile'] = {str(k): float(v) for k, v in zip(diagnostics.PROFILE_DISTANCES, profile[i])
                     if not math.isnan(v)}
  if not math.isnan(exponent[i]):
    line['largest_lyapunov_exponent'] = float(exponent[i])
  return line


def train(task: Task, configs, folders=None, writer: bool = True,
          stop_requested: Callable[[], bool] | None = None,
          programs: Programs | None = None,
          on_progress: Callable[[int], None] | None = None):
  """Trains a group of runs to ``config.steps``, resuming from their checkpoints.

  Every logged step (1, each ``log_every``, the last) appends to each run's
  metrics.jsonl and TensorBoard events: loss (nats, mean of the finite steps
  since the last line), bits, grad_norm (pre-clip global norm at this step),
  max_grad_norm, clipped (this step), clipped_fraction, update_norm, skipped
  (updates skipped since the last line), measured_spectral_radius of the
  recurrent weight and the gradient-norm profile {k: ||dL/dh_{T-k}|| /
  ||dL/dh_T||}, the last two measured on the params and carry the step
  started from (step 1: at initialization). A run that stopped gets no more
  lines. Checkpoints of each run's whole state are saved every
  ``checkpoint_every`` steps and at the end (``checkpoints``).

  Args:
    task: the experiment's ``Task``.
    configs: R configs of one group (the first gives steps, log_every,
      checkpoint_every, on_divergence and the optimizer chain).
    folders: R run folders, locked and prepared; None: nothing is read or
      written (no resume, no checkpoint).
    writer: whether this process writes metrics and TensorBoard (process 0).
    stop_requested: called after every step; when it returns True the
      state is checkpointed and ``Interrupted`` is raised.
    programs: the task's compiled ``Programs`` (made here when None).
    on_progress: called with the step after every step (for a launcher's
      progress and its watch for stalled jobs).

  Returns:
    ``(params, records, seconds)``: R final params (the last finite ones, those
    saved), R dicts (status 'finished' or 'diverged', steps_done, diverged_step,
    solved_step, skipped_steps, clipped_fraction, max_grad_norm, train_loss_nats
    and train_loss_bits: the mean training loss of the last logged interval,
    first_profile: at initialization, and final_measured_spectral_radius and
    final_profile: of the saved params, on the last step's batch) and the
    seconds per phase.

  Raises:
    Interrupted: when ``stop_requested`` said so (after checkpointing).
    checkpoints.CheckpointError: a checkpoint that cannot be read for a reason
      other than damage (one line naming the file and the cause).
  """
  seconds = {}

  def lap(name: str, started: float) -> float:
    now = time.perf_counter()
    seconds[name] = seconds.get(name, 0.0) + now - started
    return now

  first, runs = configs[0], len(configs)
  started = time.perf_counter()
  programs = programs or Programs(task, first)
  state = initial_state(task, configs)
  where = devices.placement(first.get('layout', 'auto'), runs, task.batch(1))
  one_at_a_time = devices.needs_one_step_at_a_time(where)
  stores, boards, lines, resumed = [], [], [[] for _ in range(runs)], 0
  if folders is not None:
    stores = [checkpoints.manager(folder) for folder in folders]
    target = jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=devices.replicated(where)),
        _run(state, 0))
    resumed, restored = checkpoints.restore_group(folders, target)
    if resumed:
      state = devices.to_host(_group(restored))
    if writer:
      lines = [records.cut_metrics(folder, resumed) for folder in folders]
      # resumed + 1 from step 0 too: a start killed before its first checkpoint left events
      boards = [records.tensorboard(folder, resumed + 1) for folder in folders]
  state = devices.place_state(where, state)
  logging.info('%d run(s) on %s', runs, devices.describe(where))
  if resumed:
    logging.info('resumed %d run(s) from the checkpoint of step %d', runs, resumed)
  writer = writer and folders is not None
  for folder in folders if writer else []:
    moved = records.record_devices(folder, devices.describe(where), resumed)
    if moved:
      logging.warning('%s', moved)
  compiled_before = programs.compile_seconds
  started = lap('setup', started)

  def save(state, step):
    begun = time.perf_counter()
    host = devices.to_host(state)
    for i, store in enumerate(stores):
      checkpoints.save(store, step, _run(host, i))
    lap('checkpoint', begun)

  def log(state, step, radius, profile, exponent):
    stopped, interval = devices.to_host((state.stopped, state.interval))
    for i in range(runs):
      if stopped[i]:  # stopped in this interval or before: no more lines
        continue
      line = _line(step, interval, i, radius, profile, exponent)
      lines[i].append(line)
      if writer:
        records.append_metrics(folders[i], line)
        records.write_scalars(boards[i], line)
      logging.info('%sstep %d/%d  loss %.4f nats (%.3f bits)  grad norm %.3g%s',
                   f'run {i}: ' if runs > 1 else '', step, first.steps, line['loss'],
                   line['bits'], line['grad_norm'],
                   f'  skipped {line["skipped"]}' if line['skipped'] else '')
    return state._replace(interval=jax.tree_util.tree_map(jnp.zeros_like, state.interval))

  def check_solved(state, step):
    stopped = np.array(devices.to_host(state.stopped))
    params = unstack(devices.to_host(state.params), runs)
    newly = [i for i in range(runs) if not stopped[i] and task.solved(configs[i], params[i])]
    for i in newly:
      stopped[i] = step
      logging.info('%ssolved at step %d', f'run {i}: ' if runs > 1 else '', step)
    return state._replace(stopped=devices.put_like(stopped, state.stopped)) if newly else state

  step = resumed
  all_stopped = bool(resumed) and bool(np.all(devices.to_host(state.stopped)))
  while step < first.steps and not all_stopped:
    step += 1
    batch = devices.place_batch(where, task.batch(step))
    logged = step == 1 or step % first.log_every == 0 or step == first.steps
    checked = bool(task.solved and task.solved_every and step % task.solved_every == 0)
    started = lap('train_steps', started)
    step_executable = programs.compiled('step', state, batch)
    measure_executable = programs.compiled('measure', state, batch) if logged else None
    started = time.perf_counter()
    if logged:  # measured on the params and carry this step starts from
      jax.block_until_ready(state)
      started = lap('train_steps', started)
      weights, profile, exponent = devices.to_host(measure_executable(state, batch))
      radius = host_spectral_radii(weights)
      started = lap('metrics', started)
    state = step_executable(state, batch)
    if logged or one_at_a_time:
      jax.block_until_ready(state)
    if logged or checked:
      started = lap('train_steps', started)
      state = log(state, step, radius, profile, exponent) if logged else state
      state = check_solved(state, step) if checked else state
      all_stopped = bool(np.all(devices.to_host(state.stopped)))
      started = lap('metrics', started)
    if step == first.steps or all_stopped or (first.checkpoint_every and
                                              step % first.checkpoint_every == 0):
      started = lap('train_steps', started)
      save(state, step)
      started = time.perf_counter()
    if on_progress is not None:
      on_progress(step)
    if stop_requested is not None and stop_requested() and not all_stopped:
      save(state, step)
      raise Interrupted(f'stopped on request after step {step}; a checkpoint of it was saved')
  jax.block_until_ready(state)
  started = lap('train_steps', started)
  final_radius = final_exponent = np.full((runs,), np.nan, np.float32)
  final_profile = np.full((runs, len(diagnostics.PROFILE_DISTANCES)), np.nan, np.float32)
  if task.probe or task.recurrent_weight:  # the saved params, measured
    batch = devices.place_batch(where, task.batch(max(step, 1)))
    weights, final_profile, final_exponent = devices.to_host(
        programs.compiled('measure', state, batch)(state, batch))
    final_radius = host_spectral_radii(weights)
  lap('metrics', started)
  seconds['compile'] = programs.compile_seconds - compiled_before
  for store in stores:
    store.close()
  for board in boards:
    board.close()

  host = devices.to_host(state)
  records_out = []
  for i in range(runs):
    totals, run_lines = _reduced(host.totals, TOTALS, i), lines[i]
    stopped_at, diverged = int(host.stopped[i]), bool(host.diverged[i])
    records_out.append({
        'status': 'diverged' if diverged else 'finished',
        'steps_done': int(totals['steps_done']),
        'diverged_step': stopped_at if diverged else None,
        'solved_step': stopped_at if stopped_at and not diverged else None,
        'skipped_steps': int(totals['skipped_steps']),
        'clipped_fraction': 0.0 if math.isnan(totals['clipped_fraction'])
                            else totals['clipped_fraction'],
        'max_grad_norm': totals['max_grad_norm'],
        'train_loss_nats': run_lines[-1]['loss'] if run_lines else math.nan,
        'train_loss_bits': run_lines[-1]['bits'] if run_lines else math.nan,
        'final_measured_spectral_radius': float(final_radius[i]),
        'first_profile': run_lines[0]['profile'] if run_lines else {},
        'first_largest_lyapunov_exponent': (run_lines[0].get('largest_lyapunov_exponent')
                                            if run_lines else None),
        'final_largest_lyapunov_exponent': (None if math.isnan(final_exponent[i])
                                            else float(final_exponent[i])),
        'final_profile': {str(k): float(v) for k, v in zip(diagnostics.PROFILE_DISTANCES,
                                                           final_profile[i])
                          if not math.isnan(v)},
    })
  return unstack(host.params, runs), records_out, seconds
