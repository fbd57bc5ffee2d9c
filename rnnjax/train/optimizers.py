"""Optimizer chains built from a config, and the measurements they record at every step.

A chain is ``clip -> optimizer -> measure_updates`` inside
``optax.inject_hyperparams``, so ``opt_state.hyperparams`` holds the learning
rate and the clip threshold as arrays: runs that differ only in these values
share one ``update`` function, one compiled step and one vmapped group. No
clipping is global-norm clipping at an infinite threshold.

Global-norm clipping rescales the whole gradient, g <- g min(1, c / ||g||)
(Pascanu et al. 2013, seed note 001); elementwise clipping clamps each entry
to [-c, c] (seed note 001's code); 'pascanu' is global-norm clipping with
the reference code's fallback (``rnnjax.train.pascanu``): a gradient whose
norm is not finite or above 1e10 is replaced by 0.02 W_hh for W_hh and 0
elsewhere, so that chain never turns a non-finite gradient into a non-finite
update (``handles_non_finite``). The chain's own states record what it
measured (``measurements``): the pre-clip global norm, whether clipping
changed the gradient, and the global norm of the update that was applied.

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks", algorithm 1.
"""

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from rnnjax.train import pascanu

OPTIMIZERS = {
    'sgd': optax.sgd,
    'adagrad': lambda learning_rate: optax.adagrad(learning_rate, initial_accumulator_value=0.0,
                                                   eps=1e-8),
    'adam': optax.adam,
    'adamw': optax.adamw,
}
CLIPPINGS = ('none', 'global_norm', 'elementwise', 'pascanu')


def global_norm(tree) -> jax.Array:
  """sqrt(sum of squares) over every leaf, without float32 overflow.

  optax's ``tree.norm`` squares first: [3e19, 4e19] gives inf, so clipping
  to a threshold then multiplies by c / inf = 0. Here the entries are divided
  by the largest magnitude m first: ||g|| = m sqrt(sum (g / m)^2), which is
  5e19 for that gradient.

  Returns:
    ``<float32>[]``: inf if any entry is infinite, NaN if any is NaN, 0 for
    an all-zero (or empty) tree.
  """
  leaves = [jnp.asarray(leaf, jnp.float32) for leaf in jax.tree_util.tree_leaves(tree)]
  if not leaves:
    return jnp.zeros([], jnp.float32)
  largest = jnp.max(jnp.stack([jnp.max(jnp.abs(leaf), initial=0.0) for leaf in leaves]))
  scale = jnp.where((largest > 0) & jnp.isfinite(largest), largest, 1.0)
  squares = sum(jnp.sum(jnp.square(leaf / scale)) for leaf in leaves)
  return scale * jnp.sqrt(squares)


class ClipState(NamedTuple):
  """What the clipping step saw at the last update."""
  gradient_norm: jax.Array  # <float32>[]: pre-clip global norm (``global_norm``)
  clipped: jax.Array  # <bool>[]: whether clipping changed the gradient


class UpdateState(NamedTuple):
  """The update that the chain produced at the last step."""
  update_norm: jax.Array  # <float32>[]: global norm of the update (after the learning rate)


def clip(family: str, threshold) -> optax.GradientTransformation:
  """Global-norm or elementwise clipping that records ``ClipState``.

  Args:
    family: 'global_norm' (g <- g min(1, c / ||g||)) or 'elementwise'
      (each entry clamped to [-c, c]).
    threshold: c > 0, a float or an array (inf: never clips).

  Returns:
    an ``optax.GradientTransformation`` whose state is ``ClipState``.
  """
  def init(params):
    del params
    return ClipState(jnp.zeros([], jnp.float32), jnp.zeros([], bool))

  def update(updates, state, params=None):
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


def clip_pascanu(threshold) -> optax.GradientTransformation:
  """Global-norm clipping with the reference fallback of Pascanu et al. (2013),
  recording ``ClipState``.

  ``pascanu.clip_updates``: n = ||g|| not finite or > 1e10 gives the update
  0.02 W_hh for every leaf named 'W_hh' and 0 for the others; else g <- g
  min(1, c / n). ``ClipState.gradient_norm`` is n (NaN or inf when the
  gradient was not finite), ``clipped`` whether the rescaling or the
  fallback changed the gradient.

  Args:
    threshold: c > 0, a float or an array (an injected hyperparameter).

  Returns:
    an ``optax.GradientTransformation`` whose ``update`` needs ``params``
    (with a leaf named 'W_hh'; else ValueError at trace time).

  References:
    Pascanu, Mikolov & Bengio (2013), algorithm 1; RNN.py lines 219-243 of
    github.com/pascanur/trainingRNNs.
  """
  def init(params):
    del params
    return ClipState(jnp.zeros([], jnp.float32), jnp.zeros([], bool))

  def update(updates, state, params=None):
    del state
    updates, norm, clipped, untrusted = pascanu.clip_updates(updates, params, threshold)
    return updates, ClipState(norm, clipped | untrusted)

  return optax.GradientTransformation(init, update)


def measure_updates() -> optax.GradientTransformation:
  """The identity, recording the update's global norm in ``UpdateState``."""
  def init(params):
    del params
    return UpdateState(jnp.zeros([], jnp.float32))

  def update(updates, state, params=None):
    del state, params
    return updates, UpdateState(global_norm(updates))

  return optax.GradientTransformation(init, update)


@functools.lru_cache(maxsize=None)
def _injected(name: str, family: str):
  """One chain per (optimizer, clipping family), learning rate and clip threshold
  injected as array hyperparameters: every run that shares these two shares its
  ``update`` function, so a jitted step compiles once for all of them."""
  def factory(learning_rate, clip_threshold):
    clipping = clip_pascanu(clip_threshold) if family == 'pascanu' else clip(family,
                                                                             clip_threshold)
    return optax.chain(clipping, OPTIMIZERS[name](learning_rate), measure_updates())
  return optax.inject_hyperparams(factory)(learning_rate=1.0, clip_threshold=1.0)


def check(name: str, learning_rate: float, clipping: str = 'none',
          clip_threshold: float = 1.0) -> None:
  """Raises ValueError naming the argument, as ``make_optimizer`` would."""
  if name not in OPTIMIZERS:
    raise ValueError(f'optimizer: expected one of {sorted(OPTIMIZERS)}, got {name!r}')
  if isinstance(learning_rate, bool) or not (isinstance(learning_rate, (int, float)) and
                                              0 < learning_rate < math.inf):
    raise ValueError(f'learning_rate: expected a finite value > 0, got {learning_rate!r}')
  if clipping not in CLIPPINGS:
    raise ValueError(f'clipping: expected one of {CLIPPINGS}, got {clipping!r}')
  if clipping != 'none' and not (isinstance(clip_threshold, (int, float)) and
                                 0 < clip_threshold < math.inf):
    raise ValueError(f'clip_threshold: expected a finite value > 0 for clipping={clipping!r}, '
                     f'got {clip_threshold!r}')


def family(clipping: str) -> str:
  """The chain a clipping setting runs on: 'elementwise', 'pascanu', else 'global_norm'."""
  return clipping if clipping in ('elementwise', 'pascanu') else 'global_norm'


def handles_non_finite(clipping: str) -> bool:
  """Whether the chain of ``clipping`` replaces a non-finite gradient by a finite update
  ('pascanu': the reference fallback), so that a step is judged by the update it
  applies (the trainer's finiteness test), not by the gradient's norm."""
  return family(clipping) == 'pascanu'


def make_optimizer(name: str, learning_rate: float, clipping: str = 'none',
                   clip_threshold: float = 1.0) -> optax.GradientTransformation:
  """Clipping, then the optimizer, then the update measurement; two numbers injected.

  ``opt_state.hyperparams`` holds ``learning_rate`` and ``clip_threshold``
  (inf for no clipping) as float32 arrays; ``measurements(opt_state)`` reads
  what the last update saw.

  Args:
    name: 'sgd', 'adagrad' (accumulator from 0, eps 1e-8 inside the square
      root, as in seed note 001), 'adam' or 'adamw'.
    learning_rate: finite, > 0.
    clipping: 'none', 'global_norm', 'elementwise' or 'pascanu' (global norm
      with the reference fallback, ``clip_pascanu``; needs params with a
      'W_hh' leaf).
    clip_threshold: c, finite and > 0 (ignored for 'none').

  Raises:
    ValueError: naming the argument, for unknown names or out-of-range values.
  """
  check(name, learning_rate, clipping, clip_threshold)
  base = _injected(name, family(clipping))
  threshold = math.inf if clipping == 'none' else clip_threshold

  def init(params):
    return with_hyperparameters(base.init(params), learning_rate=learning_rate,
                                clip_threshold=threshold)

  return optax.GradientTransformation(init, base.update)


def with_hyperparameters(opt_state, **values):
  """``opt_state`` of a ``make_optimizer`` chain with some of its hyperparameters
  (``learning_rate``, ``clip_threshold``) replaced; the values may be traced arrays,
  so that a vmapped program gives each run its own."""
  hyperparams = dict(opt_state.hyperparams)
  hyperparams.update({name: jnp.asarray(value, jnp.float32) for name, value in values.items()})
  return opt_state._replace(hyperparams=hyperparams)


def measurements(opt_state) -> dict:
  """What the last update of a ``make_optimizer`` chain measured.

  Returns:
    ``{'grad_norm': <float32>[] pre-clip global norm, 'clipped': <bool>[],
    'update_norm': <float32>[] global norm of the update}``.
  """
  clip_state, _, update_state = opt_state.inner_state
  return {'grad_norm': clip_state.gradient_norm, 'clipped': clip_state.clipped,
          'update_norm': update_state.update_norm}
