"""Optimizer chains built from a config: clipping first, then the optimizer.

Clipping is an optax transformation in the chain (``optax.identity()`` when
off); the norm is never written by hand. Global-norm clipping rescales the
whole gradient, g <- g min(1, c / ||g||) (Pascanu et al. 2013, seed note 001);
elementwise clipping clamps each entry to [-c, c] (seed note 001's code).
"""

import functools
import math

import jax
import jax.numpy as jnp
import optax

OPTIMIZERS = {
    'sgd': optax.sgd,
    'adagrad': lambda learning_rate: optax.adagrad(learning_rate, initial_accumulator_value=0.0,
                                                   eps=1e-8),
    'adam': optax.adam,
    'adamw': optax.adamw,
}
CLIPPINGS = ('none', 'global_norm', 'elementwise')
ON_DIVERGENCE = ('stop', 'skip')


def _check_clipping(clipping: str, threshold: float) -> None:
  if clipping not in CLIPPINGS:
    raise ValueError(f'clipping: expected one of {CLIPPINGS}, got {clipping!r}')
  if clipping != 'none' and not threshold > 0:
    raise ValueError(f'clip_threshold: expected a value > 0 for clipping={clipping!r}, '
                     f'got {threshold!r}')


def clipping_transform(clipping: str, threshold) -> optax.GradientTransformation:
  """``optax.identity``, ``optax.clip_by_global_norm`` or ``optax.clip``.

  Raises:
    ValueError: for an unknown ``clipping`` or a threshold <= 0 when clipping.
  """
  _check_clipping(clipping, threshold)
  return _clip(clipping, threshold)


def _clip(clipping, threshold):
  if clipping == 'none':
    return optax.identity()
  if clipping == 'global_norm':
    return optax.clip_by_global_norm(threshold)
  return optax.clip(threshold)


@functools.lru_cache(maxsize=None)
def _injected(name: str, clipping_family: str, on_divergence: str):
  """One optax transformation per (optimizer, clipping family, divergence
  policy), with learning rate and clip threshold as array hyperparameters
  (``optax.inject_hyperparams``): every run that shares these three shares
  its ``update`` function, so a jitted step compiles once for all of them.
  No clipping is global-norm clipping at an infinite threshold."""
  def factory(learning_rate, clip_threshold):
    chain = optax.chain(_clip(clipping_family, clip_threshold), OPTIMIZERS[name](learning_rate))
    if on_divergence == 'skip':
      return optax.apply_if_finite(chain, max_consecutive_errors=1_000_000)
    return chain
  return optax.inject_hyperparams(factory)(learning_rate=1.0, clip_threshold=1.0)


def make_optimizer(name: str, learning_rate: float, clipping: str = 'none',
                   clip_threshold: float = 1.0, on_divergence: str = 'stop'
                   ) -> optax.GradientTransformation:
  """Clipping, then the optimizer, with the two numbers as hyperparameters.

  The chain is ``optax.chain(clipping, optimizer)`` inside
  ``optax.inject_hyperparams``: ``opt_state.hyperparams`` holds
  ``learning_rate`` and ``clip_threshold`` (inf for no clipping) as arrays,
  so runs that differ only in these values share one compiled step (and can
  be vmapped together). With on_divergence='skip' the chain is wrapped in
  ``optax.apply_if_finite``: a non-finite gradient skips the step.

  Args:
    name: 'sgd', 'adagrad' (accumulator from 0, eps 1e-8 inside the square
      root, as in seed note 001), 'adam' or 'adamw'.
    learning_rate: > 0.
    clipping: 'none', 'global_norm' or 'elementwise'.
    clip_threshold: c > 0 (ignored for 'none').
    on_divergence: 'stop' (the loop stops) or 'skip' (skip the update).

  Raises:
    ValueError: naming the argument, for unknown names or non-positive values.
  """
  if name not in OPTIMIZERS:
    raise ValueError(f'optimizer: expected one of {sorted(OPTIMIZERS)}, got {name!r}')
  if not 0 < learning_rate < math.inf:
    raise ValueError(f'learning_rate: expected a finite value > 0, got {learning_rate!r}')
  if on_divergence not in ON_DIVERGENCE:
    raise ValueError(f'on_divergence: expected one of {ON_DIVERGENCE}, got {on_divergence!r}')
  _check_clipping(clipping, clip_threshold)
  family = 'elementwise' if clipping == 'elementwise' else 'global_norm'
  threshold = math.inf if clipping == 'none' else clip_threshold
  base = _injected(name, family, on_divergence)

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


def was_clipped(gradients, clipping: str, threshold) -> jax.Array:
  """Whether clipping at ``threshold`` changes ``gradients`` (a bool scalar).

  ``threshold`` may be an array (``opt_state.hyperparams['clip_threshold']``);
  'elementwise' compares the largest |entry|, 'global_norm' and 'none' the
  global norm (for 'none' the optimizer's threshold is inf: never clipped).
  """
  if clipping == 'elementwise':
    leaves = jax.tree_util.tree_leaves(gradients)
    return jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in leaves])) > threshold
  return optax.tree.norm(gradients) > threshold
