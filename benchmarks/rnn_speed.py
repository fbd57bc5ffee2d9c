"""Elman layer speed: rnnjax fused and plain scan against flax.linen.RNN and torch.nn.RNN.

  python -m benchmarks.rnn_speed [--rounds=7] [--shapes=S1,S2,S3,S4] [--nosweep]

All variants run in this one process, interleaved in shuffled rounds; each
round times every variant once and the reported ratio is the median over
rounds of the per-round ratio (this machine's speed drifts 20-40% over
seconds, so back-to-back timings mislead). Forward and forward+backward
(gradients of sum(states * w) with respect to all weights and the inputs).
GFLOP/s counts 2 B T (d H + H^2) for the forward pass and three times that
for forward+backward. XLA temp is the compiled program's temporary memory.
A large float32 GEMM gives the machine's ceiling. The second part (off with
--nosweep): 32 small character-LM runs (H = 64, T = 64, 200 steps, --sweep_steps) vmapped into
one program against the same 32 runs one after another: the group on one
device, and (on a machine of several cores) the group with its run axis
split over one XLA CPU device a core (``config.layout='runs'``, in a child
process started with ``--xla_force_host_platform_device_count``).
Prints Markdown tables.
"""

import json
import math
import os
import random
import subprocess
import sys
import time

from absl import app
from absl import flags
from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import torch

from experiments import language_tasks as tasks
from rnnjax import cells
from rnnjax import fused
from rnnjax import models
from rnnjax import recurrence
from rnnjax.data import text
from rnnjax.train import experiment
from rnnjax.train import job
from rnnjax.train import trainer

SHAPES = {'S1': (64, 128, 256, 512), 'S2': (32, 512, 128, 256), 'S3': (16, 1024, 64, 128),
          'S4': (8, 64, 32, 32)}
_SHAPES = flags.DEFINE_list('shapes', list(SHAPES), 'Shapes (B, T, d, H) to time.')
_ROUNDS = flags.DEFINE_integer('rounds', 7, 'Interleaved timing rounds per shape.')
_THREADS = flags.DEFINE_integer('torch_threads', 2, 'torch.set_num_threads.')
_SWEEP = flags.DEFINE_boolean('sweep', True, 'Also time 32 vmapped runs against 32 solo runs.')
_SWEEP_BATCHES = flags.DEFINE_list('sweep_batches', ['1', '16'],
                                   'Batch sizes of the 32 small runs of the sweep comparison.')
_SWEEP_STEPS = flags.DEFINE_integer('sweep_steps', 200, 'Training steps of each of the 32 '
                                    'small runs of the sweep comparison.', lower_bound=1)
_GROUP_OVER_DEVICES = flags.DEFINE_integer(
    'group_over_devices', 0, 'Only time the group of 32 runs of this batch size split over '
    "this process's devices and print a JSON line (what --sweep runs in a child process).",
    lower_bound=0)
flags.register_validator('sweep_batches',
                         lambda values: all(v.isdigit() and int(v) > 0 for v in values),
                         message='--sweep_batches: expected positive integers')


def jax_variants(batch, steps, d, hidden):
  """name -> (forward, forward+backward, args) for the JAX variants, jitted."""
  key = jax.random.key(0)
  params = cells.init_elman(key, d, hidden, 'uniform')
  inputs = jax.random.normal(key, (batch, steps, d))
  initial = jnp.zeros((batch, hidden))
  weights = jax.random.normal(jax.random.key(1), (batch, steps, hidden))
  flax_rnn = nn.RNN(nn.SimpleCell(hidden))
  flax_params = flax_rnn.init(key, inputs)

  layers = {
      'rnnjax fused': (lambda p, x: fused.elman_layer(p, x, initial)[0], params),
      'rnnjax scan': (lambda p, x: recurrence.scan(cells.elman('tanh'), p, x, initial)[0], params),
      'flax.linen.RNN': (lambda p, x: flax_rnn.apply(p, x), flax_params),
  }
  variants = {}
  for name, (layer, layer_params) in layers.items():
    forward = jax.jit(layer)
    both = jax.jit(jax.grad(lambda p, x, layer=layer: jnp.sum(layer(p, x) * weights),
                            argnums=(0, 1)))
    variants[name] = (forward, both, (layer_params, inputs))
  return variants


def torch_variant(batch, steps, d, hidden):
  """torch.nn.RNN's forward and forward+backward, on the GPU (cuDNN) where torch has one."""
  device = 'cuda' if torch.cuda.is_available() else 'cpu'
  synchronize = torch.cuda.synchronize if device == 'cuda' else lambda: None
  module = torch.nn.RNN(d, hidden, batch_first=True).to(device)
  inputs = torch.randn(batch, steps, d, device=device, requires_grad=True)
  weights = torch.randn(batch, steps, hidden, device=device)

  def forward():
    with torch.no_grad():
      result = module(inputs)[0]
    synchronize()
    return result

  def both():
    module.zero_grad(set_to_none=True)
    inputs.grad = None
    (module(inputs)[0] * weights).sum().backward()
    synchronize()

  return forward, both


def block(result):
  return jax.block_until_ready(result)


def temp_bytes(function, *args) -> int:
  return function.lower(*args).compile().memory_analysis().temp_size_in_bytes


def time_shape(name, shape, rounds):
  batch, steps, d, hidden = shape
  variants = jax_variants(*shape)
  torch_forward, torch_both = torch_variant(*shape)
  calls = {}
  for variant, (forward, both, args) in variants.items():
    calls[(variant, 'forward')] = lambda f=forward, a=args: block(f(*a))
    calls[(variant, 'forward+backward')] = lambda f=both, a=args: block(f(*a))
  calls[('torch.nn.RNN', 'forward')] = torch_forward
  calls[('torch.nn.RNN', 'forward+backward')] = torch_both
  for call in calls.values():  # compile and warm up
    call()
    call()
  order = list(calls)
  times = {k: [] for k in calls}
  for _ in range(rounds):
    random.shuffle(order)
    for k in order:
      started = time.perf_counter()
      calls[k]()
      times[k].append(time.perf_counter() - started)
  flops = 2 * batch * steps * (d * hidden + hidden * hidden)
  rows = []
  for variant in list(variants) + ['torch.nn.RNN']:
    for mode, factor in (('forward', 1), ('forward+backward', 3)):
      mine = np.array(times[(variant, mode)])
      row = {'shape': f'{name} {shape}', 'variant': variant, 'mode': mode,
             'ms': 1e3 * np.median(mine),
             'GFLOP/s': factor * flops / np.median(mine) / 1e9,
             'fused speed-up': np.median(np.array(times[('rnnjax fused', mode)]) ** -1 * mine)}
      if variant in variants:
        forward, both, args = variants[variant]
        row['XLA temp MiB'] = temp_bytes(forward if mode == 'forward' else both, *args) / 2**20
      rows.append(row)
  saved = steps * batch * hidden * 4 * 2 / 2**20  # states + the input projection
  return rows, saved


def gemm_ceiling(size=2048, rounds=5):
  a = jax.random.normal(jax.random.key(0), (size, size))
  matmul = jax.jit(lambda a: a @ a)
  block(matmul(a))
  best = min(_timed(lambda: block(matmul(a))) for _ in range(rounds))
  return 2 * size ** 3 / best / 1e9


def _timed(call):
  started = time.perf_counter()
  call()
  return time.perf_counter() - started


def _sweep_runs(batch, layout='auto', runs=32, steps=200):
  """The task and the configs of the sweep comparison's 32 char-LM runs (H = 64, E = 32,
  T = 64, spectral radius 0.5 .. 1.5, SGD at 0.5 with global-norm clipping at 1, as the
  main sweep trains) on uniformly random tokens of a 65-character vocabulary: nothing
  to learn (losses stay near chance, 6.02 bits); the runs time the work and check that
  a group computes what its runs compute alone."""
  vocab, hidden, tau = 65, 64, 64
  ids = np.asarray(jax.random.randint(jax.random.key(0), (batch * tau * steps + 1,), 0, vocab),
                   np.int32)
  inputs, targets = text.stream_windows(ids, batch, tau)
  model = models.LanguageModel(vocab_size=vocab, hidden_size=hidden, embedding_size=32)

  def init(config, key):
    return tasks.init_language_model(model.clone(radius=config.spectral_radius), key)

  task = tasks.truncated_bptt(model, inputs, targets, init, None)
  defaults = {name: field.default for name, field in experiment.TRAINER_FIELDS.items()}
  configs = [ml_collections.ConfigDict(dict(
      defaults, seed=i, steps=steps, log_every=steps, checkpoint_every=0, optimizer='sgd',
      learning_rate=0.5, clipping='global_norm', clip_threshold=1.0, on_divergence='stop',
      spectral_radius=float(radius), layout=layout))
      for i, radius in enumerate(np.linspace(0.5, 1.5, runs))]
  return task, configs


def _timed_training(task, group, repeats=2):
  """``(final train losses, seconds of training less compilation)`` of one group, the
  fastest of ``repeats`` trainings (the same numbers each time)."""
  times = []
  for _ in range(repeats):
    _, records, seconds = trainer.train(task, group)
    times.append(sum(v for k, v in seconds.items() if k != 'compile'))
  return [r['train_loss_nats'] for r in records], min(times)


def sweep_comparison(batch, steps=200):
  """The 32 runs through the trainer (on this process's devices, layout auto): a group of 32
  against the same runs one after another (the step compiled once for all of them;
  compilation is not counted in either; each training the faster of two).

  Returns:
    ``(solo seconds, group seconds, largest relative difference of a final loss between
    the two, solo final losses)``.
  """
  task, configs = _sweep_runs(batch, steps=steps)
  _timed_training(task, configs[:1], repeats=1)  # compile the one-run step
  solo = [_timed_training(task, [config]) for config in configs]
  _timed_training(task, configs, repeats=1)  # compile the group step
  group_losses, group_seconds = _timed_training(task, configs)
  solo_losses = [losses[0] for losses, _ in solo]
  return (sum(seconds for _, seconds in solo), group_seconds,
          _largest_relative_difference(solo_losses, group_losses), solo_losses)


def _largest_relative_difference(reference, other):
  return max(abs(a - b) / abs(a) for a, b in zip(reference, other))


def group_over_cores(batch, cores, steps=200):
  """The group of 32 with its run axis split over ``cores`` XLA CPU devices, one a core
  (``config.layout='runs'``), in a child process (the device count is fixed when XLA
  starts).

  Returns:
    ``(group seconds, final losses)``.
  """
  env = dict(os.environ, XLA_FLAGS=(os.environ.get('XLA_FLAGS', '') +
                                    f' --xla_force_host_platform_device_count={cores}'))
  child = subprocess.run([sys.executable, '-m', 'benchmarks.rnn_speed', '--shapes=',
                          f'--group_over_devices={batch}', f'--sweep_steps={steps}'], env=env,
                         capture_output=True, text=True, check=False)
  if child.returncode:
    raise RuntimeError(f'the group over {cores} devices failed:\n{child.stderr[-3000:]}')
  answer = json.loads(child.stdout.strip().splitlines()[-1])
  return answer['seconds'], answer['losses']


def _print_group_over_devices(batch, steps):
  """The child's part of ``group_over_cores``: one JSON line."""
  task, configs = _sweep_runs(batch, layout='runs', steps=steps)
  _timed_training(task, configs, repeats=1)  # compile
  losses, seconds = _timed_training(task, configs)
  print(json.dumps({'seconds': seconds, 'losses': losses}))


def vmapped_layers(batch, runs=32, steps=64, d=32, hidden=64, rounds=7):
  """The layer alone under ``vmap``: gradients of sum(states * w) for ``runs`` runs,
  each with its own params, fused against the plain scan and against the runs one by one.

  Returns:
    ``(fused vmapped ms, scan vmapped ms, fused one by one ms)``, medians over rounds.
  """
  key = jax.random.key(0)
  params = jax.vmap(lambda k: cells.init_elman(k, d, hidden, 'uniform'))(
      jax.random.split(key, runs))
  inputs = jax.random.normal(key, (batch, steps, d))
  weights = jax.random.normal(jax.random.key(1), (batch, steps, hidden))
  initial = jnp.zeros((batch, hidden))
  fused_loss = lambda p: jnp.sum(fused.elman_layer(p, inputs, initial)[0] * weights)
  scan_loss = lambda p: jnp.sum(
      recurrence.scan(cells.elman('tanh'), p, inputs, initial)[0] * weights)
  fused_group = jax.jit(jax.vmap(jax.grad(fused_loss)))
  scan_group = jax.jit(jax.vmap(jax.grad(scan_loss)))
  fused_one = jax.jit(jax.grad(fused_loss))
  each = [jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], params) for i in range(runs)]
  calls = {'fused': lambda: block(fused_group(params)), 'scan': lambda: block(scan_group(params)),
           'one by one': lambda: [block(fused_one(p)) for p in each]}
  for call in calls.values():
    call()
  times = {name: [] for name in calls}
  for _ in range(rounds):
    for name in random.sample(list(calls), len(calls)):
      times[name].append(_timed(calls[name]))
  return tuple(1e3 * np.median(times[name]) for name in ('fused', 'scan', 'one by one'))


def markdown(rows, columns):
  def cell(v):
    return f'{v:.3g}' if isinstance(v, float) else str(v)
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell(r.get(c, '')) for c in columns) + ' |' for r in rows]
  return '\n'.join(lines)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # not the trainer's lines of every run
  if _GROUP_OVER_DEVICES.value:
    job.keep_freed_memory()
    _print_group_over_devices(_GROUP_OVER_DEVICES.value, _SWEEP_STEPS.value)
    return
  kept = job.keep_freed_memory()  # as a sweep's workers; for every variant of this process
  torch.set_num_threads(_THREADS.value)
  print(f'jax {jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__} '
        f'({torch.get_num_threads()} threads); float32 GEMM ceiling '
        f'{gemm_ceiling():.0f} GFLOP/s; freed memory kept for reuse: {kept}')
  columns = ['shape', 'variant', 'mode', 'ms', 'GFLOP/s', 'fused speed-up', 'XLA temp MiB']
  for name in _SHAPES.value:
    rows, saved = time_shape(name, SHAPES[name], _ROUNDS.value)
    print()
    print(markdown(rows, columns))
    print(f'{name}: saved states + input projection = {saved:.2f} MiB')
  if _SWEEP.value:
    print()
    for batch in map(int, _SWEEP_BATCHES.value):
      fused_ms, scan_ms, solo_ms = vmapped_layers(batch)
      print(f'layer under vmap, 32 runs (B={batch}, T=64, d=32, H=64), fwd+bwd: fused '
            f'{fused_ms:.2f} ms, plain scan {scan_ms:.2f} ms (fused {scan_ms / fused_ms:.2f}x '
            f'faster), fused one by one {solo_ms:.2f} ms')
    usable = (len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else
              os.cpu_count() or 1)
    cores = 2 ** int(math.log2(usable))  # a divisor of the 32 runs
    here = f'{len(jax.devices())} {jax.default_backend()} device(s)'
    split = cores > 1 and jax.default_backend() == 'cpu' and len(jax.devices()) == 1
    for batch in map(int, _SWEEP_BATCHES.value):
      solo, group, difference, solo_losses = sweep_comparison(batch, _SWEEP_STEPS.value)
      line = (f'sweep of 32 runs (H=64, T=64, B={batch}, {_SWEEP_STEPS.value} steps): one by '
              f'one {solo:.1f} s, vmapped on {here} {group:.1f} s ({solo / group:.1f}x, final '
              f'losses within {difference:.1e} relative of the runs one by one)')
      if split:
        spread, losses = group_over_cores(batch, cores, _SWEEP_STEPS.value)
        line += (f', vmapped over {cores} CPU devices (one a core, runs split over them) '
                 f'{spread:.1f} s ({solo / spread:.1f}x, within '
                 f'{_largest_relative_difference(solo_losses, losses):.1e})')
      print(line, flush=True)


if __name__ == '__main__':
  app.run(main)
