"""Scoring text with a language model: cross-entropy, masked NLL, perplexity.

Units: nats per token; bits per token = nats / ln 2. Perplexity = exp of the
token-weighted mean NLL over non-pad targets, reported as inf past a cap of
20 nats per token.

``evaluate`` and ``evaluate_streaming`` run one compiled program per model
and shapes: module-level ``jax.jit`` functions with the model a static
argument (no cache of this module's own; JAX's jit cache holds the programs
and ``jax.clear_caches()`` drops them). A second call with the same (or an
equal) model and the same shapes compiles nothing.

References:
  Jelinek, Mercer, Bahl & Baker (1977), "Perplexity: a measure of the
  difficulty of speech recognition tasks"; the cap and the masked mean:
  ``docs/reference_numbers.md``, "Language models".
"""

import functools
import math
from typing import Any

import jax
from jax.typing import ArrayLike
import jax.numpy as jnp
import numpy as np
import optax

from rnnjax.data import batching

__all__ = ['cross_entropy', 'evaluate', 'evaluate_streaming', 'masked_nll', 'perplexity']


def _check_targets(logits: jax.Array, targets: jax.Array) -> None:
  """Targets of shape logits.shape[:-1], ids in [0, V) when concrete."""
  if jnp.shape(targets) != jnp.shape(logits)[:-1]:
    raise ValueError(f'targets: expected shape {jnp.shape(logits)[:-1]} = the leading axes of '
                     f'logits {jnp.shape(logits)}, got {jnp.shape(targets)}')
  batching.check_ids('targets', targets, jnp.shape(logits)[-1])


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """Mean negative log-likelihood in nats: ``[B, T, V], <int>[B, T] -> scalar``.

  Args:
    logits: ``<float>[..., V]``.
    targets: ``<int>[...]``, the leading axes of ``logits``, ids in [0, V).

  Returns:
    ``<float32>[]``, nats per target.

  Raises:
    ValueError: for targets not of shape [B, T] = logits' leading axes, no
      targets at all (the mean of none), or (when concrete) ids outside [0, V).
  """
  _check_targets(logits, targets)
  if not jnp.size(targets):
    raise ValueError(f'targets: expected at least one target, got shape {jnp.shape(targets)}')
  return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def masked_nll(logits: jax.Array, targets: jax.Array, mask: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
  """Summed NLL in nats over the positions where ``mask`` is true, and their count.

  Args:
    logits: ``<float32>[B, T, V]``.
    targets: ``<int32>[B, T]``.
    mask: ``<bool>[B, T]``, false at padding (excluded from the loss, as
      PyTorch's ``ignore_index``).

  Returns:
    ``(nll_sum <float32>[], count <float32>[])``; the token-weighted mean NLL
    is their ratio.

  Raises:
    ValueError: for targets or mask not of shape ``[B, T]`` = logits' leading
      axes, a mask that is not boolean, or (when concrete) target ids
      outside [0, V).
  """
  if jnp.shape(mask) != logits.shape[:-1]:
    raise ValueError(f'mask: expected shape [B, T] = {logits.shape[:-1]} (logits are '
                     f'{logits.shape}), got {jnp.shape(mask)}')
  if jnp.result_type(mask) != jnp.bool_:
    raise ValueError(f'mask: expected dtype bool, got {jnp.result_type(mask)}')
  _check_targets(logits, targets)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  return jnp.sum(jnp.where(mask, nll, 0.0)), jnp.sum(mask).astype(jnp.float32)


def perplexity(nll_sum: ArrayLike, count: ArrayLike, max_loss: ArrayLike = 20.0) -> float:
  """exp of the token-weighted mean NLL; inf when that mean exceeds ``max_loss`` nats
  (never an overflow) or is not finite.

  Args:
    nll_sum: summed NLL in nats over ``count`` predicted tokens.
    count: number of predicted tokens (> 0).
    max_loss: nats per token above which the perplexity is reported as inf.

  Returns:
    the perplexity, a Python float in [1, inf].

  Raises:
    ValueError: for a count that is not a finite number > 0, an nll_sum that is
      not a number or is < 0 (inf and NaN give inf), or a max_loss that is not
      a number >= 0; on the host (not under ``jit``).

  References:
    Jelinek et al. (1977); the cap of 20 nats: ``docs/reference_numbers.md``,
    "Language models".
  """
  def number(value: Any) -> bool:
    return (not isinstance(value, (bool, str, jax.core.Tracer)) and np.ndim(value) == 0 and
            np.asarray(value).dtype.kind in 'iuf')
  value = lambda number: float(np.asarray(number))
  if not number(count) or not 0 < value(count) < math.inf:
    raise ValueError(f'count: expected a finite number of tokens > 0, got {count!r}')
  if not number(nll_sum) or value(nll_sum) < 0:  # NaN (a diverged model) gives inf
    raise ValueError(f'nll_sum: expected a summed negative log-likelihood >= 0, got {nll_sum!r}')
  if not number(max_loss) or not value(max_loss) >= 0:
    raise ValueError(f'max_loss: expected a number of nats >= 0, got {max_loss!r}')
  mean = value(nll_sum) / value(count)
  return math.exp(mean) if math.isfinite(mean) and mean <= value(max_loss) else math.inf


@functools.partial(jax.jit, static_argnums=0)
def _window_losses(model: Any, params: Any, inputs: jax.Array, targets: jax.Array) -> jax.Array:
  """``<float32>[W]``: the mean NLL of each window, the state carried across windows."""
  def window(carry: Any, batch: tuple[jax.Array, jax.Array]) -> tuple[Any, jax.Array]:
    logits, carry = model.apply({'params': params}, batch[0], carry)
    return carry, cross_entropy(logits, batch[1])
  _, losses = jax.lax.scan(window, model.initial_state(inputs.shape[1]), (inputs, targets))
  return losses


def evaluate(model: Any, params: Any, inputs: ArrayLike, targets: ArrayLike) -> float:
  """Mean NLL in nats per token over a stream cut by ``text.stream_windows``.

  Args:
    model: a ``models.LanguageModel`` (hashable: a static argument of the
      compiled program).
    params: its params.
    inputs, targets: ``<int32>[W, B, tau]``; the state is carried across
      the W windows, starting from zero.

  Returns:
    nats per token (a Python float; the window means are summed in float64).

  Raises:
    ValueError: for inputs not of shape [W >= 1, B >= 1, tau >= 1], targets
      of another shape, or ids outside [0, V) (V = ``model.vocab_size``).
  """
  inputs, targets = jnp.asarray(inputs), jnp.asarray(targets)
  if inputs.ndim != 3 or not inputs.size:
    raise ValueError(f'inputs: expected token ids of shape [W >= 1, B >= 1, tau >= 1], got '
                     f'{inputs.shape}')
  if targets.shape != inputs.shape:
    raise ValueError(f'targets: expected the shape of inputs {inputs.shape}, got {targets.shape}')
  batching.check_ids('inputs', inputs, model.vocab_size)
  batching.check_ids('targets', targets, model.vocab_size)
  losses = jax.device_get(_window_losses(model, params, inputs, targets))
  return math.fsum(float(x) for x in losses) / len(losses)


def _kahan_add(total: jax.Array, compensation: jax.Array, value: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
  """Compensated summation (Kahan 1965): float32 sums of millions of terms to ~1e-7."""
  corrected = value - compensation
  new_total = total + corrected
  return new_total, (new_total - total) - corrected


@functools.partial(jax.jit, static_argnums=0)
def _streaming_total(model: Any, params: Any, ids: jax.Array) -> jax.Array:
  """``<float32>[]``: the summed NLL of the next-token predictions of ``ids [B, N]``, one
  step at a time with a compensated sum."""
  variables = {'params': params}

  def step(t: jax.Array, carry: tuple[Any, jax.Array, jax.Array]
           ) -> tuple[Any, jax.Array, jax.Array]:
    state, total, compensation = carry
    token = jax.lax.dynamic_slice_in_dim(ids, t, 1, axis=1)  # [B, 1], read in place
    target = jax.lax.dynamic_index_in_dim(ids, t + 1, axis=1, keepdims=False)
    logits, state = model.apply(variables, token, state)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits[:, 0], target)
    return (state, *_kahan_add(total, compensation, jnp.sum(nll)))

  _, total, _ = jax.lax.fori_loop(
      0, ids.shape[1] - 1, step,
      (model.initial_state(ids.shape[0]), jnp.float32(0.0), jnp.float32(0.0)))
  return total


def evaluate_streaming(model: Any, params: Any, ids: ArrayLike) -> float:
  """Mean NLL in nats per token of B long streams, forward only, one step at a time.

  Memory is O(1) in the stream length: the loop keeps one state ``[B, H]``
  and a compensated running sum, never the states of a window, so text of any
  length can be scored (uniform logits over V = 65 give ln 65 = 4.174387 to
  1e-6 at 3e6 tokens; a plain float32 sum gave 4.0671). Equals ``evaluate``
  on the same streams cut into windows.

  Args:
    model: a ``models.LanguageModel`` (hashable: a static argument of the
      compiled program).
    params: its params.
    ids: ``<int32>[B, N]``: B streams of N >= 2 tokens; the N - 1 next-token
      predictions of each are scored from a zero initial state.

  Returns:
    nats per token (a Python float).

  Raises:
    ValueError: for ids not of shape [B, N] with B >= 1 and N >= 2, or ids
      outside [0, V) (V = ``model.vocab_size``).

  References:
    Kahan (1965), "Further remarks on reducing truncation errors"
    (compensated summation).
  """
  ids = jnp.asarray(ids)
  if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 2:
    raise ValueError(f'ids: expected shape [B >= 1, N >= 2], got {ids.shape}')
  batching.check_ids('ids', ids, model.vocab_size)
  total = float(_streaming_total(model, params, ids))
  return total / (ids.shape[0] * (ids.shape[1] - 1))
