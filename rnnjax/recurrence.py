"""Scanning a cell over time: lengths, reverse, truncated BPTT.

Any cell ``cell(params, carry, x) -> (carry, y)`` (see ``rnnjax.cells``) runs
here; nothing in this module knows which cell it is.

Notation: B batch, T steps, d input features, H hidden units.

The input rules below hold for every recurrent path of the package (``scan``,
``truncated_scan``, ``rnnjax.fused``, ``rnnjax.combinators``, the cells,
``rnnjax.models``, ``rnnjax.seq2seq``); each is checked before any work:

- dtype: a path computes in the one floating dtype of its params
  (``dtypes.compute_dtype``; ``dtypes.in_params_dtype`` casts): floating inputs and
  initial-state leaves are cast to it, outputs and final states come back in
  it, and gradients with respect to inputs and initial state come back in
  the dtypes those were given in. Params of two floating dtypes are a
  ValueError. Mixed precision is chosen by casting the params (bfloat16
  params compute in bfloat16 whatever the state's dtype). A diagnostic that
  needs more precision than the params' dtype (a QR, a convergence test)
  computes in ``dtypes.precise_dtype`` internally and returns in the params' dtype.
- initial state: None (the default everywhere a state is taken) is zeros of
  the carry the cell returns, in the params' dtype (``zero_state``).
- lengths: ``<int>[B]`` in [0, T], as an array or a list (values checked
  when concrete; under ``jit`` clipped to [0, T]).
- padding: the inputs of steps t >= lengths[b] are replaced by zeros before
  any cell reads them (a "double where"), so NaN or inf in padding reaches
  no output and no gradient, forward or backward.
- T = 0 and B = 0 are valid: outputs ``[B, 0, H]`` and the initial state as
  final state, or empty batches.
- the initial state has the layout the cell carries (Elman, GRU: one
  ``[B, H]`` array; LSTM: an ``(h, c)`` pair), else a ValueError naming
  ``initial_state`` with the expected and the given shape. A leaf ``[H]``
  without the batch axis is broadcast to ``[B, H]`` (``broadcast_state``);
  its gradient is the sum over the batch.
- inputs are floating: integer or boolean inputs (token ids passed by
  mistake) are a ValueError naming ``inputs`` and its dtype, never cast.
- params are any pytree (a cell's: any ``Mapping``, flax's ``FrozenDict``
  included).

References:
  Werbos (1990), "Backpropagation through time: what it does and how to do
  it"; Williams & Peng (1990), "An efficient gradient-based algorithm for
  on-line training of recurrent network trajectories" (truncated BPTT).
"""

from collections.abc import Callable, Sequence
import functools
from typing import Any

import jax
from jax.typing import ArrayLike
import jax.numpy as jnp
import numpy as np

from rnnjax import checks
from rnnjax import dtypes

__all__ = ['broadcast_state', 'reverse_within_lengths', 'scan', 'truncated_scan', 'zero_state']

PyTree = Any
"""A pytree of arrays: params, a carry (one array, an ``(h, c)`` pair), gradients."""

Cell = Callable[[Any, Any, jax.Array], tuple[Any, Any]]
"""``cell(params, carry, x) -> (carry, y)``."""

Lengths = ArrayLike | Sequence[int] | None
"""``<int>[B]`` true lengths, an array or a list; None: every sequence is T steps."""


def check_inputs(inputs: Any, initial_state: PyTree, lengths: Lengths) -> None:
  """Validates ``<float>[B, T, d]`` inputs, a ``[B, ...]`` initial state and ``<int>[B]``
  lengths (an array or a list) in [0, T] (values only when concrete, not under ``jit``).

  Raises:
    ValueError: naming the argument, with the expected and the given shape, dtype or
      value.
  """
  if not hasattr(inputs, 'ndim'):
    raise ValueError(f'inputs: expected an array [B, T, d], got {type(inputs).__name__}')
  if inputs.ndim != 3:
    raise ValueError(f'inputs: expected rank 3 [B, T, d], got shape {inputs.shape}')
  dtypes.check_floating('inputs', inputs)
  batch, steps = inputs.shape[:2]
  for leaf in jax.tree_util.tree_leaves(initial_state):
    if not jnp.shape(leaf):
      raise ValueError(f'initial_state: expected leaves [B, ...] (Elman, GRU: [B, H]; [H] is '
                       f'broadcast over the batch), got a scalar {checks.shown(leaf)}; pass '
                       f'jnp.zeros(({batch}, H)), or None for zeros')
    if jnp.shape(leaf)[0] != batch:
      raise ValueError(f'initial_state: expected leading batch size {batch} (inputs are '
                       f'[B={batch}, T={steps}, d]), got shape {jnp.shape(leaf)}')
  if lengths is None:
    return
  if np.shape(lengths) != (batch,):
    raise ValueError(f'lengths: expected shape [B] = ({batch},), got {np.shape(lengths)}')
  dtype = lengths.dtype if hasattr(lengths, 'dtype') else np.asarray(lengths).dtype
  if not jnp.issubdtype(dtype, jnp.integer):
    raise ValueError(f'lengths: expected integers, got dtype {dtype}')
  if not isinstance(lengths, jax.core.Tracer):
    values = np.asarray(lengths)
    if values.size and (values.min() < 0 or values.max() > steps):
      raise ValueError(f'lengths: expected values in [0, T] = [0, {steps}], got '
                       f'min {values.min()} and max {values.max()}')


def as_lengths(lengths: Lengths, steps: int) -> jax.Array | None:
  """Checked ``lengths`` (``check_inputs``) as ``<int32>[B]`` clipped to [0, T] (None stays
  None): values are checked only outside ``jit``; inside, clipping keeps them in range."""
  if lengths is None:
    return None
  return jnp.clip(jnp.asarray(lengths, jnp.int32), 0, steps)


def zero_padding(sequences: jax.Array, lengths: jax.Array | None, axis: int = 1) -> jax.Array:
  """``sequences`` (time on ``axis``, 1: ``[B, T, ...]``, 0: ``[T, B, ...]``) with the
  steps t >= lengths[b] set to zero; ``lengths`` None: unchanged.

  The first half of a "double where": a step that is computed and then discarded by a
  select still sends 0 * (its derivative) back, which is NaN where its input is NaN or
  inf; zeroing the input first keeps every discarded value and derivative finite.
  """
  if lengths is None:
    return sequences
  steps = sequences.shape[axis]
  alive = jnp.arange(steps)[None, :] < lengths[:, None]  # [B, T]
  alive = alive if axis == 1 else alive.T
  alive = alive.reshape(alive.shape + (1,) * (sequences.ndim - 2))
  return jnp.where(alive, sequences, jnp.zeros((), sequences.dtype))


def _layout(tree: PyTree) -> tuple[Any, list[tuple[tuple[int, ...], np.dtype]]]:
  """The structure, shapes and dtypes of a pytree of arrays or ShapeDtypeStructs."""
  leaves, structure = jax.tree_util.tree_flatten(tree)
  return structure, [(tuple(leaf.shape), jnp.dtype(leaf.dtype)) for leaf in leaves]


def _step_input(inputs: jax.Array) -> jax.ShapeDtypeStruct:
  """The shape and dtype of one step's input ``[B, ...]`` of ``[B, T, ...]`` inputs."""
  return jax.ShapeDtypeStruct((inputs.shape[0],) + inputs.shape[2:], inputs.dtype)


def broadcast_state(cell: Cell, params: PyTree, inputs: Any, initial_state: PyTree) -> PyTree:
  """``initial_state`` with each leaf that lacks the batch axis broadcast over it.

  A leaf of rank 1 (``[H]``) is broadcast to ``[B, H]`` where the cell, traced
  for one step (no work), returns ``[B, H]`` for it; every other leaf (and a
  state of a cell whose carry is ``[B]``) is left as it is, for the checks of
  ``scan`` to judge.

  Args:
    cell: ``cell(params, carry, x) -> (carry, y)``.
    params: the cell's params.
    inputs: ``<float>[B, T, d]`` (anything else: ``initial_state`` unchanged,
      for ``check_inputs`` to name).
    initial_state: the carry pytree.

  Returns:
    the initial state, leaves ``[H]`` as ``[B, H]``.

  Raises:
    ValueError: the cell's own, for a state it cannot carry (e.g. another H).
  """
  leaves, structure = jax.tree_util.tree_flatten(initial_state)
  returned_structure: Any
  if (getattr(inputs, 'ndim', None) != 3 or
      not any(jnp.ndim(leaf) == 1 for leaf in leaves)):
    return initial_state
  try:
    returned = jax.eval_shape(lambda p, c, x: cell(p, c, x)[0], params, initial_state,
                              _step_input(inputs))
  except TypeError:  # a cell that cannot broadcast: check_inputs names the state
    return initial_state
  returned_leaves, returned_structure = jax.tree_util.tree_flatten(returned)
  if returned_structure != structure:
    return initial_state
  batch = inputs.shape[0]
  leaves = [jnp.broadcast_to(leaf, (batch,) + jnp.shape(leaf))
            if jnp.ndim(leaf) == 1 and out.shape == (batch,) + jnp.shape(leaf) else leaf
            for leaf, out in zip(leaves, returned_leaves)]
  return jax.tree_util.tree_unflatten(structure, leaves)


def _zero_state_maker(cell: Cell) -> Callable[[PyTree, int], PyTree] | None:
  """``cell.zero_state`` (through ``functools.partial`` wrappers), or None."""
  while True:
    maker = getattr(cell, 'zero_state', None)
    if maker is not None or not isinstance(cell, functools.partial):
      return maker
    cell = cell.func


def zero_state(cell: Cell, params: PyTree, inputs: Any) -> PyTree:
  """The zero initial state of ``cell`` for ``inputs``, in the params' dtype.

  A cell says what it carries by a ``zero_state(params, batch_size) -> carry`` attribute
  (``rnnjax.cells``' cells have one; a ``functools.partial`` of one keeps it).

  Args:
    cell: ``cell(params, carry, x) -> (carry, y)``.
    params: the cell's params.
    inputs: ``[B, T, d]``: B is the batch of the state.

  Returns:
    the carry pytree, leaves ``[B, ...]`` of zeros (Elman, GRU: ``[B, H]``; LSTM:
    ``(h, c)``).

  Raises:
    ValueError: naming ``inputs`` if not of rank 3, or ``initial_state`` for a cell that
      does not say what it carries (pass its initial state).
  """
  if getattr(inputs, 'ndim', None) != 3:
    raise ValueError(f'inputs: expected an array [B, T, d], got '
                     f'{getattr(inputs, "shape", type(inputs).__name__)}')
  maker = _zero_state_maker(cell)
  if maker is None:
    raise ValueError(f'initial_state: expected the carry of {cell!r} (it has no zero_state '
                     f'attribute to make zeros from), got None')
  return maker(params, inputs.shape[0])


def with_initial_state(cell: Cell, params: PyTree, inputs: Any, initial_state: PyTree
                       ) -> PyTree:
  """``initial_state``, or the cell's ``zero_state`` where it is None: the common entry of
  every path that takes a cell (``scan``, ``truncated_scan``, ``state_gradients``,
  ``lyapunov_spectrum``, ``elman_deer``, the regularizers), which first checks that
  ``cell`` is a cell (``checks.cell``: not the factory ``rnnjax.elman``, a layer or an
  initializer) and that params and state hold arrays, not nested lists (``checks.arrays``).

  Raises:
    ValueError: naming ``cell``, ``params`` or ``initial_state``, with the fix; or as
      ``zero_state``.
  """
  checks.cell('cell', cell)
  checks.arrays('params', params)
  checks.arrays('initial_state', initial_state)
  return zero_state(cell, params, inputs) if initial_state is None else initial_state


def check_carry(cell: Cell, params: PyTree, inputs: jax.Array, initial_state: PyTree) -> None:
  """Checks, by tracing one step (no work), that ``cell`` returns a carry of the
  structure, shapes and dtypes of ``initial_state``, as ``jax.lax.scan`` needs.

  Raises:
    ValueError: naming ``initial_state`` with the expected (returned) and the given
      layout; or the cell's own ValueError (e.g. a state of the wrong H or kind).
  """
  returned = jax.eval_shape(lambda p, c, x: cell(p, c, x)[0], params, initial_state,
                            _step_input(inputs))
  if _layout(returned) != _layout(initial_state):
    describe = lambda tree: jax.tree_util.tree_map(
        lambda leaf: f'{jnp.dtype(leaf.dtype)}{list(leaf.shape)}', tree)
    raise ValueError(f'initial_state: expected the carry the cell returns, '
                     f'{describe(returned)}, got {describe(initial_state)}')


def reverse_within_lengths(sequences: jax.Array, lengths: jax.Array | None) -> jax.Array:
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


def scan(cell: Cell, params: PyTree, inputs: jax.Array, initial_state: PyTree = None,
         lengths: Lengths = None, reverse: bool = False, unroll: int | bool = 1
         ) -> tuple[PyTree, PyTree]:
  """Runs ``cell`` over the time axis of a batch-major input.

  With ``lengths``, the state stops changing after each sequence's last real
  step, the final state is the one at ``lengths - 1`` (the initial state for
  length 0) and outputs at padded steps are zero; the inputs of padded steps
  are zeroed before the cell reads them, so whatever they hold (NaN, inf)
  reaches neither the outputs nor any gradient. ``reverse=True`` runs each
  sequence backwards within its own length; outputs come back in the original
  time order and the final state is the one after reading step 0.

  The computation runs in the params' floating dtype (``compute_dtype``; the
  module docstring): floating inputs and initial-state leaves are cast to it.

  Args:
    cell: ``cell(params, carry, x) -> (carry, y)``.
    params: the cell's params pytree.
    inputs: ``<float>[B, T, d]`` (T = 0 and B = 0 allowed).
    initial_state: carry pytree with leaves ``[B, ...]`` (Elman: ``[B, H]``;
      a leaf ``[H]`` is broadcast over the batch, ``broadcast_state``); None
      (default): zeros (``zero_state``).
    lengths: optional ``<int>[B]`` (an array or a list) with values in [0, T]
      (checked when concrete; under ``jit`` values outside are clipped to [0, T]).
    reverse: run right to left within each length: a bool (not the string 'False').
    unroll: ``jax.lax.scan``'s unroll factor, an int >= 1 or a bool.

  Returns:
    ``(outputs [B, T, H], final_state)`` in the params' dtype (T = 0:
    ``[B, 0, H]`` and the initial state).

  Raises:
    ValueError: for a ``cell`` that is no cell (the factory ``rnnjax.elman``
      uncalled, a layer such as ``rnnjax.elman_layer``: ``checks.cell``), a
      ``reverse`` that is not a bool or an ``unroll`` that is not an int >= 1
      or a bool, params or a state written as nested lists, inputs not of
      rank 3 or not floating, a scalar initial state, an initial state of
      another batch size or of another layout than the carry the cell
      returns, params of two floating dtypes, lengths of the wrong shape,
      dtype or range, or no initial state for a cell without ``zero_state``.

  References:
    Werbos (1990), "Backpropagation through time: what it does and how to
    do it" (the unrolled recurrence autodiff differentiates).
  """
  reverse = checks.flag('reverse', reverse)
  unroll = checks.unroll('unroll', unroll)
  initial_state = with_initial_state(cell, params, inputs, initial_state)
  initial_state = broadcast_state(cell, params, inputs, initial_state)
  check_inputs(inputs, initial_state, lengths)
  inputs, initial_state = dtypes.in_params_dtype(params, (inputs, initial_state))
  check_carry(cell, params, inputs, initial_state)
  lengths = as_lengths(lengths, inputs.shape[1])
  inputs = zero_padding(inputs, lengths)
  if reverse:
    inputs = reverse_within_lengths(inputs, lengths)
  time_major = jnp.swapaxes(inputs, 0, 1)  # [T, B, d]

  if lengths is None:
    final, outputs = jax.lax.scan(lambda c, x: cell(params, c, x), initial_state,
                                  time_major, unroll=unroll)
  else:
    def step(carry: PyTree, x_and_t: tuple[jax.Array, jax.Array]) -> tuple[PyTree, PyTree]:
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


def truncated_scan(cell: Cell, params: PyTree, inputs: jax.Array, initial_state: PyTree = None,
                   truncation: int | None = None, unroll: int | bool = 1
                   ) -> tuple[PyTree, PyTree]:
  """Truncated BPTT: ``scan`` in windows of ``truncation`` (tau) steps.

  The forward pass is identical to ``scan``; the state passes from window to
  window through ``jax.lax.stop_gradient``, so the gradient of any loss with
  respect to anything before the current window (the initial state included)
  is exactly zero. tau = T is full BPTT. The T // tau full windows run as one
  ``jax.lax.scan`` over windows and a last window shorter than tau as one more
  ``scan``, so the traced program's size does not grow with T / tau.

  Args:
    cell, params, inputs, initial_state, unroll: as in ``scan`` (the same
      dtype rule: the params' dtype; None is zeros).
    truncation: tau >= 1, window length in steps (required; a keyword where the
      initial state is left out).

  Returns:
    ``(outputs [B, T, H], final_state)``, in the params' dtype.

  Raises:
    ValueError: if tau is not an int >= 1, or as ``scan`` does.

  References:
    Williams & Peng (1990), "An efficient gradient-based algorithm for
    on-line training of recurrent network trajectories" (BPTT(h; h'), here
    with h = h' = tau); ``docs/reference_numbers.md``, "Truncated BPTT".
  """
  truncation = checks.integer('truncation', truncation, 1, what='an int tau')
  unroll = checks.unroll('unroll', unroll)
  initial_state = with_initial_state(cell, params, inputs, initial_state)
  initial_state = broadcast_state(cell, params, inputs, initial_state)
  check_inputs(inputs, initial_state, None)
  inputs, initial_state = dtypes.in_params_dtype(params, (inputs, initial_state))
  check_carry(cell, params, inputs, initial_state)
  batch, steps = inputs.shape[:2]
  full = steps // truncation * truncation  # steps in full windows
  windows = jnp.swapaxes(inputs[:, :full].reshape(
      (batch, full // truncation, truncation) + inputs.shape[2:]), 0, 1)  # [W, B, tau, d]

  def window(state: PyTree, window_inputs: jax.Array) -> tuple[PyTree, PyTree]:
    outputs, state = scan(cell, params, window_inputs, jax.lax.stop_gradient(state),
                          unroll=unroll)
    return state, outputs

  state, outputs = jax.lax.scan(window, initial_state, windows)  # outputs [W, B, tau, H]
  outputs = jnp.swapaxes(outputs, 0, 1).reshape((batch, full) + outputs.shape[3:])
  if full < steps:  # the last window, shorter than tau
    last, state = scan(cell, params, inputs[:, full:], jax.lax.stop_gradient(state),
                       unroll=unroll)
    outputs = jnp.concatenate([outputs, last], axis=1)
  return outputs, state
