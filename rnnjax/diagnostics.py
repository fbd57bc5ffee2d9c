"""Gradient diagnostics: dL/dh_t for every t in one backward pass.

For h_t = phi(x_t W_xh + h_{t-1} W_hh + b) the gradient of a late loss with
respect to an early state is a product of Jacobians (seed notes 000, 001):

  dL/dh_k = dL/dh_t  prod_{j=k+1..t} diag(1 - h_j^2) W_hh^T   (row layout)

and its norm vanishes or explodes geometrically with the distance t - k.

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks", eq. 5-7.
"""

import jax
import jax.numpy as jnp

PROFILE_DISTANCES = (1, 2, 5, 10, 20, 40)


def state_gradients(cell, params, inputs, initial_state, loss_fn):
  """dL/dh_t for every step t, in one forward and one backward pass.

  A zero perturbation e_t is added to each state inside the scan
  (h_t <- cell(h_{t-1}, x_t) + e_t) and the gradient is taken with respect to
  e: dL/de_t = dL/dh_t, the total derivative through all later steps.

  Args:
    cell: ``cell(params, carry, x) -> (carry, y)`` whose carry is a single
      ``[B, H]`` array equal to its output (Elman, GRU).
    params: the cell's params.
    inputs: ``<float32>[B, T, d]``.
    initial_state: ``<float32>[B, H]``.
    loss_fn: ``loss_fn(states <float32>[B, T, H]) -> scalar``.

  Returns:
    ``(loss, state_gradients <float32>[B, T, H])``.
  """
  time_major = jnp.swapaxes(inputs, 0, 1)
  batch, hidden = initial_state.shape

  def loss_of_perturbation(perturbation):
    def step(carry, x_and_e):
      x, e = x_and_e
      carry, _ = cell(params, carry, x)
      carry = carry + e
      return carry, carry

    _, states = jax.lax.scan(step, initial_state, (time_major, perturbation))
    return loss_fn(jnp.swapaxes(states, 0, 1))

  zeros = jnp.zeros((time_major.shape[0], batch, hidden), initial_state.dtype)
  loss, grads = jax.value_and_grad(loss_of_perturbation)(zeros)
  return loss, jnp.swapaxes(grads, 0, 1)


def profile_distances(truncation: int, distances=PROFILE_DISTANCES) -> tuple[int, ...]:
  """The distances k of ``distances`` that fit in a window of tau steps (k < tau)."""
  return tuple(k for k in distances if k < truncation)


def gradient_norm_profile(gradients, distances):
  """||dL/dh_{T-k}|| / ||dL/dh_T|| for each k in ``distances``.

  Args:
    gradients: ``<float32>[B, T, H]`` from ``state_gradients``; norms are taken
      over the batch and hidden axes together.
    distances: ints k with 1 <= k < T.

  Returns:
    ``<float32>[len(distances)]``, dimensionless ratios.
  """
  norms = jnp.sqrt(jnp.sum(gradients ** 2, axis=(0, 2)))  # [T]
  last = gradients.shape[1] - 1
  return jnp.stack([norms[last - k] for k in distances]) / norms[last]
