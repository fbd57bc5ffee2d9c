"""The Elman recurrence evaluated parallel in time: DEER and quasi-DEER.

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
to the same fixed point.

Either iteration is exact after at most T iterations in exact arithmetic: h_0 is
given, so step 1 of h^(1) is exact, and if steps 1..k of h^(i) are exact, the
update leaves them unchanged (the correction h_{t-1} - h^(i)_{t-1} is zero
there) and makes step k + 1 exact. The loop stops when the residual of the
current trajectory,

  r_t = h_t - F_t(h_{t-1}),   |r_t| <= tolerance (1 + |h_t|)   for every t and unit,

holds (elementwise, for each sequence of the batch on its own), or at the
iteration cap. The residual needs a_t at the new trajectory, which the next
update needs anyway, so the check is free; it measures the trajectory returned
(not the previous one, as |h^(i+1) - h^(i)| would), and so a linear activation
stops after one iteration and, in exact arithmetic, any other after at most T.

In float32 the residual of the exact solution is not 0 but about 1e-7 (up to
1e-6 at H = 64, T = 1024), which sets how small a tolerance can be. Where the
linearised dynamics expand (rho(W_hh) well above 1), rounding in the prefix
products grows along the sequence: at rho = 3 (chaotic with tanh) DEER needs
most of the T iterations and may miss the tolerance even at T, and from a poor
guess the products can overflow (rho = 2 at T = 400, rho = 6 at T = 100); the
iterate is then non-finite, its residual inf, and the loop stops there. In
chaos a small residual at every step does not make the states equal to a
sequential evaluation's either: both are float32 shadows of the recurrence and
part by O(1) after some tens of steps (quasi-DEER at rho = 3, T = 100).

With ``lengths`` a step t >= length keeps the state: there F_t(h) = h, A_t = I
and u_t = 0, so the trajectory carries the state at lengths - 1 to step T - 1.

Gradients come from the implicit function theorem at the fixed point h* = F(h*)
(a ``jax.custom_vjp``; the Newton iterations are not differentiated): the
cotangents lambda_t of the states solve the transposed linear system, a
recurrence backwards in time,

  lambda_t = g_t + (lambda_{t+1} * phi'(a_{t+1})) W_hh^T   (lambda_{T+1} = 0),

solved by the same prefix scan, reversed, with full matrices for both methods
(quasi-DEER's diagonal would give a wrong gradient, not a slower one). Then, as
in ``fused``, da_t = lambda_t * phi'(a_t), dW_hh = sum_t h_{t-1}^T da_t, the
drive x_t W_xh + b gets da_t and h_0 gets da_1 W_hh^T. A sequence whose forward
iteration did not converge has no fixed point to differentiate at: its
cotangents are NaN, which reach its inputs and initial state and the shared
weights, so a non-converged solve cannot pass a wrong gradient on silently.

Notation: B batch, T steps, d input features, H hidden units.

References:
  Lim, Zhu, Selfridge & Kasim (2024), "Parallelizing non-linear sequential
  models over the sequence length" (ICLR; DEER, its implicit gradient).
  Gonzalez, Warrington, Smith & Linderman (2024), "Towards scalable and stable
  parallelization of nonlinear RNNs" (NeurIPS; quasi-DEER, at most T iterations).
  Blelloch (1990), "Prefix sums and their applications"; Martin & Cundy (2018),
  "Parallelizing linear recurrent neural nets over sequence length" (the scan).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import recurrence

METHODS = ('deer', 'quasi')

# Full float32 products in the solver and its gradient: at JAX's default precision a GPU may
# round matmul inputs to TF32 (a TPU to bfloat16), about 1e-3, and no residual test at 1e-5
# would pass. (On CPU the default is full precision already.)
HIGHEST = jax.lax.Precision.HIGHEST


def _compose_matrices(earlier, later):
  """(A, u) then (A', u'): h -> (h A + u) A' + u' = h (A A') + (u A' + u').

  References:
    Blelloch (1990); Martin & Cundy (2018) (there in column layout).
  """
  a_earlier, u_earlier = earlier
  a_later, u_later = later
  return (jnp.matmul(a_earlier, a_later, precision=HIGHEST),
          jnp.einsum('...i,...ij->...j', u_earlier, a_later, precision=HIGHEST) + u_later)


def _compose_diagonals(earlier, later):
  """``_compose_matrices`` for diagonal A, stored as its diagonal ``[..., H]``."""
  a_earlier, u_earlier = earlier
  a_later, u_later = later
  return a_earlier * a_later, u_earlier * a_later + u_later


def _newton(activation, method, tolerance, max_iterations, w_hh, drive, initial, guess, alive):
  """DEER or quasi-DEER on one sequence.

  Args:
    activation, method, tolerance, max_iterations: as ``elman_deer``.
    w_hh: ``<float32>[H, H]``.
    drive: ``x_t W_xh + b``, ``<float32>[T, H]``.
    initial: ``h_0 <float32>[H]``.
    guess: ``h^(0) <float32>[T, H]``.
    alive: ``<bool>[T, 1]``, False at steps t >= length.

  Returns:
    ``(trajectory <float32>[T, H], iterations <int32>[], converged <bool>[],
    residual <float32>[])``: the last iterate (padded steps hold the state at
    lengths - 1), the Newton updates made, whether the residual test holds,
    and max_t |r_t| / (1 + |h_t|) of the trajectory.

  References:
    Lim et al. (2024) (the iteration); Gonzalez et al. (2024) (the diagonal
    approximation).
  """
  phi = cells.ACTIVATIONS[activation]

  def evaluate(trajectory):
    """h_{t-1}, h_{t-1} W_hh, F_t(h_{t-1}) and the scaled residual of a trajectory."""
    previous = jnp.concatenate([initial[None], trajectory[:-1]])
    recurrent = jnp.matmul(previous, w_hh, precision=HIGHEST)
    target = jnp.where(alive, phi(drive + recurrent), previous)
    scaled = jnp.abs(trajectory - target) / (1.0 + jnp.abs(trajectory))
    # inf for a trajectory that overflowed (a max over NaN may come back -inf on CPU)
    residual = jnp.where(jnp.all(jnp.isfinite(scaled)), jnp.max(scaled), jnp.inf)
    return previous, recurrent, target, residual

  def update(carry):
    iterations, trajectory, previous, recurrent, target, _ = carry
    slope = jnp.where(alive, cells.activation_derivative(target, activation), 0.0)  # phi'(a_t)
    # u_t = F_t(h_{t-1}) - h_{t-1} A_t, zero at padded steps (F_t(h) = h, A_t = I); h_0 A_1
    # joins u_1, so the scan's offsets are the states.
    if method == 'deer':
      eye = jnp.eye(w_hh.shape[0], dtype=w_hh.dtype)
      jacobians = jnp.where(alive[:, :, None], w_hh * slope[:, None, :], eye)  # [T, H, H]
      offset = jnp.where(alive, target - recurrent * slope, 0.0)  # h_{t-1} A_t = h_{t-1} W_hh phi'
      offset = offset.at[0].add(jnp.matmul(initial, jacobians[0], precision=HIGHEST))
      _, trajectory = jax.lax.associative_scan(_compose_matrices, (jacobians, offset))
    else:
      jacobians = jnp.where(alive, jnp.diagonal(w_hh) * slope, 1.0)  # [T, H]
      offset = jnp.where(alive, target - previous * jacobians, 0.0)
      offset = offset.at[0].add(initial * jacobians[0])
      _, trajectory = jax.lax.associative_scan(_compose_diagonals, (jacobians, offset))
    return (iterations + 1, trajectory) + evaluate(trajectory)

  def unconverged(carry):  # and still finite: once overflowed, an iterate stays non-finite
    iterations, residual = carry[0], carry[-1]
    return (residual > tolerance) & jnp.isfinite(residual) & (iterations < max_iterations)

  carry = (jnp.int32(0), guess) + evaluate(guess)
  iterations, trajectory, *_, residual = jax.lax.while_loop(unconverged, update, carry)
  return trajectory, iterations, residual <= tolerance, residual


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _solve(activation, method, tolerance, max_iterations, w_hh, drive, initial, guess, alive):
  """``_newton`` over the batch: ``drive, guess [B, T, H]``, ``initial [B, H]``,
  ``alive [B, T, 1]``; each sequence stops on its own (``jax.vmap`` of the loop)."""
  return _solve_forward(activation, method, tolerance, max_iterations, w_hh, drive, initial,
                        guess, alive)[0]


def _solve_forward(activation, method, tolerance, max_iterations, w_hh, drive, initial, guess,
                   alive):
  solve = functools.partial(_newton, activation, method, tolerance, max_iterations, w_hh)
  outputs = jax.vmap(solve)(drive, initial, guess, alive)
  trajectory, _, converged, _ = outputs
  return outputs, (w_hh, trajectory, initial, alive, converged)


def _solve_backward(activation, method, tolerance, max_iterations, residuals, cotangents):
  """The implicit-function-theorem gradient (module docstring), by a reversed scan.

  References:
    Lim et al. (2024); Bai, Kolter & Koltun (2019), "Deep equilibrium models"
    (the implicit backward pass).
  """
  del method, tolerance, max_iterations
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
  return (g_w_hh, g_drive, g_initial, jnp.zeros_like(trajectory),
          jnp.zeros(alive.shape, jax.dtypes.float0))


_solve.defvjp(_solve_forward, _solve_backward)


def elman_deer(params, inputs, initial_state, lengths=None, activation='tanh', method='deer',
               initial_guess=None, tolerance=1e-5, max_iterations=None):
  """The Elman recurrence by DEER or quasi-DEER: ``fused.elman_layer``'s result,
  parallel over T.

  Args:
    params: ``{'W_xh': [d, H], 'W_hh': [H, H], 'b': [H]}`` (+ ``'b_hh'``).
    inputs: ``<float32>[B, T, d]``, T >= 1.
    initial_state: ``h_0 <float32>[B, H]``.
    lengths: optional ``<int32>[B]`` in [0, T]: states stop changing after
      step lengths - 1 and outputs there are zero (checked when concrete;
      under ``jit`` values outside are clipped to [0, T]).
    activation: 'tanh', 'relu' or 'linear'.
    method: 'deer' (full Jacobians, O(B T H^2) memory) or 'quasi' (their
      diagonals, O(B T H); more iterations to the same fixed point). The
      gradient solves with full matrices for both, O(B T H^2).
    initial_guess: ``h^(0) <float32>[B, T, H]``; None is zeros. It changes
      the iterations needed, not the fixed point, and gets a zero gradient.
    tolerance: > 0, dimensionless: a sequence has converged when
      |h_t - F_t(h_{t-1})| <= tolerance (1 + |h_t|) at every step and unit.
      float32 rounding leaves residuals near 1e-7 (up to 1e-6 at H = 64,
      T = 1024), so a much smaller tolerance runs to the cap. The states'
      error is about the residual times 1 / (1 - contraction) at most: DEER's
      quadratic last step usually lands far below the tolerance, quasi-DEER's
      just below it.
    max_iterations: >= 1, the cap on Newton updates per sequence; None is T,
      where either method is exact in exact arithmetic.

  Returns:
    ``(states <float32>[B, T, H], final_state <float32>[B, H], info)`` with
    ``info = {'iterations': <int32>[B], 'converged': <bool>[B],
    'residual': <float32>[B]}``: per sequence, the updates made (0 if the
    guess already passes; the cap if not converged, fewer if the iterate
    overflowed), whether it converged, and max_t |h_t - F_t(h_{t-1})| /
    (1 + |h_t|) of the states returned (inf once non-finite). Where
    ``converged`` is False the states are the last iterate, not the
    recurrence's, and gradients for that sequence are NaN.

  Raises:
    ValueError: as ``recurrence.scan`` (shapes, lengths), for T = 0, a last
      axis of inputs not d or of initial_state not H, an initial_guess not
      [B, T, H], an unknown activation or method, a tolerance not a finite
      number > 0 or a max_iterations not an int in [1, 2**31).

  References:
    Lim et al. (2024); Gonzalez et al. (2024); see the module docstring.
  """
  cells.elman(activation)  # validates the name
  if method not in METHODS:
    raise ValueError(f'method: expected one of {METHODS}, got {method!r}')
  recurrence.check_inputs(inputs, initial_state, lengths)
  batch, steps, _ = inputs.shape
  cells.check_step('elman', params, initial_state, (batch, inputs.shape[-1]), ('W_xh', 'W_hh'))
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
  max_iterations = steps if max_iterations is None else max_iterations
  if (isinstance(max_iterations, (bool, np.bool_)) or
      not isinstance(max_iterations, (int, np.integer)) or not 1 <= max_iterations < 2**31):
    raise ValueError(f'max_iterations: expected an int in [1, 2**31) (or None for T = '
                     f'{steps}), got {max_iterations!r}')
  if lengths is None:
    alive = jnp.ones((batch, steps, 1), bool)
  else:  # values are checked only outside jit; inside, clip to [0, T]
    lengths = recurrence.as_lengths(lengths, steps)
    alive = (jnp.arange(steps)[None, :] < lengths[:, None])[..., None]
  drive = inputs @ params['W_xh'] + cells.bias(params)
  guess = jnp.zeros_like(drive) if initial_guess is None else jnp.asarray(initial_guess,
                                                                          drive.dtype)
  trajectory, iterations, converged, residual = _solve(
      activation, method, float(tolerance), int(max_iterations), params['W_hh'], drive,
      initial_state, guess, alive)
  states = jnp.where(alive, trajectory, 0.0)
  info = {'iterations': iterations, 'converged': converged, 'residual': residual}
  return states, trajectory[:, -1], info
