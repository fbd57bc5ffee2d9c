"""The training loop of every experiment: a group of runs stepped together.

An experiment supplies a ``Task`` (its data, model and loss); the trainer owns
the loop. Its state (``TrainState``) is params, optimizer state, recurrent
carry, key and counters, each with a leading run axis: R runs that differ
only in values that change no program (initial params, seed, learning rate,
clip threshold) train as one ``jax.vmap``ped step on the same batches, and a
single run is a group of one. The step of a run:

  loss, carry' = task.loss(params, carry, batch, key_t)     key_t = fold_in(key, t)
  params', opt_state' = optimizer step (clip -> optimizer -> measure)
  finite = loss, the pre-clip gradient norm, params' and carry' all finite
           (clipping 'pascanu', whose fallback turns a non-finite gradient into
           a finite update: loss, params' and carry' all finite)

One divergence rule: a step that is not finite is never applied (params,
optimizer state and carry stay as they were, so params are always the last
finite ones); with ``on_divergence='skip'`` it is counted as skipped and
training goes on, with 'stop' the run stops there (its lane of the vmapped
step runs on, ignored) and the group ends when every run has stopped.

The data of step t is ``task.batch(t)``, a function of t alone, so the data
position of a resumed run is its step; with the carry and the key in the
checkpoint, a run killed at any moment and rerun gives the same params,
metrics.jsonl and summary.json, bit for bit, as a run never interrupted.

Units: losses in nats; bits = nats / ln 2.
"""

import functools
import math
import time
from typing import Any, Callable, NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from rnnjax import diagnostics
from rnnjax import initializers
from rnnjax.train import devices
from rnnjax.train import optimizers
from rnnjax.train import run_folder

ON_DIVERGENCE = ('stop', 'skip')
# Config fields that change no program: runs that differ only in these (and in
# clipping none / global_norm, one chain at an infinite threshold) share a group.
# An experiment adds its own (the seed, where the data does not depend on it).
VMAPPABLE = ('learning_rate', 'clip_threshold', 'clipping')


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


class Counters(NamedTuple):
  """Per-run counters, each ``[R]``: over the whole run, and since the last logged step."""
  stopped: jax.Array  # bool: stopped by a non-finite step (on_divergence='stop')
  diverged_step: jax.Array  # int32: the step that stopped it (0: none)
  steps_done: jax.Array  # int32: steps taken (skipped ones included)
  skipped: jax.Array  # int32: updates skipped (on_divergence='skip')
  clipped: jax.Array  # int32: steps whose gradient clipping changed
  max_grad_norm: jax.Array  # float32: largest pre-clip global norm (NaN ignored)
  interval_steps: jax.Array  # int32: steps taken since the last logged step
  interval_finite: jax.Array  # int32: of which finite
  interval_loss: jax.Array  # float32: summed loss of those finite steps (nats)
  interval_clipped: jax.Array  # int32
  interval_skipped: jax.Array  # int32
  interval_max_grad_norm: jax.Array  # float32
  last_grad_norm: jax.Array  # float32: pre-clip global norm at the last step
  last_clipped: jax.Array  # bool
  last_update_norm: jax.Array  # float32


class TrainState(NamedTuple):
  """Everything a group's training needs to continue; leaves have a leading run axis R."""
  params: Any
  opt_state: Any
  carry: Any  # the recurrent carry after the last step
  key: jax.Array  # <uint32>[R, 2]: key data of each run's training key
  step: jax.Array  # <int32>[]: steps done (the same for every run of a group)
  counters: Counters


class Interrupted(Exception):
  """Training stopped on request at a step; a checkpoint of that step was saved."""


def check_config(config) -> None:
  """Checks the fields every experiment's config has, before any work.

  Raises:
    ValueError: naming ``config.<field>``, with the expected and the given value.
  """
  for name, low in (('steps', 1), ('log_every', 1), ('checkpoint_every', 0), ('seed', 0)):
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
      raise ValueError(f'config.{name}: expected an int >= {low}, got {value!r}')
  if config.seed >= 2**32:  # jax.random.key keeps a seed's low 32 bits (without x64)
    raise ValueError(f'config.seed: expected an int < 2**32 (a larger seed gives the key of '
                     f'seed % 2**32), got {config.seed!r}')
  if config.get('layout', 'auto') not in devices.LAYOUTS:
    raise ValueError(f'config.layout: expected one of {devices.LAYOUTS}, got '
                     f'{config.layout!r}')
  if config.on_divergence not in ON_DIVERGENCE:
    raise ValueError(f'config.on_divergence: expected one of {ON_DIVERGENCE}, got '
                     f'{config.on_divergence!r}')
  try:
    optimizers.check(config.optimizer, config.learning_rate, config.clipping,
                     config.clip_threshold)
  except ValueError as error:
    raise ValueError(f'config.{error}') from None


def group_key(config, vmappable) -> tuple:
  """Runs with equal keys can train in one group: every field but the vmappable
  ones (``VMAPPABLE`` and the experiment's own), with clipping reduced to the
  chain it runs on."""
  fields = config.to_dict()
  return tuple(sorted((k, repr(v)) for k, v in fields.items()
                      if k not in VMAPPABLE and k not in vmappable)) + (
      ('clipping_family', optimizers.family(config.clipping)),)


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
    optimizer = optimizers.make_optimizer(config.optimizer, config.learning_rate,
                                          config.clipping, config.clip_threshold)
    params.append(run_params)
    opt_states.append(optimizer.init(run_params))
    keys.append(jax.random.key_data(train_key))
  runs = len(configs)
  zeros = lambda dtype: jnp.zeros((runs,), dtype)
  counters = Counters(
      stopped=zeros(bool), diverged_step=zeros(jnp.int32), steps_done=zeros(jnp.int32),
      skipped=zeros(jnp.int32), clipped=zeros(jnp.int32), max_grad_norm=zeros(jnp.float32),
      interval_steps=zeros(jnp.int32), interval_finite=zeros(jnp.int32),
      interval_loss=zeros(jnp.float32), interval_clipped=zeros(jnp.int32),
      interval_skipped=zeros(jnp.int32), interval_max_grad_norm=zeros(jnp.float32),
      last_grad_norm=zeros(jnp.float32), last_clipped=zeros(bool),
      last_update_norm=zeros(jnp.float32))
  carry = jax.tree_util.tree_map(lambda leaf: jnp.stack([jnp.asarray(leaf)] * runs), task.carry)
  return TrainState(_stack(params), _stack(opt_states), carry, jnp.stack(keys),
                    jnp.zeros([], jnp.int32), counters)


def _reset_interval(counters: Counters) -> Counters:
  return counters._replace(**{name: jnp.zeros_like(getattr(counters, name))
                              for name in Counters._fields if name.startswith('interval_')})


@functools.lru_cache(maxsize=None)
def step_function(loss, update, on_divergence: str, judge_by_update: bool = False):
  """The jitted group step ``step(state, batch) -> state`` (the module docstring's rule)
  of a task's ``loss``; one per (loss, update, on_divergence, judge_by_update) in a
  process.

  ``update`` is the optimizer chain's update function, shared by the group's
  runs (``optimizers.make_optimizer`` gives one per optimizer and clipping
  family); each run's learning rate and threshold live in its opt_state.
  ``judge_by_update`` (``optimizers.handles_non_finite``: clipping 'pascanu')
  leaves the pre-clip gradient norm out of the finiteness test, so that a step
  whose gradient is not finite but whose fallback update is, is applied.
  """
  def one_run(params, opt_state, carry, key_data, counters, batch, step):
    key = jax.random.fold_in(jax.random.wrap_key_data(key_data), step)
    (value, new_carry), grads = jax.value_and_grad(loss, has_aux=True)(params, carry, batch,
                                                                       key)
    updates, new_opt_state = update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    measured = optimizers.measurements(new_opt_state)
    gradient_finite = True if judge_by_update else jnp.isfinite(measured['grad_norm'])
    finite = (jnp.isfinite(value) & gradient_finite & _all_finite(new_params) &
              _all_finite(new_carry))
    active = ~counters.stopped
    apply = finite & active
    keep = lambda new, old: jax.tree_util.tree_map(lambda n, o: jnp.where(apply, n, o), new, old)
    stops = active & ~finite & (on_divergence == 'stop')
    taken = active & ~stops  # this step counts as taken (applied or skipped)
    skipped = taken & ~finite
    clipped = taken & finite & measured['clipped']
    norm = jnp.where(taken & ~jnp.isnan(measured['grad_norm']), measured['grad_norm'], 0.0)
    counters = counters._replace(
        stopped=counters.stopped | stops,
        diverged_step=jnp.where(stops, step, counters.diverged_step),
        steps_done=counters.steps_done + taken,
        skipped=counters.skipped + skipped,
        clipped=counters.clipped + clipped,
        max_grad_norm=jnp.maximum(counters.max_grad_norm, norm),
        interval_steps=counters.interval_steps + taken,
        interval_finite=counters.interval_finite + (taken & finite),
        interval_loss=counters.interval_loss + jnp.where(taken & finite, value, 0.0),
        interval_clipped=counters.interval_clipped + clipped,
        interval_skipped=counters.interval_skipped + skipped,
        interval_max_grad_norm=jnp.maximum(counters.interval_max_grad_norm, norm),
        last_grad_norm=jnp.where(taken, measured['grad_norm'], counters.last_grad_norm),
        last_clipped=jnp.where(taken, measured['clipped'], counters.last_clipped),
        last_update_norm=jnp.where(taken, measured['update_norm'], counters.last_update_norm))
    return (keep(new_params, params), keep(new_opt_state, opt_state), keep(new_carry, carry),
            counters)

  group = jax.vmap(one_run, in_axes=(0, 0, 0, 0, 0, None, None))

  def step(state: TrainState, batch) -> TrainState:
    number = state.step + 1
    params, opt_state, carry, counters = group(state.params, state.opt_state, state.carry,
                                               state.key, state.counters, batch, number)
    return TrainState(params, opt_state, carry, state.key, number, counters)

  return jax.jit(step, donate_argnums=0)


@functools.lru_cache(maxsize=None)
def diagnostics_function(probe_fn, recurrent_weight):
  """The jitted ``measure(state, batch) -> (recurrent weights, profile <float32>[R,
  len(PROFILE_DISTANCES)])`` of a task's ``probe`` and ``recurrent_weight`` on the
  params and carry a step starts from: the weights ``<float32>[R, H, H]`` (``[R]`` of
  NaN where the task has none) for ``host_spectral_radii``, the profile NaN where the
  task measures nothing or a distance does not fit the probe's T.

  The spectral radius is solved on the host, after the program, not inside it
  through ``jax.pure_callback``: in a program over several CPU devices ('data'
  layout) the callback deadlocked 6 of 8 runs of the README's 8-device
  example on 2 cores (7 devices in an all-reduce, the 8th inside the
  callback; XLA aborts after 40 s)."""
  distances = diagnostics.PROFILE_DISTANCES

  def one_run(params, carry, batch):
    weight = recurrent_weight(params) if recurrent_weight else jnp.float32(jnp.nan)
    if probe_fn is None:
      return weight, jnp.full((len(distances),), jnp.nan, jnp.float32)
    probe = probe_fn(params, carry, batch)
    fitting = diagnostics.profile_distances(probe.inputs.shape[1], distances)
    ratios = diagnostics.profile(probe, fitting)
    padding = jnp.full((len(distances) - len(fitting),), jnp.nan, jnp.float32)
    return weight, jnp.concatenate([ratios.astype(jnp.float32), padding])

  group = jax.vmap(one_run, in_axes=(0, 0, None))
  return jax.jit(lambda state, batch: group(state.params, state.carry, batch))


def host_spectral_radii(weights) -> np.ndarray:
  """``<float32>[R]``: rho of each ``[H, H]`` of ``weights`` (host values, ``[R, H, H]``),
  NaN for one with a NaN or an infinity; ``weights`` of shape ``[R]`` (no recurrent
  weight) come back as they are."""
  weights = np.asarray(weights)
  if weights.ndim == 1:
    return weights.astype(np.float32)
  return np.array([initializers.host_spectral_radius(w) for w in weights], np.float32)


def _line(step: int, counters, i: int, radius, profile) -> dict:
  """The metrics line of run i at a logged step (host values)."""
  finite = int(counters.interval_finite[i])
  loss = float(counters.interval_loss[i]) / finite if finite else math.nan
  steps = max(int(counters.interval_steps[i]), 1)
  return {
      'step': step,
      'loss': loss,
      'bits': loss / math.log(2),
      'grad_norm': float(counters.last_grad_norm[i]),
      'max_grad_norm': float(counters.interval_max_grad_norm[i]),
      'clipped': bool(counters.last_clipped[i]),
      'clipped_fraction': int(counters.interval_clipped[i]) / steps,
      'update_norm': float(counters.last_update_norm[i]),
      'skipped': int(counters.interval_skipped[i]),
      'spectral_radius': float(radius[i]),
      'profile': {str(k): float(v) for k, v in zip(diagnostics.PROFILE_DISTANCES, profile[i])
                  if not math.isnan(v)},
  }


def _tensorboard(writer, line: dict) -> None:
  scalars = {f'train/{name}': line[name]
             for name in ('loss', 'bits', 'grad_norm', 'max_grad_norm', 'clipped_fraction',
                          'update_norm', 'skipped', 'spectral_radius')
             if math.isfinite(line[name])}
  scalars.update({f'profile/k{k}': ratio for k, ratio in line['profile'].items()})
  run_folder.write_scalars(writer, line['step'], scalars)


class Timer:
  """Seconds spent per named phase (``timing.json``)."""

  def __init__(self):
    self.seconds = {}

  def add(self, name: str, started: float) -> float:
    now = time.perf_counter()
    self.seconds[name] = self.seconds.get(name, 0.0) + now - started
    return now


_COMPILED = {}  # (jitted function, argument structure and shapes) -> executable


def _compiled(function, timer: Timer, *args):
  """``function`` compiled for the shapes of ``args`` (once per shape in a process), the
  compilation timed."""
  signature = jax.tree_util.tree_map(
      lambda x: (np.shape(x), str(x.dtype) if hasattr(x, 'dtype') else type(x).__name__,
                 str(getattr(x, 'sharding', ''))), args)
  signature = (function, jax.tree_util.tree_structure(args),
               tuple(jax.tree_util.tree_leaves(signature)))
  if signature not in _COMPILED:
    started = time.perf_counter()
    _COMPILED[signature] = function.lower(*args).compile()
    timer.add('compile', started)
  return _COMPILED[signature]


def forget_compiled() -> None:
  """Drops this process's jitted steps and diagnostics and their executables (each
  task's own: a task built anew compiles again, or reads JAX's persistent cache), so
  that a process that trains job after job (``launch.run --worker``) keeps only
  JAX's own caches between them."""
  step_function.cache_clear()
  diagnostics_function.cache_clear()
  _COMPILED.clear()


def _restore(state: TrainState, folders, managers, sharding=None):
  """Resumes the group from the newest step that every run's folder can restore
  (onto ``sharding``, every device, when several devices train the group).

  Returns:
    ``(state, step)``; step 0 (and ``state`` as given) when there is none.
  """
  targets = [jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                                   sharding=sharding),
                                    _run(state, i)) for i in range(len(folders))]
  common = set.intersection(*(set(run_folder.saved_steps(f)) for f in folders))
  for step in sorted(common, reverse=True):
    restored = []
    for folder, manager, target in zip(folders, managers, targets):
      got, value = run_folder.restore(manager, target, [step], folder)
      if got is None:
        break
      restored.append(value)
    if len(restored) == len(folders):
      return devices.to_host(_group(restored)), step
  return state, 0


def train(task: Task, configs, folders=None, writer: bool = True,
          stop_requested: Callable[[], bool] | None = None):
  """Trains a group of runs to ``config.steps``, resuming from their checkpoints.

  Every logged step (1, each ``log_every``, the last) appends to each run's
  metrics.jsonl and TensorBoard events: loss (nats, mean of the finite steps
  since the last line), bits, grad_norm (pre-clip global norm at this step),
  max_grad_norm, clipped (this step), clipped_fraction, update_norm, skipped
  (updates skipped since the last line), spectral_radius of the recurrent
  weight and the gradient-norm profile {k: ||dL/dh_{T-k}|| / ||dL/dh_T||}, the
  last two measured on the params and carry the step started from (step 1:
  at initialization). A run that stopped gets no more lines. Checkpoints of
  each run's whole state are saved every ``checkpoint_every`` steps and at
  the end (orbax, atomic).

  Args:
    task: the experiment's ``Task``.
    configs: R configs that share one ``group_key`` (the first gives steps,
      log_every, checkpoint_every, on_divergence and the optimizer chain).
    folders: R run folders, locked and prepared (``run_folder.start``); None:
      nothing is read or written (no resume, no checkpoint).
    writer: whether this process writes metrics and TensorBoard (process 0).
    stop_requested: called after every step; when it returns True the
      state is checkpointed and ``Interrupted`` is raised.

  Returns:
    ``(params, records, timer)``: R final params (the last finite ones), R
    dicts (status 'finished' or 'diverged', steps_done, diverged_step,
    skipped_steps, clipped_fraction, max_grad_norm, final_train_loss (nats)
    and final_train_bits, final_spectral_radius, first_profile, last_profile)
    and the ``Timer``. The ``final_`` and ``last_`` values are those of the last
    metrics line: measured, like its loss, on the params that step started from
    (the last update is not in them).

  Raises:
    Interrupted: when ``stop_requested`` said so (after checkpointing).
  """
  timer = Timer()
  first, runs = configs[0], len(configs)
  started = time.perf_counter()
  state = initial_state(task, configs)
  update = optimizers.make_optimizer(first.optimizer, first.learning_rate, first.clipping,
                                     first.clip_threshold).update
  step_fn = step_function(task.loss, update, first.on_divergence,
                          optimizers.handles_non_finite(first.clipping))
  measure_fn = diagnostics_function(task.probe, task.recurrent_weight)
  where = devices.placement(first.get('layout', 'auto'), runs, task.batch(1))
  one_at_a_time = devices.needs_one_step_at_a_time(where)
  managers, boards, lines, resumed = [], [], [[] for _ in range(runs)], 0
  if folders is not None:
    managers = [run_folder.checkpoints(folder) for folder in folders]
    state, resumed = _restore(state, folders, managers, devices.replicated(where))
    if writer:
      lines = [run_folder.cut_metrics(folder, resumed) for folder in folders]
      # resumed + 1 from step 0 too: a start killed before its first checkpoint left events
      boards = [run_folder.tensorboard(folder, resumed + 1) for folder in folders]
  state = devices.place_state(where, state)
  logging.info('%d run(s) on %s', runs, devices.describe(where))
  if resumed:
    logging.info('resumed %d run(s) from the checkpoint of step %d', runs, resumed)
  writer = writer and folders is not None
  for folder in folders if writer else []:
    moved = run_folder.record_devices(folder, devices.describe(where), resumed)
    if moved:
      logging.warning('%s', moved)
  started = timer.add('setup', started)

  def save(state, step):
    begun = time.perf_counter()
    for i, manager in enumerate(managers):
      if step not in manager.all_steps():
        manager.save(step, args=ocp.args.StandardSave(_run(state, i)))
    timer.add('checkpoint', begun)

  def log(state, step, radius, profile):
    counters = devices.to_host(state.counters)
    for i in range(runs):
      if counters.stopped[i]:  # stopped in this interval or before: no more lines
        continue
      line = _line(step, counters, i, radius, profile)
      lines[i].append(line)
      if writer:
        run_folder.append_metrics(folders[i], line)
        _tensorboard(boards[i], line)
      logging.info('%sstep %d/%d  loss %.4f nats (%.3f bits)  grad norm %.3g%s',
                   f'run {i}: ' if runs > 1 else '', step, first.steps, line['loss'],
                   line['bits'], line['grad_norm'],
                   f'  skipped {line["skipped"]}' if line['skipped'] else '')
    return state._replace(counters=_reset_interval(state.counters))

  step = resumed
  while step < first.steps:
    step += 1
    batch = devices.place_batch(where, task.batch(step))
    logged = step == 1 or step % first.log_every == 0 or step == first.steps
    started = timer.add('train_steps', started)
    step_executable = _compiled(step_fn, timer, state, batch)
    measure_executable = _compiled(measure_fn, timer, state, batch) if logged else None
    started = time.perf_counter()
    if logged:  # measured on the params and carry this step starts from
      jax.block_until_ready(state)
      started = timer.add('train_steps', started)
      weights, profile = devices.to_host(measure_executable(state, batch))
      radius = host_spectral_radii(weights)
      started = timer.add('metrics', started)
    state = step_executable(state, batch)
    if logged or one_at_a_time:
      jax.block_until_ready(state)
    if logged:
      started = timer.add('train_steps', started)
      state = log(state, step, radius, profile)
      started = timer.add('metrics', started)
    stopped = logged and bool(np.all(devices.to_host(state.counters.stopped)))
    if step == first.steps or stopped or (first.checkpoint_every and
                                          step % first.checkpoint_every == 0):
      started = timer.add('train_steps', started)
      save(state, step)
      started = time.perf_counter()
    if stopped:
      break
    if stop_requested is not None and stop_requested():
      save(state, step)
      raise Interrupted(f'stopped on request after step {step}; a checkpoint of it was saved')
  jax.block_until_ready(state)
  timer.add('train_steps', started)
  for manager in managers:
    manager.wait_until_finished()
    manager.close()
  for board in boards:
    board.close()

  counters = devices.to_host(state.counters)
  records = []
  for i in range(runs):
    run_lines = lines[i]
    records.append({
        'status': 'diverged' if counters.stopped[i] else 'finished',
        'steps_done': int(counters.steps_done[i]),
        'diverged_step': int(counters.diverged_step[i]) or None,
        'skipped_steps': int(counters.skipped[i]),
        'clipped_fraction': int(counters.clipped[i]) / max(int(counters.steps_done[i]), 1),
        'max_grad_norm': float(counters.max_grad_norm[i]),
        'final_train_loss': run_lines[-1]['loss'] if run_lines else math.nan,
        'final_train_bits': run_lines[-1]['bits'] if run_lines else math.nan,
        'final_spectral_radius': run_lines[-1]['spectral_radius'] if run_lines else math.nan,
        'first_profile': run_lines[0]['profile'] if run_lines else {},
        'last_profile': run_lines[-1]['profile'] if run_lines else {},
    })
  return unstack(devices.to_host(state.params), runs), records, timer
