"""dL/dh_t for every t: one backward pass against T separate vjps.

  python -m benchmarks.state_gradients [--batch=32 --steps=64 --hidden=128]

Prints the time of ``diagnostics.state_gradients`` (one forward, one
backward pass), of T per-step ``jax.vjp``s (rerun the sequence from each h_t),
and their ratio, interleaved over rounds with the median of the per-round
ratios (this machine's speed drifts 20-40% over seconds).
"""

import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import recurrence

_BATCH = flags.DEFINE_integer('batch', 32, 'B.')
_STEPS = flags.DEFINE_integer('steps', 64, 'T.')
_HIDDEN = flags.DEFINE_integer('hidden', 128, 'H (and d).')
_ROUNDS = flags.DEFINE_integer('rounds', 7, 'Interleaved timing rounds.')


def main(argv):
  del argv
  batch, steps, hidden = _BATCH.value, _STEPS.value, _HIDDEN.value
  key = jax.random.key(0)
  params = cells.init_elman(key, hidden, hidden, 'gaussian', radius=1.0)
  inputs = jax.random.normal(key, (batch, steps, hidden))
  initial = jnp.zeros((batch, hidden))
  cell = cells.elman('tanh')
  loss_fn = lambda states: jnp.sum(jnp.tanh(states[:, -1]))

  one_pass = jax.jit(lambda p, x: diagnostics.state_gradients(cell, p, x, initial, loss_fn)[1])

  @jax.jit
  def per_step(p, x):
    states, _ = recurrence.scan(cell, p, x, initial)
    grads = []
    for t in range(steps):
      def from_state(h, t=t):
        final = recurrence.scan(cell, p, x[:, t + 1:], h)[1] if t + 1 < steps else h
        return jnp.sum(jnp.tanh(final))
      grads.append(jax.vjp(from_state, states[:, t])[1](jnp.float32(1.0))[0])
    return jnp.stack(grads, axis=1)

  np.testing.assert_allclose(one_pass(params, inputs), per_step(params, inputs), rtol=1e-4,
                             atol=1e-6)
  ratios, fast_times, slow_times = [], [], []
  for _ in range(_ROUNDS.value):
    times = {}
    for name, function in (('one', one_pass), ('per_step', per_step)):
      started = time.perf_counter()
      function(params, inputs).block_until_ready()
      times[name] = time.perf_counter() - started
    fast_times.append(times['one'])
    slow_times.append(times['per_step'])
    ratios.append(times['per_step'] / times['one'])
  print(f'state_gradients, B={batch} T={steps} H={hidden}: one backward pass '
        f'{1e3 * np.median(fast_times):.2f} ms, {steps} per-step vjps '
        f'{1e3 * np.median(slow_times):.1f} ms, ratio {np.median(ratios):.1f}x (median of '
        f'{len(ratios)} interleaved rounds)')


if __name__ == '__main__':
  app.run(main)
