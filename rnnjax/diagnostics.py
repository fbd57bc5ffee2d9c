"""Gradient diagnostics: dL/dh_t for every t in one backward pass.

For h_t = phi(x_t W_xh + h_{t-1} W_hh + b) the gradient of a late loss with
respect to an early state is a product of Jacobians:

  dL/dh_k = dL/dh_t  prod_{j=k+1..t} diag(1 - h_j^2) W_hh^T   (row layout)

and its norm vanishes or explodes geometrically with the distance t - k (the
long-run rate is the largest Lyapunov exponent, ``rnnjax.lyapunov``). Every
norm here is taken without overflow (``rnnjax.norms``), and the products are
carried rescaled, so a norm is inf only where it is beyond the dtype's range.

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks", eq. 5-7; ``docs/reference_numbers.md`` (the worked
  gradient-norm examples).
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import dtypes
from rnnjax import norms as norms_
from rnnjax import recurrence

__all__ = ['PROFILE_DISTANCES', 'state_gradients', 'profile_distances', 'gradient_norm_profile',
           'Probe', 'profile', 'recurrent_matrix', 'largest_singular_value',
           'jacobian_product_norms', 'growth_rate']

PROFILE_DISTANCES = (1, 2, 5, 10, 20, 40)


def state_gradients(cell: Callable, params: Any, inputs: jax.typing.ArrayLike,
                    initial_state: jax.typing.ArrayLike | None = None,
                    loss_fn: Callable[[jax.Array], jax.Array] | None = None,
                    lengths: jax.typing.ArrayLike | None = None) -> tuple[jax.Array, jax.Array]:
  """dL/dh_t for every step t, in one forward and one backward pass.

  A zero perturbation e_t is added to each state inside the scan
  (h_t <- cell(h_{t-1}, x_t) + e_t) and the gradient is taken with respect to
  e: dL/de_t = dL/dh_t, the total derivative through all later steps. The
  computation runs in the params' dtype (``dtypes.in_params_dtype``):
  inputs, initial state, states and the perturbation.

  Args:
    cell: ``cell(params, carry, x) -> (carry, y)`` whose carry is a single
      ``[B, H]`` array equal to its output (Elman, GRU).
    params: the cell's params.
    inputs: ``<float>[B, T, d]``, cast to the params' dtype.
    initial_state: ``<float>[B, H]``, cast to the params' dtype; None: zeros
      (``recurrence.zero_state``).
    loss_fn: ``loss_fn(states <dtype>[B, T, H]) -> scalar`` (required; a
      keyword where the initial state is left out); with ``lengths`` it
      should not read the states of steps t >= lengths[b].
    lengths: optional ``<int>[B]`` in [0, T]: the inputs of steps t >=
      lengths[b] are zeroed first (``recurrence.zero_padding``), so NaN or inf
      in padding reaches no gradient of an earlier step.

  Returns:
    ``(loss, state_gradients <dtype>[B, T, H])``, dtype the params'.

  Raises:
    ValueError: for inputs not of rank 3 or not floating, an initial state not
      ``[B, H]``, no loss_fn, or lengths not ``<int>[B]`` in [0, T] (values
      checked when concrete).

  References:
    Pascanu, Mikolov & Bengio (2013), eq. 5 (dL/dh_k as the sum over later losses).
  """
  if loss_fn is None or not callable(loss_fn):
    raise ValueError(f'loss_fn: expected a function of the states [B, T, H] to a scalar, '
                     f'got {loss_fn!r}')
  initial_state = recurrence.with_initial_state(cell, params, inputs, initial_state)
  if jnp.ndim(initial_state) != 2:
    raise ValueError(f'initial_state: expected one [B, H] array, got shape '
                     f'{jnp.shape(initial_state)}')
  recurrence.check_inputs(inputs, initial_state, lengths)
  sequences, start = dtypes.in_params_dtype(
      params, (jnp.asarray(inputs), jnp.asarray(initial_state)))
  inputs, initial_state = jnp.asarray(sequences), jnp.asarray(start)
  inputs = recurrence.zero_padding(inputs, recurrence.as_lengths(lengths, inputs.shape[1]))
  time_major = jnp.swapaxes(inputs, 0, 1)
  batch, hidden = initial_state.shape

  def loss_of_perturbation(perturbation: jax.Array) -> jax.Array:
    def step(carry: jax.Array, x_and_e: tuple[jax.Array, jax.Array]
             ) -> tuple[jax.Array, jax.Array]:
      x, e = x_and_e
      carry, _ = cell(params, carry, x)
      carry = carry + e
      return carry, carry

    _, states = jax.lax.scan(step, initial_state, (time_major, perturbation))
    return loss_fn(jnp.swapaxes(states, 0, 1))

  zeros = jnp.zeros((time_major.shape[0], batch, hidden), initial_state.dtype)
  loss, grads = jax.value_and_grad(loss_of_perturbation)(zeros)
  return loss, jnp.swapaxes(grads, 0, 1)


def profile_distances(truncation: int,
                      distances: tuple[int, ...] = PROFILE_DISTANCES) -> tuple[int, ...]:
  """The distances k of ``distances`` that fit in a window of tau steps (k < tau).

  Raises:
    ValueError: for a truncation that is not an int tau >= 1.
  """
  if (isinstance(truncation, (bool, np.bool_)) or not isinstance(truncation, (int, np.integer))
      or truncation < 1):
    raise ValueError(f'truncation: expected an int tau >= 1, got {truncation!r}')
  return tuple(k for k in distances if k < truncation)


def _checked_distances(distances: Any, last: float) -> tuple[int, ...]:
  """``distances`` as a tuple of ints in [1, last], or a ValueError naming it."""
  try:
    values = tuple(distances)
  except TypeError:
    values = None
  if values is None or any(isinstance(k, (bool, np.bool_)) or np.ndim(k) or
                           not np.issubdtype(np.asarray(k).dtype, np.integer) for k in values):
    raise ValueError(f'distances: expected a sequence of ints, got {distances!r}')
  values = tuple(int(k) for k in values)
  if any(not 1 <= k <= last for k in values):
    bound = 'ints >= 1' if last == math.inf else f'values in [1, T - 1] = [1, {last}]'
    raise ValueError(f'distances: expected {bound}, got {values}')
  return values


def gradient_norm_profile(gradients: jax.typing.ArrayLike, distances: Any,
                          lengths: jax.typing.ArrayLike | None = None) -> jax.Array:
  """||dL/dh_{T-k}|| / ||dL/dh_T|| for each k in ``distances``.

  With ``lengths``, T is each sequence's own last step (``lengths - 1``), and
  distance k counts only the sequences longer than k, in the numerator and
  the denominator alike.

  Args:
    gradients: ``<float32>[B, T, H]`` from ``state_gradients``; norms are taken
      over the batch and hidden axes together.
    distances: ints k with 1 <= k < T.
    lengths: optional ``<int32>[B]`` true lengths in [1, T] (values checked
      when concrete).

  Returns:
    ``<float32>[len(distances)]``, dimensionless ratios (empty for no
    distances); NaN where no sequence is longer than k.

  Raises:
    ValueError: for gradients not of rank 3, distances that are not ints in
      [1, T - 1], or lengths not ``<int>[B]`` in [1, T].
  References:
    Pascanu, Mikolov & Bengio (2013), eq. 5-7; ``docs/reference_numbers.md``
    (the gradient-norm table).
  """
  if jnp.ndim(gradients) != 3:
    raise ValueError(f'gradients: expected rank 3 [B, T, H], got shape {jnp.shape(gradients)}')
  gradients = jnp.asarray(gradients)
  last = gradients.shape[1] - 1
  distances = _checked_distances(distances, last)
  if lengths is not None:
    recurrence.check_inputs(gradients, gradients, lengths)
    if not isinstance(lengths, jax.core.Tracer) and np.size(lengths) and np.min(lengths) < 1:
      raise ValueError(f'lengths: expected values in [1, T] = [1, {last + 1}], got min '
                       f'{np.min(lengths)}')
  if not distances:
    return jnp.zeros((0,), gradients.dtype)
  # Each ratio from the two norms' scaled forms (``norms.norm_ratio``): a ratio below the
  # dtype's largest value is finite though ||dL/dh_{T-k}|| over the batch is past it.
  if lengths is None:
    return jnp.stack([norms_.norm_ratio(gradients[:, last - k], gradients[:, last],
                                        axis=(0, 1)) for k in distances])
  lengths = recurrence.as_lengths(lengths, last + 1)
  aligned = recurrence.reverse_within_lengths(gradients, lengths)  # [b, k] = step len_b - 1 - k
  ratios = []
  for k in distances:
    counted = (lengths > k)[:, None]
    ratios.append(norms_.norm_ratio(jnp.where(counted, aligned[:, k], 0.0),
                                    jnp.where(counted, aligned[:, 0], 0.0), axis=(0, 1)))
  return jnp.stack(ratios)


class Probe(NamedTuple):
  """Where a model's gradient-norm profile is measured: a recurrence and the loss
  as a function of its states (everything else of the model held fixed).

  ``profile`` reruns the recurrence with a zero perturbation on each state
  (``state_gradients``), so any model whose loss reads one recurrence's
  states can be probed: an LM (the loss at the last position), a classifier
  (the loss of the last state), the encoder of a seq2seq model.
  """
  cell: Callable  # cell(params, carry, x) -> (carry, y), carry a single [B, H] array
  params: Any  # the cell's params
  inputs: jax.Array  # <float32>[B, T, d]: the recurrence's inputs
  initial_state: jax.Array  # <float32>[B, H]
  loss: Callable  # loss(states <float32>[B, T, H]) -> scalar, in nats
  lengths: Any = None  # optional <int32>[B]: each sequence's last step is lengths - 1


def profile(probe: Probe, distances: Any) -> jax.Array:
  """``gradient_norm_profile`` of a ``Probe``: ``<float32>[len(distances)]``."""
  _, gradients = state_gradients(probe.cell, probe.params, probe.inputs, probe.initial_state,
                                 probe.loss, probe.lengths)
  return gradient_norm_profile(gradients, distances, probe.lengths)


def recurrent_matrix(cell_params: dict) -> jax.Array:
  """The ``[H, H]`` recurrent matrix of a cell whose spectral radius is reported:
  the Elman cell's W_hh; for GRU and LSTM (PyTorch's gate order) the block of
  W_h that feeds the candidate, GRU's n and LSTM's g (block 2 of 3 and of 4)."""
  if 'W_hh' in cell_params:
    return cell_params['W_hh']
  hidden = cell_params['W_h'].shape[0]
  return cell_params['W_h'][:, 2 * hidden:3 * hidden]


def largest_singular_value(matrix: jax.typing.ArrayLike) -> jax.Array:
  """sigma_max of a ``[H, H]`` matrix (its spectral norm), computed on the matrix scaled by
  a power of two (``rnnjax.norms``): no overflow where sigma_max fits the dtype.

  Raises:
    ValueError: for a matrix that is not square ``[H, H]``, H >= 1.
  """
  shape = jnp.shape(matrix)
  if len(shape) != 2 or shape[0] != shape[1] or not shape[0]:
    raise ValueError(f'matrix: expected a square [H, H] array, H >= 1, got shape {shape}')
  return norms_.spectral_norm(matrix)


def jacobian_product_norms(states: jax.typing.ArrayLike, w_hh: jax.typing.ArrayLike,
                           distances: Any,
                           activation: str = 'tanh') -> tuple[jax.Array, jax.Array]:
  """Spectral norms of the Jacobian products that carry gradients back in time.

  For the last step t = T - 1 and each distance n in ``distances``, the norm of
  dh_t/dh_{t-n} = prod_{j=t-n+1..t} diag(phi'_j) W_hh (column layout; in
  rnnjax's row layout the same matrix transposed, which has the same norm),
  computed from the stored states, beside the bound sigma_max(W_hh)^n
  (||diag(phi'_j)|| <= 1 for tanh and relu).

  Args:
    states: ``<float32>[B, T, H]`` states of an Elman network.
    w_hh: ``<float32>[H, H]``.
    distances: ints 1 <= n <= T - 1 (the product needs h_{t-n}).
    activation: 'tanh', 'relu' or 'linear'.

  Returns:
    ``(norms <float32>[B, len(distances)], bounds <float32>[len(distances)])``.

  Raises:
    ValueError: for states not of rank 3, w_hh not [H, H], or distances that
      are not ints in [1, T - 1] (at least one).

  References:
    Pascanu, Mikolov & Bengio (2013), eq. 7; ``docs/reference_numbers.md``
    (why the product explodes or vanishes).
  """
  if jnp.ndim(states) != 3:
    raise ValueError(f'states: expected rank 3 [B, T, H], got shape {jnp.shape(states)}')
  states = jnp.asarray(states)
  hidden = states.shape[2]
  if jnp.shape(w_hh) != (hidden, hidden):
    raise ValueError(f'w_hh: expected shape [H, H] = ({hidden}, {hidden}), got {jnp.shape(w_hh)}')
  w_hh = jnp.asarray(w_hh)
  distances = _checked_distances(distances, states.shape[1] - 1)
  if not distances:
    raise ValueError('distances: expected at least one distance, got none')
  longest = max(distances)
  derivatives = cells.activation_derivative(states, activation)  # [B, T, H]
  # Row layout: a perturbation e of h_{t-n} reaches h_t as e M_n with
  # M_n = W D_{t-n+1} W D_{t-n+2} ... W D_t, so M_{n+1} = W D_{t-n} M_n. M_n is carried as
  # 2^e P with P's entries below 1 (``norms.scale_exponent``; e an int, no rounding): P stays
  # in range, and ||M_n|| = 2^e ||P|| is inf only where it is past the dtype's range
  # (rho = 1.5 passes float32's in about 220 steps).
  def one_sequence(derivative: jax.Array) -> jax.Array:
    def step(carry: tuple[jax.Array, jax.Array], d: jax.Array
             ) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
      product, exponent = carry
      product = (w_hh * d[None, :]) @ product
      shift = norms_.scale_exponent(jnp.max(jnp.abs(product)))
      product, exponent = norms_.ldexp(product, -shift), exponent + shift
      return (product, exponent), norms_.ldexp(norms_.spectral_norm(product), exponent)
    reversed_derivatives = derivative[::-1][:longest]  # D_t, D_{t-1}, ...
    start = (jnp.eye(w_hh.shape[0], dtype=w_hh.dtype), jnp.zeros((), jnp.int32))
    _, norms = jax.lax.scan(step, start, reversed_derivatives)
    return norms  # norms[n - 1] = ||M_n||
  norms = jax.vmap(one_sequence)(derivatives)
  index = jnp.asarray(distances) - 1
  bounds = largest_singular_value(w_hh) ** jnp.asarray(distances, w_hh.dtype)
  return norms[:, index], bounds


def growth_rate(ratios: jax.typing.ArrayLike, distances: Any) -> jax.Array:
  """Per-step growth (||dL/dh_{t-k}|| / ||dL/dh_t||)^(1/k) for each k.

  Below 1 the gradient vanishes geometrically, above 1 it explodes; compare
  with the spectral radius rho(W_hh) and sigma_max(W_hh).

  Args:
    ratios: ``[..., len(distances)]`` profile ratios (``gradient_norm_profile``).
    distances: the k of each ratio.

  Returns:
    ``[..., len(distances)]`` per-step rates.

  Raises:
    ValueError: for distances that are not ints >= 1, one per ratio.
  References:
    Pascanu, Mikolov & Bengio (2013), section 2.1 (the product of Jacobians
    shrinks or grows geometrically); its long-run rate is the largest
    Lyapunov exponent (``rnnjax.lyapunov``).
  """
  distances = _checked_distances(distances, math.inf)
  if jnp.shape(ratios)[-1:] != (len(distances),):
    raise ValueError(f'ratios: expected a last axis of len(distances) = {len(distances)}, got '
                     f'shape {jnp.shape(ratios)}')
  return jnp.asarray(ratios) ** (1.0 / jnp.asarray(distances, jnp.float32))
