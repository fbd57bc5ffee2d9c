"""Success rate of an Elman network on a long-range task, by T, init and clipping.

  python -m experiments.long_range --config=experiments/configs/long_range.py \
      --workdir=results/long_range

For every sequence length T the runs of all inits, clip thresholds and seeds
that share an activation are stacked and trained together: one
``jax.vmap``ped, ``jit``-compiled program per (T, activation). Each run draws
fresh batches from its seed's key (runs with the same seed see the same
data) and is tested on fresh sequences. Writes config.json, results.md,
results.csv (one row per T x init x clipping: success rate, median test
error, the gradient-norm profile at init and after training),
runs.json (every run's test error) and one heatmap per clipping setting
(heatmap_clip_<threshold>.png; x: T, y: init, colour: success rate).
"""

import json
import math
import pathlib
import time

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax
from ml_collections import config_flags

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import fused
from rnnjax.data import synthetic
from rnnjax.train import optimizers

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (only when run as a program, so the module imports cleanly)."""
  config_flags.DEFINE_config_file(
      'config', 'experiments/configs/long_range.py',
      'Config file with get_config(); override fields with --config.NAME=VALUE.')
  flags.DEFINE_string('workdir', 'results/long_range',
                                 'Folder for config.json, results.md/.csv, runs.json, heatmaps.')

INIT_ACTIVATIONS = {'gaussian': 'tanh', 'orthogonal': 'tanh', 'identity': 'relu'}


def parse_init(spec: str) -> tuple[str, float]:
  """'gaussian:1.2' -> ('gaussian', 1.2).

  Raises:
    ValueError: naming the spec, for an unknown init or a bad number.
  """
  name, _, value = spec.partition(':')
  if name not in INIT_ACTIVATIONS:
    raise ValueError(f'inits: expected entries <init>:<radius> with init in '
                     f'{sorted(INIT_ACTIVATIONS)}, got {spec!r}')
  try:
    return name, float(value or 1.0)
  except ValueError:
    raise ValueError(f'inits: expected a number after the colon, got {spec!r}') from None


def init_label(spec: str) -> str:
  name, value = parse_init(spec)
  if name == 'identity':
    return f'IRNN (identity x {value:g}, relu)'
  return f'{name} rho={value:g}, tanh'


def task_functions(config, length: int):
  """(draw, outputs, loss_and_error, recall_steps) for the configured task.

  draw(key, batch) -> (inputs, targets); loss_and_error(predictions, targets)
  -> (training loss, test error); predictions are ``[B, outputs]`` from the
  last state, or ``[B, T', outputs]`` from every state for the copy task.
  """
  if config.task == 'adding':
    def loss_and_error(predictions, targets):
      mse = jnp.mean((predictions - targets) ** 2)
      return mse, mse
    return (lambda key, b: synthetic.adding(key, b, length)), 1, loss_and_error, False
  if config.task == 'temporal_order':
    def loss_and_error(logits, targets):
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
      return loss, jnp.mean(jnp.argmax(logits, -1) != targets)
    return ((lambda key, b: synthetic.temporal_order(key, b, length)),
            synthetic.TEMPORAL_ORDER_CLASSES, loss_and_error, False)
  if config.task == 'copy':
    memory = config.copy_memory
    def loss_and_error(logits, targets):
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
      recalled = jnp.argmax(logits[:, -memory:], -1) != targets[:, -memory:]
      return loss, jnp.mean(recalled)
    return ((lambda key, b: synthetic.copy(key, b, length, memory)), synthetic.COPY_SYMBOLS,
            loss_and_error, True)
  raise ValueError(f"task: expected 'adding', 'temporal_order' or 'copy', got {config.task!r}")


def make_run(config, length: int, activation: str):
  """``run(params, key, clip_threshold) -> metrics`` for one setting; vmap it over runs."""
  draw, _, loss_and_error, every_step = task_functions(config, length)
  cell = cells.elman(activation)
  hidden = config.hidden_size

  def readout(params, states):
    return (states if every_step else states[:, -1]) @ params['W_out'] + params['b_out']

  def loss(params, inputs, targets):
    states, _ = fused.elman_layer(params['cell'], inputs, jnp.zeros((inputs.shape[0], hidden)),
                                  activation=activation)
    return loss_and_error(readout(params, states), targets)

  def profile(params, inputs, targets):
    """||dL/dh_{T-k}|| / ||dL/dh_T|| for the loss of the last step's prediction."""
    def last_step_loss(states):
      if every_step:
        logits = states[:, -1] @ params['W_out'] + params['b_out']
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets[:, -1]).mean()
      return loss_and_error(readout(params, states), targets)[0]
    _, grads = diagnostics.state_gradients(cell, params['cell'], inputs,
                                           jnp.zeros((inputs.shape[0], hidden)), last_step_loss)
    return diagnostics.gradient_norm_profile(grads, diagnostics.profile_distances(grads.shape[1]))

  optimizer = optimizers.make_optimizer(config.optimizer, config.learning_rate, 'global_norm')

  def run(params, key, clip_threshold):
    threshold = jnp.where(clip_threshold > 0, clip_threshold, jnp.inf)  # 0: no clipping
    train_key, test_key = jax.random.split(key)
    test_inputs, test_targets = draw(test_key, config.test_size)
    initial_profile = profile(params, test_inputs[:64], test_targets[:64])

    def step(carry, key):
      params, state = carry
      inputs, targets = draw(key, config.batch_size)
      (value, _), grads = jax.value_and_grad(loss, has_aux=True)(params, inputs, targets)
      updates, state = optimizer.update(grads, state, params)
      clipped = optimizers.was_clipped(grads, 'global_norm', threshold)
      return (optax.apply_updates(params, updates), state), (value, clipped)

    (params, _), (losses, clipped) = jax.lax.scan(
        step, (params, optimizers.with_hyperparameters(optimizer.init(params),
                                                        clip_threshold=threshold)),
        jax.random.split(train_key, config.steps))
    _, test_error = loss(params, test_inputs, test_targets)
    return {'test_error': test_error, 'initial_profile': initial_profile,
            'final_profile': profile(params, test_inputs[:64], test_targets[:64]),
            'final_train_loss': jnp.mean(losses[-100:]), 'clipped_fraction': jnp.mean(clipped),
            'finite': jnp.isfinite(test_error)}

  return run


def initial_params(config, spec: str, seed: int, input_size: int, outputs: int):
  name, value = parse_init(spec)
  key_cell, key_out = jax.random.split(jax.random.fold_in(jax.random.key(seed), 1))
  return {'cell': cells.init_elman(key_cell, input_size, config.hidden_size, name, radius=value),
          'W_out': jax.random.normal(key_out, (config.hidden_size, outputs)) /
                   math.sqrt(config.hidden_size),
          'b_out': jnp.zeros((outputs,))}


def check_config(config) -> None:
  """Fails before any training on a setting that could only fail later.

  Raises:
    ValueError: naming the field, with the expected and the given value.
  """
  for name in ('lengths', 'inits', 'clip_thresholds'):
    if not config[name]:
      raise ValueError(f'config.{name}: expected at least one value, got {config[name]!r}')
  for name in ('seeds', 'hidden_size', 'batch_size', 'steps', 'test_size'):
    if not isinstance(config[name], int) or config[name] < 1:
      raise ValueError(f'config.{name}: expected an int >= 1, got {config[name]!r}')
  for clip in config.clip_thresholds:
    if not 0 <= clip < math.inf:
      raise ValueError(f'config.clip_thresholds: expected values >= 0 (0: no clipping), got {clip!r}')
  for spec in config.inits:
    parse_init(spec)
  optimizers.make_optimizer(config.optimizer, config.learning_rate)  # names and learning rate
  for length in config.lengths:
    draw = task_functions(config, length)[0]
    try:
      draw(jax.random.key(0), 1)
    except ValueError as error:
      raise ValueError(f'config.lengths: {error}') from None


def run_length(config, length: int):
  """Trains every (init, clip, seed) at one T; returns one record per run."""
  draw, outputs, _, _ = task_functions(config, length)
  input_size = draw(jax.random.key(0), 1)[0].shape[-1]
  records = []
  for activation in sorted(set(INIT_ACTIVATIONS[parse_init(s)[0]] for s in config.inits)):
    settings = [(spec, clip, seed) for spec in config.inits
                if INIT_ACTIVATIONS[parse_init(spec)[0]] == activation
                for clip in config.clip_thresholds for seed in range(config.seeds)]
    params = [initial_params(config, spec, seed, input_size, outputs) for spec, _, seed in settings]
    stacked = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *params)
    keys = jnp.stack([jax.random.key(seed) for _, _, seed in settings])
    thresholds = jnp.asarray([clip for _, clip, _ in settings], jnp.float32)
    started = time.perf_counter()
    metrics = jax.device_get(jax.jit(jax.vmap(make_run(config, length, activation)))(
        stacked, keys, thresholds))
    logging.info('T=%d %s: %d runs in %.1f s', length, activation, len(settings),
                 time.perf_counter() - started)
    for i, (spec, clip, seed) in enumerate(settings):
      records.append({'length': length, 'init': spec, 'clip_threshold': clip, 'seed': seed,
                      **{k: np.asarray(v[i]).tolist() for k, v in metrics.items()}})
  return records


def summarise(config, records):
  """One row per (T, init, clip): success rate over seeds, median error, median profiles."""
  rows = []
  for clip in config.clip_thresholds:
    for spec in config.inits:
      for length in config.lengths:
        group = [r for r in records if (r['length'], r['init'], r['clip_threshold']) ==
                 (length, spec, clip)]
        errors = np.array([r['test_error'] if r['finite'] else np.inf for r in group])
        distances = diagnostics.profile_distances(length)
        row = {'T': length, 'init': init_label(spec),
               'clipping': f'global norm {clip:g}' if clip > 0 else 'none',
               'success_rate': float(np.mean(errors < config.success_threshold)),
               'median_test_error': float(np.median(errors)),
               'clipped_fraction': float(np.mean([r['clipped_fraction'] for r in group]))}
        for when in ('initial', 'final'):
          profiles = np.array([r[f'{when}_profile'] for r in group])
          median = np.median(profiles, axis=0)
          row[f'{when}_profile'] = ' '.join(f'{k}:{v:.2g}' for k, v in zip(distances, median))
        rows.append(row)
  return rows


def write_table(rows, workdir: pathlib.Path) -> str:
  import csv
  with open(workdir / 'results.csv', 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
  columns = list(rows[0])
  def cell(v):
    return f'{v:.3g}' if isinstance(v, float) else str(v)
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell(row[c]) for c in columns) + ' |' for row in rows]
  table = '\n'.join(lines) + '\n'
  (workdir / 'results.md').write_text(table)
  return table


def plot_heatmaps(config, rows, workdir: pathlib.Path) -> list[pathlib.Path]:
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

  paths = []
  labels = [init_label(s) for s in config.inits]
  for clip in config.clip_thresholds:
    name = f'global norm {clip:g}' if clip > 0 else 'none'
    grid = np.array([[next(r['success_rate'] for r in rows if r['clipping'] == name and
                           r['init'] == label and r['T'] == length)
                      for length in config.lengths] for label in labels])
    figure, axis = plt.subplots(figsize=(1.2 * len(config.lengths) + 3.5, 0.45 * len(labels) + 1.5))
    image = axis.imshow(grid, vmin=0, vmax=1, cmap='viridis', aspect='auto')
    axis.set_xticks(range(len(config.lengths)), [str(t) for t in config.lengths])
    axis.set_yticks(range(len(labels)), labels, fontsize=8)
    axis.set_xlabel('sequence length T')
    for (i, j), value in np.ndenumerate(grid):
      axis.text(j, i, f'{value:.2f}', ha='center', va='center',
                color='white' if value < 0.5 else 'black', fontsize=8)
    axis.set_title(f'{config.task}: success rate (test error < {config.success_threshold:g}), '
                   f'clipping {name}', fontsize=9)
    figure.colorbar(image, ax=axis, fraction=0.04)
    figure.tight_layout()
    path = workdir / f'heatmap_clip_{clip:g}.png'
    figure.savefig(path, dpi=120)
    plt.close(figure)
    paths.append(path)
  return paths


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  config = FLAGS.config
  try:
    check_config(config)
  except ValueError as error:
    raise app.UsageError(str(error)) from error
  workdir = pathlib.Path(FLAGS.workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2) + '\n')
  started = time.perf_counter()
  records = []
  for length in config.lengths:
    records += run_length(config, length)
  (workdir / 'runs.json').write_text(json.dumps(records) + '\n')
  rows = summarise(config, records)
  print(write_table(rows, workdir))
  paths = plot_heatmaps(config, rows, workdir)
  print(f'{len(records)} runs in {time.perf_counter() - started:.0f} s; wrote '
        f'{workdir / "results.md"}, results.csv, runs.json and {", ".join(p.name for p in paths)}')


if __name__ == '__main__':
  define_flags()
  app.run(main)
