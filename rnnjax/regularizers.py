"""The vanishing-gradient regularizer Omega of Pascanu, Mikolov & Bengio (2013).

Omega asks every Jacobian dh_t/dh_{t-1} to preserve the norm of the error
dE/dh_t in the direction that error actually has (not in every direction).
For the Elman cell h_t = phi(a_t), a_t = x_t W_xh + h_{t-1} W_hh + b, in
rnnjax's row layout, h_{t-1}[i] reaches a_t[j] through W_hh[i, j], so the
error that h_t sends back to h_{t-1} is the row vector

  g_t dh_t/dh_{t-1} = (g_t * phi'(a_t)) W_hh^T,     g_t = dE/dh_t  [H],

entry i being sum_j g_t[j] phi'(a_t)[j] W_hh[i, j]. With states[:, t] = h_t
(t = 0..T-1, h_{-1} the initial state) the term of step t is the ratio

  r_t = ||(g_t * phi'(a_t)) W_hh^T|| / ||g_t||,

and Omega = sum_t (r_t - 1)^2 (the paper's eq. 9, its k + 1 being our t).
The paper writes eq. 9 for its parametrization x_t = W_rec sigma(x_{t-1}) +
..., whose Jacobian holds sigma'(x_k) of the earlier state; for the Elman form
of the reference code and of rnnjax it holds phi'(a_t) of the later one
(RNN.py line 197: ``d_ht[1:] * (1 - ht**2)``).

Paper and reference code (github.com/pascanur/trainingRNNs, RNN.py lines
188-217) differ; ``omega`` offers both and defaults to the code, which ran
the paper's experiments (weight alpha = 2 there, RNN.py line 467):

* ratio: the code compares squared norms, (r_t^2 - 1)^2 (lines 205-207);
  the paper norms, (r_t - 1)^2. Both vanish at r_t = 1; near it the first
  is about 4 (r_t - 1)^2.
* reduction: the code takes the ratio per sequence, then the mean over all
  kept (t, b) pairs (lines 208-209: ``mean(1).sum() / n_elems.sum()``); the
  paper sums over t (here: then the mean over the batch).
* every step counts, including the Jacobian into the initial state; a pair
  (t, b) is left out where ||g_t||^2 < ``bound`` (1e-20 in the code, line
  207: no error reaches that state, e.g. past a sequence's end) and, with
  ``lengths``, where t >= lengths[b].
* gradient: eq. 10 takes the immediate partial derivative, with dE/dh and
  the states held constant; the code does the same (line 210 takes
  ``TT.grad`` with respect to W_hh before the clone of lines 211-215 puts in
  the states and dE/dh) and adds the result to the gradient of W_hh only
  (line 217). ``omega`` always holds dE/dh constant (stop_gradient);
  ``omega_value_and_grad`` holds the states constant too unless
  ``through_states``, which lets the gradient also flow through
  phi'(a_t) into W_xh, b and W_hh.

``omega_penalty`` puts Omega inside any loss of an Elman network (a
classifier, a language model): it takes dE/dh_t from
``diagnostics.state_gradients`` and holds it and the states constant, so
``jax.grad`` of ``loss + alpha * omega_penalty(...)`` is the loss gradient
plus alpha times eq. 10's, added before clipping as RNN.py line 217.

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks", section 3.3, eq. 9-10.
"""

from collections.abc import Callable, Mapping
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import checks
from rnnjax import diagnostics
from rnnjax import fused
from rnnjax import norms
from rnnjax import recurrence

__all__ = ['RATIOS', 'REDUCTIONS', 'REFERENCE_BOUND', 'omega', 'omega_value_and_grad',
           'omega_penalty']

RATIOS = ('squared_norm', 'norm')
REDUCTIONS = ('mean', 'sum')
REFERENCE_BOUND = 1e-20  # RNN.py, state['bound']: smallest ||dE/dh_t||^2 kept


def _check_options(activation: str, ratio: str, reduction: str, bound: Any) -> None:
  """One line naming the argument (``rnnjax.checks``); a traced bound passes (it is used as
  a value: ``omega`` works under ``jit`` with the bound an argument)."""
  checks.one_of('activation', activation, tuple(sorted(cells.ACTIVATIONS)))
  checks.one_of('ratio', ratio, RATIOS)
  checks.one_of('reduction', reduction, REDUCTIONS)
  checks.number('bound', bound, low=0, high_open=True)


def omega(w_hh: jax.typing.ArrayLike, states: jax.typing.ArrayLike,
          state_gradients: jax.typing.ArrayLike, activation: str = 'tanh',
          lengths: jax.typing.ArrayLike | None = None, ratio: str = 'squared_norm',
          reduction: str = 'mean', bound: float = REFERENCE_BOUND) -> jax.Array:
  """The regularizer Omega of an Elman network, from its states and dE/dh_t.

  With g_t = dE/dh_t and phi'_t = phi'(a_t) of each sequence, the term of
  step t is r_t = ||(g_t * phi'_t) W_hh^T|| / ||g_t|| (norms over the H
  units; ``(g_t * phi'_t) W_hh^T`` is g_t dh_t/dh_{t-1} in the row layout),
  raised to the power 2 (ratio='squared_norm') or 1 ('norm'), minus 1,
  squared. A pair (t, b) is kept where ||g_t||^2 >= ``bound`` and t <
  lengths[b]; the others contribute 0.

  No norm is a plain sum of squares (``rnnjax.norms``): each g_t is scaled
  by a power of two before the product with W_hh^T (r_t does not depend on
  g_t's scale), so dE/dh_t up to float32's largest value gives the float64
  value of Omega.

  ``state_gradients`` pass through ``jax.lax.stop_gradient`` (eq. 10), so
  the gradient of Omega reaches W_hh through the explicit W_hh^T and, if the
  caller's ``states`` depend on params, through phi'_t.

  Args:
    w_hh: ``<float32>[H, H]``.
    states: ``<float32>[B, T, H]``, h_t = phi(a_t) for t = 0..T-1.
    state_gradients: ``<float32>[B, T, H]``, dE/dh_t (total derivatives,
      e.g. from ``diagnostics.state_gradients``).
    activation: phi, one of ``cells.ACTIVATIONS``; phi' is taken from the
      states by ``cells.activation_derivative``.
    lengths: optional ``<int>[B]`` in [0, T] (an array or a list); steps t >=
      lengths[b] are left out, and their states and dE/dh_t are zeroed first,
      so NaN there reaches neither Omega nor its gradient.
    ratio: 'squared_norm' (RNN.py lines 205-207) or 'norm' (eq. 9).
    reduction: 'mean' over the kept (t, b) pairs (RNN.py line 209; 0 if none
      is kept) or 'sum' over t, then the mean over the B sequences (eq. 9).
    bound: pairs with ||g_t||^2 < bound are left out; 1e-20 as RNN.py. A finite
      value >= 0, or a traced scalar (an argument of a jitted function), taken as it is.

  Returns:
    float scalar Omega >= 0, dimensionless (NaN when a kept dE/dh_t is NaN;
    0 for no sequences). The gradient of r_t with ratio='norm' is taken as 0
    where r_t = 0.

  Raises:
    ValueError: for states not of rank 3, state_gradients of another shape,
      w_hh not [H, H], lengths not ``<int>[B]`` in [0, T] (values checked when
      concrete), or an unknown activation, ratio or reduction, or a negative
      bound.

  References:
    Pascanu, Mikolov & Bengio (2013), eq. 9-10; RNN.py lines 188-209 of
    github.com/pascanur/trainingRNNs.
  """
  _check_options(activation, ratio, reduction, bound)
  if jnp.ndim(states) != 3:
    raise ValueError(f'states: expected rank 3 [B, T, H], got shape {jnp.shape(states)}')
  states = jnp.asarray(states)
  batch, steps, hidden = states.shape
  if jnp.shape(state_gradients) != states.shape:
    raise ValueError(f'state_gradients: expected the shape of states {states.shape}, '
                     f'got {jnp.shape(state_gradients)}')
  if jnp.shape(w_hh) != (hidden, hidden):
    raise ValueError(f'w_hh: expected shape [H, H] = ({hidden}, {hidden}), got {jnp.shape(w_hh)}')
  recurrence.check_inputs(states, states, lengths)
  errors = jax.lax.stop_gradient(state_gradients)
  if lengths is not None:  # the "double where": nothing of a padded step is NaN
    clipped = cast(jax.Array, recurrence.as_lengths(lengths, steps))  # not None: lengths is not
    alive = jnp.arange(steps)[None, :] < clipped[:, None]
    errors = jnp.where(alive[..., None], errors, 0.0)
    states = jnp.where(alive[..., None], states, 0.0)
  # No sum of squares: |dE/dh| of 1e19 squares past float32's range (a ratio of two such sums
  # is NaN or inf). r_t does not change when g_t is scaled, here by the power of two just
  # above its largest magnitude (``norms.scale_exponent``), and the norms scale by theirs.
  error_norm = norms.vector_norm(errors)  # [B, T]
  exponent = norms.scale_exponent(jnp.max(jnp.abs(errors), axis=-1, keepdims=True, initial=0.0))
  unit = norms.ldexp(errors, -exponent)
  phi_prime = cells.activation_derivative(states, activation)
  sent_back = (unit * phi_prime) @ jnp.transpose(w_hh)  # [B, T, H]
  # ||g||^2 >= bound (a NaN gradient is kept: Omega says so); a concrete bound's root in
  # float64, so that 1e-80 keeps only nonzero gradients in float32 too, a traced one's as it is
  least = jnp.sqrt(bound) if isinstance(bound, jax.core.Tracer) else np.sqrt(float(bound))
  kept = ~(error_norm < least)
  if lengths is not None:
    kept = kept & alive
  unit_norm = norms.vector_norm(unit)
  # r_t, with a zero gradient where it is 0 (the norm's own rule)
  ratio_t = norms.vector_norm(sent_back) / jnp.where(kept, unit_norm, 1.0)
  value = ratio_t ** 2 if ratio == 'squared_norm' else ratio_t
  terms = jnp.where(kept, (value - 1.0) ** 2, 0.0)
  if reduction == 'mean':
    return jnp.sum(terms) / jnp.maximum(jnp.sum(kept), 1)
  return jnp.sum(terms) / max(batch, 1)


def omega_value_and_grad(params: Mapping[str, Any], inputs: jax.typing.ArrayLike,
                         initial_state: jax.typing.ArrayLike | None,
                         state_gradients: jax.typing.ArrayLike, activation: str = 'tanh',
                         lengths: jax.typing.ArrayLike | None = None,
                         through_states: bool = False, ratio: str = 'squared_norm',
                         reduction: str = 'mean',
                         bound: float = REFERENCE_BOUND) -> tuple[jax.Array, Any]:
  """Omega of an Elman network and its gradient with respect to the cell params.

  The states are recomputed from ``params`` (``recurrence.scan`` of
  ``cells.elman``) and passed to ``omega`` with ``params['W_hh']``; dE/dh_t
  is held constant. With through_states=False (eq. 10 and RNN.py line 210)
  the states are held constant too, so only W_hh receives a gradient
  (through the explicit W_hh^T) and the others get zeros; with True the
  gradient also flows through phi'(a_t) into W_xh, b (and b_hh) and W_hh.
  A training step of MSGD-CR adds ``weight * grads`` to the loss gradient
  of the cell params before clipping (RNN.py line 217; weight alpha = 2 there,
  line 467, and 4 in the paper).

  Args:
    params: Elman cell params ``{'W_xh': [d, H], 'W_hh': [H, H], 'b': [H]}``
      (+ ``'b_hh'``), as ``cells.init_elman``.
    inputs: ``<float32>[B, T, d]``.
    initial_state: ``<float32>[B, H]``; None: zeros.
    state_gradients: ``<float32>[B, T, H]``, dE/dh_t of the loss at these
      params (``diagnostics.state_gradients``).
    activation: the cell's phi, one of ``cells.ACTIVATIONS``.
    lengths: optional ``<int32>[B]``, as ``recurrence.scan`` and ``omega``.
    through_states: let the gradient flow through the states as well.
    ratio, reduction, bound: as ``omega``.

  Returns:
    ``(omega <float32>[], grads)`` with grads shaped as ``params``.

  Raises:
    ValueError: as ``recurrence.scan`` and ``omega``.

  References:
    Pascanu, Mikolov & Bengio (2013), eq. 10; RNN.py lines 210-217.
  """
  _check_options(activation, ratio, reduction, bound)
  cell = cells.elman(activation)

  def of_params(params: Mapping[str, Any]) -> jax.Array:
    # scan checks inputs itself (an array [B, T, d]; numpy's passes too)
    states, _ = recurrence.scan(cell, params, cast(jax.Array, inputs), initial_state, lengths)
    if not through_states:
      states = jax.lax.stop_gradient(states)
    return omega(params['W_hh'], states, state_gradients, activation, lengths, ratio, reduction,
                 bound)

  return jax.value_and_grad(of_params)(params)


def omega_penalty(params: Mapping[str, Any], inputs: jax.typing.ArrayLike,
                  initial_state: jax.typing.ArrayLike | None,
                  loss_fn: Callable[[jax.Array], jax.Array],
                  activation: str = 'tanh', lengths: jax.typing.ArrayLike | None = None,
                  states: jax.typing.ArrayLike | None = None, ratio: str = 'squared_norm',
                  reduction: str = 'mean', bound: float = REFERENCE_BOUND) -> jax.Array:
  """Omega of an Elman layer as a term of a loss, differentiable as eq. 10.

  dE/dh_t is ``diagnostics.state_gradients`` of ``loss_fn`` (one forward and
  one backward pass of ``recurrence.scan``) at the params as they are, or, where the
  caller passes the layer's ``states``, ``fused.state_gradients_from_states`` (the layer's
  backward loop alone, to the longest length; equal to float32 rounding); it,
  the states and phi'(a_t) are held constant (``stop_gradient``), so the
  gradient of the result with respect to ``params`` is that of
  ``omega_value_and_grad`` with through_states=False: W_hh through the
  explicit W_hh^T, zeros for the others. In a training loss,
  ``loss + alpha * omega_penalty(...)`` gives the loss gradient plus alpha
  times Omega's in W_hh (RNN.py line 217); ``loss + alpha * (omega -
  stop_gradient(omega))`` gives the same gradient with the loss's value.

  Args:
    params: the Elman cell params ``{'W_xh': [d, H], 'W_hh': [H, H], 'b':
      [H]}`` (+ ``'b_hh'``), as ``cells.init_elman`` (e.g.
      ``params['recurrence']['cell']`` of a ``models.LanguageModel``).
    inputs: ``<float32>[B, T, d]``, the layer's inputs (an LM's embedded or
      one-hot tokens, ``model.embed``).
    initial_state: ``<float32>[B, H]``; None: zeros.
    loss_fn: ``loss_fn(states <float32>[B, T, H]) -> scalar``, the loss E as a
      function of the layer's states (the readout and targets closed over);
      its params may be traced: dE/dh_t is held constant whatever it reads.
    activation: the cell's phi, one of ``cells.ACTIVATIONS``.
    lengths: optional ``<int32>[B]``: steps t >= lengths[b] are left out
      (``omega``); loss_fn should not read them.
    states: optional ``<float32>[B, T, H]``, the layer's states at these
      params if the caller has them (``fused.elman_layer``'s, 0 at padded steps:
      ``loss_fn`` is then differentiated at them and dE/dh_t follows by
      ``fused.state_gradients_from_states``); else they are recomputed
      (``recurrence.scan``).
    ratio, reduction, bound: as ``omega`` (default: the reference code's).

  Returns:
    float scalar Omega >= 0, dimensionless.

  Raises:
    ValueError: as ``omega`` and ``recurrence.scan``.

  References:
    Pascanu, Mikolov & Bengio (2013), eq. 9-10; RNN.py lines 188-217 of
    github.com/pascanur/trainingRNNs.
  """
  _check_options(activation, ratio, reduction, bound)
  cell = cells.elman(activation)
  held = jax.lax.stop_gradient(params)
  initial_state = recurrence.with_initial_state(cell, held, inputs, initial_state)
  inputs, initial_state = jax.lax.stop_gradient((inputs, initial_state))
  if states is not None and jnp.shape(states) != jnp.shape(inputs)[:2] + jnp.shape(
      initial_state)[-1:]:
    raise ValueError(f'states: expected shape [B, T, H] = '
                     f'{jnp.shape(inputs)[:2] + jnp.shape(initial_state)[-1:]}, got '
                     f'{jnp.shape(states)}')
  if states is None:
    _, errors = diagnostics.state_gradients(cell, held, inputs, initial_state, loss_fn, lengths)
    states, _ = recurrence.scan(cell, held, cast(jax.Array, inputs), initial_state, lengths)
  else:  # the layer's states: dE/dh_t by its backward loop alone, no recurrence run again
    states = jax.lax.stop_gradient(states)
    direct = jax.lax.stop_gradient(jax.grad(loss_fn)(states))  # no tangent enters the loop
    errors = fused.state_gradients_from_states(held['W_hh'], states, direct, lengths, activation)
  return omega(params['W_hh'], jax.lax.stop_gradient(states), errors, activation, lengths,
               ratio, reduction, bound)
