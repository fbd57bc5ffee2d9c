"""Sampling from a language model: a prompt, then greedy, temperature or top-k draws.

Every path that turns logits into a token (``sample`` here, ``seq2seq.decode``)
draws it with ``draw``, one rule: temperature 0 is argmax; a temperature t > 0
draws from softmax(logits / t), computed as (logits - max) / t with the
largest logits exactly 0, so that no temperature overflows float32 (at 1e-38
or 1e-45, a denormal or one flushed to zero, the draw is the greedy token
where logits / t alone would give inf and NaN).

Non-finite logits (NaN or inf, from non-finite params or an overflow) never
become a token: argmax and categorical draws would turn them into a
plausible id (0 at every step for a NaN head bias). The step that meets them
gives ``INVALID`` (-1, never an id) and so does every later step;
``sample`` raises outside ``jit``, and callers that trace it must check
``ids == INVALID``.

References:
  Ackley, Hinton & Sejnowski (1985), "A learning algorithm for Boltzmann
  machines" (sampling at a temperature); Fan, Lewis & Dauphin (2018),
  "Hierarchical neural story generation" (top-k sampling); Gumbel (1954) and
  Maddison, Tarlow & Minka (2014), "A* sampling" (the Gumbel-max draw of
  ``jax.random.categorical``).
"""

import functools
import math
import numbers
from typing import Any

import jax
from jax.typing import ArrayLike
import jax.numpy as jnp
import numpy as np

from rnnjax import checks
from rnnjax.data import batching

__all__ = ['INVALID', 'check_temperature', 'draw', 'non_finite_entries', 'sample']

INVALID = -1  # the token of a step whose logits were not all finite: never an id


def non_finite_entries(params: Any) -> list[str]:
  """The paths (``"['head']['bias']"``) of the leaves of a params pytree that hold NaN or inf.

  Args:
    params: a pytree of arrays (concrete, not traced).

  Returns:
    ``jax.tree_util.keystr`` of each non-finite leaf, in tree order.
  """
  return [jax.tree_util.keystr(path) for path, leaf in
          jax.tree_util.tree_flatten_with_path(params)[0] if not np.all(np.isfinite(leaf))]


def not_finite_message(params: Any, where: str) -> str:
  """The ValueError message for logits that were not finite at ``where``."""
  entries = non_finite_entries(params)
  cause = (f'non-finite params: {entries}' if entries else
           'the params are finite, so the activations overflowed')
  return (f'params: the logits at {where} are not finite (NaN or inf), so no token can be '
          f'chosen; {cause}')


def check_temperature(temperature: Any) -> float:
  """``temperature`` as a Python float, checked: a finite number >= 0 (0: greedy).

  Args:
    temperature: a number or a concrete 0-d array.

  Returns:
    ``float(temperature)``.

  Raises:
    ValueError: naming ``temperature`` for a negative, infinite or NaN value,
      a bool, a string, an array of rank > 0 or a traced value.
  """
  if (isinstance(temperature, (bool, str, jax.core.Tracer)) or np.ndim(temperature) or
      np.asarray(temperature).dtype.kind not in 'iuf' or not 0 <= float(temperature) < math.inf):
    raise ValueError(f'temperature: expected a finite value >= 0 (0: greedy), got '
                     f'{temperature!r}')
  return float(temperature)


def draw(key: jax.Array | None, logits: ArrayLike, temperature: ArrayLike = 1.0,
         top_k: int | None = None) -> jax.Array:
  """A token id from each row of logits at a temperature: the rule of every sampling path.

  Temperature 0 is greedy (argmax; ``key`` unused). A temperature t > 0 draws
  from softmax(logits / t), restricted with ``top_k`` = k to the k largest
  logits of each row (k = 1 is greedy at any temperature). The scaled logits
  are (logits - max) / t with the largest set to exactly 0, the same
  softmax, so no t overflows: a t so small that logits / t would be inf
  (1e-38, 1e-45; also a denormal t that the CPU flushes to 0) gives the
  largest logit (the greedy token; among tied largest logits, one drawn
  uniformly).

  Args:
    key: a ``jax.random`` key (one draw for all rows); None only when
      ``temperature`` is a Python or numpy 0.
    logits: ``<float>[..., V]``.
    temperature: t >= 0, a number or a 0-d array (traced under ``jit``: then
      0 selects the greedy token at run time). A concrete one is checked (a finite
      value >= 0, ``rnnjax.checks``); a traced one cannot be.
    top_k: None (every id may be drawn) or an int k in [1, V] (static).

  Returns:
    ``<int32>[...]`` ids in [0, V), or ``INVALID`` (-1) for each row whose
    logits are not all finite.

  Raises:
    ValueError: for ``logits`` of rank 0, a concrete temperature that is negative, infinite
      or NaN, a ``top_k`` that is not None or an int in [1, V], or no ``key`` for a
      temperature that may be > 0.

  References:
    Ackley, Hinton & Sejnowski (1985) (temperature); Fan, Lewis & Dauphin
    (2018) (top-k).
  """
  checks.number('temperature', temperature, low=0, high_open=True)
  logits = jnp.asarray(logits)
  if logits.ndim < 1:
    raise ValueError(f'logits: expected an array [..., V], got shape {logits.shape}')
  vocab_size = logits.shape[-1]
  if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral)
                            or not 1 <= top_k <= vocab_size):
    raise ValueError(f'top_k: expected None or an int in [1, V] = [1, {vocab_size}], '
                     f'got {top_k!r}')
  finite = jnp.all(jnp.isfinite(logits), axis=-1)
  greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)
  always_greedy = (not isinstance(temperature, jax.core.Tracer) and np.ndim(temperature) == 0
                   and bool(np.asarray(temperature) == 0))
  if always_greedy:
    return jnp.where(finite, greedy, INVALID)
  if key is None:
    raise ValueError(f'key: expected a jax.random key to draw at temperature {temperature!r}, '
                     'got None')
  candidates, candidate_ids = logits, None
  if top_k is not None:
    candidates, candidate_ids = jax.lax.top_k(logits, int(top_k))  # [..., k], largest first
  shifted = candidates - jnp.max(candidates, axis=-1, keepdims=True)  # <= 0, the largest 0
  scaled = jnp.where(shifted == 0, 0.0, shifted / jnp.asarray(temperature, shifted.dtype))
  drawn = jax.random.categorical(key, scaled, axis=-1)
  if candidate_ids is not None:
    drawn = jnp.take_along_axis(candidate_ids, drawn[..., None], axis=-1)[..., 0]
  drawn = drawn.astype(jnp.int32)
  if isinstance(temperature, jax.core.Tracer) or np.ndim(temperature):
    drawn = jnp.where(jnp.asarray(temperature) > 0, drawn, greedy)
  return jnp.where(finite, drawn, INVALID)


def sample(model: Any, params: Any, prompt: ArrayLike, length: int, key: jax.Array,
           temperature: ArrayLike = 1.0, top_k: int | None = None) -> jax.Array:
  """Feeds ``prompt`` through the network, then generates ``length`` tokens.

  Each generated token is fed back as the next input (no teacher forcing).
  Each token is drawn by ``draw``: temperature 0 is greedy (argmax, no
  division by zero); temperature t > 0 draws from softmax(logits / t) (any
  t, 1e-45 included: no overflow), restricted with ``top_k`` = k to the k
  largest logits of each step (the others get probability 0; k = 1 is greedy
  at any temperature, k = V draws from the whole softmax).

  One compiled program per model, length, greedy-or-not and ``top_k``
  (``jax.jit`` with those static): a second call with the same ones and a
  prompt of the same length compiles nothing. The temperature is a value,
  not a program.

  A step whose logits are not all finite gives ``INVALID`` (-1), as does
  every step after it; outside ``jit`` that is a ValueError. Under ``jit``
  (a traced prompt, params or key) the ids come back with the sentinel, and
  the caller must check ``ids == INVALID`` (or ``ids < 0``) and report it.

  Args:
    model: a ``models.LanguageModel`` (hashable: it is a static argument).
    params: its params.
    prompt: ``<int32>[P]`` token ids, P >= 1.
    length: number of tokens to generate, >= 0.
    key: a ``jax.random`` key.
    temperature: a finite value >= 0 (a number or a 0-d array).
    top_k: None (every id may be drawn) or an int k in [1, V].

  Returns:
    ``<int32>[length]`` generated ids (the prompt not included), each in
    [0, V) (traced only: ``INVALID`` from the first non-finite step on).

  Raises:
    ValueError: for an empty prompt, ids outside [0, V), a negative length or
      temperature, or a ``top_k`` that is not an int in [1, V]; naming
      ``params`` (and their non-finite entries) when logits are not finite.

  References:
    Fan, Lewis & Dauphin (2018), "Hierarchical neural story generation" (top-k
    sampling).
  """
  batching.check_ids('prompt', prompt, model.vocab_size)
  if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 0:
    raise ValueError(f'length: expected an int >= 0, got {length!r}')
  temperature = check_temperature(temperature)
  prompt = jnp.asarray(prompt, jnp.int32)
  if prompt.ndim != 1 or prompt.shape[0] < 1:
    raise ValueError(f'prompt: expected a non-empty 1-D array of ids, got shape {prompt.shape}')
  if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral)
                            or not 1 <= top_k <= model.vocab_size):
    raise ValueError(f'top_k: expected None or an int in [1, V] = [1, {model.vocab_size}], '
                     f'got {top_k!r}')
  ids = _generate(model, params, prompt, key, jnp.float32(temperature), length=int(length),
                  greedy=temperature == 0, top_k=None if top_k is None else int(top_k))
  if not isinstance(ids, jax.core.Tracer):
    invalid = np.flatnonzero(np.asarray(ids) == INVALID)
    if invalid.size:
      raise ValueError(not_finite_message(params, f'generated step {invalid[0]}'))
  return ids


@functools.partial(jax.jit, static_argnames=('model', 'length', 'greedy', 'top_k'))
def _generate(model: Any, params: Any, prompt: jax.Array, key: jax.Array,
              temperature: jax.Array, *, length: int, greedy: bool,
              top_k: int | None) -> jax.Array:
  """``<int32>[length]`` ids after ``prompt``, each drawn by ``draw`` (``greedy``: at
  temperature 0), ``INVALID`` from the first non-finite step on."""
  variables = {'params': params}
  at = 0.0 if greedy else temperature

  def choose(logits: jax.Array, key: jax.Array, failed: jax.Array | bool) -> jax.Array:
    """The drawn id, or INVALID where the logits are not all finite or ``failed``."""
    return jnp.where(failed, INVALID, draw(key, logits, at, top_k))

  logits, state = model.apply(variables, prompt[None, :], model.initial_state(1))

  def step(carry: tuple[Any, jax.Array], key: jax.Array) -> tuple[tuple[Any, jax.Array],
                                                                  jax.Array]:
    state, token = carry
    logits, state = model.apply(variables, token[None, None], state)
    next_token = choose(logits[0, 0], key, token == INVALID)
    return (state, next_token), next_token

  first_key, rest = jax.random.split(key)
  first = choose(logits[0, -1], first_key, False)
  if length == 0:
    return jnp.zeros((0,), jnp.int32)
  _, tokens = jax.lax.scan(step, (state, first), jax.random.split(rest, length - 1))
  return jnp.concatenate([first[None], tokens])
