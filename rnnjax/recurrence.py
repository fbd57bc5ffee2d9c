"""Scanning a cell over time: lengths, reverse, truncated BPTT.

Any cell ``cell(params, carry, x) -> (carry, y)`` (see ``rnnjax.cells``) runs
here; nothing in this module knows which cell it is.

Notation: B batch, T steps, d input features, H hidden units.
"""

import jax
import jax.numpy as jnp
import numpy as np


def check_inputs(inputs, initial_state, lengths):
  """Validates ``[B, T, d]`` inputs, a ``[B, ...]`` initial state and ``<int>[B]``
  lengths in [0, T] (values only when concrete, not under ``jit``).

  Raises:
    ValueError: naming the argument, with the expected and the given shape or value.
  """
  if inputs.ndim != 3:
    raise ValueError(f'inputs: expected rank 3 [B, T, d], got shape {inputs.shape}')
  batch, steps = inputs.shape[:2]
  for leaf in jax.tree_util.tree_leaves(initial_state):
    if leaf.ndim < 1 or leaf.shape[0] != batch:
      raise ValueError(f'initial_state: expected leading batch size {batch} (inputs are '
                       f'[B={batch}, T={steps}, d]), got shape {leaf.shape}')
  if lengths is None:
    return
  if jnp.shape(lengths) != (batch,):
    raise ValueError(f'lengths: expected shape [B] = ({batch},), got {jnp.shape(lengths)}')
  if not isinstance(lengths, jax.core.Tracer):
    values = np.asarray(lengths)
    if not np.issubdtype(values.dtype, np.integer):
      raise ValueError(f'lengths: expected integers, got dtype {values.dtype}')
    if values.size and (values.min() < 0 or values.max() > steps):
      raise ValueError(f'lengths: expected values in [0, T] = [0, {steps}], got '
                       f'min {values.min()} and max {values.max()}')


def reverse_within_lengths(sequences, lengths):
  """Reverses each sequence within its own length; padding stays in place.

  Args:
    sequences: ``[B, T, ...]``.
    lengths: ``<int>[B]`` true lengths; None reverses the whole time axis.

  Returns:
    ``[B, T, ...]`` with ``out[b, t] = sequences[b, lengths[b] - 1 - t]`` for
    ``t < lengths[b]`` and ``out[b, t] = sequences[b, t]`` otherwise. The map
    is its own inverse.
  """
  if lengths is None:
    return jnp.flip(sequences, axis=1)
  steps = sequences.shape[1]
  t = jnp.arange(steps)[None, :]
  source = jnp.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)  # [B, T]
  source = source.reshape(source.shape + (1,) * (sequences.ndim - 2))
  return jnp.take_along_axis(sequences, source, axis=1)


def scan(cell, params, inputs, initial_state, lengths=None, reverse=False, unroll=1):
  """Runs ``cell`` over the time axis of a batch-major input.

  With ``lengths``, the state stops changing after each sequence's last real
  step, the final state is the one at ``lengths - 1`` (the initial state for
  length 0) and outputs at padded steps are zero. ``reverse=True`` runs each
  sequence backwards within its own length; outputs come back in the original
  time order and the final state is the one after reading step 0.

  Args:
    cell: ``cell(params, carry, x) -> (carry, y)``.
    params: the cell's params pytree.
    inputs: ``<float32>[B, T, d]``.
    initial_state: carry pytree with leaves ``[B, ...]`` (Elman: ``[B, H]``).
    lengths: optional ``<int32>[B]`` with values in [0, T] (checked when
      concrete; under ``jit`` values outside are clipped to [0, T]).
    reverse: run right to left within each length.
    unroll: ``jax.lax.scan``'s unroll factor.

  Returns:
    ``(outputs <float32>[B, T, H], final_state)``.

  Raises:
    ValueError: for inputs not of rank 3, an initial state of another batch
      size, or lengths of the wrong shape, dtype or range.
  """
  check_inputs(inputs, initial_state, lengths)
  if lengths is not None:  # values are checked only outside jit; inside, clip to [0, T]
    lengths = jnp.clip(lengths, 0, inputs.shape[1])
  if reverse:
    inputs = reverse_within_lengths(inputs, lengths)
  time_major = jnp.swapaxes(inputs, 0, 1)  # [T, B, d]

  if lengths is None:
    final, outputs = jax.lax.scan(lambda c, x: cell(params, c, x), initial_state,
                                  time_major, unroll=unroll)
  else:
    def step(carry, x_and_t):
      x, t = x_and_t
      new_carry, y = cell(params, carry, x)
      alive = t < lengths  # [B]
      keep = lambda new, old: jnp.where(alive.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
      return jax.tree_util.tree_map(keep, new_carry, carry), keep(y, jnp.zeros_like(y))

    final, outputs = jax.lax.scan(step, initial_state,
                                  (time_major, jnp.arange(time_major.shape[0])), unroll=unroll)
  outputs = jnp.swapaxes(outputs, 0, 1)
  if reverse:
    outputs = reverse_within_lengths(outputs, lengths)
  return outputs, final


def truncated_scan(cell, params, inputs, initial_state, truncation, unroll=1):
  """Truncated BPTT: ``scan`` in windows of ``truncation`` (tau) steps.

  The forward pass is identical to ``scan``; the state passes from window to
  window through ``jax.lax.stop_gradient``, so the gradient of any loss with
  respect to anything before the current window is exactly zero. tau = T is
  full BPTT. A last window shorter than tau takes the remaining steps.

  Args:
    cell, params, inputs, initial_state, unroll: as in ``scan``.
    truncation: tau >= 1, window length in steps.

  Returns:
    ``(outputs <float32>[B, T, H], final_state)``.

  Raises:
    ValueError: if tau < 1, or as ``scan`` does.

  References:
    Williams & Peng (1990); seed note 001, "truncated bptt".
  """
  if not isinstance(truncation, (int, np.integer)) or truncation < 1:
    raise ValueError(f'truncation: expected an int tau >= 1, got {truncation!r}')
  check_inputs(inputs, initial_state, None)
  outputs, state = [], initial_state
  for start in range(0, inputs.shape[1], truncation):
    window_outputs, state = scan(cell, params, inputs[:, start:start + truncation],
                                 jax.lax.stop_gradient(state), unroll=unroll)
    outputs.append(window_outputs)
  return jnp.concatenate(outputs, axis=1), state
