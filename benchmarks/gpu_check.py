"""The GPU check: the layer benchmark, the vmapped sweep and DEER in one go (under 10 minutes).

On a machine with an NVIDIA GPU (a CUDA build of jax and of torch, so that
torch.nn.RNN runs cuDNN):

  pip install -e '.[test]' 'jax[cuda12]' torch --index-url ...   # the CUDA wheels
  python -m benchmarks.gpu_check

Prints Markdown tables: (1) ``benchmarks.rnn_speed``'s layer table (rnnjax
fused, rnnjax plain scan, flax.linen.RNN, torch.nn.RNN; forward and
forward+backward) at S1-S4, (2) its sweep comparison (32 vmapped runs
against the same runs one by one, B = 1 and 16), (3) DEER and quasi-DEER
(``parallel.elman_deer``, rho = 0.5, tolerance 1e-5) against the sequential
fused layer, forward, at H in {4, 16, 64} and T in {1024, 16384}, B = 8. Runs
on CPU too (slowly: use --shapes=S4 --sweep_steps=10 --deer_lengths=1024 to try it;
``rnn_speed``'s flags --shapes, --sweep_batches and --sweep_steps apply).
"""

import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import torch

from benchmarks import rnn_speed
from rnnjax import cells
from rnnjax import fused
from rnnjax import initializers
from rnnjax import parallel

_DEER_LENGTHS = flags.DEFINE_list('deer_lengths', ['1024', '16384'], 'T of the DEER table.')
_DEER_HIDDEN = flags.DEFINE_list('deer_hidden_sizes', ['4', '16', '64'], 'H of the DEER table.')


def fastest(executable, *args, repeats: int = 5) -> float:
  """The fastest of ``repeats`` timed calls (seconds), after one warm-up call."""
  jax.block_until_ready(executable(*args))
  times = []
  for _ in range(repeats):
    started = time.perf_counter()
    jax.block_until_ready(executable(*args))
    times.append(time.perf_counter() - started)
  return min(times)


def deer_rows(lengths, hidden_sizes, batch: int = 8, input_size: int = 32, radius: float = 0.5):
  """Forward wall time of DEER, quasi-DEER and the fused layer on the same problem.

  Returns:
    rows ``{'T', 'H', 'fused ms', 'DEER ms', 'DEER iterations', 'quasi ms',
    'quasi iterations', 'DEER / fused', 'quasi / fused'}`` (iterations: the
    largest over the batch; -1 where it did not converge).
  """
  rows = []
  for steps in lengths:
    for hidden in hidden_sizes:
      key = jax.random.key(hidden)
      params = cells.init_elman(key, input_size, hidden, 'gaussian')
      params['W_hh'] = initializers.gaussian_at_radius(jax.random.fold_in(key, 2), hidden, radius)
      inputs = jax.random.normal(jax.random.fold_in(key, 1), (batch, steps, input_size))
      initial = jnp.zeros((batch, hidden))
      sequential = jax.jit(lambda p, x: fused.elman_layer(p, x, initial)[0])
      row = {'T': steps, 'H': hidden, 'fused ms': 1e3 * fastest(sequential, params, inputs)}
      for method, name in (('deer', 'DEER'), ('quasi', 'quasi')):
        solve = jax.jit(lambda p, x, method=method: parallel.elman_deer(
            p, x, initial, method=method, max_iterations=min(steps, 200)))
        _, _, info = solve(params, inputs)
        converged = bool(np.all(info['converged']))
        row[f'{name} ms'] = 1e3 * fastest(lambda p, x: solve(p, x)[0], params, inputs, repeats=3)
        row[f'{name} iterations'] = int(np.max(info['iterations'])) if converged else -1
        row[f'{name} / fused'] = row[f'{name} ms'] / row['fused ms']
      rows.append(row)
  return rows


def main(argv):
  del argv
  torch.set_num_threads(2)
  device = jax.devices()[0]
  print(f'jax {jax.__version__} on {device.platform} ({device.device_kind}), torch '
        f'{torch.__version__} on {"cuda" if torch.cuda.is_available() else "cpu"} '
        f'(cuDNN {torch.backends.cudnn.version()}); float32 GEMM '
        f'{rnn_speed.gemm_ceiling(4096 if device.platform == "gpu" else 2048):.0f} GFLOP/s',
        flush=True)
  columns = ['shape', 'variant', 'mode', 'ms', 'GFLOP/s', 'fused speed-up', 'XLA temp MiB']
  for name in rnn_speed._SHAPES.value:
    rows, _ = rnn_speed.time_shape(name, rnn_speed.SHAPES[name], 5)
    print()
    print(rnn_speed.markdown(rows, columns), flush=True)
  print()
  steps = rnn_speed._SWEEP_STEPS.value
  for batch in map(int, rnn_speed._SWEEP_BATCHES.value):
    solo, group, difference, _ = rnn_speed.sweep_comparison(batch, steps)
    print(f'sweep of 32 runs (H=64, T=64, B={batch}, {steps} steps): one by one {solo:.1f} s, '
          f'vmapped {group:.1f} s, speed-up {solo / group:.1f}x; largest relative difference '
          f'of a final loss {difference:.1e}', flush=True)
  print()
  rows = deer_rows([int(t) for t in _DEER_LENGTHS.value],
                   [int(h) for h in _DEER_HIDDEN.value])
  print(rnn_speed.markdown(rows, list(rows[0])))


if __name__ == '__main__':
  app.run(main)
