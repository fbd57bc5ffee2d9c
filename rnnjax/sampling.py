"""Sampling from a language model: a prompt, then greedy, temperature or top-k draws."""

import functools
import math
import numbers

import jax
import jax.numpy as jnp


def sample(model, params, prompt, length: int, key, temperature: float = 1.0,
           top_k: int | None = None):
  """Feeds ``prompt`` through the network, then generates ``length`` tokens.

  Each generated token is fed back as the next input (no teacher forcing).
  Temperature 0 is greedy (argmax, no division by zero); temperature t > 0
  draws from softmax(logits / t), restricted with ``top_k`` = k to the k
  largest logits of each step (the others get probability 0; k = 1 is greedy
  at any temperature, k = V draws from the whole softmax).

  Args:
    model: a ``LanguageModel``.
    params: its params.
    prompt: ``<int32>[P]`` token ids, P >= 1.
    length: number of tokens to generate, >= 0.
    key: a ``jax.random`` key.
    temperature: >= 0.
    top_k: None (every id may be drawn) or an int k in [1, V].

  Returns:
    ``<int32>[length]`` generated ids (the prompt not included), each in [0, V).

  Raises:
    ValueError: for an empty prompt, ids outside [0, V), a negative length or
      temperature, or a ``top_k`` that is not an int in [1, V].

  References:
    Fan, Lewis & Dauphin (2018), "Hierarchical Neural Story Generation" (top-k
    sampling).
  """
  if jnp.size(prompt) and not jnp.issubdtype(jnp.asarray(prompt).dtype, jnp.integer):
    raise ValueError(f'prompt: expected int ids, got dtype {jnp.asarray(prompt).dtype}')
  if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 0:
    raise ValueError(f'length: expected an int >= 0, got {length!r}')
  if not isinstance(temperature, numbers.Real) or not 0 <= temperature < math.inf:
    raise ValueError(f'temperature: expected a finite value >= 0 (0: greedy), got '
                     f'{temperature!r}')
  prompt = jnp.asarray(prompt, jnp.int32)
  if prompt.ndim != 1 or prompt.shape[0] < 1:
    raise ValueError(f'prompt: expected a non-empty 1-D array of ids, got shape {prompt.shape}')
  if not isinstance(prompt, jax.core.Tracer) and prompt.size and (
      int(prompt.min()) < 0 or int(prompt.max()) >= model.vocab_size):
    raise ValueError(f'prompt: expected ids in [0, V) = [0, {model.vocab_size}), got min '
                     f'{int(prompt.min())} and max {int(prompt.max())}')
  if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral)
                            or not 1 <= top_k <= model.vocab_size):
    raise ValueError(f'top_k: expected None or an int in [1, V] = [1, {model.vocab_size}], '
                     f'got {top_k!r}')
  top_k = None if top_k is None else int(top_k)
  ids = _generator(model, int(length), temperature == 0, top_k)(
      params, prompt, key, jnp.float32(max(temperature, 1e-30)))
  return ids


@functools.lru_cache(maxsize=None)
def _generator(model, length: int, greedy: bool, top_k: int | None):
  """A jitted ``generate(params, prompt, key, temperature) -> <int32>[length]``."""
  def choose(logits, key, temperature):
    if greedy:
      return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    if top_k is None:
      return jax.random.categorical(key, logits / temperature).astype(jnp.int32)
    best, ids = jax.lax.top_k(logits, top_k)  # [k], largest first
    return ids[jax.random.categorical(key, best / temperature)].astype(jnp.int32)

  @jax.jit
  def generate(params, prompt, key, temperature):
    variables = {'params': params}
    logits, state = model.apply(variables, prompt[None, :], model.initial_state(1))

    def step(carry, key):
      state, token = carry
      logits, state = model.apply(variables, token[None, None], state)
      next_token = choose(logits[0, 0], key, temperature)
      return (state, next_token), next_token

    first_key, rest = jax.random.split(key)
    first = choose(logits[0, -1], first_key, temperature)
    if length == 0:
      return jnp.zeros((0,), jnp.int32)
    _, tokens = jax.lax.scan(step, (state, first), jax.random.split(rest, length - 1))
    return jnp.concatenate([first[None], tokens])

  return generate
