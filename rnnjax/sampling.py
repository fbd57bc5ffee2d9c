"""Sampling from a language model: a prompt, then greedy or temperature draws."""

import functools

import jax
import jax.numpy as jnp


def sample(model, params, prompt, length: int, key, temperature: float = 1.0):
  """Feeds ``prompt`` through the network, then generates ``length`` tokens.

  Each generated token is fed back as the next input (no teacher forcing).
  Temperature 0 is greedy (argmax, no division by zero); temperature t > 0
  draws from softmax(logits / t).

  Args:
    model: a ``CharLanguageModel``.
    params: its params.
    prompt: ``<int32>[P]`` token ids, P >= 1.
    length: number of tokens to generate, >= 0.
    key: a ``jax.random`` key.
    temperature: >= 0.

  Returns:
    ``<int32>[length]`` generated ids (the prompt not included), each in [0, V).

  Raises:
    ValueError: for an empty prompt, ids outside [0, V), a negative length or
      temperature.
  """
  prompt = jnp.asarray(prompt, jnp.int32)
  if prompt.ndim != 1 or prompt.shape[0] < 1:
    raise ValueError(f'prompt: expected a non-empty 1-D array of ids, got shape {prompt.shape}')
  if not isinstance(prompt, jax.core.Tracer) and prompt.size and (
      int(prompt.min()) < 0 or int(prompt.max()) >= model.vocab_size):
    raise ValueError(f'prompt: expected ids in [0, V) = [0, {model.vocab_size}), got min '
                     f'{int(prompt.min())} and max {int(prompt.max())}')
  if length < 0:
    raise ValueError(f'length: expected an int >= 0, got {length!r}')
  if not temperature >= 0:
    raise ValueError(f'temperature: expected a value >= 0, got {temperature!r}')
  ids = _generator(model, length, temperature == 0)(params, prompt, key,
                                                     jnp.float32(max(temperature, 1e-30)))
  return ids


@functools.lru_cache(maxsize=None)
def _generator(model, length: int, greedy: bool):
  """A jitted ``generate(params, prompt, key, temperature) -> <int32>[length]``."""
  def choose(logits, key, temperature):
    if greedy:
      return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return jax.random.categorical(key, logits / temperature).astype(jnp.int32)

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
