"""The training loop of every experiment: a group of runs stepped together.

An experiment supplies a ``Task`` (data, model, loss); the trainer owns the loop. Its state
(``TrainState``) has a leading run axis R on every leaf: runs that differ only in values that
change no program (initial params, seed, learning rate, clip threshold) train as one
``jax.vmap``ped step on the same batches. The step of a run:

  loss, carry' = task.loss(params, carry, batch, fold_in(key, t))
      (+ flossing_weight x ``lyapunov.flossing_loss`` on the task's probe, steps <= flossing_steps)
  params', opt_state' = the optimizer chain (clip -> optimizer -> measure)
  finite = loss, pre-clip gradient norm (not for 'pascanu', whose fallback makes a non-finite
           gradient a finite update), params' and carry' all finite

A step that is not finite is never applied (params are always the last finite ones); with
``on_divergence='skip'`` it counts as skipped and training goes on, with 'stop' the run stops
there. A task with ``solved`` stops a run once solved (checked every ``solved_every`` steps);
one with ``validate`` is scored on held-out data every ``validate_every`` steps, its learning
rate following the validation loss by Mikolov's rule (``plateau``) where ``plateau_decay`` < 1.
The loop's periodic actions are due by one rule (``cadences``). ``task.batch(t)`` is a
function of t alone and the carry and key are checkpointed, so a run killed at any moment and
rerun gives the same params, metrics and summary, bit for bit.
"""

import math
import pathlib
import time
from typing import Any, Callable, NamedTuple, Sequence

from absl import logging
import jax
import jax.numpy as jnp
from ml_collections import ConfigDict
import numpy as np
import optax

from rnnjax import diagnostics
from rnnjax import initializers
from rnnjax import lyapunov
from rnnjax.train import checkpoints
from rnnjax.train import devices
from rnnjax.train import optimizers
from rnnjax.train import records
from rnnjax.train import run_folder

__all__ = ['Task', 'TrainState', 'Interrupted', 'Programs', 'initial_state', 'train', 'cadences',
           'plateau', 'host_spectral_radii', 'LOGGED', 'TOTALS']


class Task(NamedTuple):
  """An experiment's data, model and loss; ``batch`` is the same for every run of a group."""
  init: Callable  # init(config, key) -> params pytree of one run
  loss: Callable  # loss(params, carry, batch, key) -> (<float32>[] in loss_unit, carry)
  batch: Callable  # batch(step >= 1) -> pytree of numpy arrays
  carry: Any = ()  # the initial carry of one run (truncated BPTT's state); () for none
  probe: Callable | None = None  # probe(params, carry, batch) -> diagnostics.Probe
  recurrent_weight: Callable | None = None  # recurrent_weight(params) -> <float32>[H, H]
  report: Callable | None = None  # report(config, params) -> dict for summary.json (evaluation)
  artifacts: dict = {}  # file name -> bytes the run folder keeps (e.g. a tokenizer's model)
  solved: Callable | None = None  # solved(config, params) -> bool: the run stops, solved
  solved_every: int = 0  # steps between the checks of ``solved``
  validate: Callable | None = None  # validate(config, params) -> held-out loss (nats), host
  loss_unit: str = 'nats'  # the loss's unit: 'nats' (then also bits) or another, as named


# The metrics, as data: name -> (the step's quantity, its reduction over the steps of a
# logged interval (LOGGED, a metrics.jsonl line) or of the run (TOTALS, the summary)). A
# quantity counts only at the steps where it is valid; 'mean' is sum / count, 'max' skips NaN.
LOGGED = {'loss': ('loss', 'mean'), 'grad_norm': ('grad_norm', 'last'),
          'max_grad_norm': ('grad_norm', 'max'), 'clipped': ('clipped', 'last'),
          'clipped_fraction': ('clipped', 'mean'), 'update_norm': ('update_norm', 'last'),
          'skipped': ('skipped', 'sum')}
TOTALS = {'steps_done': ('taken', 'sum'), 'skipped_steps': ('skipped', 'sum'),
          'clipped_fraction': ('clipped', 'mean'), 'max_grad_norm': ('grad_norm', 'max')}
Metrics = dict[str, Any]  # name -> <float32>[R], or for 'mean' (sum, count)


class TrainState(NamedTuple):
  """Everything a group's training needs to continue; leaves have a leading run axis R."""
  params: Any
  opt_state: Any
  carry: Any  # the recurrent carry after the last step
  key: jax.Array  # <uint32>[R, 2]: key data of each run's training key
  step: Any  # <int32>[]: steps done, shared by the group (None inside the vmapped step)
  stopped: jax.Array  # <int32>[R]: the step a run stopped at (diverged or solved), 0: going on
  diverged: jax.Array  # <bool>[R]: whether it stopped by a non-finite step
  flossing_weight: jax.Array  # <float32>[R]: each run's config.flossing_weight
  validation: jax.Array  # <float32>[R]: the last validation loss (nats; NaN before the first)
  decaying: jax.Array  # <bool>[R]: the plateau rule has begun to decay the learning rate
  converged: jax.Array  # <bool>[R]: stopped by the plateau rule
  interval: Metrics  # LOGGED accumulators since the last logged step
  totals: Metrics  # TOTALS accumulators of the whole run


class Interrupted(Exception):
  """Training stopped on request at a step; a checkpoint of that step was saved."""


def _zeros(spec: dict, runs: int) -> Metrics:
  zeros = lambda: jnp.zeros((runs,), jnp.float32)  # distinct buffers: the state is donated
  return {name: (zeros(), zeros()) if reduction == 'mean' else zeros()
          for name, (_, reduction) in spec.items()}


def _accumulate(accumulators: Metrics, spec: dict, quantities: dict) -> Metrics:
  """One step's quantities (name -> (value, valid)) folded into the accumulators."""
  out: Metrics = {}
  for name, (quantity, reduction) in spec.items():
    value, valid = quantities[quantity]
    value, old = jnp.asarray(value, jnp.float32), accumulators[name]
    if reduction == 'mean':
      out[name] = (old[0] + jnp.where(valid, value, 0.0), old[1] + valid)
    elif reduction == 'sum':
      out[name] = old + jnp.where(valid, value, 0.0)
    elif reduction == 'max':
      out[name] = jnp.where(valid & ~jnp.isnan(value), jnp.maximum(old, value), old)
    else:  # 'last'
      out[name] = jnp.where(valid, value, old)
  return out


def _reduced(accumulators: Metrics, spec: dict, i: int) -> dict[str, float]:
  """Host values of run i's accumulators: 'mean' as sum / count (NaN for no steps)."""
  mean = lambda total, count: float(total[i]) / float(count[i]) if count[i] else math.nan
  return {name: mean(*accumulators[name]) if reduction == 'mean' else float(accumulators[name][i])
          for name, (_, reduction) in spec.items()}


def _stack(trees: Sequence[Any]) -> Any:
  return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


def _unstack(tree: Any, count: int) -> list:
  """The R pytrees of a pytree whose leaves have a leading run axis."""
  return [jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], tree) for i in range(count)]


def _run(state: TrainState, i: int) -> TrainState:
  """Run i of a group's state (the step is shared)."""
  one = jax.tree_util.tree_map(lambda leaf: leaf[i], state._replace(step=None))
  return one._replace(step=state.step)


def _all_finite(tree: Any) -> jax.Array:
  return jax.tree_util.tree_reduce(lambda finite, leaf: finite & jnp.all(jnp.isfinite(leaf)),
                                   tree, jnp.bool_(True))


def initial_state(task: Task, configs: Sequence[ConfigDict]) -> TrainState:
  """The state at step 0 of a group: each run's params from ``task.init`` with its
  own config and seed, its optimizer from its config, the task's initial carry."""
  params, opt_states, keys = [], [], []
  for config in configs:
    init_key, train_key = jax.random.split(jax.random.key(config.seed))
    params.append(task.init(config, init_key))
    opt_states.append(optimizers.from_config(config).init(params[-1]))
    keys.append(jax.random.key_data(train_key))
  runs = len(configs)
  return TrainState(
      _stack(params), _stack(opt_states), _stack([task.carry] * runs), jnp.stack(keys),
      jnp.zeros([], jnp.int32), jnp.zeros((runs,), jnp.int32), jnp.zeros((runs,), bool),
      jnp.array([c.flossing_weight for c in configs], jnp.float32),
      jnp.full((runs,), jnp.nan, jnp.float32), jnp.zeros((runs,), bool),
      jnp.zeros((runs,), bool), _zeros(LOGGED, runs), _zeros(TOTALS, runs))


class Programs:
  """The compiled programs of one task, owned by whoever trains it (drop it, they go).

  ``step(state, batch) -> state``: the vmapped group step (the module docstring's rule).
  ``measure(state, batch) -> (recurrent weights <float32>[R, H, H] (or [R] of NaN), profile
  <float32>[R, len(PROFILE_DISTANCES)], largest Lyapunov exponent <float32>[R])`` of the params
  and carry a step starts from. ``compiled`` compiles each once a batch shape (``compile_seconds``).
  """

  def __init__(self, task: Task, config: ConfigDict):
    self.step = jax.jit(_step_function(task, config), donate_argnums=0)
    self.measure = jax.jit(_measure_function(task, config.measure_lyapunov))
    self.executables: dict[tuple, Any] = {}
    self.compile_seconds = 0.0

  def compiled(self, name: str, state: TrainState, batch: Any) -> Any:
    """The executable of ``name`` ('step' or 'measure') for this batch's shapes."""
    key = (name, tuple((np.shape(leaf), str(getattr(leaf, 'dtype', type(leaf))),
                        str(getattr(leaf, 'sharding', '')))
                       for leaf in jax.tree_util.tree_leaves(batch)))
    if key not in self.executables:
      started = time.perf_counter()
      self.executables[key] = getattr(self, name).lower(state, batch).compile()
      self.compile_seconds += time.perf_counter() - started
    return self.executables[key]


def _step_function(task: Task, config: ConfigDict) -> Callable:
  """The group step of ``task.loss`` with ``config``'s optimizer, divergence rule and flossing."""
  update = optimizers.from_config(config).update
  judge_by_update = optimizers.handles_non_finite(config.clipping)
  flossing_steps, probe_fn = config.flossing_steps, task.probe
  if config.flossing_weight > 0 and probe_fn is None:
    raise ValueError('config.flossing_weight: expected 0 for a task without a probe (flossing '
                     'needs its cell and inputs)')

  def objective(params: Any, carry: Any, batch: Any, key: jax.Array, step: jax.Array,
                flossing_weight: jax.Array) -> tuple:
    value, new_carry = task.loss(params, carry, batch, key)
    if not config.flossing_weight > 0 or probe_fn is None:
      return value, (value, new_carry)

    def floss() -> jax.Array:
      probe = probe_fn(params, carry, batch)
      return lyapunov.flossing_loss(probe.cell, probe.params, probe.inputs, probe.initial_state,
                                    config.flossing_exponents, lengths=probe.lengths)
    applies = (step <= flossing_steps) if flossing_steps else True
    term = jax.lax.cond(applies, floss, lambda: jnp.zeros([], jnp.float32))
    return value + flossing_weight * term, (value, new_carry)

  def one_run(state: TrainState, batch: Any, step: jax.Array) -> TrainState:
    params, opt_state, carry = state.params, state.opt_state, state.carry
    key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
    (_, (value, new_carry)), grads = jax.value_and_grad(objective, has_aux=True)(
        params, carry, batch, key, step, state.flossing_weight)
    updates, new_opt_state = update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    measured = optimizers.measurements(new_opt_state)
    gradient_finite = True if judge_by_update else jnp.isfinite(measured['grad_norm'])
    finite = (jnp.isfinite(value) & gradient_finite & _all_finite(new_params) &
              _all_finite(new_carry))
    active = state.stopped == 0
    keep = lambda new, old: optax.tree_utils.tree_where(finite & active, new, old)
    stops = active & ~finite & (config.on_divergence == 'stop')
    taken = active & ~stops  # this step counts as taken (applied or skipped)
    quantities = {'loss': (value, taken & finite),
                  'grad_norm': (measured['grad_norm'], taken),
                  'clipped': (finite & measured['clipped'], taken),
                  'update_norm': (measured['update_norm'], taken),
                  'skipped': (~finite, taken),
                  'taken': (taken, True)}
    return state._replace(
        params=keep(new_params, params), opt_state=keep(new_opt_state, opt_state),
        carry=keep(new_carry, carry), stopped=jnp.where(stops, step, state.stopped),
        diverged=state.diverged | stops,
        interval=_accumulate(state.interval, LOGGED, quantities),
        totals=_accumulate(state.totals, TOTALS, quantities))

  group = jax.vmap(one_run, in_axes=(0, None, None))

  def step(state: TrainState, batch: Any) -> TrainState:
    number = state.step + 1
    return group(state._replace(step=None), batch, number)._replace(step=number)

  return step


def _measure_function(task: Task, measure_lyapunov: bool) -> Callable:
  """``Programs.measure``; rho is solved on the host (a pure_callback deadlocks CPU meshes)."""
  distances = diagnostics.PROFILE_DISTANCES
  nan = jnp.float32(jnp.nan)

  def one_run(params: Any, carry: Any, batch: Any) -> tuple:
    weight = task.recurrent_weight(params) if task.recurrent_weight else nan
    if task.probe is None:
      return weight, jnp.full((len(distances),), jnp.nan, jnp.float32), nan
    probe = task.probe(params, carry, batch)
    fitting = diagnostics.profile_distances(probe.inputs.shape[1], distances)
    ratios = diagnostics.profile(probe, fitting).astype(jnp.float32)
    padding = jnp.full((len(distances) - len(fitting),), jnp.nan, jnp.float32)
    exponent = jnp.mean(lyapunov.lyapunov_spectrum(
        probe.cell, probe.params, probe.inputs, probe.initial_state, 1,
        lengths=probe.lengths)) if measure_lyapunov else nan
    return weight, jnp.concatenate([ratios, padding]), exponent

  group = jax.vmap(one_run, in_axes=(0, 0, None))
  return lambda state, batch: group(state.params, state.carry, batch)


def host_spectral_radii(weights: np.ndarray) -> np.ndarray:
  """``<float32>[R]``: rho of each ``[H, H]`` of host ``weights [R, H, H]``, NaN for one not
  finite; ``weights`` of shape ``[R]`` (no recurrent weight) come back as they are."""
  weights = np.asarray(weights)
  if weights.ndim == 1:
    return weights.astype(np.float32)
  return np.array([initializers.host_spectral_radius(w) for w in weights], np.float32)


def plateau(loss: float, last: float, decaying: bool, threshold: float) -> tuple[bool, bool]:
  """Mikolov's learning-rate rule at one validation check: ``(decaying, converged)`` after a
  check whose validation loss is ``loss`` where the last was ``last`` (NaN: none yet).

  A check improves enough when loss (1 + threshold) < last (the first always does; a loss
  that is not finite never does). The first that does not starts the decay (the rate times
  the decay at this check and every later one); the next that does not ends the run.

  References:
    Mikolov (2012), "Statistical language models based on neural networks", PhD thesis,
    section 3.3 (the RNNLM toolkit's min_improvement, 1.003, and alpha_divide).
  """
  if math.isnan(last) or (math.isfinite(loss) and loss * (1.0 + threshold) < last):
    return decaying, False
  return True, decaying


def _profile(values: np.ndarray) -> dict[str, float]:
  return {str(k): float(v) for k, v in zip(diagnostics.PROFILE_DISTANCES, values)
          if not math.isnan(v)}


def cadences(task: Task, config: ConfigDict, step: int) -> dict[str, bool]:
  """Which of the loop's actions 'validate', 'log', 'solved' and 'checkpoint' are due at ``step``
  (1 to ``config.steps``), as big_vision's itstime: each every its ``*_every`` steps (0: never),
  'log' also at step 1, every validation and the last step, 'checkpoint' also at the last."""
  every = lambda period: bool(period) and step % period == 0
  last = step == config.steps
  validate = every(config.validate_every if task.validate else 0)
  return {'validate': validate, 'log': validate or step == 1 or every(config.log_every) or last,
          'solved': every(task.solved_every if task.solved else 0),
          'checkpoint': every(config.checkpoint_every) or last}


class _Group:
  """A group's training but its loop: placement, checkpoints, metrics, actions, seconds."""

  def __init__(self, task: Task, configs: Sequence[ConfigDict],
               folders: Sequence[pathlib.Path] | None, writer: bool, programs: Programs):
    self.task, self.configs, self.runs, self.programs = task, configs, len(configs), programs
    self.where = devices.placement(configs[0].get('layout', 'auto'), self.runs, task.batch(1))
    self.paths, self.writer = list(folders or ()), writer and folders is not None
    self.stores, self.boards, self.seconds = list[Any](), list[Any](), dict[str, float]()
    self.lines: list[list[dict]] = [[] for _ in range(self.runs)]
    self.mark, self.compiled_before = time.perf_counter(), programs.compile_seconds

  def charge(self, phase: str | None) -> None:
    """The time since the last charge, to ``phase`` (None: to no phase)."""
    now = time.perf_counter()
    if phase:
      self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self.mark
    self.mark = now

  def start(self, state: TrainState) -> tuple[TrainState, int]:
    """The state on the devices, restored from checkpoints, and its step; opens the writers."""
    resumed = 0
    if self.paths:
      self.stores = [checkpoints.manager(folder) for folder in self.paths]
      target = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(
          x.shape, x.dtype, sharding=devices.replicated(self.where)), _run(state, 0))
      resumed, restored = checkpoints.restore_group(self.paths, target)
      if resumed:
        state = devices.to_host(_stack([s._replace(step=None) for s in restored])._replace(
            step=restored[0].step))
    if self.writer:
      self.lines = [records.cut_metrics(folder, resumed) for folder in self.paths]
      # resumed + 1 from step 0 too: a start killed before its first checkpoint left events
      self.boards = [records.tensorboard(folder, resumed + 1) for folder in self.paths]
    state = devices.place_state(self.where, state)
    where = devices.describe(self.where)
    logging.info('%d run(s) on %s', self.runs, where)
    group = 'alone' if self.runs == 1 else f'in a vmapped group of {self.runs} runs'
    for folder in self.paths:
      if resumed:  # in each run's own log
        logging.info('resumed %d run(s) from the checkpoint of step %d', self.runs, resumed,
                     extra=run_folder.about(folder))
      moved = records.record_devices(folder, where, resumed, group) if self.writer else None
      if moved:
        logging.warning('%s', moved, extra=run_folder.about(folder))
    self.charge('setup')
    return state, resumed

  def stopped(self, state: TrainState) -> bool:
    """Whether every run has stopped (diverged, solved, converged)."""
    return bool(np.all(devices.to_host(state.stopped)))

  def step(self, state: TrainState, step: int, due: dict[str, bool]) -> tuple[TrainState, bool]:
    """Step ``step`` and its ``due`` actions but the checkpoint: (state, all stopped)."""
    batch = devices.place_batch(self.where, self.task.batch(step))
    self.charge('train_steps')
    step_executable = self.programs.compiled('step', state, batch)
    if due['log']:
      self.programs.compiled('measure', state, batch)
    self.charge(None)  # compilation: ``programs.compile_seconds``
    measured = None
    if due['log']:  # measured on the params and carry this step starts from
      jax.block_until_ready(state)
      self.charge('train_steps')
      measured = self.measure(state, batch)
      self.charge('metrics')
    state = step_executable(state, batch)
    if due['log'] or devices.needs_one_step_at_a_time(self.where):
      jax.block_until_ready(state)
    if not (due['log'] or due['solved']):
      return state, False
    self.charge('train_steps')
    state = self.act(state, step, due, measured)
    all_stopped = self.stopped(state)
    self.charge('metrics')
    return state, all_stopped

  def save(self, state: TrainState, step: int) -> None:
    """Checkpoints each run's whole state at ``step``."""
    self.charge('train_steps')
    host = devices.to_host(state)
    for i, store in enumerate(self.stores):
      checkpoints.save(store, step, _run(host, i))
    self.charge('checkpoint')

  def measure(self, state: TrainState, batch: Any) -> tuple:
    """``Programs.measure`` on the host, the spectral radii solved there."""
    weights, profile, exponent = devices.to_host(
        self.programs.compiled('measure', state, batch)(state, batch))
    return host_spectral_radii(weights), profile, exponent

  def say(self, i: int, line: str) -> None:
    """Logs a line about run i, into its own log (``run_folder.about``)."""
    logging.info('%s%s', f'run {i}: ' if self.runs > 1 else '', line,
                 extra=run_folder.about(self.paths[i] if self.paths else None))

  def act(self, state: TrainState, step: int, due: dict[str, bool], measured: tuple | None
          ) -> TrainState:
    """Validates each going run, logs it, stops the solved and follows ``plateau``, in order."""
    hyper = dict(state.opt_state.hyperparams)
    stopped, last, decaying, converged, rate = (np.array(a) for a in devices.to_host((
        state.stopped, state.validation, state.decaying, state.converged, hyper['learning_rate'])))
    going = [i for i in range(self.runs) if not stopped[i]]
    params = _unstack(devices.to_host(state.params), self.runs) if (
        due['validate'] or due['solved']) else []
    validation: dict[int, float] = {}
    if due['validate']:
      assert self.task.validate is not None  # the 'validate' cadence is never due without it
      validation = {i: float(self.task.validate(self.configs[i], params[i])) for i in going}
    if measured is not None:
      self.log(devices.to_host(state.interval), going, step, measured, validation, rate)
      state = state._replace(interval=jax.tree_util.tree_map(jnp.zeros_like, state.interval))
    for i in going if due['solved'] else []:
      assert self.task.solved is not None  # the 'solved' cadence is never due without it
      if self.task.solved(self.configs[i], params[i]):
        stopped[i] = step
        self.say(i, f'solved at step {step}')
    for i, loss in validation.items():
      if self.configs[i].plateau_decay < 1:
        decaying[i], converged[i] = plateau(loss, float(last[i]), bool(decaying[i]),
                                            self.configs[i].plateau_threshold)
        if converged[i]:
          stopped[i] = step
          self.say(i, f'converged at step {step}')
        elif decaying[i]:
          rate[i] *= np.float32(self.configs[i].plateau_decay)
      last[i] = loss
    hyper['learning_rate'] = devices.put_like(rate, hyper['learning_rate'])
    return state._replace(
        opt_state=state.opt_state._replace(hyperparams=hyper),
        validation=devices.put_like(last, state.validation),
        decaying=devices.put_like(decaying, state.decaying),
        converged=devices.put_like(converged, state.converged),
        stopped=devices.put_like(stopped, state.stopped))

  def log(self, interval: Metrics, going: list[int], step: int, measured: tuple,
          validation: dict[int, float], rate: np.ndarray) -> None:
    """Each going run's metrics line (``train``'s docstring) from the host ``interval``."""
    radius, profile, exponent = measured
    for i in going:
      values = _reduced(interval, LOGGED, i)
      line = {'step': step, 'loss': values['loss'],
              **({'bits': values['loss'] / math.log(2)} if self.task.loss_unit == 'nats' else {}),
              **values, 'clipped': bool(values['clipped']), 'skipped': int(values['skipped']),
              'measured_spectral_radius': float(radius[i]), 'profile': _profile(profile[i])}
      if not math.isnan(exponent[i]):
        line['largest_lyapunov_exponent'] = float(exponent[i])
      if i in validation:  # the rate the steps up to this one took
        line.update(validation_loss=validation[i], learning_rate=float(rate[i]))
      self.lines[i].append(line)
      if self.writer:
        records.append_metrics(self.paths[i], line)
        records.write_scalars(self.boards[i], line)
      self.say(i, f'step {step}/{self.configs[0].steps}  loss {line["loss"]:.4f} '
               f'{self.task.loss_unit}' + (f' ({line["bits"]:.3f} bits)' if 'bits' in line else '')
               + f'  grad norm {line["grad_norm"]:.3g}'
               + (f'  skipped {line["skipped"]}' if line['skipped'] else ''))

  def finish(self, state: TrainState, step: int) -> tuple[list, list[dict], dict[str, float]]:
    """``train``'s return value (the params measured on ``step``'s batch); closes the writers."""
    jax.block_until_ready(state)
    self.charge('train_steps')
    final = (np.full((self.runs,), np.nan, np.float32),
             np.full((self.runs, len(diagnostics.PROFILE_DISTANCES)), np.nan, np.float32),
             np.full((self.runs,), np.nan, np.float32))
    if self.task.probe or self.task.recurrent_weight:  # the saved params, measured
      final = self.measure(state, devices.place_batch(self.where, self.task.batch(max(step, 1))))
    self.charge('metrics')
    self.seconds['compile'] = self.programs.compile_seconds - self.compiled_before
    for closable in self.stores + self.boards:
      closable.close()
    host = devices.to_host(state)
    validated = self.configs[0].validate_every and self.task.validate
    out = []
    for i in range(self.runs):
      totals, stopped_at = _reduced(host.totals, TOTALS, i), int(host.stopped[i])
      diverged, converged = bool(host.diverged[i]), bool(host.converged[i])
      start, last = (self.lines[i][0], self.lines[i][-1]) if self.lines[i] else ({}, {})
      out.append({
          'status': 'diverged' if diverged else 'finished',
          'steps_done': int(totals['steps_done']),
          'diverged_step': stopped_at if diverged else None,
          'solved_step': stopped_at if stopped_at and not (diverged or converged) else None,
          **({'converged_step': stopped_at if converged else None,
              'validation_loss': float(host.validation[i]),
              'final_learning_rate': float(host.opt_state.hyperparams['learning_rate'][i])}
             if validated else {}),
          'skipped_steps': int(totals['skipped_steps']),
          'clipped_fraction': float(np.nan_to_num(totals['clipped_fraction'])),  # no step: 0
          'max_grad_norm': totals['max_grad_norm'],
          'train_loss': last.get('loss', math.nan), 'loss_unit': self.task.loss_unit,
          **({'train_loss_nats': last.get('loss', math.nan),
              'train_loss_bits': last.get('bits', math.nan)}
             if self.task.loss_unit == 'nats' else {}),
          'final_measured_spectral_radius': float(final[0][i]),
          'first_profile': start.get('profile', {}),
          'first_largest_lyapunov_exponent': start.get('largest_lyapunov_exponent'),
          'final_largest_lyapunov_exponent': (None if math.isnan(final[2][i])
                                              else float(final[2][i])),
          'final_profile': _profile(final[1][i]),
      })
    return _unstack(host.params, self.runs), out, self.seconds


def train(task: Task, configs: Sequence[ConfigDict], folders: Sequence[pathlib.Path] | None = None,
          writer: bool = True, stop_requested: Callable[[], bool] | None = None,
          programs: Programs | None = None, on_progress: Callable[[int], None] | None = None
          ) -> tuple[list, list[dict], dict[str, float]]:
  """Trains a group of runs to ``config.steps``, resuming from their checkpoints.

  Every logged step (``cadences``) appends to each run's metrics.jsonl and TensorBoard events: loss
  (in the task's ``loss_unit``, mean of the finite steps since the last line), bits (for a loss in
  nats), grad_norm (pre-clip global norm), max_grad_norm, clipped (this step), clipped_fraction,
  update_norm, skipped (since the last line), measured_spectral_radius and the gradient-norm profile
  {k: ||dL/dh_{T-k}|| / ||dL/dh_T||} of the params and carry the step started from, and at a
  validation the validation_loss and learning_rate. A stopped run gets no more lines.

  Args:
    task: the experiment's ``Task``.
    configs: R configs of one group (the first gives steps, cadences and the optimizer chain).
    folders: R run folders, locked and prepared; None: nothing is read or written.
    writer: whether this process writes metrics and TensorBoard (process 0).
    stop_requested: called after every step; True: checkpoint and raise ``Interrupted``.
    programs: the task's compiled ``Programs`` (made here when None).
    on_progress: called with the step after every step.

  Returns:
    ``(params, records, seconds)``: R final params (the last finite ones, those saved), R dicts
    (status 'finished' or 'diverged', steps_done, diverged_step, solved_step, with validations
    converged_step, validation_loss and final_learning_rate, skipped_steps, clipped_fraction,
    max_grad_norm, train_loss and loss_unit of the last logged interval (for nats also
    train_loss_nats and train_loss_bits), first_profile at initialization,
    final_measured_spectral_radius and final_profile of the saved params on the last batch, and the
    largest Lyapunov exponent first and final) and the seconds per phase.

  Raises:
    Interrupted: when ``stop_requested`` said so (after checkpointing).
    checkpoints.CheckpointError: a checkpoint unreadable for a reason other than damage.
  """
  first = configs[0]
  group = _Group(task, configs, folders, writer, programs or Programs(task, first))
  state, step = group.start(initial_state(task, configs))
  all_stopped = bool(step) and group.stopped(state)
  while step < first.steps and not all_stopped:
    step += 1
    due = cadences(task, first, step)
    state, all_stopped = group.step(state, step, due)
    if due['checkpoint'] or all_stopped:
      group.save(state, step)
    if on_progress is not None:
      on_progress(step)
    if stop_requested is not None and stop_requested() and not all_stopped:
      group.save(state, step)
      raise Interrupted(f'stopped on request after step {step}; a checkpoint of it was saved')
  return group.finish(state, step)
