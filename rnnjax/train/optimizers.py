"""Optimizer chains built from a config: clip -> optimizer -> (decay) -> measure.

The chain sits inside ``optax.inject_hyperparams``, so ``opt_state.hyperparams`` holds the
learning rate and the clip threshold as arrays: runs that differ only in these values share
one ``update`` function, one compiled step and one vmapped group. No clipping is global-norm
clipping at an infinite threshold.

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent neural networks",
  algorithm 1 (``rnnjax.clipping``).
"""

import math
from typing import Any

import optax

from rnnjax import checks
from rnnjax import clipping as clippers

__all__ = ['OPTIMIZERS', 'CLIPPINGS', 'check', 'family', 'handles_non_finite', 'make_optimizer',
           'from_config', 'measurements']

OPTIMIZERS = {
    'sgd': optax.sgd,
    'adagrad': lambda learning_rate: optax.adagrad(learning_rate, initial_accumulator_value=0.0,
                                                   eps=1e-8),
    'adam': optax.adam,
    'adamw': optax.adamw,
}
CLIPPINGS = ('none', 'global_norm', 'elementwise', 'pascanu')


def check(name: str, learning_rate: float, clipping: str = 'none',
          clip_threshold: float = 1.0) -> None:
  """Raises ValueError naming the argument, as ``make_optimizer`` would (``rnnjax.checks``)."""
  checks.one_of('optimizer', name, sorted(OPTIMIZERS))
  checks.number('learning_rate', learning_rate, 0, low_open=True, high_open=True)
  checks.one_of('clipping', clipping, CLIPPINGS)
  if clipping != 'none':
    checks.number('clip_threshold', clip_threshold, 0, low_open=True, high_open=True,
                  note=f' for clipping={clipping!r}')


def family(clipping: str) -> str:
  """The chain a clipping setting runs on: 'elementwise', 'pascanu', else 'global_norm'."""
  return clipping if clipping in ('elementwise', 'pascanu') else 'global_norm'


def handles_non_finite(clipping: str) -> bool:
  """Whether the chain turns a non-finite gradient into a finite update ('pascanu': the
  reference fallback), so that a step is judged by its update, not its gradient."""
  return family(clipping) == 'pascanu'


def make_optimizer(name: str, learning_rate: float, clipping: str = 'none',
                   clip_threshold: float = 1.0, decay: float = 1.0, decay_every: int = 0,
                   decay_begin: int = 0) -> optax.GradientTransformation:
  """The chain; ``measurements(opt_state)`` reads what its last update saw.

  Args:
    name: 'sgd', 'adagrad' (accumulator from 0, eps 1e-8), 'adam' or 'adamw'.
    learning_rate: finite, > 0.
    clipping: one of ``CLIPPINGS`` ('pascanu' needs params with a 'W_hh' leaf).
    clip_threshold: c, finite and > 0 (ignored for 'none').
    decay, decay_every, decay_begin: the learning rate times ``decay`` every
      ``decay_every`` steps from step ``decay_begin`` on (a staircase); 0: constant.

  Raises:
    ValueError: naming the argument (``check``).
  """
  check(name, learning_rate, clipping, clip_threshold)
  chain_family = family(clipping)

  def factory(learning_rate: float, clip_threshold: float) -> optax.GradientTransformation:
    clip = (clippers.clip_pascanu(clip_threshold) if chain_family == 'pascanu'
            else clippers.clip(chain_family, clip_threshold))
    schedule = optax.scale_by_schedule(optax.exponential_decay(
        1.0, decay_every, decay, decay_begin, staircase=True)) if decay_every else optax.identity()
    return optax.chain(clip, OPTIMIZERS[name](learning_rate), schedule, clippers.measure_updates())

  threshold = math.inf if clipping == 'none' else clip_threshold
  return optax.inject_hyperparams(factory)(learning_rate=learning_rate, clip_threshold=threshold)


def from_config(config: Any) -> optax.GradientTransformation:
  """``make_optimizer`` of a config's optimizer, learning rate, clipping and decay."""
  return make_optimizer(config.optimizer, config.learning_rate, config.clipping,
                        config.clip_threshold, config.learning_rate_decay, config.decay_every,
                        config.decay_begin)


def measurements(opt_state: Any) -> dict:
  """``{'grad_norm': <float32>[] pre-clip global norm, 'clipped': <bool>[], 'update_norm':
  <float32>[] global norm of the update}`` of the chain's last update."""
  clip_state, update_state = opt_state.inner_state[0], opt_state.inner_state[-1]
  return {'grad_norm': clip_state.gradient_norm, 'clipped': clip_state.clipped,
          'update_norm': update_state.update_norm}
