"""Training a language model with truncated BPTT over a token stream.

One training step is one window of tau steps from each of B parallel
streams (``rnnjax.data.text.stream_windows``). The state passes from window
to window as a value only: it enters the next jitted step as an input, so
the gradient stops at the window boundary (truncated BPTT, seed note 001).
It is reset to zero at the start of every pass over the stream.

Units: losses are in nats per token; bits per token = nats / ln 2.
"""

import dataclasses
import json
import math
import os
import pathlib
import time

from absl import logging
from flax.training import train_state
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


@dataclasses.dataclass(frozen=True)
class LoopSettings:
  """How the truncated-BPTT loop runs and what it records.

  Attributes:
    steps: number of training steps (windows).
    clipping, clip_threshold: as in ``optimizers.make_optimizer``; used here to
      report whether each step was clipped.
    on_divergence: 'stop' ends the run at the first non-finite loss; 'skip'
      (with an optimizer built with the same setting) skips such updates.
    log_every: steps between metric lines (and gradient-norm profiles).
    profile_distances: k for ||dL/dh_{T-k}|| / ||dL/dh_T||.
    checkpoint_every: steps between checkpoints (0: only at the end); a
      multiple of log_every, since checkpoints are written after the
      divergence check of a logged step.
  """
  steps: int
  clipping: str = 'none'
  clip_threshold: float = 1.0
  on_divergence: str = 'stop'
  log_every: int = 100
  profile_distances: tuple[int, ...] = diagnostics.PROFILE_DISTANCES
  checkpoint_every: int = 0

  def __post_init__(self):
    for name in ('steps', 'log_every'):
      if getattr(self, name) < 1:
        raise ValueError(f'{name}: expected an int >= 1, got {getattr(self, name)!r}')
    if self.checkpoint_every % self.log_every:
      raise ValueError(f'checkpoint_every: expected a multiple of log_every={self.log_every}, '
                       f'got {self.checkpoint_every}')
    if self.on_divergence not in optimizers.ON_DIVERGENCE:
      raise ValueError(f'on_divergence: expected one of {optimizers.ON_DIVERGENCE}, '
                       f'got {self.on_divergence!r}')


def make_train_step(model, clipping: str, clip_threshold: float):
  """A jitted ``step(state, carry, inputs, targets) -> (state, carry, metrics)``.

  ``inputs, targets <int32>[B, tau]``, ``carry <float32>[B, H]``; metrics hold
  the loss (nats), the pre-clip global gradient norm and whether clipping
  changed the gradient.
  """
  def loss_fn(params, carry, inputs, targets):
    logits, final = model.apply({'params': params}, inputs, carry)
    return cross_entropy(logits, targets), final

  @jax.jit
  def step(state, carry, inputs, targets):
    (loss, final), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params, carry, inputs, targets)
    metrics = {'loss': loss, 'grad_norm': optax.tree.norm(grads),
               'clipped': optimizers.was_clipped(grads, clipping, clip_threshold)}
    return state.apply_gradients(grads=grads), final, metrics

  return step


def make_gradient_profile(model, distances):
  """A jitted ``profile(params, carry, inputs, targets) -> <float32>[len(distances)]``.

  The loss is the window's cross-entropy at its last position, L_T; the
  profile is ||dL_T/dh_{T-k}|| / ||dL_T/dh_T|| for each k, all from one
  backward pass (``diagnostics.state_gradients``).
  """
  cell = cells.elman(model.activation)

  @jax.jit
  def profile(params, carry, inputs, targets):
    variables = {'params': params}
    embedded = model.apply(variables, inputs, method=model.embed)

    def last_step_loss(states):
      logits = model.apply(variables, states[:, -1], method=model.logits)
      return optax.softmax_cross_entropy_with_integer_labels(logits, targets[:, -1]).mean()

    _, grads = diagnostics.state_gradients(cell, params['recurrence']['cell'], embedded, carry,
                                           last_step_loss)
    return diagnostics.gradient_norm_profile(grads, distances)

  return profile


def evaluate(model, params, inputs, targets) -> float:
  """Mean NLL in nats per token over a stream cut by ``stream_windows``.

  Args:
    inputs, targets: ``<int32>[W, B, tau]``; the state is carried across
      the W windows, starting from zero.

  Returns:
    nats per token (a Python float).
  """
  @jax.jit
  def run(params, inputs, targets):
    def window(carry, batch):
      logits, carry = model.apply({'params': params}, batch[0], carry)
      return carry, cross_entropy(logits, batch[1])
    _, losses = jax.lax.scan(window, model.initial_state(inputs.shape[1]), (inputs, targets))
    return losses.mean()

  return float(run(params, jnp.asarray(inputs), jnp.asarray(targets)))


def _append_json_line(path: pathlib.Path, record: dict) -> None:
  with open(path, 'a') as f:
    f.write(json.dumps(record) + '\n')


def train(model, params, optimizer, inputs, targets, settings: LoopSettings,
          workdir: str | os.PathLike | None = None):
  """Runs truncated BPTT over the windows of a stream.

  At the first step, every ``log_every`` steps and at the last it logs the step, loss and
  steps per second, and, if ``workdir`` is given, appends one JSON line to
  ``workdir/metrics.jsonl``: step, loss (nats, mean since the last line),
  bits_per_char, grad_norm (pre-clip global norm at this step),
  max_grad_norm and clipped_fraction since the last line, clipped (this
  step), spectral_radius of W_hh and the gradient-norm profile. Orbax
  checkpoints of params and optimizer state go to ``workdir/checkpoint``
  (written atomically by orbax).

  Args:
    model: a ``CharLanguageModel``.
    params: its initial params.
    optimizer: an optax transformation (``optimizers.make_optimizer``).
    inputs, targets: ``<int32>[W, B, tau]`` from ``stream_windows``.
    settings: ``LoopSettings``.
    workdir: where metrics and checkpoints go; None writes nothing.

  Returns:
    ``(params, record)``: the final params and a dict with steps_done,
    diverged, diverged_step, skipped_steps, clipped_fraction, max_grad_norm,
    final_train_loss (nats, mean of the last logged interval) and
    first_profile / last_profile.
  """
  windows = inputs.shape[0]
  distances = diagnostics.profile_distances(inputs.shape[2], settings.profile_distances)
  step_fn = make_train_step(model, settings.clipping, settings.clip_threshold)
  profile_fn = make_gradient_profile(model, distances)
  state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optimizer)
  initial = model.initial_state(inputs.shape[1])
  inputs, targets = jnp.asarray(inputs), jnp.asarray(targets)
  metrics_path = checkpoints = None
  if workdir is not None:
    metrics_path = pathlib.Path(workdir) / 'metrics.jsonl'
    metrics_path.unlink(missing_ok=True)
    checkpoints = ocp.CheckpointManager(
        pathlib.Path(workdir).absolute() / 'checkpoint',
        options=ocp.CheckpointManagerOptions(max_to_keep=1, enable_async_checkpointing=False))

  record = {'steps_done': 0, 'diverged': False, 'diverged_step': None, 'skipped_steps': 0,
            'clipped_fraction': 0.0, 'max_grad_norm': 0.0, 'final_train_loss': math.nan,
            'first_profile': None, 'last_profile': None}
  pending, clipped_total, carry = [], 0, initial
  started = interval_start = time.perf_counter()
  for step in range(1, settings.steps + 1):
    window = (step - 1) % windows
    if window == 0:
      carry = initial
    window_carry = carry
    state, carry, metrics = step_fn(state, carry, inputs[window], targets[window])
    pending.append(metrics)
    if step % settings.log_every and step not in (1, settings.steps):
      continue
    interval = jax.device_get(pending)
    pending = []
    losses = np.array([m['loss'] for m in interval])
    norms = np.array([m['grad_norm'] for m in interval])
    clipped = np.array([m['clipped'] for m in interval])
    finite = np.isfinite(losses)
    first_step = step - len(interval) + 1
    if not finite.all():
      record['skipped_steps'] += int((~finite).sum())
      if settings.on_divergence == 'stop':
        record['diverged'] = True
        record['diverged_step'] = first_step + int(np.argmin(finite))
        logging.warning('diverged: non-finite loss at step %d; stopping (on_divergence=stop)',
                        record['diverged_step'])
        break
      logging.warning('non-finite loss at %d steps up to step %d; updates skipped '
                      '(on_divergence=skip)', int((~finite).sum()), step)
    clipped_total += int(clipped.sum())
    record['max_grad_norm'] = max(record['max_grad_norm'], float(np.nanmax(norms)))
    record['steps_done'] = step
    now = time.perf_counter()
    profile = dict(zip(map(str, distances),
                       map(float, profile_fn(state.params, window_carry, inputs[window],
                                             targets[window]))))
    record['first_profile'] = record['first_profile'] or profile
    record['last_profile'] = profile
    record['final_train_loss'] = float(np.mean(losses[finite])) if finite.any() else math.nan
    line = {
        'step': step,
        'loss': record['final_train_loss'],
        'bits_per_char': record['final_train_loss'] / math.log(2),
        'grad_norm': float(norms[-1]),
        'max_grad_norm': float(np.nanmax(norms)),
        'clipped': bool(clipped[-1]),
        'clipped_fraction': float(clipped.mean()),
        'spectral_radius': float(initializers.spectral_radius(
            state.params['recurrence']['cell']['W_hh'])),
        'profile': profile,
        'steps_per_second': len(interval) / (now - interval_start),
        'elapsed_seconds': now - started,
    }
    interval_start = now
    logging.info('step %d/%d  loss %.4f nats (%.3f bits/char)  grad norm %.3g  %.1f steps/s',
                 step, settings.steps, line['loss'], line['bits_per_char'], line['grad_norm'],
                 line['steps_per_second'])
    if metrics_path is not None:
      _append_json_line(metrics_path, line)
      if step == settings.steps or (settings.checkpoint_every and
                                    step % settings.checkpoint_every == 0):
        checkpoints.save(step, args=ocp.args.StandardSave(
            {'params': state.params, 'opt_state': state.opt_state}))
  record['clipped_fraction'] = clipped_total / max(record['steps_done'], 1)
  if checkpoints is not None:
    checkpoints.wait_until_finished()
    checkpoints.close()
  return state.params, record
