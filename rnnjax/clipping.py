"""Gradient clipping as optax transformations, Pascanu et al.'s reference rule among them.

Global-norm clipping rescales the whole gradient, g <- g min(1, c / ||g||)
(Pascanu, Mikolov & Bengio 2013, algorithm 1); elementwise clipping clamps
each entry to [-c, c]. ``clip`` and ``clip_pascanu`` record what they saw in
their state (``ClipState``: the pre-clip global norm and whether clipping
changed the gradient), ``measure_updates`` the global norm of the update, so
that a training loop reports them at every step (``rnnjax.train.optimizers``).

Pascanu's reference code (github.com/pascanur/trainingRNNs, RNN.py lines
219-243) adds a fallback to algorithm 1: where the global norm is NaN,
infinite, negative or above 1e10 ("due to numerical precision issues in
float32 we assume that we can not even trust the numbers"), the gradient of
W_hh becomes 0.02 W_hh and every other gradient 0, so that an SGD step shrinks
W_hh by the factor (1 - 0.02 lr) and leaves the rest alone. Norms are
``norms.global_norm``, without float32 overflow (the reference sums squares in
float32, which overflows above a norm of about 1.8e19; any such norm is above
1e10, so the decision is the same).

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks", section 3.2, algorithm 1; RNN.py lines 219-243.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from rnnjax import checks
from rnnjax.norms import global_norm

__all__ = ['FAMILIES', 'ClipState', 'UpdateState', 'clip', 'clip_pascanu', 'measure_updates',
           'pascanu_clip_updates', 'clip_with_fallback', 'clipped_sgd', 'REFERENCE_THRESHOLD',
           'REFERENCE_FALLBACK_FACTOR', 'REFERENCE_MAX_TRUSTED_NORM']

REFERENCE_THRESHOLD = 1.0  # RNN.py line 495, state['cutoff']
REFERENCE_FALLBACK_FACTOR = 0.02  # RNN.py line 239
REFERENCE_MAX_TRUSTED_NORM = 1e10  # RNN.py line 237
FAMILIES = ('global_norm', 'elementwise')  # of ``clip``


def _check_settings(threshold: Any, fallback_factor: Any = REFERENCE_FALLBACK_FACTOR,
                    max_trusted_norm: Any = REFERENCE_MAX_TRUSTED_NORM) -> None:
  """The settings of every clipping rule: c > 0 and a trusted norm > 0 (inf allowed; a
  negative c would flip the gradient's sign), a finite fallback factor; traced values pass
  (``checks.number``)."""
  checks.number('threshold', threshold, low=0, low_open=True)
  checks.number('max_trusted_norm', max_trusted_norm, low=0, low_open=True)
  checks.number('fallback_factor', fallback_factor, high_open=True, low_open=True)


class ClipState(NamedTuple):
  """What the clipping step saw at the last update."""
  gradient_norm: jax.Array  # <float32>[]: pre-clip global norm (``global_norm``)
  clipped: jax.Array  # <bool>[]: whether clipping changed the gradient


class UpdateState(NamedTuple):
  """The update that the chain produced at the last step."""
  update_norm: jax.Array  # <float32>[]: global norm of the update (after the learning rate)


def _is_recurrent(path: tuple[Any, ...], recurrent_name: str) -> bool:
  return any(getattr(entry, 'key', None) == recurrent_name for entry in path)


def pascanu_clip_updates(updates: Any, params: Any, threshold: float | jax.Array,
                         fallback_factor: float = REFERENCE_FALLBACK_FACTOR,
                         max_trusted_norm: float = REFERENCE_MAX_TRUSTED_NORM,
                         recurrent_name: str = 'W_hh'
                         ) -> tuple[Any, jax.Array, jax.Array, jax.Array]:
  """The rule of ``clip_with_fallback`` as a pure function of one gradient.

  With n = ``global_norm(updates)``: untrusted (n not finite or n >
  max_trusted_norm): every leaf named ``recurrent_name`` becomes
  ``fallback_factor * params``, every other leaf 0; else n > threshold:
  g <- (g / n) threshold; else g unchanged.

  Args:
    updates: the gradient, a pytree shaped as ``params``.
    params: the current params; they must hold a leaf named
      ``recurrent_name`` (at any depth).
    threshold: c > 0 (inf allowed), a float or a float array (traced, e.g. an
      injected hyperparameter: then checked only for its dtype).
    fallback_factor, max_trusted_norm, recurrent_name: as
      ``clip_with_fallback``.

  Returns:
    ``(updates, norm <float32>[], clipped <bool>[], untrusted <bool>[])``:
    the new updates (dtypes as given), the pre-clip global norm, whether the
    rescaling applied (n > c, finite n) and whether the fallback replaced
    the gradient.

  Raises:
    ValueError: for a threshold or max_trusted_norm not > 0, a fallback_factor not finite
      (``checks.number``); params None or without a leaf named ``recurrent_name`` (at trace
      time).

  References:
    RNN.py lines 219-243 of github.com/pascanur/trainingRNNs.
  """
  _check_settings(threshold, fallback_factor, max_trusted_norm)
  if params is None:
    raise ValueError('params: expected the current params (the fallback replaces the '
                     f'gradient of {recurrent_name!r} by a multiple of it), got None')
  paths = [path for path, _ in jax.tree_util.tree_leaves_with_path(params)]
  if not any(_is_recurrent(path, recurrent_name) for path in paths):
    raise ValueError(f'recurrent_name: expected a leaf named {recurrent_name!r} in params, '
                     f'found none among {[jax.tree_util.keystr(p) for p in paths]}')
  norm = global_norm(updates)
  untrusted = ~jnp.isfinite(norm) | (norm > max_trusted_norm)
  clip = (norm > threshold) & ~untrusted
  divisor = jnp.where(clip, norm, 1.0)

  def one_leaf(path: tuple[Any, ...], g: jax.Array, p: jax.Array) -> jax.Array:
    fallback = fallback_factor * p if _is_recurrent(path, recurrent_name) else jnp.zeros_like(g)
    clipped = jnp.where(clip, (g / divisor) * threshold, g)  # g / n <= 1: no underflow
    return jnp.where(untrusted, fallback, clipped).astype(g.dtype)

  updates = jax.tree_util.tree_map_with_path(one_leaf, updates, params)
  return updates, norm.astype(jnp.float32), clip, untrusted


def clip_with_fallback(threshold: float = REFERENCE_THRESHOLD,
                       fallback_factor: float = REFERENCE_FALLBACK_FACTOR,
                       max_trusted_norm: float = REFERENCE_MAX_TRUSTED_NORM,
                       recurrent_name: str = 'W_hh') -> optax.GradientTransformation:
  """Norm clipping with the reference code's fallback, as an optax transformation.

  With n = ``global_norm(updates)`` over every leaf:

  * n not finite, or n > max_trusted_norm: the leaves named
    ``recurrent_name`` become ``fallback_factor * params`` (0.02 W_hh), every
    other leaf 0 (RNN.py lines 234-243; there is no clipping of this);
  * else n > threshold: g <- (g / n) threshold (RNN.py lines 224-230);
  * else g is unchanged.

  Put it before ``optax.sgd(lr)``: the fallback step is then W_hh <- (1 -
  0.02 lr) W_hh. max_trusted_norm=inf keeps only the non-finite case. The
  same rule, recording what it saw, is the clipping 'pascanu' of
  ``clip_pascanu`` (``pascanu_clip_updates``).

  Args:
    threshold: c > 0 (inf: no clipping, the fallback alone).
    fallback_factor: the multiple of W_hh that replaces an untrusted gradient.
    max_trusted_norm: norms above it are untrusted (> 0; inf allowed).
    recurrent_name: the dict key of the recurrent weights; every leaf under
      that key (at any depth) takes the fallback.

  Returns:
    ``optax.GradientTransformation`` whose ``update(updates, state, params)``
    needs ``params``: the gradient and the params as pytrees of one
    structure; its state is ``optax.EmptyState``.

  Raises:
    ValueError: for threshold or max_trusted_norm <= 0 or NaN, or a
      fallback_factor that is not finite; at update time, for params None or
      without a leaf named ``recurrent_name``.

  References:
    Pascanu, Mikolov & Bengio (2013), algorithm 1; RNN.py lines 219-243.
  """
  _check_settings(threshold, fallback_factor, max_trusted_norm)

  def init(params: Any) -> Any:
    del params
    return optax.EmptyState()

  def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
    updates, _, _, _ = pascanu_clip_updates(updates, params, threshold, fallback_factor,
                                    max_trusted_norm, recurrent_name)
    return updates, state

  return optax.GradientTransformation(init, update)


def clipped_sgd(learning_rate: float, threshold: float = REFERENCE_THRESHOLD
                ) -> optax.GradientTransformation:
  """The paper's MSGD-C step: ``clip_with_fallback(threshold)``, then SGD
  without momentum (learning rate 0.01 in RNN.py line 469).

  Raises:
    ValueError: for learning_rate <= 0 or not finite, or as
      ``clip_with_fallback``.
  """
  checks.number('learning_rate', learning_rate, low=0, low_open=True, high_open=True)
  return optax.chain(clip_with_fallback(threshold), optax.sgd(learning_rate))


def clip(family: str, threshold: float | jax.Array) -> optax.GradientTransformation:
  """Global-norm or elementwise clipping that records ``ClipState``.

  Args:
    family: 'global_norm' (g <- g min(1, c / ||g||)) or 'elementwise'
      (each entry clamped to [-c, c]): one of ``FAMILIES``.
    threshold: c > 0, a float or an array (inf: never clips; a traced one, e.g. injected
      by ``optax.inject_hyperparams``, is checked only for its dtype).

  Returns:
    an ``optax.GradientTransformation`` whose state is ``ClipState``.

  Raises:
    ValueError: for a family not in ``FAMILIES`` or a threshold not > 0, in one line
      (``rnnjax.checks``).
  """
  checks.one_of('family', family, FAMILIES)
  _check_settings(threshold)
  def init(params: Any) -> ClipState:
    del params
    return ClipState(jnp.zeros([], jnp.float32), jnp.zeros([], bool))

  def update(updates: Any, state: ClipState, params: Any = None) -> tuple[Any, ClipState]:
    del state, params
    norm = global_norm(updates)
    if family == 'elementwise':
      largest = jnp.max(jnp.stack([jnp.max(jnp.abs(g), initial=0.0)
                                   for g in jax.tree_util.tree_leaves(updates)]))
      clipped = largest > threshold
      updates = jax.tree_util.tree_map(lambda g: jnp.clip(g, -threshold, threshold), updates)
    else:
      clipped = norm > threshold
      factor = jnp.where(clipped, threshold / norm, 1.0)
      updates = jax.tree_util.tree_map(lambda g: g * factor.astype(g.dtype), updates)
    return updates, ClipState(norm, clipped)

  return optax.GradientTransformation(init, update)


def clip_pascanu(threshold: float | jax.Array) -> optax.GradientTransformation:
  """Global-norm clipping with the reference fallback of Pascanu et al. (2013),
  recording ``ClipState``.

  ``pascanu_clip_updates``: n = ||g|| not finite or > 1e10 gives the update
  0.02 W_hh for every leaf named 'W_hh' and 0 for the others; else g <- g
  min(1, c / n). ``ClipState.gradient_norm`` is n (NaN or inf when the
  gradient was not finite), ``clipped`` whether the rescaling or the
  fallback changed the gradient.

  Args:
    threshold: c > 0, a float or a scalar array (an injected hyperparameter).

  Returns:
    an ``optax.GradientTransformation`` whose ``update`` needs ``params``, a
    pytree shaped as the gradient (with a leaf named 'W_hh'; else ValueError
    at trace time); ``ClipState`` holds ``<float32>[]`` and ``<bool>[]``.

  Raises:
    ValueError: for a threshold not > 0 (inf allowed), in one line.

  References:
    Pascanu, Mikolov & Bengio (2013), algorithm 1; RNN.py lines 219-243 of
    github.com/pascanur/trainingRNNs.
  """
  _check_settings(threshold)

  def init(params: Any) -> ClipState:
    del params
    return ClipState(jnp.zeros([], jnp.float32), jnp.zeros([], bool))

  def update(updates: Any, state: ClipState, params: Any = None) -> tuple[Any, ClipState]:
    del state
    updates, norm, clipped, untrusted = pascanu_clip_updates(updates, params, threshold)
    return updates, ClipState(norm, clipped | untrusted)

  return optax.GradientTransformation(init, update)


def measure_updates() -> optax.GradientTransformation:
  """The identity, recording the update's global norm in ``UpdateState``."""
  def init(params: Any) -> UpdateState:
    del params
    return UpdateState(jnp.zeros([], jnp.float32))

  def update(updates: Any, state: UpdateState, params: Any = None
             ) -> tuple[Any, UpdateState]:
    del state, params
    return updates, UpdateState(global_norm(updates))

  return optax.GradientTransformation(init, update)
