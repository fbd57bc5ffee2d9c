"""Optimizer chains built from a config: clipping first, then the optimizer.

Clipping is an optax transformation in the chain (``optax.identity()`` when
off); the norm is never written by hand. Global-norm clipping rescales the
whole gradient, g <- g min(1, c / ||g||) (Pascanu et al. 2013, seed note 001);
elementwise clipping clamps each entry to [-c, c] (seed note 001's code).
"""

import optax
import jax
import jax.numpy as jnp

OPTIMIZERS = {
    'sgd': optax.sgd,
    'adagrad': lambda learning_rate: optax.adagrad(learning_rate, initial_accumulator_value=0.0,
                                                   eps=1e-8),
    'adam': optax.adam,
    'adamw': optax.adamw,
}
CLIPPINGS = ('none', 'global_norm', 'elementwise')
ON_DIVERGENCE = ('stop', 'skip')


def clipping_transform(clipping: str, threshold: float) -> optax.GradientTransformation:
  """``optax.identity``, ``optax.clip_by_global_norm`` or ``optax.clip``.

  Raises:
    ValueError: for an unknown ``clipping`` or a threshold <= 0 when clipping.
  """
  if clipping not in CLIPPINGS:
    raise ValueError(f'clipping: expected one of {CLIPPINGS}, got {clipping!r}')
  if clipping == 'none':
    return optax.identity()
  if not threshold > 0:
    raise ValueError(f'clip_threshold: expected a value > 0 for clipping={clipping!r}, '
                     f'got {threshold!r}')
  if clipping == 'global_norm':
    return optax.clip_by_global_norm(threshold)
  return optax.clip(threshold)


def make_optimizer(name: str, learning_rate: float, clipping: str = 'none',
                   clip_threshold: float = 1.0, on_divergence: str = 'stop'
                   ) -> optax.GradientTransformation:
  """``optax.chain(clipping, optimizer)``; with on_divergence='skip' it is
  wrapped in ``optax.apply_if_finite`` so a non-finite gradient skips the step.

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
  if not learning_rate > 0:
    raise ValueError(f'learning_rate: expected a value > 0, got {learning_rate!r}')
  if on_divergence not in ON_DIVERGENCE:
    raise ValueError(f'on_divergence: expected one of {ON_DIVERGENCE}, got {on_divergence!r}')
  chain = optax.chain(clipping_transform(clipping, clip_threshold),
                      OPTIMIZERS[name](learning_rate))
  if on_divergence == 'skip':
    return optax.apply_if_finite(chain, max_consecutive_errors=1_000_000)
  return chain


def was_clipped(gradients, clipping: str, threshold: float) -> jax.Array:
  """Whether ``clipping`` at ``threshold`` changes ``gradients`` (a bool scalar)."""
  if clipping == 'global_norm':
    return optax.tree.norm(gradients) > threshold
  if clipping == 'elementwise':
    leaves = jax.tree_util.tree_leaves(gradients)
    return jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in leaves])) > threshold
  return jnp.asarray(False)
