"""Sampling from a language model: a prompt, then greedy, temperature or top-k draws.

Non-finite logits (NaN or inf, from non-finite params or an overflow) never
become a token: argmax and categorical draws would turn them into a
plausible id (0 at every step for a NaN head bias). The step that meets them
gives ``INVALID`` (-1, never an id) and so does every later step;
``sample`` raises outside ``jit``, and callers that trace it must check
``ids == INVALID``.
"""

import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax.data import batching

INVALID = -1  # the token of a step whose logits were not all finite: never an id


def non_finite_entries(params):
  """The paths (``"['head']['bias']"``) of the leaves of ``params`` that hold NaN or inf."""
  return [jax.tree_util.keystr(path) for path, leaf in
          jax.tree_util.tree_flatten_with_path(params)[0] if not np.all(np.isfinite(leaf))]


def not_finite_message(params, where):
  """The ValueError message for logits that were not finite at ``where``."""
  entries = non_finite_entries(params)
  cause = (f'non-finite params: {entries}' if entries else
           'the params are finite, so the activations overflowed')
  return (f'params: the logits at {where} are not finite (NaN or inf), so no token can be '
          f'chosen; {cause}')


def sample(model, params, prompt, length: int, key, temperature: float = 1.0,
           top_k: int | None = None):
  """Feeds ``prompt`` through the network, then generates ``length`` tokens.

  Each generated token is fed back as the next input (no teacher forcing).
  Temperature 0 is greedy (argmax, no division by zero); temperature t > 0
  draws from softmax(logits / t), restricted with ``top_k`` = k to the k
  largest logits of each step (the others get probability 0; k = 1 is greedy
  at any temperature, k = V draws from the whole softmax).

  A step whose logits are not all finite gives ``INVALID`` (-1), as does
  every step after it; outside ``jit`` that is a ValueError. Under ``jit``
  (a traced prompt, params or key) the ids come back with the sentinel, and
  the caller must check ``ids == INVALID`` (or ``ids < 0``) and report it.

  Args:
    model: a ``LanguageModel``.
    params: its params.
    prompt: ``<int32>[P]`` token ids, P >= 1.
    length: number of tokens to generate, >= 0.
    key: a ``jax.random`` key.
    temperature: >= 0.
    top_k: None (every id may be drawn) or an int k in [1, V].

  Returns:
    ``<int32>[length]`` generated ids (the prompt not included), each in
    [0, V) (traced only: ``INVALID`` from the first non-finite step on).

  Raises:
    ValueError: for an empty prompt, ids outside [0, V), a negative length or
      temperature, or a ``top_k`` that is not an int in [1, V]; naming
      ``params`` (and their non-finite entries) when logits are not finite.

  References:
    Fan, Lewis & Dauphin (2018), "Hierarchical Neural Story Generation" (top-k
    sampling).
  """
  batching.check_ids('prompt', prompt, model.vocab_size)
  if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 0:
    raise ValueError(f'length: expected an int >= 0, got {length!r}')
  if (isinstance(temperature, (bool, jax.core.Tracer)) or np.ndim(temperature) or
      np.asarray(temperature).dtype.kind not in 'iuf' or not 0 <= float(temperature) < math.inf):
    raise ValueError(f'temperature: expected a finite value >= 0 (0: greedy), got '
                     f'{temperature!r}')
  temperature = float(temperature)
  prompt = jnp.asarray(prompt, jnp.int32)
  if prompt.ndim != 1 or prompt.shape[0] < 1:
    raise ValueError(f'prompt: expected a non-empty 1-D array of ids, got shape {prompt.shape}')
  if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral)
                            or not 1 <= top_k <= model.vocab_size):
    raise ValueError(f'top_k: expected None or an int in [1, V] = [1, {model.vocab_size}], '
                     f'got {top_k!r}')
  top_k = None if top_k is None else int(top_k)
  ids = _generator(model, int(length), temperature == 0, top_k)(
      params, prompt, key, jnp.float32(max(temperature, 1e-30)))
  if not isinstance(ids, jax.core.Tracer):
    invalid = np.flatnonzero(np.asarray(ids) == INVALID)
    if invalid.size:
      raise ValueError(not_finite_message(params, f'generated step {invalid[0]}'))
  return ids


@functools.lru_cache(maxsize=None)
def _generator(model, length: int, greedy: bool, top_k: int | None):
  """A jitted ``generate(params, prompt, key, temperature) -> <int32>[length]``."""
  def draw(logits, key, temperature):
    if greedy:
      return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    if top_k is None:
      return jax.random.categorical(key, logits / temperature).astype(jnp.int32)
    best, ids = jax.lax.top_k(logits, top_k)  # [k], largest first
    return ids[jax.random.categorical(key, best / temperature)].astype(jnp.int32)

  def choose(logits, key, temperature, failed):
    """The drawn id, or INVALID where the logits are not all finite or ``failed``."""
    failed = failed | ~jnp.all(jnp.isfinite(logits))
    return jnp.where(failed, INVALID, draw(logits, key, temperature))

  @jax.jit
  def generate(params, prompt, key, temperature):
    variables = {'params': params}
    logits, state = model.apply(variables, prompt[None, :], model.initial_state(1))

    def step(carry, key):
      state, token = carry
      logits, state = model.apply(variables, token[None, None], state)
      next_token = choose(logits[0, 0], key, temperature, token == INVALID)
      return (state, next_token), next_token

    first_key, rest = jax.random.split(key)
    first = choose(logits[0, -1], first_key, temperature, False)
    if length == 0:
      return jnp.zeros((0,), jnp.int32)
    _, tokens = jax.lax.scan(step, (state, first), jax.random.split(rest, length - 1))
    return jnp.concatenate([first[None], tokens])

  return generate
