"""Training a language model with truncated BPTT over a token stream.

One training step is one window of tau steps from each of B parallel
streams (``rnnjax.data.text.stream_windows``). The state passes from window
to window as a value only: it enters the next jitted step as an input, so
the gradient stops at the window boundary (truncated BPTT, seed note 001).
It is reset to zero at the start of every pass over the stream.

Runs that share every shape and the optimizer's structure (they may differ
in initial params, learning rate and clip threshold) train together as a
group: one ``jax.vmap``ped step over the stacked runs, on the same windows.
A single run is a group of one. Each step function compiles once per
(model, optimizer structure, shape).

Units: losses are in nats per token; bits per token = nats / ln 2.
"""

import dataclasses
import functools
import json
import math
import os
import pathlib
import time

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import initializers
from rnnjax.train import optimizers


def cross_entropy(logits, targets):
  """Mean negative log-likelihood in nats: ``[B, T, V], <int>[B, T] -> scalar``."""
  return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def masked_nll(logits, targets, mask):
  """Summed NLL in nats over the positions where ``mask`` is true, and their count.

  Args:
    logits: ``<float32>[B, T, V]``.
    targets: ``<int32>[B, T]``.
    mask: ``<bool>[B, T]``, false at padding (excluded from the loss, as
      ``ignore_index`` in seed note 000).

  Returns:
    ``(nll_sum <float32>[], count <float32>[])``; the token-weighted mean NLL
    is their ratio.

  Raises:
    ValueError: for targets or mask not of shape ``[B, T]`` = logits' leading
      axes, a mask that is not boolean, or (when concrete) target ids
      outside [0, V).
  """
  if jnp.shape(targets) != logits.shape[:-1] or jnp.shape(mask) != logits.shape[:-1]:
    raise ValueError(f'targets, mask: expected shape [B, T] = {logits.shape[:-1]} (logits are '
                     f'{logits.shape}), got {jnp.shape(targets)} and {jnp.shape(mask)}')
  if jnp.result_type(mask) != jnp.bool_:
    raise ValueError(f'mask: expected dtype bool, got {jnp.result_type(mask)}')
  if not isinstance(targets, jax.core.Tracer) and jnp.size(targets):
    low, high = int(jnp.min(targets)), int(jnp.max(targets))
    if low < 0 or high >= logits.shape[-1]:
      raise ValueError(f'targets: expected ids in [0, V) = [0, {logits.shape[-1]}), got min '
                       f'{low} and max {high}')
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  return jnp.sum(jnp.where(mask, nll, 0.0)), jnp.sum(mask).astype(jnp.float32)


def perplexity(nll_sum: float, count: float, max_loss: float = 20.0) -> float:
  """exp of the token-weighted mean NLL; inf when that mean exceeds ``max_loss`` nats
  (never an overflow; seed note 000 caps at 20) or is not finite.

  Args:
    nll_sum: summed NLL in nats over ``count`` predicted tokens.
    count: number of predicted tokens (> 0).
    max_loss: nats per token above which the perplexity is reported as inf.

  Returns:
    the perplexity, a Python float in [1, inf].

  Raises:
    ValueError: for count <= 0 or nll_sum < 0.
  """
  if not count > 0:
    raise ValueError(f'count: expected a number of tokens > 0, got {count!r}')
  if float(nll_sum) < 0:
    raise ValueError(f'nll_sum: expected a summed negative log-likelihood >= 0, got {nll_sum!r}')
  mean = float(nll_sum) / float(count)
  return math.exp(mean) if math.isfinite(mean) and mean <= max_loss else math.inf


@dataclasses.dataclass(frozen=True)
class LoopSettings:
  """How the truncated-BPTT loop runs and what it records.

  Attributes:
    steps: number of training steps (windows).
    clipping: as in ``optimizers.make_optimizer``; says how to report
      whether a step was clipped (the threshold is the optimizer's).
    on_divergence: 'stop' ends the run at the first non-finite loss; 'skip'
      (with an optimizer built with the same setting) skips such updates, and
      ends the run only when every step of a logging interval was
      non-finite (skipping cannot recover from non-finite params).
    log_every: steps between metric lines (and gradient-norm profiles).
    profile_distances: k for ||dL/dh_{T-k}|| / ||dL/dh_T||.
    checkpoint_every: steps between checkpoints (0: only at the end); a
      multiple of log_every, since checkpoints are written after the
      divergence check of a logged step.
  """
  steps: int
  clipping: str = 'none'
  on_divergence: str = 'stop'
  log_every: int = 100
  profile_distances: tuple[int, ...] = diagnostics.PROFILE_DISTANCES
  checkpoint_every: int = 0

  def __post_init__(self):
    for name in ('steps', 'log_every'):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f'{name}: expected an int >= 1, got {value!r}')
    if self.clipping not in optimizers.CLIPPINGS:
      raise ValueError(f'clipping: expected one of {optimizers.CLIPPINGS}, got {self.clipping!r}')
    if (not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 0 or
        self.checkpoint_every % self.log_every):
      raise ValueError(f'checkpoint_every: expected 0 or a multiple of log_every={self.log_every}, '
                       f'got {self.checkpoint_every}')
    if self.on_divergence not in optimizers.ON_DIVERGENCE:
      raise ValueError(f'on_divergence: expected one of {optimizers.ON_DIVERGENCE}, '
                       f'got {self.on_divergence!r}')


@functools.lru_cache(maxsize=None)
def step_functions(model, update, clipping: str):
  """Jitted training steps for one model and one optimizer ``update``.

  Returns:
    ``(step, group_step)``: ``step(params, opt_state, carry, inputs, targets,
    key) -> (params, opt_state, carry, metrics)`` with ``inputs, targets
    <int32>[B, tau]``, ``carry [B, H]`` and ``key`` the step's dropout key;
    ``group_step`` is the same vmapped over a leading run axis of params,
    opt_state and carry (the data and the key are shared). Metrics: loss (nats), the pre-clip global gradient norm and
    whether clipping changed the gradient (at ``opt_state.hyperparams
    ['clip_threshold']``).
  """
  def loss_fn(params, carry, inputs, targets, key):
    logits, final = model.apply({'params': params}, inputs, carry, deterministic=False,
                                rngs={'dropout': key})
    return cross_entropy(logits, targets), final

  def step(params, opt_state, carry, inputs, targets, key):
    (loss, final), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, carry, inputs,
                                                                     targets, key)
    threshold = opt_state.hyperparams['clip_threshold']
    metrics = {'loss': loss, 'grad_norm': optax.tree.norm(grads),
               'clipped': optimizers.was_clipped(grads, clipping, threshold)}
    updates, opt_state = update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, final, metrics

  return jax.jit(step), jax.jit(jax.vmap(step, in_axes=(0, 0, 0, None, None, None)))


@functools.lru_cache(maxsize=None)
def group_gradient_profile(model, distances):
  """A jitted ``profile(params, carry, inputs, targets) -> [R, len(distances)]`` over a
  group of R runs (params and carry with a leading run axis).

  The loss is the window's cross-entropy at its last position, L_T; the
  profile is ||dL_T/dh_{T-k}|| / ||dL_T/dh_T|| for each k, all from one
  backward pass (``diagnostics.state_gradients``).
  """
  cell = cells.elman(model.activation)

  def profile(params, carry, inputs, targets):
    variables = {'params': params}
    embedded = model.apply(variables, inputs, method=model.embed)

    def last_step_loss(states):
      logits = model.apply(variables, states[:, -1], method=model.logits)
      return optax.softmax_cross_entropy_with_integer_labels(logits, targets[:, -1]).mean()

    _, grads = diagnostics.state_gradients(cell, params['recurrence']['cell'], embedded, carry,
                                           last_step_loss)
    return diagnostics.gradient_norm_profile(grads, distances)

  return jax.jit(jax.vmap(profile, in_axes=(0, 0, None, None)))


@functools.lru_cache(maxsize=None)
def _evaluation(model):
  @jax.jit
  def run(params, inputs, targets):
    def window(carry, batch):
      logits, carry = model.apply({'params': params}, batch[0], carry)
      return carry, cross_entropy(logits, batch[1])
    _, losses = jax.lax.scan(window, model.initial_state(inputs.shape[1]), (inputs, targets))
    return losses.mean()
  return run


def evaluate(model, params, inputs, targets) -> float:
  """Mean NLL in nats per token over a stream cut by ``stream_windows``.

  Args:
    inputs, targets: ``<int32>[W, B, tau]``; the state is carried across
      the W windows, starting from zero.

  Returns:
    nats per token (a Python float).
  """
  return float(_evaluation(model)(params, jnp.asarray(inputs), jnp.asarray(targets)))


@functools.lru_cache(maxsize=None)
def _streaming_evaluation(model):
  @jax.jit
  def run(params, ids):
    variables = {'params': params}

    def step(t, carry):
      state, total = carry
      token = jax.lax.dynamic_slice_in_dim(ids, t, 1, axis=1)  # [B, 1], read in place
      target = jax.lax.dynamic_index_in_dim(ids, t + 1, axis=1, keepdims=False)
      logits, state = model.apply(variables, token, state)
      nll = optax.softmax_cross_entropy_with_integer_labels(logits[:, 0], target)
      return state, total + jnp.sum(nll)

    _, total = jax.lax.fori_loop(0, ids.shape[1] - 1, step,
                                 (model.initial_state(ids.shape[0]), jnp.float32(0.0)))
    return total / (ids.shape[0] * (ids.shape[1] - 1))
  return run


def evaluate_streaming(model, params, ids) -> float:
  """Mean NLL in nats per token of B long streams, forward only, one step at a time.

  Memory is O(1) in the stream length: the scan keeps one state ``[B, H]``
  and a running sum, never the states of a window, so arbitrarily long text
  can be scored. Equals ``evaluate`` on the same streams cut into windows.

  Args:
    ids: ``<int32>[B, N]``: B streams of N tokens; the N - 1 next-token
      predictions of each are scored from a zero initial state.

  Returns:
    nats per token (a Python float).
  """
  return float(_streaming_evaluation(model)(params, jnp.asarray(ids)))


def _append_json_line(path: pathlib.Path, record: dict) -> None:
  with open(path, 'a') as f:
    f.write(json.dumps(record) + '\n')


def _stack(trees):
  return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *trees)


def _unstack(tree, count):
  return [jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], tree) for i in range(count)]


def train(model, params, optimizer, inputs, targets, settings: LoopSettings,
          workdir: str | os.PathLike | None = None, dropout_key=None):
  """Runs truncated BPTT over the windows of a stream: ``train_group`` for one run.

  Returns:
    ``(params, record)`` as one element of ``train_group``'s lists.
  """
  params, records = train_group(model, [params], [optimizer], inputs, targets, settings,
                                None if workdir is None else [workdir], dropout_key)
  return params[0], records[0]


def train_group(model, params, optimizers_, inputs, targets, settings: LoopSettings,
                workdirs=None, dropout_key=None):
  """Trains R runs together, one vmapped step per window, on the same windows.

  At the first step, every ``log_every`` steps and at the last it logs each
  run's step, loss and steps per second, and, if workdirs are given, appends
  one JSON line to ``<workdir>/metrics.jsonl``: step, loss (nats, mean since
  the last line), bits_per_char, grad_norm (pre-clip global norm at this
  step), max_grad_norm and clipped_fraction since the last line, clipped
  (this step), spectral_radius of W_hh and the gradient-norm profile, the
  last two measured on the params this step's gradient was taken at (before
  its update; step 1: at initialization). Orbax
  checkpoints of params and optimizer state go to ``<workdir>/checkpoint``
  (written atomically by orbax). A run whose loss turns NaN/Inf with
  on_divergence='stop' is marked diverged at that step and records nothing
  more (its lane of the vmapped step runs on, ignored); the loop ends when
  every run has diverged.

  Args:
    model: a ``LanguageModel`` (its apply; the runs' own init settings,
      such as the spectral radius, are already in their params).
    params: list of R params pytrees of that model.
    optimizers_: list of R ``optimizers.make_optimizer`` results that share
      one ``update`` (same optimizer, clipping family and divergence policy).
    inputs, targets: ``<int32>[W, B, tau]`` from ``stream_windows``.
    settings: ``LoopSettings``.
    workdirs: list of R folders, or None to write nothing.
    dropout_key: ``jax.random`` key of the model's dropout (folded with the
      step number; every run of the group gets the same masks); None: key 0.

  Returns:
    ``(params, records)``: lists of R final params and R dicts with
    steps_done, diverged, diverged_step, skipped_steps, clipped_fraction,
    max_grad_norm, final_train_loss (nats, mean of the last logged interval),
    final_spectral_radius (at the last logged step) and first_profile /
    last_profile.

  Raises:
    ValueError: if the optimizers do not share one update function or the
      list lengths differ.
  """
  runs = len(params)
  dropout_key = jax.random.key(0) if dropout_key is None else dropout_key
  if len(optimizers_) != runs or (workdirs is not None and len(workdirs) != runs):
    raise ValueError(f'optimizers_, workdirs: expected {runs} of each (one per run), got '
                     f'{len(optimizers_)} and {None if workdirs is None else len(workdirs)}')
  if any(o.update is not optimizers_[0].update for o in optimizers_):
    raise ValueError('optimizers_: expected runs that share one optimizer structure '
                     '(optimizer, clipping family, on_divergence), got several')
  windows = inputs.shape[0]
  distances = diagnostics.profile_distances(inputs.shape[2], settings.profile_distances)
  _, group_step = step_functions(model, optimizers_[0].update, settings.clipping)
  profile_fn = group_gradient_profile(model, distances)
  stacked = _stack(params)
  opt_state = _stack([o.init(p) for o, p in zip(optimizers_, params)])
  initial = jnp.zeros((runs,) + model.initial_state(inputs.shape[1]).shape, jnp.float32)
  inputs, targets = jnp.asarray(inputs), jnp.asarray(targets)
  metrics_paths, checkpoints = [None] * runs, [None] * runs
  if workdirs is not None:
    for i, workdir in enumerate(workdirs):
      metrics_paths[i] = pathlib.Path(workdir) / 'metrics.jsonl'
      metrics_paths[i].unlink(missing_ok=True)
      checkpoints[i] = ocp.CheckpointManager(
          pathlib.Path(workdir).absolute() / 'checkpoint',
          options=ocp.CheckpointManagerOptions(max_to_keep=1, enable_async_checkpointing=False))

  records = [{'steps_done': 0, 'diverged': False, 'diverged_step': None, 'skipped_steps': 0,
              'clipped_fraction': 0.0, 'max_grad_norm': 0.0, 'final_train_loss': math.nan,
              'final_spectral_radius': math.nan, 'first_profile': None, 'last_profile': None}
             for _ in range(runs)]
  clipped_totals = np.zeros(runs, np.int64)
  pending, carry = [], initial
  started = interval_start = time.perf_counter()
  for step in range(1, settings.steps + 1):
    window = (step - 1) % windows
    if window == 0:
      carry = initial
    logged = step % settings.log_every == 0 or step in (1, settings.steps)
    if logged:  # measured on the params that this step's loss and gradient come from
      profiles = profile_fn(stacked, carry, inputs[window], targets[window])
      w_hh = stacked['recurrence']['cell']['W_hh']
    stacked, opt_state, carry, metrics = group_step(stacked, opt_state, carry, inputs[window],
                                                    targets[window],
                                                    jax.random.fold_in(dropout_key, step))
    pending.append(metrics)
    if not logged:
      continue
    interval = jax.device_get(pending)
    pending = []
    now = time.perf_counter()
    steps_per_second = len(interval) / (now - interval_start)
    interval_start = now
    losses = np.array([m['loss'] for m in interval])  # [steps, R]
    norms = np.array([m['grad_norm'] for m in interval])
    clipped = np.array([m['clipped'] for m in interval])
    profiles = np.asarray(profiles)
    first_step = step - len(interval) + 1
    save = workdirs is not None and (step == settings.steps or (
        settings.checkpoint_every and step % settings.checkpoint_every == 0))
    if save:
      run_params, run_opt_states = _unstack(stacked, runs), _unstack(opt_state, runs)
    for i, record in enumerate(records):
      if record['diverged']:
        continue
      finite = np.isfinite(losses[:, i])
      if not finite.all():
        record['skipped_steps'] += int((~finite).sum())
        if settings.on_divergence == 'stop' or not finite.any():
          record['diverged'] = True
          record['diverged_step'] = first_step + int(np.argmin(finite))
          logging.warning('run %d diverged: non-finite loss at step %d; stopping it '
                          '(on_divergence=%s%s)', i, record['diverged_step'],
                          settings.on_divergence, '' if settings.on_divergence == 'stop' else
                          ': every step since the last log was non-finite, skipping cannot '
                          'recover')
          continue
        logging.warning('run %d: non-finite loss at %d steps up to step %d; updates skipped '
                        '(on_divergence=skip)', i, int((~finite).sum()), step)
      clipped_totals[i] += int(clipped[:, i].sum())
      record['max_grad_norm'] = max(record['max_grad_norm'], float(np.nanmax(norms[:, i])))
      record['steps_done'] = step
      profile = dict(zip(map(str, distances), map(float, profiles[i])))
      record['first_profile'] = record['first_profile'] or profile
      record['last_profile'] = profile
      record['final_train_loss'] = (float(np.mean(losses[finite, i])) if finite.any()
                                    else math.nan)
      record['final_spectral_radius'] = float(initializers.spectral_radius(w_hh[i]))
      line = {
          'step': step,
          'loss': record['final_train_loss'],
          'bits_per_char': record['final_train_loss'] / math.log(2),
          'grad_norm': float(norms[-1, i]),
          'max_grad_norm': float(np.nanmax(norms[:, i])),
          'clipped': bool(clipped[-1, i]),
          'clipped_fraction': float(clipped[:, i].mean()),
          'spectral_radius': record['final_spectral_radius'],
          'profile': profile,
          'steps_per_second': steps_per_second,
          'elapsed_seconds': now - started,
      }
      logging.info('%sstep %d/%d  loss %.4f nats (%.3f bits) per token  grad norm %.3g  '
                   '%.1f steps/s',
                   f'run {i}: ' if runs > 1 else '', step, settings.steps, line['loss'],
                   line['bits_per_char'], line['grad_norm'], line['steps_per_second'])
      if metrics_paths[i] is not None:
        _append_json_line(metrics_paths[i], line)
        if save:
          checkpoints[i].save(step, args=ocp.args.StandardSave(
              {'params': run_params[i], 'opt_state': run_opt_states[i]}))
    if all(r['diverged'] for r in records):
      break
  for record, total in zip(records, clipped_totals):
    record['clipped_fraction'] = int(total) / max(record['steps_done'], 1)
  for manager in checkpoints:
    if manager is not None:
      manager.wait_until_finished()
      manager.close()
  return _unstack(stacked, runs), records
