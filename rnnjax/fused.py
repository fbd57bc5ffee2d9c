"""The fused Elman layer: the input projection out of the loop and a hand-written BPTT.

Forward: the input projection for all T steps is one large matmul,
A_x = X W_xh, then a loop does only h_t = phi(A_x[t] + h_{t-1} W_hh + b), in
the layout the inputs come in (no transposes). Backward (a ``jax.custom_vjp``):

  G_T = dL/dh_T (final state),  da_t = phi'(a_t) * (g_t + G_t),
  G_{t-1} = da_t W_hh^T                                  (reverse loop)
  dW_hh = sum_t h_{t-1}^T da_t,  dW_xh = sum_t x_t^T da_t,  db = sum_t da_t,
  dX = dA W_xh^T,  dh_0 = G_0                            (large matmuls)

For the named activations phi'(a_t) is read from the saved states alone
(``cells.activation_derivative``: 1 - h^2, [h > 0], 1), the fast path. For a
callable phi (``jax.nn.gelu``) the forward loop also keeps the
pre-activations a_t (one more ``[T, B, H]`` buffer) and the backward loop takes da_t = phi'(a_t) * (.) as
``jax.vjp`` of phi at a_t: exact for any phi of a step's ``[B, H]``, with no
derivative to write by hand.

where g_t is the cotangent of output t. With ``lengths`` a step t >= length
leaves the state unchanged and outputs zero: there da_t = 0 and the carry
gradient passes through, G_{t-1} = G_t. So the steps at or past the batch's
longest length change nothing: both loops run to that length alone, a bound
traced from the lengths (under ``vmap``, the group's longest), and a batch of
length 60 padded to T = 199 costs 60 steps, not 199 (with ``unroll`` > 1 the
loops keep the static T: a traced bound takes no unroll). The inputs of those steps are zeroed
before the projection (``recurrence.zero_padding``), so NaN or inf in padding
reaches neither A_x nor dW_xh = X^T dA (where 0 * NaN would be NaN).

Inputs are checked as in ``recurrence`` (its module docstring gives the rules
every path shares): the computation runs in the params' dtype (inputs and
initial state are cast to it), lengths may be a list, and T = 0 returns
empty states and the initial state.

It agrees with autodiff of ``recurrence.scan`` over ``cells.elman_cell`` to
float32 rounding (tests/test_fused.py) and is what the models use.

Under ``jax.jit``: the options (activation, reverse, time_major, unroll,
projected) are Python values that decide the program. ``jax.jit(elman_layer)``
traces every argument, and JAX refuses a string (``activation='relu'``) before
the layer runs; either name them static,
``jax.jit(elman_layer, static_argnames=('activation', 'reverse'))``, or bind
them first with ``elman_layer_with(activation='relu', reverse=True)``, a layer
of (params, inputs, initial_state, lengths) alone, ready to jit with no static
arguments to name.

Autodiff: reverse mode (``jax.grad``, ``jax.vjp``) takes the hand-written pass.
Forward mode (``jax.jvp``, ``jax.jacfwd``, and forward over reverse for
Hessian-vector products) is not defined for a ``jax.custom_vjp``: called on
``jax.jvp``'s tracers the layer runs the same forward loop without the custom
rule, and autodiff differentiates it (equal to the JVP of ``recurrence.scan``).
Two forward-mode calls cannot be told from reverse mode where the layer is
traced, and there JAX's own error says that a custom_vjp function has no
forward mode: ``jax.linearize`` (its tracers are those of ``jax.grad``), and a
``jax.jit`` of the layer inside ``jax.jvp`` (``jax.jvp(jax.jit(f), ...)``, which
hides the tracers). The fix for these: put the ``jit`` outside the ``jvp``, or
run the recurrence as ``recurrence.scan(cells.elman(activation), ...)``
(``rnnjax.scan(rnnjax.elman('tanh'), params, inputs)``: the same values, every
transform, autodiff's backward pass). A ``jax.custom_jvp`` whose tangent is a
linear loop JAX transposes into this backward pass was tried: at the pinned jax
(0.9.2) ``jax.grad`` of a custom_jvp rule whose tangent holds a ``lax.scan``
fails inside JAX's transpose of the scan (a ``ValAccum`` TypeError), so the
custom_vjp stays.

References:
  Williams & Zipser (1995), "Gradient-based learning algorithms for recurrent
  networks and their computational complexity" (BPTT); Pascanu, Mikolov &
  Bengio (2013), "On the difficulty of training recurrent neural networks",
  eq. 3-5 (the same recursion in column layout).
"""

from collections.abc import Callable, Mapping
import dataclasses
import functools
import math
from typing import Any

import jax
from jax.interpreters import ad
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import checks
from rnnjax import dtypes
from rnnjax import recurrence

__all__ = ['ElmanLayer', 'checkpointed_elman_layer', 'elman_layer', 'elman_layer_with',
           'state_gradients_from_states']


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _elman(activation: cells.Activation, unroll: int, axis: int, w_hh: jax.Array,
           bias: jax.Array, projected: jax.Array, initial: jax.Array,
           alive: jax.Array | None) -> jax.Array:
  """States of h_t = phi(projected[t] + h_{t-1} W_hh + b), with time on ``axis`` of
  ``projected`` (0: ``[T, B, H]``, 1: ``[B, T, H]``); where ``alive[t]`` (``[T, B, 1]``)
  is False the state is kept and the output is zero."""
  return _states(cells.activation_function(activation), unroll, axis, w_hh, bias, projected,
                 initial, alive)


def _at(array: jax.Array, t: Any, axis: int) -> jax.Array:
  """``array`` at index t of ``axis`` (that axis dropped), a plain dynamic slice."""
  starts = [0] * array.ndim
  starts[axis] = t
  sizes = list(array.shape)
  sizes[axis] = 1
  return jnp.squeeze(jax.lax.dynamic_slice(array, starts, sizes), axis)


def _put(array: jax.Array, value: jax.Array, t: Any, axis: int) -> jax.Array:
  """``array`` with ``value`` written at index t of ``axis``: a plain dynamic update slice
  (``dynamic_update_index_in_dim`` lowers to a scatter under ``vmap``, and XLA then copies
  the whole buffer at every step of the loop)."""
  starts = [0] * array.ndim
  starts[axis] = t
  return jax.lax.dynamic_update_slice(array, jnp.expand_dims(value, axis), starts)


def _step(phi: Callable[[jax.Array], jax.Array], a: jax.Array, h: jax.Array,
          keep: jax.Array | None) -> tuple[jax.Array, jax.Array]:
  """The new state and the output of a step of pre-activation ``a`` (a masked step,
  ``keep`` False, keeps ``h`` and outputs 0)."""
  new = phi(a)
  if keep is None:
    return new, new
  return jnp.where(keep, new, h), jnp.where(keep, new, 0.0)


def _live_steps(steps: int, alive: jax.Array | None, unroll: int) -> Any:
  """How many steps the loops run: the longest length, traced from ``alive`` (``[T, B, 1]``;
  a step where no sequence is alive changes nothing), or all ``steps`` (no lengths, or an
  ``unroll`` > 1, which needs a static trip count)."""
  if alive is None or unroll > 1:
    return steps
  return jnp.sum(jnp.any(alive, axis=(1, 2)))  # int64 under x64, as the loop's other indices


def _states(phi: Callable[[jax.Array], jax.Array], unroll: int, axis: int, w_hh: jax.Array,
            bias: jax.Array, projected: jax.Array, initial: jax.Array,
            alive: jax.Array | None) -> jax.Array:
  """The forward loop. For tanh it runs in place: it overwrites projected[t] with h_t, so the
  states are the only [T, B, H] buffer it keeps (for a named activation, the only one the
  backward pass needs). For a cheap phi (relu, linear, a callable) it reads the projection and
  writes the states to a buffer of their own: XLA recomputes a cheap step in both the new
  state's fusion and the write's, and in place it would copy the whole buffer twice a step to
  order those reads before the write. The bias is added inside the
  loop (adding it to the whole projection first cost one more such buffer)."""
  in_place = phi is cells.ACTIVATIONS['tanh']

  def step(t: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    h, states = carry
    a = _at(states if in_place else projected, t, axis) + h @ w_hh + bias
    h, output = _step(phi, a, h, None if alive is None else _at(alive, t, 0))
    return h, _put(states, output, t, axis)

  _, states = jax.lax.fori_loop(0, _live_steps(projected.shape[axis], alive, unroll), step,
                                (initial, projected if in_place else jnp.zeros_like(projected)),
                                unroll=unroll)
  return states


def _states_and_preactivations(phi: Callable[[jax.Array], jax.Array], unroll: int, axis: int,
                               w_hh: jax.Array, bias: jax.Array, projected: jax.Array,
                               initial: jax.Array, alive: jax.Array | None
                               ) -> tuple[jax.Array, jax.Array]:
  """The forward loop for a callable phi: the states and the pre-activations a_t (the one
  more [T, B, H] buffer its derivative needs), each written to a buffer of its own. The
  projection is only read: written over while a second write of the step also reads it,
  XLA copied it whole at every step to order the two."""
  def step(t: jax.Array, carry: tuple[jax.Array, jax.Array, jax.Array]
           ) -> tuple[jax.Array, jax.Array, jax.Array]:
    h, states, preactivations = carry
    a = _at(projected, t, axis) + h @ w_hh + bias
    h, output = _step(phi, a, h, None if alive is None else _at(alive, t, 0))
    return h, _put(states, output, t, axis), _put(preactivations, a, t, axis)

  _, states, preactivations = jax.lax.fori_loop(
      0, _live_steps(projected.shape[axis], alive, unroll), step,
      (initial, jnp.zeros_like(projected), jnp.zeros_like(projected)), unroll=unroll)
  return states, preactivations


def _forward_rule(activation: cells.Activation, unroll: int, axis: int, w_hh: jax.Array,
                  bias: jax.Array, projected: jax.Array, initial: jax.Array,
                  alive: jax.Array | None) -> tuple[jax.Array, tuple[Any, ...]]:
  if isinstance(activation, str):  # phi' is read from the states
    states = _states(cells.ACTIVATIONS[activation], unroll, axis, w_hh, bias, projected,
                     initial, alive)
    return states, (w_hh, states, None, initial, alive)
  states, preactivations = _states_and_preactivations(activation, unroll, axis, w_hh, bias,
                                                      projected, initial, alive)
  return states, (w_hh, states, preactivations, initial, alive)


def _backward_rule(activation: cells.Activation, unroll: int, axis: int,
                   residuals: tuple[Any, ...], g_states: jax.Array) -> tuple[Any, ...]:
  w_hh, states, preactivations, initial, alive = residuals
  w_hh_t = w_hh.T
  steps = _live_steps(states.shape[axis], alive, unroll)  # t >= steps: da_t = 0, G passes

  def through_phi(t: jax.Array, total: jax.Array) -> jax.Array:
    """da_t = phi'(a_t) * total: from the states for a named phi; by ``jax.vjp`` of a
    callable at the saved pre-activation a_t (its exact derivative, whatever phi is)."""
    if isinstance(activation, str):
      return total * cells.activation_derivative(_at(states, t, axis), activation)
    _, pullback = jax.vjp(activation, _at(preactivations, t, axis))
    return pullback(total)[0]

  def step(i: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    carry_grad, buffer = carry
    t = steps - 1 - i
    total = _at(g_states, t, axis) + carry_grad
    da = through_phi(t, total)
    previous = da @ w_hh_t
    if alive is not None:
      keep = _at(alive, t, 0)
      da = jnp.where(keep, da, 0.0)
      previous = jnp.where(keep, previous, carry_grad)  # a masked step outputs a constant 0
    return previous, _put(buffer, da, t, axis)

  # g_t is read from the incoming cotangents and da_t written to a buffer of its own: a
  # buffer read (for a matmul) and written in the same step is copied whole at every step.
  g_initial, d_projected = jax.lax.fori_loop(0, steps, step, (jnp.zeros_like(initial),
                                                              jnp.zeros_like(g_states)),
                                             unroll=unroll)
  # dW_hh = sum_t h_{t-1}^T da_t as one [H, T B] x [T B, H] matmul on a shifted copy of the
  # states: XLA places the copy in memory that the loops have freed (48 MiB of temporaries at
  # B = 64, T = 128, H = 512, against 64 MiB for matmuls on shifted slices); an einsum over
  # (t, b) was 2.3x slower.
  hidden = initial.shape[-1]
  previous = jnp.concatenate([jnp.expand_dims(initial, axis), jax.lax.slice_in_dim(
      states, 0, states.shape[axis] - 1, axis=axis)], axis=axis)  # h_{t-1}, one [T, B, H] copy
  flat_grads = d_projected.reshape(-1, hidden)
  g_w_hh = previous.reshape(-1, hidden).T @ flat_grads
  g_alive = None if alive is None else jnp.zeros(alive.shape, jax.dtypes.float0)
  g_bias = jnp.sum(flat_grads, axis=0)
  return g_w_hh, g_bias, d_projected, g_initial, g_alive


_elman.defvjp(_forward_rule, _backward_rule)


def _final_state(states: jax.Array, initial: jax.Array, lengths: jax.Array | None,
                 axis: int) -> jax.Array:
  """The state at step lengths - 1 (the initial state for length 0)."""
  if lengths is None:
    return _at(states, states.shape[axis] - 1, axis)
  index = jnp.maximum(lengths - 1, 0)
  index = index[None, :, None] if axis == 0 else index[:, None, None]
  last = jnp.take_along_axis(states, index, axis=axis)
  last = last[0] if axis == 0 else last[:, 0]
  return jnp.where((lengths > 0)[:, None], last, initial)


def _forward_mode(arrays: Any) -> bool:
  """Whether any leaf of ``arrays`` is a tracer of ``jax.jvp`` (forward-mode autodiff)."""
  return any(isinstance(leaf, ad.JVPTracer) for leaf in jax.tree_util.tree_leaves(arrays))


def _static(name: str, value: Any) -> None:
  """Raises a ValueError naming ``name`` where an option that decides the program is
  traced (passed to a ``jax.jit`` without being static)."""
  if isinstance(value, jax.core.Tracer):
    raise ValueError(f'{name}: expected a Python value (it decides the program), got a traced '
                     f'{value.dtype}: jit rnnjax.elman_layer_with({name}=...) instead, or name '
                     f'it in static_argnames')


def _checked(params: cells.Params, batch_major: Any, initial_state: Any,
             lengths: recurrence.Lengths, activation: cells.Activation, projected: bool = False
             ) -> tuple[jax.Array, jax.Array | None, Any]:
  """Checks the layers' arguments before any work.

  Args:
    params, initial_state, lengths, activation, projected: as ``elman_layer``.
    batch_major: the inputs, ``[B, T, d]`` (``[B, T, H]`` when projected).

  Returns:
    ``(initial_state, lengths, dtype)``: the state (``[H]`` broadcast to
    ``[B, H]``; None: zeros) cast to the params' dtype ``dtype``, lengths as
    ``<int32>[B]`` clipped to [0, T] (or None).

  Raises:
    ValueError: as ``elman_layer``.
  """
  cells.activation_function(activation)  # validates it
  checks.arrays('params', params)
  checks.arrays('initial_state', initial_state)
  if initial_state is None and getattr(batch_major, 'ndim', None) == 3 and isinstance(
      params, Mapping) and 'W_hh' in params:
    initial_state = recurrence.zero_state(cells.elman_cell, params, batch_major)
  if getattr(initial_state, 'ndim', None) == 1 and getattr(batch_major, 'ndim', None) == 3:
    initial_state = jnp.broadcast_to(initial_state, batch_major.shape[:1] + initial_state.shape)
  recurrence.check_inputs(batch_major, initial_state, lengths)
  step_shape = (batch_major.shape[0], batch_major.shape[-1])
  if projected:
    hidden_size = jnp.shape(params['W_hh'])[0]
    if batch_major.shape[-1] != hidden_size:
      raise ValueError(f'inputs: expected the input projection X W_xh with last axis H = '
                       f'{hidden_size}, got shape {batch_major.shape}')
    step_shape = (batch_major.shape[0], jnp.shape(params['W_xh'])[0])
  cells.check_step('elman', params, initial_state, step_shape, ('W_xh', 'W_hh'))
  dtype = dtypes.compute_dtype(params)
  if not jnp.issubdtype(jnp.result_type(initial_state), jnp.inexact):
    raise ValueError(f'initial_state: expected a floating [B, H] array (cast to the params\' '
                     f'{dtype}), got {jnp.result_type(initial_state)}')
  return (dtypes.cast_floating(initial_state, dtype),
          recurrence.as_lengths(lengths, batch_major.shape[1]), dtype)


def elman_layer(params: cells.Params, inputs: jax.Array, initial_state: jax.Array | None = None,
                lengths: recurrence.Lengths = None, reverse: bool = False,
                activation: cells.Activation = 'tanh', time_major: bool = False,
                unroll: int = 1, projected: bool = False) -> tuple[jax.Array, jax.Array]:
  """The Elman recurrence, fused: the same result as ``recurrence.scan`` with
  ``cells.elman(activation)``, with a faster backward pass.

  The computation runs in the params' floating dtype: inputs and initial
  state are cast to it, states and final state come back in it. The inputs
  of padded steps are zeroed first, so NaN or inf there reaches neither the
  states nor any gradient.

  Under ``jax.jit`` the options are static, Python values that decide the
  program: ``jax.jit(elman_layer, static_argnames='activation')`` (name each
  option passed), or ``jax.jit(elman_layer_with(activation='relu'))``, whose
  layer takes arrays alone. Plain ``jax.jit(elman_layer)(..., activation='relu')``
  is refused by JAX before the layer runs (a str is not an array). Forward mode
  (``jax.jvp``, ``jax.jacfwd``) works, but not ``jax.linearize`` nor
  ``jax.jvp(jax.jit(layer))`` (module docstring): for those use
  ``rnnjax.scan(rnnjax.elman(activation), params, inputs)``.

  Args:
    params: ``{'W_xh': [d, H], 'W_hh': [H, H], 'b': [H]}`` (``b`` optional,
      ``'b_hh'`` added where present), any ``Mapping`` of arrays, one floating
      dtype (float32 by default).
    inputs: ``<float>[B, T, d]``, or ``[T, B, d]`` with ``time_major``
      (T = 0 and B = 0 allowed).
    initial_state: ``<float>[B, H]``, one array (``[H]``: broadcast over the
      batch; its gradient is the sum over the batch); None (default): zeros.
    lengths: optional ``<int>[B]`` (an array or a list) in [0, T]: states stop
      changing after step lengths - 1 and outputs there are zero (checked when
      concrete; under ``jit`` values outside are clipped to [0, T]).
    reverse: run each sequence right to left within its length, a bool. This
      and the options below decide the program: Python values, static under
      ``jit`` (``static_argnames``, or ``elman_layer_with`` binds them).
    activation: 'tanh', 'relu' or 'linear' (phi' from the states: the fast
      path), or a callable phi such as ``jax.nn.gelu`` (phi' by ``jax.vjp``
      at the saved pre-activations: one more ``[T, B, H]`` buffer, and a pass
      through phi's derivative at each backward step). A callable is a
      static argument: pass the same function object to reuse a compiled
      program.
    time_major: inputs and outputs are ``[T, B, ...]``, a bool.
    unroll: the loops' unroll factor, forward and backward, an int >= 1.
    projected: a bool: the inputs are already the input projection X W_xh
      (``<float>[B, T, H]``): a model that reads token ids computes it as a
      lookup in the [V, H] table E W_xh (``models.Elman``), and the gradient
      with respect to it is returned as the gradient of the inputs.

  Returns:
    ``(states [B, T, H] (or [T, B, H]), final_state [B, H])`` in the params'
    dtype; for T = 0, empty states and the initial state.

  Raises:
    ValueError: as ``recurrence.scan`` (shapes, lengths, params of two
      dtypes, inputs not floating: naming ``inputs`` and its dtype), for an
      initial state that is not one floating ``[B, H]`` (or ``[H]``) array,
      for an activation that is neither a known name nor callable, a flag
      (reverse, time_major, projected) that is not a bool, an unroll that is
      not an int >= 1, params or a state written as nested lists, or an option
      traced by a ``jit`` that did not make it static.

  References:
    Williams & Zipser (1995) (BPTT); the recursion: this module's docstring.
  """
  for name, value in (('reverse', reverse), ('time_major', time_major), ('unroll', unroll),
                      ('projected', projected)):
    _static(name, value)
  reverse, time_major, projected = (checks.flag('reverse', reverse),
                                    checks.flag('time_major', time_major),
                                    checks.flag('projected', projected))
  unroll = checks.unroll('unroll', unroll, bools=False)
  batch_major = inputs if not time_major else jnp.swapaxes(inputs, 0, 1)
  initial_state, lengths, dtype = _checked(params, batch_major, initial_state, lengths,
                                           activation, projected)
  batch, steps = batch_major.shape[:2]
  if steps == 0:  # no step to run (the loops and the final-state gather need one)
    hidden = initial_state.shape[-1]
    return jnp.zeros((0, batch, hidden) if time_major else (batch, 0, hidden),
                     initial_state.dtype), initial_state
  axis = 0 if time_major and not reverse else 1  # work in the layout given, no transposes
  source = dtypes.cast_floating(inputs if axis == 0 else batch_major, dtype)
  source = recurrence.zero_padding(source, lengths, axis)  # the "double where"'s first half
  if reverse:
    source = recurrence.reverse_within_lengths(source, lengths)
  if not projected:
    source = source @ params['W_xh']  # one big matmul
  alive = None
  if lengths is not None:
    alive = (jnp.arange(steps)[:, None] < lengths[None, :])[..., None]  # [T, B, 1]
  arguments = (params['W_hh'], cells.bias(params), source, initial_state, alive)
  plain = functools.partial(_states, cells.activation_function(activation), unroll, axis)
  if _forward_mode(arguments):  # jax.jvp's tracers: the custom_vjp has no rule, the loop has
    states = plain(*arguments)
  else:
    try:
      states = _elman(activation, unroll, axis, *arguments)
    except TypeError as error:  # a jvp that wraps another transform's tracers (jvp of vmap)
      if 'forward-mode' not in str(error):
        raise
      states = plain(*arguments)
  final = _final_state(states, initial_state, lengths, axis)
  if reverse:
    states = recurrence.reverse_within_lengths(states, lengths)
  if time_major and axis == 1:
    states = jnp.swapaxes(states, 0, 1)
  return states, final


def state_gradients_from_states(w_hh: jax.typing.ArrayLike, states: jax.typing.ArrayLike,
                                direct: jax.typing.ArrayLike,
                                lengths: recurrence.Lengths = None,
                                activation: str = 'tanh') -> jax.Array:
  """dE/dh_t of an Elman layer's states, by the backward loop alone, from the states.

  The recursion of the layer's own backward pass (module docstring), run from the
  batch's longest length down, with the totals written out:

    dE/dh_t = direct_t + (phi'(a_{t+1}) * dE/dh_{t+1}) W_hh^T,

  phi'(a_t) read from the states (``cells.activation_derivative``). Where
  ``diagnostics.state_gradients`` runs the recurrence again and differentiates it (a
  forward and an autodiff backward over all T steps), this is one reverse loop to the
  longest length: what Omega's state gradients cost in a training step that has the
  layer's states (``regularizers.omega_penalty`` with ``states``). Equal to
  ``diagnostics.state_gradients`` of the same loss to float32 rounding
  (tests/test_pascanu.py).

  Args:
    w_hh: ``<float>[H, H]``.
    states: ``<float>[B, T, H]``, h_t of ``elman_layer`` (0 at padded steps).
    direct: ``<float>[B, T, H]``, the loss's derivative with respect to each state
      alone (``jax.grad`` of a function of the states), the states' dtype.
    lengths: optional ``<int>[B]`` in [0, T]: at t >= lengths[b] the result is 0 and
      the later steps' gradient passes through unchanged, as the layer's masked steps.
    activation: 'tanh', 'relu' or 'linear' (phi' from the states).

  Returns:
    ``<float>[B, T, H]``, dE/dh_t in the states' dtype.

  Raises:
    ValueError: for an unknown activation, ``direct`` of another shape than ``states``,
      states not ``[B, T, H]`` or w_hh not ``[H, H]``.

  References:
    Pascanu, Mikolov & Bengio (2013), eq. 5; Williams & Zipser (1995) (BPTT).
  """
  checks.one_of('activation', activation, tuple(sorted(cells.ACTIVATIONS)))
  if jnp.ndim(states) != 3:
    raise ValueError(f'states: expected rank 3 [B, T, H], got shape {jnp.shape(states)}')
  if jnp.shape(direct) != jnp.shape(states):
    raise ValueError(f'direct: expected the shape of states {jnp.shape(states)}, got '
                     f'{jnp.shape(direct)}')
  batch, steps, hidden = jnp.shape(states)
  if jnp.shape(w_hh) != (hidden, hidden):
    raise ValueError(f'w_hh: expected shape [H, H] = ({hidden}, {hidden}), got '
                     f'{jnp.shape(w_hh)}')
  states, direct = jnp.asarray(states), jnp.asarray(direct)
  lengths = recurrence.as_lengths(lengths, steps)
  alive = None if lengths is None else (jnp.arange(steps)[:, None] < lengths[None, :])[..., None]
  live = _live_steps(steps, alive, 1)
  w_hh_t = jnp.transpose(w_hh)

  def step(i: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    later, totals = carry
    t = live - 1 - i
    total = _at(direct, t, 1) + later
    previous = (total * cells.activation_derivative(_at(states, t, 1), activation)) @ w_hh_t
    if alive is not None:
      keep = _at(alive, t, 0)
      total = jnp.where(keep, total, 0.0)
      previous = jnp.where(keep, previous, later)
    return previous, _put(totals, total, t, 1)

  _, totals = jax.lax.fori_loop(0, live, step, (jnp.zeros((batch, hidden), states.dtype),
                                                jnp.zeros_like(direct)))
  return totals


def checkpointed_elman_layer(params: cells.Params, inputs: jax.Array,
                             initial_state: jax.Array | None = None,
                             segment_length: int | None = None,
                             activation: cells.Activation = 'tanh',
                             unroll: int = 1) -> tuple[jax.Array, jax.Array]:
  """``elman_layer`` for long sequences: O(T / s + s) saved states instead of O(T).

  The T steps run as T / s segments of s steps; each segment is a
  ``jax.checkpoint`` of the fused layer, so the forward pass keeps only the
  state at each segment boundary and the backward pass recomputes one
  segment's states at a time. With s ~ sqrt(T) the memory is O(sqrt(T))
  states for about one extra forward pass of compute.

  Args:
    params, initial_state, activation, unroll: as ``elman_layer`` (the same
      dtype rule: the computation runs in the params' dtype; None is zeros).
    inputs: ``<float>[B, T, d]`` with T a multiple of ``segment_length``
      (T = 0 and B = 0 allowed).
    segment_length: s >= 1; None: the largest divisor of T at most sqrt(T).

  Returns:
    ``(states [B, T, H], final_state [B, H])`` in the params' dtype, equal to
    ``elman_layer``'s.

  Raises:
    ValueError: if s < 1 or T is not a multiple of s, or as ``elman_layer``.

  References:
    Chen, Xu, Zhang & Guestrin (2016), "Training deep nets with sublinear
    memory cost"; Gruslys et al. (2016), "Memory-efficient backpropagation
    through time".
  """
  initial_state, _, dtype = _checked(params, inputs, initial_state, None, activation)
  inputs = dtypes.cast_floating(inputs, dtype)
  batch, steps, input_size = inputs.shape
  if segment_length is None:
    segment_length = max([s for s in range(1, math.isqrt(steps) + 1) if steps % s == 0] or [1])
  if (isinstance(segment_length, (bool, np.bool_)) or
      not isinstance(segment_length, (int, np.integer)) or segment_length < 1 or
      steps % segment_length):
    raise ValueError(f'segment_length: expected an int s >= 1 dividing T = {steps}, '
                     f'got {segment_length!r}')
  segments = jnp.swapaxes(inputs, 0, 1).reshape(steps // segment_length, segment_length, batch,
                                                input_size)

  @jax.checkpoint
  def segment(state: jax.Array, segment_inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
    states, final = elman_layer(params, segment_inputs, state, activation=activation,
                                time_major=True, unroll=unroll)
    return final, states

  final, states = jax.lax.scan(segment, initial_state, segments)
  return jnp.swapaxes(states.reshape(steps, batch, initial_state.shape[-1]), 0, 1), final


@dataclasses.dataclass(frozen=True)
class ElmanLayer:
  """``elman_layer`` with its options bound: ``layer(params, inputs [B, T, d],
  initial_state [B, H] = None, lengths [B] = None) -> (states [B, T, H], final [B, H])``.

  What a ``jax.jit`` needs: the options that decide the program are fields of a frozen
  value (equal and hashing equal for equal options), and the call takes arrays alone, so
  ``jax.jit(layer)`` needs no static arguments named. Make one with ``elman_layer_with``.
  """
  activation: cells.Activation = 'tanh'
  reverse: bool = False
  time_major: bool = False
  unroll: int = 1
  projected: bool = False

  def __call__(self, params: cells.Params, inputs: jax.Array,
               initial_state: jax.Array | None = None, lengths: recurrence.Lengths = None
               ) -> tuple[jax.Array, jax.Array]:
    return elman_layer(params, inputs, initial_state, lengths, self.reverse, self.activation,
                       self.time_major, self.unroll, self.projected)


def elman_layer_with(activation: cells.Activation = 'tanh', reverse: bool = False,
                     time_major: bool = False, unroll: int = 1, projected: bool = False
                     ) -> ElmanLayer:
  """The fused Elman layer with its options bound, ready for ``jax.jit``:
  ``jax.jit(elman_layer_with(activation='relu', reverse=True))(params, inputs)``.

  Args:
    activation, reverse, time_major, unroll, projected: as ``elman_layer``.

  Returns:
    ``layer(params, inputs <float>[B, T, d], initial_state <float>[B, H] = None,
    lengths <int>[B] = None) -> (states [B, T, H], final_state [B, H])``, an
    ``ElmanLayer`` (a frozen value: equal options, equal layers).

  Raises:
    ValueError: for an activation that is neither a known name nor callable, an unroll
      that is not an int >= 1, or a flag that is not a bool.
  """
  cells.activation_function(activation)
  unroll = checks.unroll('unroll', unroll, bools=False)
  return ElmanLayer(activation, checks.flag('reverse', reverse),
                    checks.flag('time_major', time_major), unroll,
                    checks.flag('projected', projected))
