"""dL/dh_t in one backward pass equals per-step vjps; closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import initializers
from rnnjax import recurrence

B, T, D, H = 2, 12, 3, 8


def per_step_vjp(cell, params, inputs, initial, loss_fn):
  """dL/dh_t for each t by a separate vjp: rerun the sequence from h_t."""
  states, _ = recurrence.scan(cell, params, inputs, initial)
  grads = []
  for t in range(T):
    def loss_from_state(h_t, t=t):
      later, _ = recurrence.scan(cell, params, inputs[:, t + 1:], h_t) if t + 1 < T else (
          jnp.zeros((B, 0, H)), h_t)
      return loss_fn(jnp.concatenate([states[:, :t], h_t[:, None], later], axis=1))
    _, vjp = jax.vjp(loss_from_state, states[:, t])
    grads.append(vjp(jnp.float32(1.0))[0])
  return jnp.stack(grads, axis=1)


@pytest.mark.parametrize('loss_name', ['last_step', 'all_steps'])
def test_state_gradients_equal_per_step_vjp(key, loss_name):
  k1, k2 = jax.random.split(key)
  params = cells.init_elman(k1, D, H, 'gaussian', radius=1.2)
  inputs = jax.random.normal(k2, (B, T, D))
  initial = jnp.zeros((B, H))
  readout = jax.random.normal(jax.random.key(7), (H,))
  if loss_name == 'last_step':
    loss_fn = lambda states: jnp.sum(jnp.tanh(states[:, -1] @ readout))
  else:
    loss_fn = lambda states: jnp.sum(jnp.sin(states @ readout))
  cell = cells.elman('tanh')
  _, fast = diagnostics.state_gradients(cell, params, inputs, initial, loss_fn)
  slow = per_step_vjp(cell, params, inputs, initial, loss_fn)
  np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-7)
  distances = diagnostics.profile_distances(T)
  assert distances == (1, 2, 5, 10)
  slow_norms = np.linalg.norm(np.asarray(slow), axis=(0, 2))
  expected = [slow_norms[T - 1 - k] / slow_norms[T - 1] for k in distances]
  np.testing.assert_allclose(diagnostics.gradient_norm_profile(fast, distances), expected,
                             rtol=1e-5)


@pytest.mark.parametrize('rho', [0.5, 1.0, 1.3])
def test_linear_orthogonal_profile_is_rho_to_the_k(key, rho):
  # With a linear activation and W_hh = rho Q (Q orthogonal), dL/dh_{T-k} = dL/dh_T (W_hh^T)^k,
  # whose norm is exactly rho^k times that of dL/dh_T.
  params = {'W_xh': jnp.zeros((D, H)), 'W_hh': initializers.orthogonal_at_radius(key, H, rho),
            'b': jnp.zeros((H,))}
  readout = jax.random.normal(jax.random.key(3), (B, H))
  _, grads = diagnostics.state_gradients(
      cells.elman('linear'), params, jnp.zeros((B, T, D)), jnp.ones((B, H)),
      lambda states: jnp.sum(states[:, -1] * readout))
  distances = (1, 2, 5, 10)
  np.testing.assert_allclose(diagnostics.gradient_norm_profile(grads, distances),
                             [rho ** k for k in distances], rtol=1e-5)
