"""The fused Elman layer: the input projection out of the loop and a hand-written BPTT.

Forward: the input projection for all T steps is one large matmul,
A_x = X W_xh + b ``[T, B, H]``, then a scan does only
h_t = phi(A_x[t] + h_{t-1} W_hh). Backward (a ``jax.custom_vjp``), from the
saved states alone:

  G_T = dL/dh_T (final state),  da_t = phi'(h_t) * (g_t + G_t),
  G_{t-1} = da_t W_hh^T                                  (reverse scan)
  dW_hh = sum_t h_{t-1}^T da_t,  dW_xh = sum_t x_t^T da_t,  db = sum_t da_t,
  dX = dA W_xh^T,  dh_0 = G_0                            (large matmuls)

where g_t is the cotangent of output t. With ``lengths`` a step t >= length
leaves the state unchanged and outputs zero: there da_t = 0 and the carry
gradient passes through, G_{t-1} = G_t.

It agrees with autodiff of ``recurrence.scan`` over ``cells.elman_cell`` to
float32 rounding (tests/test_fused.py) and is what the models use.

References:
  Williams & Zipser (1995), "Gradient-based learning algorithms for recurrent
  networks" (BPTT); seed note 001, "backpropagation through time" (the same
  recursion in column layout).
"""

import functools

import jax
import jax.numpy as jnp

from rnnjax import cells
from rnnjax import recurrence


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _elman_time_major(activation, unroll, w_hh, projected, initial, alive):
  """States ``[T, B, H]`` of h_t = phi(projected[t] + h_{t-1} W_hh); where ``alive[t]``
  is False the state is kept and the output is zero."""
  return _forward_rule(activation, unroll, w_hh, projected, initial, alive)[0]


def _forward_rule(activation, unroll, w_hh, projected, initial, alive):
  phi = cells.ACTIVATIONS[activation]

  def step(h, inputs):
    a, keep = inputs
    new = phi(a + h @ w_hh)
    if keep is None:
      return new, new
    return jnp.where(keep, new, h), jnp.where(keep, new, 0.0)

  _, states = jax.lax.scan(step, initial, (projected, alive), unroll=unroll)
  return states, (w_hh, states, initial, alive)


def _backward_rule(activation, unroll, residuals, g_states):
  w_hh, states, initial, alive = residuals
  w_hh_t = w_hh.T

  def step(carry_grad, inputs):
    g, h, keep = inputs
    total = g + carry_grad
    da = total * cells.activation_derivative(h, activation)  # phi'(a_t) from h_t
    previous = da @ w_hh_t
    if keep is not None:
      da = jnp.where(keep, da, 0.0)
      previous = jnp.where(keep, previous, carry_grad)  # a masked step outputs a constant 0
    return previous, da

  g_initial, d_projected = jax.lax.scan(step, jnp.zeros_like(initial), (g_states, states, alive),
                                        reverse=True, unroll=unroll)
  # dW_hh = sum_t h_{t-1}^T da_t as one [H, T B] x [T B, H] matmul (2.3x faster here than
  # the same contraction as an einsum over t and b of the shifted slices).
  hidden = states.shape[-1]
  previous_states = jnp.concatenate([initial[None], states[:-1]], axis=0)
  g_w_hh = previous_states.reshape(-1, hidden).T @ d_projected.reshape(-1, hidden)
  g_alive = None if alive is None else jnp.zeros(alive.shape, jax.dtypes.float0)
  return g_w_hh, d_projected, g_initial, g_alive


_elman_time_major.defvjp(_forward_rule, _backward_rule)


def _final_state(states, initial, lengths):
  """The state at step lengths - 1 (the initial state for length 0); ``states [T, B, H]``."""
  if lengths is None:
    return states[-1]
  last = jnp.take_along_axis(states, jnp.maximum(lengths - 1, 0)[None, :, None], axis=0)[0]
  return jnp.where((lengths > 0)[:, None], last, initial)


def elman_layer(params, inputs, initial_state, lengths=None, reverse=False, activation='tanh',
                time_major=False, unroll=1):
  """The Elman recurrence, fused: the same result as ``recurrence.scan`` with
  ``cells.elman(activation)``, with a faster backward pass.

  Args:
    params: ``{'W_xh': [d, H], 'W_hh': [H, H], 'b': [H]}`` (+ ``'b_hh'``).
    inputs: ``<float32>[B, T, d]``, or ``[T, B, d]`` with ``time_major``.
    initial_state: ``<float32>[B, H]``.
    lengths: optional ``<int32>[B]`` in [0, T]: states stop changing after
      step lengths - 1 and outputs there are zero.
    reverse: run each sequence right to left within its length.
    activation: 'tanh', 'relu' or 'linear'.
    time_major: inputs and outputs are ``[T, B, ...]``.
    unroll: ``jax.lax.scan``'s unroll factor, forward and backward.

  Returns:
    ``(states <float32>[B, T, H] (or [T, B, H]), final_state <float32>[B, H])``.

  Raises:
    ValueError: as ``recurrence.scan`` (shapes, lengths) or for an unknown
      activation.
  """
  cells.elman(activation)  # validates the name
  batch_major = inputs if not time_major else jnp.swapaxes(inputs, 0, 1)
  recurrence.check_inputs(batch_major, initial_state, lengths)
  input_size, hidden_size = params['W_xh'].shape
  if inputs.shape[-1] != input_size:
    raise ValueError(f'inputs: expected last axis d = {input_size} (W_xh is '
                     f'[{input_size}, {hidden_size}]), got shape {inputs.shape}')
  if initial_state.shape[-1] != hidden_size:
    raise ValueError(f'initial_state: expected last axis H = {hidden_size}, '
                     f'got shape {initial_state.shape}')
  if lengths is not None:  # values are checked only outside jit; inside, clip to [0, T]
    lengths = jnp.clip(lengths, 0, batch_major.shape[1])
  if reverse:
    batch_major = recurrence.reverse_within_lengths(batch_major, lengths)
  time_first = inputs if time_major and not reverse else jnp.swapaxes(batch_major, 0, 1)
  projected = time_first @ params['W_xh'] + cells.bias(params)  # one [T B, d] x [d, H] matmul
  alive = None
  if lengths is not None:
    alive = (jnp.arange(time_first.shape[0])[:, None] < lengths[None, :])[..., None]  # [T, B, 1]
  states = _elman_time_major(activation, unroll, params['W_hh'], projected, initial_state, alive)
  final = _final_state(states, initial_state, lengths)
  if reverse:
    states = jnp.swapaxes(recurrence.reverse_within_lengths(jnp.swapaxes(states, 0, 1), lengths),
                          0, 1)
  return (states if time_major else jnp.swapaxes(states, 0, 1)), final


def checkpointed_elman_layer(params, inputs, initial_state, segment_length: int,
                             activation='tanh', unroll=1):
  """``elman_layer`` for long sequences: O(T / s + s) saved states instead of O(T).

  The T steps run as T / s segments of s steps; each segment is a
  ``jax.checkpoint`` of the fused layer, so the forward pass keeps only the
  state at each segment boundary and the backward pass recomputes one
  segment's states at a time. With s ~ sqrt(T) the memory is O(sqrt(T))
  states for about one extra forward pass of compute.

  Args:
    params, initial_state, activation, unroll: as ``elman_layer``.
    inputs: ``<float32>[B, T, d]`` with T a multiple of ``segment_length``.
    segment_length: s >= 1.

  Returns:
    ``(states <float32>[B, T, H], final_state <float32>[B, H])``, equal to
    ``elman_layer``'s.

  Raises:
    ValueError: if s < 1 or T is not a multiple of s, or as ``elman_layer``.

  References:
    Chen, Xu, Zhang & Guestrin (2016), "Training deep nets with sublinear
    memory cost"; Gruslys et al. (2016), "Memory-efficient backpropagation
    through time".
  """
  recurrence.check_inputs(inputs, initial_state, None)
  batch, steps, input_size = inputs.shape
  if not isinstance(segment_length, int) or segment_length < 1 or steps % segment_length:
    raise ValueError(f'segment_length: expected an int s >= 1 dividing T = {steps}, '
                     f'got {segment_length!r}')
  segments = jnp.swapaxes(inputs, 0, 1).reshape(steps // segment_length, segment_length, batch,
                                                input_size)

  @jax.checkpoint
  def segment(state, segment_inputs):
    states, final = elman_layer(params, segment_inputs, state, activation=activation,
                                time_major=True, unroll=unroll)
    return final, states

  final, states = jax.lax.scan(segment, initial_state, segments)
  return jnp.swapaxes(states.reshape(steps, batch, -1), 0, 1), final
