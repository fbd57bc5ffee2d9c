"""The Elman recurrence evaluated parallel in time: DEER, quasi-DEER, ELK and quasi-ELK.

The states of h_t = F_t(h_{t-1}) = phi(x_t W_xh + h_{t-1} W_hh + b) for all T
steps are the solution of one system of T H equations, h = F(h), which Newton's
method solves. Linearised around the current trajectory h^(i), the recurrence
is linear,

  h_t = h_{t-1} A_t + u_t,   A_t = W_hh diag(phi'(a_t)),
  u_t = phi(a_t) - h^(i)_{t-1} A_t,   a_t = x_t W_xh + h^(i)_{t-1} W_hh + b,

and a linear recurrence is solved exactly in O(log T) depth by a parallel prefix
scan over the pairs (A_t, u_t), composed as (A, u) then (A', u') = (A A', u A' + u')
(``jax.lax.associative_scan``). Its solution is h^(i+1). DEER keeps the full
[H, H] matrices A_t: O(T H^2) memory and O(T H^3) work per iteration, quadratic
convergence near the solution. Quasi-DEER keeps only their diagonals,
diag(W_hh) * phi'(a_t): O(T H) memory and elementwise work, linear convergence
to the same fixed point. Either is exact after at most T iterations in exact
arithmetic: h_0 is given, so step 1 of h^(1) is exact, and if steps 1..k of
h^(i) are exact, the update leaves them unchanged and makes step k + 1 exact.

ELK and quasi-ELK (Gonzalez et al. 2024) damp the step: a trust-region
penalty damping |h - h^(i)|^2 is added to the linear system, which makes the
step the estimate of a linear-Gaussian state-space model (the linearised
recurrence with unit noise, the current iterate observed with variance
1 / damping) and is solved by a parallel Kalman filter (``_damped_solve``;
Sarkka & Garcia-Fernandez 2021). Where the linearised recurrence expands
(rho(W_hh) > 1 and tanh unsaturated, as along the zero guess), DEER's prefix
products pass float32's range (rho = 1.5 from T = 256: 1.5^256 = 1e45), while
the filter's gain holds each step's growth to about 1 / sqrt(damping). The
damped methods are not exact after T iterations; their default cap is 2 T.
Their damping is a parameter; Gonzalez et al. choose it by a sweep over a log
grid for each problem (``damping_sweep``). On the grid of
experiments/parallel_in_time (Gaussian W_hh, drive of std 0.125) the fewest
iterations came at the smallest damping tried that keeps the products in
range, 1e-6 (the reference code's ELK, sigmasq = 1e6): ``DEFAULT_DAMPING``.

Convergence. A trajectory's residual r_t = h_t - F_t(h_{t-1}) is not its
error e_t = h_t - h*_t: the error solves e_t = e_{t-1} A_t + r_t to first
order, so e = (I - N)^-1 r (N the block subdiagonal of the A_t), which
amplifies the residual by up to 1 / (1 - contraction) where the recurrence
contracts and without bound where it expands. (I - N)^-1 r is the Newton step
from the trajectory itself, so each DEER iteration estimates the error of the
iterate it starts from: DEER stops at, and returns, the first iterate whose
step is within the tolerance. The other methods' steps are no such estimate
(quasi-DEER's diagonal solve, the damped step): they iterate until the
residual test holds, then one full-Jacobian Newton solve estimates the error;
where that fails but is finite, the Newton step is taken (the iterate is close)
and they go on. A sequence has converged when, at every step and unit,

  |r_t| <= tolerance (1 + |h_t|)   and   |e_t| + |e_t|^2 <= tolerance (1 + |h_t|),

e_t the estimate (the square covers its second-order term; tanh's curvature
is at most 0.77). The tolerance is refused at 0.1 and above (the first-order
estimate is off by up to 45% of the error at 0.4) and below the dtype's eps
(no estimate in the dtype can certify it).

The residual is evaluated in float64 (the drive x_t W_xh + b too), whatever
the states' dtype; the rest of the solve keeps it. A float32 residual cannot
see the float32 rounding of F_t, about eps a step, which the linearised
recurrence amplifies like any residual (over long, slowly contracting
sequences to far more than the tolerance). With the float64 residual the
estimate is the error of the float32 states from the exact recurrence, and
Newton's step h - e, a correction by it, is iterative refinement in mixed
precision (Moler 1967): the states it certifies can be closer to the exact
recurrence than a float32 sequential scan. Where the linearised dynamics expand (rho(W_hh) well
above 1), rounding in the prefix products grows along the sequence: at rho = 3
(chaotic with tanh) DEER needs most of the T iterations and may miss the
tolerance even at T, and from a poor guess the products can overflow (rho = 2
at T = 400, rho = 6 at T = 100); the iterate is then non-finite, its residual
inf, and the loop stops there. In chaos the states are not determined to
float32's precision at all: a sequential evaluation and a parallel one are
both float32 shadows of the recurrence and part by O(1) after some tens of
steps, and the error estimate says so (it grows like the products of the
Jacobians).

With ``lengths`` a step t >= length keeps the state: there F_t(h) = h, A_t = I
and u_t = 0 (and ELK observes nothing), so the trajectory carries the state at
lengths - 1 to step T - 1.

Gradients come from the implicit function theorem at the fixed point h* = F(h*)
(a ``jax.custom_vjp``; the iterations are not differentiated): the
cotangents lambda_t of the states solve the transposed linear system, a
recurrence backwards in time,

  lambda_t = g_t + (lambda_{t+1} * phi'(a_{t+1})) W_hh^T   (lambda_{T+1} = 0),

solved by the same prefix scan, reversed, with full matrices for every method
(a diagonal would give a wrong gradient, not a slower one; the fixed point,
and so the gradient, does not depend on the method). Then, as in ``fused``,
da_t = lambda_t * phi'(a_t), dW_hh = sum_t h_{t-1}^T da_t, the drive
x_t W_xh + b gets da_t and h_0 gets da_1 W_hh^T. A sequence whose forward
iteration did not converge has no fixed point to differentiate at: its
cotangents are NaN, which reach its inputs and initial state and the shared
weights, so a non-converged solve cannot pass a wrong gradient on silently.

Notation: B batch, T steps, d input features, H hidden units.

References:
  Lim, Zhu, Selfridge & Kasim (2024), "Parallelizing non-linear sequential
  models over the sequence length" (ICLR; DEER, its implicit gradient).
  Gonzalez, Warrington, Smith & Linderman (2024), "Towards scalable and stable
  parallelization of nonlinear RNNs" (NeurIPS, arXiv 2407.19115; quasi-DEER,
  at most T iterations, ELK and quasi-ELK); reference code
  github.com/lindermanlab/elk, elk/algs/elk.py.
  Sarkka & Garcia-Fernandez (2021), "Temporal parallelization of Bayesian
  smoothers", IEEE Transactions on Automatic Control 66(1) (the parallel
  Kalman filter).
  Moler (1967), "Iterative refinement in floating point", J. ACM 14(2) (the
  residual in higher precision, the correction in the working one).
  Blelloch (1990), "Prefix sums and their applications"; Martin & Cundy (2018),
  "Parallelizing linear recurrent neural nets over sequence length" (the scan).
"""

import functools
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import dtypes
from rnnjax import recurrence

METHODS = ('deer', 'quasi', 'elk', 'quasi_elk')
DAMPED_METHODS = ('elk', 'quasi_elk')
DEFAULT_DAMPING = {'elk': 1e-6, 'quasi_elk': 1e-6}
MAX_TOLERANCE = 0.1
DAMPING_GRID = (1e-8, 1e-6, 1e-4, 1e-2, 1.0)

__all__ = ['METHODS', 'DAMPED_METHODS', 'DEFAULT_DAMPING', 'DAMPING_GRID', 'MAX_TOLERANCE',
           'elman_deer', 'damping_sweep']

_Pair = tuple[jax.Array, jax.Array]  # (A or its diagonal, u) of h -> h A + u
_Element = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]  # (A, b, C, eta, J)
_Evaluation = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]  # of _newton
_Result = tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]  # of _newton

# Full float32 products in the solver and its gradient: at JAX's default precision a GPU may
# round matmul inputs to TF32 (a TPU to bfloat16), about 1e-3, and no residual test at 1e-5
# would pass. (On CPU the default is full precision already.)
HIGHEST = jax.lax.Precision.HIGHEST


def _compose_matrices(earlier: _Pair, later: _Pair) -> _Pair:
  """(A, u) then (A', u'): h -> (h A + u) A' + u' = h (A A') + (u A' + u').

  References:
    Blelloch (1990); Martin & Cundy (2018) (there in column layout).
  """
  a_earlier, u_earlier = earlier
  a_later, u_later = later
  return (jnp.matmul(a_earlier, a_later, precision=HIGHEST),
          jnp.einsum('...i,...ij->...j', u_earlier, a_later, precision=HIGHEST) + u_later)


def _compose_diagonals(earlier: _Pair, later: _Pair) -> _Pair:
  """``_compose_matrices`` for diagonal A, stored as its diagonal ``[..., H]``."""
  a_earlier, u_earlier = earlier
  a_later, u_later = later
  return a_earlier * a_later, u_earlier * a_later + u_later


def _inverse(matrices: jax.Array) -> jax.Array:
  """The inverse of each ``[..., n, n]`` matrix, by Gauss-Jordan elimination with partial
  pivoting in plain array operations (n steps, each on the whole batch).

  Not ``jnp.linalg`` or ``jax.scipy.linalg``: on XLA:CPU those are LAPACK calls, and jaxlib
  0.10.0-0.10.2 run a batched LAPACK call as chunks on the intra-op thread pool, each chunk
  blocking a pool thread until the call ends; where a program runs several such calls at once
  (the filter's elements, every level of the parallel scan) every thread of a small pool waits
  and the process hangs (H = 16, T = 1,024 on 2 cores).

  References:
    Golub & Van Loan (2013), "Matrix computations", 4th ed., sections 3.2 (Gaussian
    elimination, partial pivoting) and 3.4.
  """
  size = matrices.shape[-1]
  rows = jnp.arange(size)
  eye = jnp.eye(size, dtype=matrices.dtype)

  def eliminate(k: jax.Array, augmented: jax.Array) -> jax.Array:
    column = jnp.take(augmented, k, axis=-1)[..., :size]  # [..., n] of the left block
    candidates = jnp.where(rows >= k, jnp.abs(column), -1.0)
    # the first row of the largest candidate, one-hot (no argmax: its index dtype follows the
    # x64 flag, which ``elman_deer`` traces this under)
    largest = candidates == jnp.max(candidates, axis=-1, keepdims=True)
    is_pivot = largest & (jnp.cumsum(largest.astype(matrices.dtype), axis=-1) == 1)
    is_k = rows == k  # [..., n] one-hot rows
    row_k = jnp.take(augmented, k, axis=-2)  # [..., 2n]
    row_pivot = jnp.sum(jnp.where(is_pivot[..., None], augmented, 0.0), axis=-2)
    swapped = augmented + ((is_k.astype(augmented.dtype) - is_pivot.astype(augmented.dtype)
                            )[..., None] * (row_pivot - row_k)[..., None, :])
    row = row_pivot / jnp.take(row_pivot, k, axis=-1)[..., None]  # the pivot row, scaled
    factors = jnp.where(is_k, 0.0, jnp.take(swapped, k, axis=-1))  # [..., n]
    eliminated = swapped - factors[..., None] * row[..., None, :]
    return jnp.where(is_k[..., None], row[..., None, :], eliminated)

  augmented = jnp.concatenate([matrices, jnp.broadcast_to(eye, matrices.shape)], axis=-1)
  return jax.lax.fori_loop(0, size, eliminate, augmented)[..., size:]


def _compose_filter_matrices(earlier: _Element, later: _Element) -> _Element:
  """Two elements of the parallel Kalman filter, full covariances (column layout).

  An element (A, b, C, eta, J) is p(s_j | s_{i-1}, y_{i..j}) = N(A s_{i-1} + b, C) together with
  the information N^-1(eta, J) that y_{i..j} carry about s_{i-1}; with M = (I + C_i J_j)^-1,

    A = A_j M A_i,  b = A_j M (b_i + C_i eta_j) + b_j,  C = A_j M C_i A_j^T + C_j,
    eta = A_i^T M^T (eta_j - J_j b_i) + eta_i,  J = A_i^T M^T J_j A_i + J_i.

  References:
    Sarkka & Garcia-Fernandez (2021), "Temporal parallelization of Bayesian smoothers",
    IEEE Transactions on Automatic Control 66(1) (the filtering elements and their
    associative operator); lindermanlab/elk, elk/utils/parallel_kalman_scalar.py (the same
    operator for scalars).
  """
  a_i, b_i, c_i, eta_i, j_i = earlier
  a_j, b_j, c_j, eta_j, j_j = later
  mm = functools.partial(jnp.matmul, precision=HIGHEST)
  mv = lambda m, v: jnp.einsum('...ij,...j->...i', m, v, precision=HIGHEST)
  transpose = lambda m: jnp.swapaxes(m, -1, -2)
  size = a_i.shape[-1]
  # M = (I + C_i J_j)^-1 once, for M and M^T (no LAPACK call: ``_inverse``)
  inverse = _inverse(jnp.eye(size, dtype=a_i.dtype) + mm(c_i, j_j))
  forward = mm(inverse, jnp.concatenate(
      [a_i, (b_i + mv(c_i, eta_j))[..., None], mm(c_i, transpose(a_j))], axis=-1))
  backward = mm(transpose(inverse), jnp.concatenate(
      [(eta_j - mv(j_j, b_i))[..., None], mm(j_j, a_i)], axis=-1))
  a = mm(a_j, forward[..., :size])
  b = mv(a_j, forward[..., size]) + b_j
  c = mm(a_j, forward[..., size + 1:]) + c_j
  eta = mv(transpose(a_i), backward[..., 0]) + eta_i
  j = mm(transpose(a_i), backward[..., 1:]) + j_i
  return a, b, (c + transpose(c)) / 2, eta, (j + transpose(j)) / 2


def _compose_filter_diagonals(earlier: _Element, later: _Element) -> _Element:
  """``_compose_filter_matrices`` for diagonal dynamics: every entry a scalar per unit."""
  a_i, b_i, c_i, eta_i, j_i = earlier
  a_j, b_j, c_j, eta_j, j_j = later
  shrink = 1.0 / (1.0 + c_i * j_j)
  return (a_j * shrink * a_i, a_j * shrink * (b_i + c_i * eta_j) + b_j,
          a_j * shrink * c_i * a_j + c_j, a_i * shrink * (eta_j - j_j * b_i) + eta_i,
          a_i * shrink * j_j * a_i + j_i)


def _damped_solve(jacobians: jax.Array, offset: jax.Array, observations: jax.Array,
                  damping: jax.Array, diagonal: bool) -> jax.Array:
  """ELK's damped step: the filtered means of a linear-Gaussian chain, by one parallel scan.

  The chain is the recurrence linearised at the current iterate y, with unit process noise, and
  y itself observed with noise variance 1 / damping_t:

    s_t = s_{t-1} A_t + u_t + w_t,  w_t ~ N(0, I);   y_t = s_t + v_t,  v_t ~ N(0, I / damping_t)

  (s_0 given, folded into u_1). The mean of s_t given y_1..y_t minimises the first t terms of
  sum_t |s_t - s_{t-1} A_t - u_t|^2 + damping_t |s_t - y_t|^2 (the Newton step's linear
  system plus the trust-region penalty) over s_1..s_t, and the one of the last step minimises
  all of them. Where the linearised recurrence expands, the gain (I - K_t) of the filter shrinks
  what passes from one step to the next (the prediction's covariance grows, the observation
  wins), so the step stays finite where Newton's overflows. With F_t = A_t^T (column layout),
  F_1 = 0 and kappa = damping / (1 + damping) (the Kalman gain of a unit prior variance), the
  filter's elements

    A = (1 - kappa) F,  b = u + kappa (y - u),  C = (1 - kappa) I,
    eta = kappa F^T (y - u),  J = kappa F^T F

  composed by ``_compose_filter_matrices`` hold, at prefix t, the filtered mean (b) and
  covariance (C). A step with damping 0 is not observed: the filter predicts through it (at
  padded steps A = I, u = 0, so the state is carried).

  The smoothed means (given all of y) would minimise the whole sum, the Levenberg-Marquardt
  step itself; the reference code takes the filtered ones, and so does this function: where
  DEER overflows the smoothed step stalls, since the observations after step t pin s_t to the
  old iterate wherever the recurrence expands, while the filtered step converges.

  Args:
    jacobians: ``A_t <float>[T, H, H]`` (row layout, h -> h A_t), or ``[T, H]`` diagonals.
    offset: ``u_t <float>[T, H]``.
    observations: ``y_t <float>[T, H]``, the current iterate.
    damping: ``<float>[T, 1]`` >= 0.
    diagonal: whether ``jacobians`` are diagonals.

  Returns:
    ``<float>[T, H]``, the filtered means.

  References:
    Gonzalez, Warrington, Smith & Linderman (2024), section 4 (ELK) and lindermanlab/elk,
    elk/algs/elk.py (filtered means, sigmasq = 1 / damping); Sarkka & Garcia-Fernandez
    (2021), "Temporal parallelization of Bayesian smoothers" (the elements).
  """
  gain = damping / (1.0 + damping)  # [T, 1]
  keep = 1.0 / (1.0 + damping)
  innovation = observations - offset
  if diagonal:
    dynamics = jacobians.at[0].set(0.0)
    elements = (keep * dynamics, offset + gain * innovation, jnp.broadcast_to(keep, offset.shape),
                gain * dynamics * innovation, gain * dynamics ** 2)
    return jax.lax.associative_scan(_compose_filter_diagonals, elements)[1]
  dynamics = jnp.swapaxes(jacobians, -1, -2).at[0].set(0.0)  # F_t, column layout
  eye = jnp.eye(offset.shape[-1], dtype=offset.dtype)
  elements = (keep[..., None] * dynamics, offset + gain * innovation,
              jnp.broadcast_to(keep[..., None] * eye, dynamics.shape),
              gain * jnp.einsum('tji,tj->ti', dynamics, innovation, precision=HIGHEST),
              gain[..., None] * jnp.matmul(jnp.swapaxes(dynamics, -1, -2), dynamics,
                                           precision=HIGHEST))
  return jax.lax.associative_scan(_compose_filter_matrices, elements)[1]


def _certified(error: jax.Array, residual: jax.Array, tolerance: float) -> jax.Array:
  """The convergence test: residual <= tolerance and error + error^2 <= tolerance, the
  linearised error with its second-order term (module docstring); False for NaN."""
  return (residual <= tolerance) & (error + error * error <= tolerance)


def _newton(activation: str, method: str, damping: float | None, tolerance: float,
            max_iterations: int, w_hh: jax.Array, drive: jax.Array, drive_low: jax.Array,
            initial: jax.Array, guess: jax.Array, alive: jax.Array) -> _Result:
  """DEER, quasi-DEER, ELK or quasi-ELK on one sequence, and the error estimate of its result.

  Args:
    activation, method, damping, tolerance, max_iterations: as ``elman_deer``.
    w_hh: ``<float>[H, H]``.
    drive: ``x_t W_xh + b``, ``<float>[T, H]``.
    drive_low: ``<float>[T, H]``, what the drive's rounding left out (the exact drive, as
      float64, is drive + drive_low).
    initial: ``h_0 <float>[H]``.
    guess: ``h^(0) <float>[T, H]``.
    alive: ``<bool>[T, 1]``, False at steps t >= length.

  Returns:
    ``(trajectory <float>[T, H], iterations <int32>[], converged <bool>[],
    residual <float>[], error <float>[])``: the last iterate (padded steps hold the state at
    lengths - 1), the updates made, whether residual and error estimate are within the
    tolerance, max_t |r_t| / (1 + |h_t|) and max_t |e_t| / (1 + |h_t|) of the trajectory
    (module docstring; inf where the estimate overflowed).

  References:
    Lim et al. (2024) (the iteration); Gonzalez et al. (2024) (the diagonal approximation, the
    damped step).
  """
  phi = cells.ACTIVATIONS[activation]
  eye = jnp.eye(w_hh.shape[0], dtype=w_hh.dtype)

  def scaled(difference: jax.Array, trajectory: jax.Array) -> jax.Array:
    """max |difference| / (1 + |h|), inf where not finite (a max over NaN may be -inf on CPU)."""
    ratio = jnp.abs(difference) / (1.0 + jnp.abs(trajectory))
    return jnp.where(jnp.all(jnp.isfinite(ratio)), jnp.max(ratio), jnp.inf)

  def evaluate(trajectory: jax.Array) -> _Evaluation:
    """h_{t-1}, h_{t-1} W_hh, F_t(h_{t-1}), the residual r_t = h_t - F_t(h_{t-1}) evaluated in
    float64 (returned in the trajectory's dtype) and its scaled maximum."""
    previous = jnp.concatenate([initial[None], trajectory[:-1]])
    recurrent = jnp.matmul(previous, w_hh, precision=HIGHEST)
    target = jnp.where(alive, phi(drive + recurrent), previous)
    wide = lambda x: x.astype(jnp.float64)  # traced with float64 enabled (``elman_deer``)
    exact = phi(wide(drive) + wide(drive_low) + jnp.matmul(wide(previous), wide(w_hh),
                                                          precision=HIGHEST))
    residual = (wide(trajectory) - jnp.where(alive, exact, wide(previous))).astype(
        trajectory.dtype)
    return previous, recurrent, target, residual, scaled(residual, trajectory)

  def linearize(evaluation: _Evaluation, full: bool) -> _Pair:
    """``(A_t, u_t)`` of h_t = h_{t-1} A_t + u_t, the recurrence linearised at the trajectory:
    ``[T, H, H]`` (full) or their diagonals ``[T, H]``, and u_t with h_0 A_1 in u_1 (so the
    scan's offsets are the states; at padded steps A_t = I, u_t = 0)."""
    previous, recurrent, target, _, _ = evaluation
    slope = jnp.where(alive, cells.activation_derivative(target, activation), 0.0)  # phi'(a_t)
    if full:
      jacobians = jnp.where(alive[:, :, None], w_hh * slope[:, None, :], eye)  # [T, H, H]
      offset = jnp.where(alive, target - recurrent * slope, 0.0)  # h_{t-1} A_t = h_{t-1} W phi'
      return jacobians, offset.at[0].add(jnp.matmul(initial, jacobians[0], precision=HIGHEST))
    jacobians = jnp.where(alive, jnp.diagonal(w_hh) * slope, 1.0)  # [T, H]
    offset = jnp.where(alive, target - previous * jacobians, 0.0)
    return jacobians, offset.at[0].add(initial * jacobians[0])

  def newton_step(trajectory: jax.Array, evaluation: _Evaluation) -> jax.Array:
    """The undamped Newton (DEER) iterate from a trajectory, as a correction: h - e with
    e_t = e_{t-1} A_t + r_t (full Jacobians), r the float64 residual of ``evaluate``."""
    jacobians, _ = linearize(evaluation, full=True)
    return trajectory - jax.lax.associative_scan(_compose_matrices,
                                                 (jacobians, evaluation[3]))[1]

  def method_step(trajectory: jax.Array, evaluation: _Evaluation) -> jax.Array:
    """The next iterate of ``method`` from a trajectory."""
    full = method == 'elk'
    jacobians, offset = linearize(evaluation, full)
    if method == 'quasi':
      return jax.lax.associative_scan(_compose_diagonals, (jacobians, offset))[1]
    assert damping is not None  # the damped methods have one (``elman_deer``)
    return _damped_solve(jacobians, offset, trajectory, damping * alive.astype(offset.dtype),
                         diagonal=not full)

  if method == 'deer':
    # The Newton step from h is -(I - N)^-1 r(h), the error estimate of h itself: each
    # iteration certifies the iterate it starts from, and moves on only if that fails.
    def deer_unconverged(carry: tuple[jax.Array, jax.Array, _Evaluation, jax.Array, jax.Array]
                         ) -> jax.Array:
      iterations, _, evaluation, _, error = carry
      residual = evaluation[-1]
      return ~_certified(error, residual, tolerance) & jnp.isfinite(residual) & (
          iterations < max_iterations)

    def deer_update(carry: tuple[jax.Array, jax.Array, _Evaluation, jax.Array, jax.Array]
                    ) -> tuple[jax.Array, jax.Array, _Evaluation, jax.Array, jax.Array]:
      iterations, _, _, following, _ = carry
      evaluation = evaluate(following)
      step = newton_step(following, evaluation)
      return iterations + 1, following, evaluation, step, scaled(step - following, following)

    evaluation = evaluate(guess)
    step = newton_step(guess, evaluation)
    carry = (jnp.int32(0), guess, evaluation, step, scaled(step - guess, guess))
    iterations, trajectory, evaluation, _, error = jax.lax.while_loop(
        deer_unconverged, deer_update, carry)
    residual = evaluation[-1]
    return trajectory, iterations, _certified(error, residual, tolerance), residual, error

  # The other methods' steps are no error estimates: once the residual test holds, one Newton
  # solve estimates the error; where that is too large (and finite) the Newton step is taken
  # (the iterate is close) and the method goes on from there.
  def iterate_unconverged(carry: tuple[jax.Array, jax.Array, _Evaluation]) -> jax.Array:
    iterations, _, evaluation = carry
    residual = evaluation[-1]
    return (residual > tolerance) & jnp.isfinite(residual) & (iterations < max_iterations)

  def iterate(carry: tuple[jax.Array, jax.Array, _Evaluation]
              ) -> tuple[jax.Array, jax.Array, _Evaluation]:
    iterations, trajectory, evaluation = carry
    trajectory = method_step(trajectory, evaluation)
    return iterations + 1, trajectory, evaluate(trajectory)

  def certify(carry: tuple[jax.Array, jax.Array, _Evaluation, jax.Array, jax.Array]
              ) -> tuple[jax.Array, jax.Array, _Evaluation, jax.Array, jax.Array]:
    iterations, trajectory, evaluation, _, _ = carry
    iterations, trajectory, evaluation = jax.lax.while_loop(
        iterate_unconverged, iterate, (iterations, trajectory, evaluation))
    step = newton_step(trajectory, evaluation)
    error = scaled(step - trajectory, trajectory)
    residual = evaluation[-1]
    passed = _certified(error, residual, tolerance)
    polish = ~passed & jnp.isfinite(error) & (iterations < max_iterations)
    trajectory = jnp.where(polish, step, trajectory)
    return iterations + polish, trajectory, evaluate(trajectory), error, ~polish

  carry = (jnp.int32(0), guess, evaluate(guess), jnp.asarray(jnp.nan, guess.dtype),
           jnp.asarray(False))
  iterations, trajectory, evaluation, error, _ = jax.lax.while_loop(
      lambda carry: ~carry[-1], certify, carry)
  residual = evaluation[-1]
  return trajectory, iterations, _certified(error, residual, tolerance), residual, error


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3, 4))
def _solve(activation: str, method: str, damping: float | None, tolerance: float,
           max_iterations: int, w_hh: jax.Array, drive: jax.Array, drive_low: jax.Array,
           initial: jax.Array, guess: jax.Array, alive: jax.Array) -> _Result:
  """``_newton`` over the batch: ``drive, drive_low, guess [B, T, H]``, ``initial [B, H]``,
  ``alive [B, T, 1]``; each sequence stops on its own (``jax.vmap`` of the loop)."""
  return _solve_forward(activation, method, damping, tolerance, max_iterations, w_hh, drive,
                        drive_low, initial, guess, alive)[0]


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _batched_newton(activation: str, method: str, damping: float | None, tolerance: float,
                    max_iterations: int, w_hh: jax.Array, drive: jax.Array,
                    drive_low: jax.Array, initial: jax.Array, guess: jax.Array,
                    alive: jax.Array) -> _Result:
  """``_newton`` vmapped over the batch, compiled as one program (also when called eagerly)."""
  solve = functools.partial(_newton, activation, method, damping, tolerance, max_iterations,
                            w_hh)
  return jax.vmap(solve)(drive, drive_low, initial, guess, alive)


def _solve_forward(activation: str, method: str, damping: float | None, tolerance: float,
                   max_iterations: int, w_hh: jax.Array, drive: jax.Array,
                   drive_low: jax.Array, initial: jax.Array, guess: jax.Array,
                   alive: jax.Array) -> tuple[_Result, tuple[jax.Array, ...]]:
  with jax.enable_x64(True):  # traced here too when differentiated (``elman_deer``)
    outputs = _batched_newton(activation, method, damping, tolerance, max_iterations, w_hh,
                              drive, drive_low, initial, guess, alive)
  trajectory, _, converged, _, _ = outputs
  return outputs, (w_hh, trajectory, initial, alive, converged)


def _solve_backward(activation: str, method: str, damping: float | None, tolerance: float,
                    max_iterations: int, residuals: tuple[jax.Array, ...],
                    cotangents: _Result) -> tuple[jax.Array, ...]:
  """The implicit-function-theorem gradient (module docstring), by a reversed scan.

  References:
    Lim et al. (2024); Bai, Kolter & Koltun (2019), "Deep equilibrium models"
    (the implicit backward pass).
  """
  del method, damping, tolerance, max_iterations
  w_hh, trajectory, initial, alive, converged = residuals
  g_states = jnp.where(converged[:, None, None], cotangents[0], jnp.nan)
  slope = jnp.where(alive, cells.activation_derivative(trajectory, activation), 0.0)
  # lambda_t = g_t + lambda_{t+1} M_t with M_t = dF_{t+1}/dh_t = diag(phi'(a_{t+1})) W_hh^T
  # (I where step t + 1 is padded); M_{T-1} multiplies lambda_T = 0.
  eye = jnp.eye(w_hh.shape[0], dtype=w_hh.dtype)
  steps_after = jnp.where(alive[:, 1:, :, None], slope[:, 1:, :, None] * w_hh.T, eye)
  steps_after = jnp.concatenate([steps_after, jnp.zeros_like(steps_after[:, :1])], axis=1)
  _, g_total = jax.lax.associative_scan(_compose_matrices, (steps_after, g_states), reverse=True,
                                        axis=1)
  g_drive = g_total * slope  # da_t, zero at padded steps
  g_initial = jnp.where(alive[:, 0], jnp.matmul(g_drive[:, 0], w_hh.T, precision=HIGHEST),
                        g_total[:, 0])
  previous = jnp.concatenate([initial[:, None], trajectory[:, :-1]], axis=1)
  g_w_hh = jnp.einsum('bti,btj->ij', previous, g_drive, precision=HIGHEST)
  return (g_w_hh, g_drive, jnp.zeros_like(g_drive), g_initial, jnp.zeros_like(trajectory),
          jnp.zeros(alive.shape, jax.dtypes.float0))


_solve.defvjp(_solve_forward, _solve_backward)


def elman_deer(params: dict, inputs: jax.typing.ArrayLike,
               initial_state: jax.typing.ArrayLike | None = None,
               lengths: jax.typing.ArrayLike | None = None, activation: str = 'tanh',
               method: str = 'deer', initial_guess: jax.typing.ArrayLike | None = None,
               tolerance: float | None = None, max_iterations: int | None = None,
               damping: float | None = None) -> tuple[jax.Array, jax.Array, dict]:
  """The Elman recurrence by DEER, quasi-DEER, ELK or quasi-ELK: ``fused.elman_layer``'s
  result, parallel over T.

  The solve runs in the params' dtype, and in float32 for bfloat16 and
  float16 params (their values, exactly: Newton's method and its
  certificate need the precision; ``dtypes.precise_dtype``); states come
  back in the params' dtype.

  Args:
    params: ``{'W_xh': [d, H], 'W_hh': [H, H], 'b': [H]}`` (+ ``'b_hh'``), one
      floating dtype.
    inputs: ``<float>[B, T, d]``, T >= 1, cast to the params' dtype.
    initial_state: ``h_0 <float>[B, H]``; None (default): zeros.
    lengths: optional ``<int32>[B]`` in [0, T]: states stop changing after
      step lengths - 1 and outputs there are zero (checked when concrete;
      under ``jit`` values outside are clipped to [0, T]).
    activation: 'tanh', 'relu' or 'linear'.
    method: 'deer' (Newton, full Jacobians, O(B T H^2) memory), 'quasi'
      (their diagonals, O(B T H) per iteration; more iterations to the same
      fixed point), 'elk' (the Newton step damped, a Kalman smoother; full
      Jacobians) or 'quasi_elk' (damped, diagonals). All but 'deer' end with
      one full-Jacobian solve, the error estimate (module docstring), so
      their memory is O(B T H^2) once. The gradient solves with full
      matrices for all, O(B T H^2).
    initial_guess: ``h^(0) <float32>[B, T, H]``; None is zeros. It changes
      the iterations needed, not the fixed point, and gets a zero gradient.
    tolerance: dimensionless, in [eps of the solve's dtype, 0.1) (float32:
      [1.19e-7, 0.1)); None (default) is 1e-5: a sequence has converged when the residual
      |h_t - F_t(h_{t-1})| and the estimated error |e_t| (+ |e_t|^2) of its
      states are at most tolerance (1 + |h_t|) at every step and unit (module
      docstring). Below eps no estimate in the dtype can certify it; from 0.1
      the first-order estimate is too rough (the zero guess 'converged' at
      tolerance 1.0 under the residual test alone, off by 1.0). The residual
      is evaluated in float64, so the states are certified against the exact
      recurrence, not a float32 evaluation of it.
    max_iterations: >= 1, the cap on updates per sequence; None is T for
      DEER and quasi-DEER, where they are exact in exact arithmetic, and 2 T
      for the damped methods, which are exact after no fixed count.
    damping: lambda > 0, the weight of the trust-region penalty lambda |h -
      h^(i)|^2 of 'elk' and 'quasi_elk' (the reference code's sigmasq is 1 /
      lambda): small is close to Newton, large takes short, safe steps. None
      is ``DEFAULT_DAMPING[method]``; Gonzalez et al. (2024) choose it by a
      sweep over a log grid (``damping_sweep``). Only for those methods.

  Returns:
    ``(states <dtype>[B, T, H], final_state <dtype>[B, H], info)``, dtype the
    params', with ``info = {'iterations': <int32>[B], 'converged': <bool>[B],
    'residual': <float>[B], 'error': <float>[B]}`` (in the solve's dtype): per sequence, the
    updates made (0 if the guess already passes; the cap if not converged,
    fewer if the iterate overflowed or its error could not be estimated),
    whether it converged, max_t |h_t - F_t(h_{t-1})| / (1 + |h_t|) of the
    states returned (in float64; inf once non-finite), and max_t |e_t| / (1 + |h_t|),
    their linearised error (one full-Jacobian Newton solve from the states;
    inf where it overflowed). Where ``converged`` is False the
    states are the last iterate, not the recurrence's, and gradients for
    that sequence are NaN.

  Raises:
    ValueError: as ``recurrence.scan`` (shapes, lengths), for T = 0, a last
      axis of inputs not d or of initial_state not H, an initial_guess not
      [B, T, H], an unknown activation or method, a tolerance not a finite
      number in [eps, 0.1), a max_iterations not an int in [1, 2**31), or a
      damping not a finite number > 0 (or one given to 'deer' or 'quasi').

  References:
    Lim et al. (2024); Gonzalez et al. (2024); see the module docstring.
  """
  cells.elman(activation)  # validates the name
  if method not in METHODS:
    raise ValueError(f'method: expected one of {METHODS}, got {method!r}')
  initial_state = recurrence.with_initial_state(cells.elman_cell, params, inputs, initial_state)
  recurrence.check_inputs(inputs, initial_state, lengths)
  inputs = jnp.asarray(inputs)
  batch, steps, _ = inputs.shape
  cells.check_step('elman', params, initial_state, (batch, inputs.shape[-1]), ('W_xh', 'W_hh'))
  given = dtypes.compute_dtype(params) or jnp.dtype(jnp.float32)
  dtype = dtypes.precise_dtype(given)  # the solve's
  params, inputs, initial_state = dtypes.cast_floating(
      (params, inputs, jnp.asarray(initial_state)), dtype)
  inputs, initial_state = jnp.asarray(inputs), jnp.asarray(initial_state)
  tolerance = 1e-5 if tolerance is None else tolerance
  hidden_size = params['W_hh'].shape[0]
  if steps == 0:
    raise ValueError(f'inputs: expected T >= 1 steps, got shape {inputs.shape}')
  if initial_guess is not None and jnp.shape(initial_guess) != (batch, steps, hidden_size):
    raise ValueError(f'initial_guess: expected shape [B, T, H] = ({batch}, {steps}, '
                     f'{hidden_size}), got {jnp.shape(initial_guess)}')
  if (isinstance(tolerance, (bool, np.bool_)) or isinstance(tolerance, jax.core.Tracer) or
      np.ndim(tolerance) or np.asarray(tolerance).dtype.kind not in 'iuf' or
      not 0 < float(tolerance) < np.inf):
    raise ValueError(f'tolerance: expected a finite number > 0, got {tolerance!r}')
  resolution = float(jnp.finfo(dtype).eps)
  if not resolution <= float(tolerance) < MAX_TOLERANCE:
    raise ValueError(f'tolerance: expected a value in [eps, {MAX_TOLERANCE}) = [{resolution:.3g}, '
                     f'{MAX_TOLERANCE}) for {dtype} (below eps no error estimate in {dtype} can '
                     f'certify the states; from {MAX_TOLERANCE} the first-order error estimate '
                     f'is too rough), got {tolerance!r}')
  if max_iterations is None:
    max_iterations = steps if method not in DAMPED_METHODS else 2 * steps
  if (isinstance(max_iterations, (bool, np.bool_)) or
      not isinstance(max_iterations, (int, np.integer)) or not 1 <= max_iterations < 2**31):
    raise ValueError(f'max_iterations: expected an int in [1, 2**31) (or None), got '
                     f'{max_iterations!r}')
  if method in DAMPED_METHODS:
    damping = DEFAULT_DAMPING[method] if damping is None else damping
    if (isinstance(damping, (bool, np.bool_)) or isinstance(damping, jax.core.Tracer) or
        np.ndim(damping) or np.asarray(damping).dtype.kind not in 'iuf' or
        not 0 < float(damping) < np.inf):
      raise ValueError(f'damping: expected a finite number > 0 for {method!r}, got {damping!r}')
    damping = float(damping)
  elif damping is not None:
    raise ValueError(f'damping: only for the damped methods {DAMPED_METHODS}, got {damping!r} '
                     f'with method {method!r}')
  if lengths is None:
    alive = jnp.ones((batch, steps, 1), bool)
  else:  # values are checked only outside jit; inside, clip to [0, T]
    clipped = cast(jax.Array, recurrence.as_lengths(lengths, steps))  # not None: lengths is not
    alive = (jnp.arange(steps)[None, :] < clipped[:, None])[..., None]
  drive = jnp.matmul(inputs, params['W_xh'], precision=HIGHEST) + cells.bias(params)
  guess = jnp.zeros_like(drive) if initial_guess is None else jnp.asarray(initial_guess,
                                                                          drive.dtype)
  # The certificate's residuals are float64 (module docstring): the solve is traced, and under
  # an outer vmap batched, with float64 enabled; its own arrays keep their dtypes.
  with jax.enable_x64(True):
    wide = {key: jnp.asarray(value).astype(jnp.float64) for key, value in params.items()}
    exact = (jnp.matmul(inputs.astype(jnp.float64), wide['W_xh'], precision=HIGHEST)
             + cells.bias(wide))
    drive_low = jax.lax.stop_gradient((exact - drive.astype(jnp.float64)).astype(drive.dtype))
    trajectory, iterations, converged, residual, error = _solve(
        activation, method, damping, float(tolerance), int(max_iterations), params['W_hh'],
        drive, drive_low, initial_state, guess, alive)
  states = jnp.where(alive, trajectory, 0.0)
  info = {'iterations': iterations, 'converged': converged, 'residual': residual,
          'error': error}
  return states.astype(given), trajectory[:, -1].astype(given), info


def damping_sweep(params: dict, inputs: jax.typing.ArrayLike,
                  initial_state: jax.typing.ArrayLike | None = None,
                  method: str = 'elk', dampings: tuple[float, ...] = DAMPING_GRID,
                  lengths: jax.typing.ArrayLike | None = None, activation: str = 'tanh',
                  tolerance: float | None = None,
                  max_iterations: int | None = None) -> tuple[float | None, dict[float, float]]:
  """The damping of ELK or quasi-ELK chosen as Gonzalez et al. (2024) choose it: the method
  run at each damping of a log grid, and the one whose sequences all converge in the fewest
  iterations kept.

  Each damping is one compiled ``elman_deer`` (the damping is static) on the same inputs; a
  sweep belongs before a long run of one network, not inside a training step.

  Args:
    params, inputs, initial_state, lengths, activation, tolerance, max_iterations: as
      ``elman_deer``.
    method: 'elk' or 'quasi_elk'.
    dampings: the grid, finite numbers > 0; by default 1e-8 to 1 by factors of 100.

  Returns:
    ``(best, iterations)``: the damping with the smallest mean iteration count among those
    where every sequence converged (the smaller damping on a tie; None if none converged),
    and ``{damping: mean iterations over the sequences}`` (inf where one did not converge).

  Raises:
    ValueError: for a method that is not damped, an empty grid, and as ``elman_deer``.

  References:
    Gonzalez, Warrington, Smith & Linderman (2024) (the damping swept on a log scale, as
    lindermanlab/elk's blog.ipynb says of the paper's experiments).
  """
  if method not in DAMPED_METHODS:
    raise ValueError(f'method: expected one of {DAMPED_METHODS}, got {method!r}')
  if not len(dampings):
    raise ValueError(f'dampings: expected at least one damping, got {dampings!r}')
  iterations = {}
  for damping in dampings:
    run = jax.jit(functools.partial(elman_deer, activation=activation, method=method,
                                    tolerance=tolerance, max_iterations=max_iterations,
                                    damping=damping))
    _, _, info = run(params, inputs, initial_state, lengths)
    converged = np.asarray(info['converged'])
    iterations[damping] = (float(np.mean(np.asarray(info['iterations']))) if converged.all()
                           else np.inf)
  finite = [d for d in sorted(iterations) if iterations[d] < np.inf]
  best = min(finite, key=lambda d: iterations[d]) if finite else None
  return best, iterations
