"""Lyapunov exponents of a recurrent network along a driven trajectory, and gradient flossing.

The gradient of a late loss with respect to an early state is a product of
the Jacobians D_t = dh_t/dh_{t-1} along the trajectory (``diagnostics``); the
Lyapunov exponents are the long-run growth rates of such products,

  lambda_i = lim (1 / T) log sigma_i(D_1 D_2 ... D_T)   (nats per step),

sigma_i the i-th singular value: lambda_1 > 0 means perturbations (and
gradients) explode along the trajectory, lambda_1 < 0 that they vanish, and
the number of exponents near 0 says how many directions carry a gradient
far. They are computed as Benettin et al. (1980) do: k orthonormal tangent
vectors Q (the columns of an ``[n, k]`` matrix, n the size of the flattened
carry) are carried along the trajectory by the Jacobian of the cell,
Q <- D_t Q (Jacobian-vector products of the cell with respect to its carry,
``jax.linearize``: any cell, no derivative written by hand), and every
``reorthonormalize_every`` steps re-orthonormalised by a QR decomposition,
Q R = D Q; the logarithms log |R_ii| summed after a transient and divided by
the steps counted are the exponents, sorted descending. The QR keeps the
vectors from collapsing onto the most expanding direction and from
overflowing; between two decompositions the vectors grow by at most the
product of the Jacobians of the steps in between, so a few steps apart is
enough where that product stays in the dtype's range.

Gradient flossing (Engelken 2023) adds sum_i (lambda_i - target)^2 over the
top k exponents to the loss (or minimises it alone before training), which
drives the top exponents towards the target, 0: gradients that neither
explode nor vanish along the directions of those exponents. The exponents
are differentiable functions of the params (through the Jacobians and the
QR decompositions), so ``jax.grad`` of ``flossing_loss`` is the flossing
gradient.

Notation: B batch, T steps, d input features, n carry size (H for Elman and
GRU, 2 H for LSTM's (h, c)), k exponents.

References:
  Benettin, Galgani, Giorgilli & Strelcyn (1980), "Lyapunov characteristic
  exponents for smooth dynamical systems and for Hamiltonian systems; a method
  for computing all of them", Meccanica 15 (the QR method).
  Engelken, Wolf & Abbott (2023), "Lyapunov spectra of chaotic recurrent
  neural networks", arXiv 2006.02427 (the algorithm for RNNs, the interval
  between reorthonormalisations, the transient).
  Engelken (2023), "Gradient flossing: improving gradient descent through
  dynamic control of Jacobians", NeurIPS (arXiv 2312.17306).
"""

from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from rnnjax import checks
from rnnjax import dtypes
from rnnjax import recurrence

__all__ = ['lyapunov_spectrum', 'flossing_loss']

Cell = Callable[[Any, Any, jax.Array], tuple[Any, jax.Array]]


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
  if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or
      value < low or (high is not None and value > high)):
    bound = f'an int >= {low}' if high is None else f'an int in [{low}, {high}]'
    raise ValueError(f'{name}: expected {bound}, got {value!r}')
  return int(value)


def _orthonormal_start(key: jax.Array, size: int, k: int, dtype: Any) -> jax.Array:
  """``[size, k]`` orthonormal columns drawn at random (QR of a Gaussian matrix)."""
  q, r = jnp.linalg.qr(jax.random.normal(key, (size, k), dtype))
  return q * jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0).astype(dtype)


def lyapunov_spectrum(cell: Cell, params: Any, inputs: jax.typing.ArrayLike,
                      initial_state: Any = None, k: int = 1, transient: int = 0,
                      reorthonormalize_every: int = 1,
                      lengths: jax.typing.ArrayLike | None = None,
                      key: jax.Array | None = None, through_states: bool = True) -> jax.Array:
  """The k largest Lyapunov exponents of ``cell`` along the trajectory each sequence drives.

  For each sequence b the carry runs from ``initial_state[b]`` through
  ``cell(params, carry, inputs[b, t])``; k tangent vectors follow it by the
  Jacobian-vector products of the cell with respect to the carry, and are
  re-orthonormalised by QR every ``reorthonormalize_every`` steps and at the
  end of the transient. The exponent i is the sum of log |R_ii| over the
  steps after the transient divided by their number (module docstring).
  The batch mean is ``lyapunov_spectrum(...).mean(axis=0)``. Works under
  ``jax.jit`` (all but params, inputs, initial_state, lengths and key
  static), ``jax.vmap`` and ``jax.grad``.

  Args:
    cell: ``cell(params, carry, x) -> (carry, y)`` (``rnnjax.cells``), the
      carry any pytree of ``[B, ...]`` leaves (Elman, GRU: ``[B, H]``; LSTM:
      ``(h, c)``), flattened to n numbers per sequence.
    params: the cell's params. The computation runs in their floating dtype,
      float32 for bfloat16 and float16 params (their values, exactly: the QR
      decompositions need at least float32; ``dtypes.precise_dtype``).
    inputs: ``<float>[B, T, d]``.
    initial_state: the carry at step 0, leaves ``[B, ...]``; None (default):
      zeros (``recurrence.zero_state``).
    k: how many exponents, an int in [1, n]; 1 (default): the largest.
    transient: steps discarded first, an int in [0, T - 1]: the trajectory
      and the tangent vectors settle (onto the attractor, onto the most
      expanding directions) before the growth is counted.
    reorthonormalize_every: the steps between two QR decompositions, an int
      >= 1; 1 is safest, a few steps are cheaper where the Jacobian products
      of that many steps stay in the dtype's range.
    lengths: optional ``<int>[B]`` in [0, T]: steps t >= lengths[b] are
      left out (the carry and the tangent vectors stop there), and the
      exponents of sequence b are its sums over lengths[b] - transient
      steps; NaN where lengths[b] <= transient.
    key: the ``jax.random`` key of the random orthonormal tangent vectors
      at step 0 (one draw for all sequences); None is ``jax.random.key(0)``.
      The exponents do not depend on it after a long enough transient.
    through_states: a bool, whether the gradient with respect to ``params`` flows
      through the trajectory (the states' dependence on the params) as well
      as through each step's Jacobian and the tangent vectors. False holds
      the states constant (``stop_gradient``): each step's term log |R_ii|
      then depends on the params through its own Jacobian and the
      orthonormal tangent vectors only, and its gradient stays bounded where
      the trajectory is chaotic (there the full gradient grows like
      exp(lambda_1 T) with the window, ``flossing_loss``). The values are
      the same either way.

  Returns:
    ``<float>[B, k]``, in the params' dtype (float32 for params without a
    float): the exponents in nats per step,
    sorted descending, per sequence; -inf where the Jacobians annihilate a
    tangent vector (rank below k: tanh saturated to 1.0 in the dtype, relu
    units all off), and then the gradient is NaN.

  Raises:
    ValueError: as ``recurrence.scan`` (inputs not of rank 3, an initial
      state of another batch size or not the carry the cell returns, bad
      lengths; a ``cell`` that is no cell, ``checks.cell``), for k not in
      [1, n], transient not in [0, T - 1], reorthonormalize_every not an int
      >= 1, through_states not a bool, or carry leaves of more than one
      floating dtype.

  References:
    Benettin et al. (1980); Engelken, Wolf & Abbott (2023), arXiv 2006.02427.
  """
  through_states = checks.flag('through_states', through_states)
  initial_state = recurrence.with_initial_state(cell, params, inputs, initial_state)
  recurrence.check_inputs(inputs, initial_state, lengths)
  given = dtypes.compute_dtype(params) or jnp.dtype(jnp.float32)
  dtype = dtypes.precise_dtype(given)
  params = dtypes.cast_floating(params, dtype)
  sequences: jax.Array
  sequences, initial_state = dtypes.cast_floating((jnp.asarray(inputs), initial_state), dtype)
  recurrence.check_carry(cell, params, sequences, initial_state)
  batch, steps = sequences.shape[:2]
  one_carry = jax.tree_util.tree_map(lambda leaf: leaf[:1], initial_state)
  size = ravel_pytree(one_carry)[0].size
  k = _check_int('k', k, 1, size)
  if steps == 0:
    raise ValueError(f'inputs: expected T >= 1 steps, got shape {sequences.shape}')
  transient = _check_int('transient', transient, 0, steps - 1)
  every = _check_int('reorthonormalize_every', reorthonormalize_every, 1)
  lengths_array = (jnp.full((batch,), steps, jnp.int32) if lengths is None
                   else cast(jax.Array, recurrence.as_lengths(lengths, steps)))
  # QR after step t where the interval ends, at the end of the transient and at the last step
  t = np.arange(steps)
  decompose = ((t + 1 - transient) % every == 0) | (t == transient - 1) | (t == steps - 1)
  counted = t >= transient
  start = _orthonormal_start(jax.random.key(0) if key is None else key, size, k, dtype)

  def one_sequence(x: jax.Array, carry: Any, length: jax.Array) -> jax.Array:
    """Exponents of one sequence: ``x [T, d]``, carry leaves ``[1, ...]``."""
    flat, unravel = ravel_pytree(carry)

    def step(state: tuple[jax.Array, jax.Array, jax.Array],
             inputs_t: tuple[jax.Array, jax.Array, jax.Array, jax.Array]
             ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], None]:
      flat, tangents, sums = state
      x_t, t, decompose_t, counted_t = inputs_t
      alive = t < length
      advance = lambda v: ravel_pytree(cell(params, unravel(v), x_t[None])[0])[0]
      new_flat, push = jax.linearize(advance, flat if through_states else jax.lax.stop_gradient(flat))
      new_tangents = jax.vmap(push, in_axes=1, out_axes=1)(tangents)

      def orthonormalize(tangents: jax.Array) -> tuple[jax.Array, jax.Array]:
        q, r = jnp.linalg.qr(tangents)
        return q, jnp.log(jnp.abs(jnp.diagonal(r)))

      new_tangents, logs = jax.lax.cond(decompose_t, orthonormalize,
                                        lambda q: (q, jnp.zeros((k,), dtype)), new_tangents)
      sums = sums + jnp.where(alive & counted_t, logs, 0.0)
      return (jnp.where(alive, new_flat, flat), jnp.where(alive, new_tangents, tangents),
              sums), None

    # the last real step of a shorter sequence is decomposed by hand below
    state = (flat, start, jnp.zeros((k,), dtype))
    (_, tangents, sums), _ = jax.lax.scan(
        step, state, (x, jnp.arange(steps), jnp.asarray(decompose), jnp.asarray(counted)))
    # growth since the last decomposition (a sequence ending between two): log |R_ii| of Q
    _, r = jnp.linalg.qr(tangents)
    sums = sums + jnp.log(jnp.abs(jnp.diagonal(r)))
    return -jnp.sort(-sums / (length - transient).astype(dtype))

  carries = jax.tree_util.tree_map(lambda leaf: leaf[:, None], initial_state)
  exponents = jax.vmap(one_sequence)(sequences, carries, lengths_array)
  return jnp.where((lengths_array > transient)[:, None], exponents, jnp.nan).astype(given)


def flossing_loss(cell: Cell, params: Any, inputs: jax.typing.ArrayLike,
                  initial_state: Any = None, k: int = 1, target: float = 0.0, transient: int = 0,
                  reorthonormalize_every: int = 1, lengths: jax.typing.ArrayLike | None = None,
                  key: jax.Array | None = None, through_states: bool = True) -> jax.Array:
  """Gradient flossing: the mean over sequences of sum_i (lambda_i - target)^2, i <= k.

  The top k Lyapunov exponents (``lyapunov_spectrum``) of the trajectory
  each sequence drives are pulled towards ``target`` (0: gradients that
  neither explode nor vanish); ``jax.grad`` with respect to ``params`` is
  the flossing gradient. Add ``weight * flossing_loss(...)`` to a training
  loss, or minimise it alone before training (Engelken 2023, "flossing
  before training"). The squares are summed over the k exponents; the
  reference implementation takes their mean, the same minimiser with a
  gradient k times smaller.

  From a chaotic start (lambda_1 > 0) the gradient through the trajectory
  grows like exp(lambda_1 T) with the window's T steps (a time average
  along a chaotic trajectory, differentiated; Lea, Allen & Haine 2000), and
  no optimizer step from it is useful. The rule for such a start: short
  windows (the reference code flosses on 55 steps for tasks of 300) and
  ``through_states=False``, which holds the states constant so that each
  step's term depends on the params through its own Jacobian and the
  orthonormal tangent vectors, with a bounded gradient. With windows of 30
  steps (10 of them transient), 16 sequences a step and Adam at 0.03
  (cosine-decayed to 0.003 over 300 steps), lambda_1 of a 32-unit tanh
  network at spectral radius 3 reaches |lambda_1| < 0.05 within 300 steps
  (``docs/diagnostics.md``, tested there and in tests/test_lyapunov.py).

  Args:
    cell, params, inputs, initial_state, k, transient, reorthonormalize_every, lengths, key:
      as ``lyapunov_spectrum``.
    target: the exponent aimed at, in nats per step (a float or a 0-d array).
    through_states: as ``lyapunov_spectrum``: False holds the states constant
      in the gradient (the rule for a chaotic start, above).

  Returns:
    ``<float>[]`` >= 0, in (nats per step)^2, in the params' dtype. With
    ``lengths``, sequences with lengths[b] <= transient are left out of the
    mean (NaN if none is left).

  Raises:
    ValueError: as ``lyapunov_spectrum``.

  References:
    Engelken (2023), "Gradient flossing: improving gradient descent through
    dynamic control of Jacobians", NeurIPS (arXiv 2312.17306): the loss of
    squared top exponents, flossing before and during training; its
    reference code, github.com/RainerEngelken/GradientFlossing,
    GradientFlossing_ExampleCode.jl (mean(abs2.(ls .- lstarget)), flossing
    windows Tp = 55). Lea, Allen & Haine (2000), "Sensitivity analysis of
    the climate of a chaotic system", Tellus A 52 (the gradient of a time
    average along a chaotic trajectory grows exponentially with its length).
  """
  exponents = lyapunov_spectrum(cell, params, inputs, initial_state, k, transient,
                                reorthonormalize_every, lengths, key, through_states)
  kept = jnp.isfinite(exponents[:, 0])
  squares = jnp.sum((jnp.where(kept[:, None], exponents, 0.0) - target) ** 2, axis=1)
  return jnp.sum(jnp.where(kept, squares, 0.0)) / jnp.sum(kept).astype(squares.dtype)
