"""A plain training loop for padded-batch tasks: a loss, an optax optimizer, batches.

Used by the BPE language model, the classifiers and seq2seq, whose batches
are independent (no state carried between steps). The step is jitted once
per (loss function, batch shape). Losses are in nats.
"""

import json
import math
import pathlib
import shutil
import time

from absl import logging
import jax
import numpy as np
import optax
import orbax.checkpoint as ocp

from rnnjax.train import optimizers


def fit(loss_fn, params, optimizer, batches, steps: int, key, *, clipping: str = 'global_norm',
        on_divergence: str = 'stop', log_every: int = 100, workdir=None):
  """Runs ``steps`` optimizer steps of ``loss_fn`` over ``batches``.

  Every ``log_every`` steps (and at the first and last) it logs the mean
  loss since the last line, the pre-clip global gradient norm and steps
  per second, and with a workdir appends them as a JSON line to
  ``<workdir>/metrics.jsonl``; at the end it writes an orbax checkpoint of
  the params to ``<workdir>/checkpoint`` (replacing an earlier run's; atomic: orbax writes to a
  temporary folder and renames it). A non-finite loss with
  on_divergence='stop' ends the run at the log line that sees it and
  returns the params of the last finite log line; with 'skip' (and an
  optimizer built with on_divergence='skip', which does not apply
  non-finite updates) training goes on and the skipped steps are counted,
  and it ends the same way only if the params themselves turn non-finite
  (for example with an optimizer that was not built to skip). Batches that
  run out before ``steps`` end the run there, with a warning.

  Args:
    loss_fn: ``loss_fn(params, batch, key) -> scalar`` mean loss in nats;
      ``key`` is a fresh ``jax.random`` key per step (for dropout).
    params: initial params pytree.
    optimizer: an ``optimizers.make_optimizer`` result.
    batches: an iterable of batches (pytrees of arrays; each distinct
      shape compiles the step once).
    steps: number of steps, >= 1.
    key: ``jax.random`` key, split once per step.
    clipping: the optimizer's clipping, to report whether a step clipped.
    on_divergence: 'stop' or 'skip' as above.
    log_every: steps between log lines, >= 1.
    workdir: folder for metrics and the checkpoint, or None.

  Returns:
    ``(params, record)`` with record keys steps_done, diverged,
    diverged_step, skipped_steps, final_train_loss (nats, mean of the last
    log interval), clipped_fraction and seconds.

  Raises:
    ValueError: for steps or log_every < 1, an unknown on_divergence or clipping.
  """
  for name, value in (('steps', steps), ('log_every', log_every)):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f'{name}: expected an int >= 1, got {value!r}')
  if on_divergence not in optimizers.ON_DIVERGENCE:
    raise ValueError(f'on_divergence: expected one of {optimizers.ON_DIVERGENCE}, '
                     f'got {on_divergence!r}')
  if clipping not in optimizers.CLIPPINGS:
    raise ValueError(f'clipping: expected one of {optimizers.CLIPPINGS}, got {clipping!r}')

  @jax.jit
  def step(params, opt_state, batch, key):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch, key)
    clipped = optimizers.was_clipped(grads, clipping, opt_state.hyperparams['clip_threshold'])
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, {
        'loss': loss, 'grad_norm': optax.tree.norm(grads), 'clipped': clipped}

  metrics_path = None
  if workdir is not None:
    pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
    metrics_path = pathlib.Path(workdir) / 'metrics.jsonl'
    metrics_path.unlink(missing_ok=True)
    shutil.rmtree(pathlib.Path(workdir) / 'checkpoint', ignore_errors=True)  # a rerun starts afresh
  record = {'steps_done': 0, 'diverged': False, 'diverged_step': None, 'skipped_steps': 0,
            'final_train_loss': math.nan, 'clipped_fraction': 0.0, 'seconds': 0.0}
  opt_state = optimizer.init(params)
  batches = iter(batches)
  good_params, pending, clipped_total = params, [], 0
  started = interval_start = time.perf_counter()
  for number in range(1, steps + 1):
    key, step_key = jax.random.split(key)
    try:
      batch = next(batches)
    except StopIteration:
      logging.warning('batches: ran out after %d of steps=%d batches; the run ends there',
                      number - 1, steps)
      if not pending:
        break
      batch, number = None, number - 1
    if batch is not None:
      params, opt_state, metrics = step(params, opt_state, batch, step_key)
      pending.append(metrics)
      if not (number % log_every == 0 or number in (1, steps)):
        continue
    interval, pending = jax.device_get(pending), []
    now = time.perf_counter()
    losses = np.array([m['loss'] for m in interval])
    finite = np.isfinite(losses)
    params_finite = all(bool(np.isfinite(leaf).all())
                        for leaf in jax.tree_util.tree_leaves(jax.device_get(params)))
    if not finite.all() or not params_finite:
      record['skipped_steps'] += int((~finite).sum())
      if on_divergence == 'stop' or not params_finite:
        record['diverged'] = True
        record['diverged_step'] = number - len(interval) + 1 + int(np.argmin(finite))
        logging.warning('diverged: non-finite %s at step %d; stopping (on_divergence=%s), '
                        'keeping the params of step %d', 'loss' if params_finite else 'params',
                        record['diverged_step'], on_divergence, record['steps_done'])
        params = good_params
        break
      logging.warning('non-finite loss at %d steps up to step %d; updates skipped '
                      '(on_divergence=skip)', int((~finite).sum()), number)
    good_params = params
    clipped_total += int(sum(bool(m['clipped']) for m in interval))
    record['steps_done'] = number
    record['final_train_loss'] = float(losses[finite].mean()) if finite.any() else math.nan
    line = {'step': number, 'loss': record['final_train_loss'],
            'grad_norm': float(interval[-1]['grad_norm']),
            'clipped_fraction': float(np.mean([m['clipped'] for m in interval])),
            'steps_per_second': len(interval) / (now - interval_start),
            'elapsed_seconds': now - started}
    interval_start = now
    logging.info('step %d/%d  loss %.4f nats  grad norm %.3g  %.1f steps/s', number, steps,
                 line['loss'], line['grad_norm'], line['steps_per_second'])
    if metrics_path is not None:
      with open(metrics_path, 'a') as f:
        f.write(json.dumps(line) + '\n')
    if batch is None:
      break
  record['clipped_fraction'] = clipped_total / max(record['steps_done'], 1)
  record['seconds'] = time.perf_counter() - started
  if workdir is not None:
    with ocp.CheckpointManager(
        pathlib.Path(workdir).absolute() / 'checkpoint',
        options=ocp.CheckpointManagerOptions(max_to_keep=1,
                                             enable_async_checkpointing=False)) as manager:
      manager.save(record['steps_done'], args=ocp.args.StandardSave({'params': params}))
  return params, record
