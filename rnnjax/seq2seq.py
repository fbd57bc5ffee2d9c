"""Sequence to sequence: a recurrent encoder whose final state starts a recurrent decoder.

The encoder reads the embedded, right-padded source with its lengths; its
state after each sequence's last real token (not after the padding) is the
decoder's initial state. The decoder is a cell of the same kind with an
output head, logits = h W_out + b_out. In training it is teacher-forced:
its inputs are ``<bos>`` followed by the target shifted right by one, and
the loss is the mean negative log-likelihood (nats) over the real target
tokens, the closing ``<eos>`` included and the padding masked. At test time
it decodes greedily (argmax) or by sampling at a temperature, feeding each
token back in, until ``<eos>`` or a maximum length.

Token ids: ``PAD`` = 0, ``BOS`` = 1, ``EOS`` = 2; a task's own tokens follow.
Params are a plain dict (``init``)::

  {'embedding': [V, E], 'encoder': cell params (d = E), 'decoder': cell params (d = E),
   'W_out': [H, V], 'b_out': [V]}

with source and target sharing the embedding. Shapes: B batch, S source
steps, T target steps, V vocabulary, E embedding, H hidden units.

Inputs are checked before any work, as in ``rnnjax.recurrence``: ids must be
ints in [0, V) in right-padded rows (when concrete, not under ``jit``); the
params must share one floating dtype, the one everything computes in (the
encoder's and decoder's padded steps reach no output or gradient). Logits
that are not finite never become a token: ``decode`` gives ``INVALID`` (-1)
there, raises outside ``jit``, and ``accuracies`` raises on such tokens.

References:
  Sutskever, Vinyals & Le (2014), "Sequence to sequence learning with neural
  networks"; Cho et al. (2014), "Learning phrase representations using RNN
  encoder-decoder for statistical machine translation".
"""

from collections.abc import Callable, Mapping
from typing import Any

import jax
from jax.typing import ArrayLike
import jax.numpy as jnp
import numpy as np
import optax

from rnnjax import cells
from rnnjax import checks
from rnnjax import combinators
from rnnjax import dtypes
from rnnjax import sampling
from rnnjax.data import batching

__all__ = ['BOS', 'CELLS', 'EOS', 'INVALID', 'PAD', 'accuracies', 'decode', 'decoder_inputs',
           'encode', 'init', 'lengths_of', 'loss', 'step_function', 'teacher_forced_logits']

PAD, BOS, EOS = 0, 1, 2
INVALID = sampling.INVALID  # a decoded token whose logits were not finite: never an id
CELLS = ('elman', 'gru')

Params = Mapping[str, Any]
"""``init``'s dict: embedding, encoder and decoder cell params, W_out, b_out."""


def _check_cell(cell: str) -> None:
  checks.one_of('cell', cell, CELLS)


def step_function(cell: str) -> Callable[..., tuple[Any, Any]]:
  """One step ``cell(params, carry, x) -> (carry, y)``: tanh Elman or GRU.

  Args:
    cell: 'elman' or 'gru'.

  Returns:
    ``cells.elman('tanh')`` or ``cells.gru_cell``.

  Raises:
    ValueError: for a cell not in CELLS.
  """
  _check_cell(cell)
  return cells.elman('tanh') if cell == 'elman' else cells.gru_cell


def init(key: jax.Array, cell: str, vocab_size: int, embedding_size: int, hidden_size: int
         ) -> dict[str, Any]:
  """Params of an encoder-decoder.

  The embedding is N(0, 1) (PyTorch's ``nn.Embedding``), the cells use
  their own defaults (``cells.init_elman``: Gaussian W_hh at spectral radius
  1; ``cells.init_gru``: PyTorch's uniform), W_out is N(0, 1 / H) and b_out 0.

  Args:
    key: a ``jax.random`` key.
    cell: 'elman' or 'gru', for encoder and decoder both.
    vocab_size: V, special ids included.
    embedding_size: E.
    hidden_size: H.

  Returns:
    The params dict of the module docstring, all ``float32``.

  Raises:
    ValueError: for an unknown cell or a size < 1.
  """
  _check_cell(cell)
  vocab_size = checks.integer('vocab_size', vocab_size, 1)
  embedding_size = checks.integer('embedding_size', embedding_size, 1)
  init_cell = cells.init_elman if cell == 'elman' else cells.init_gru
  key_embedding, key_encoder, key_decoder, key_out = jax.random.split(key, 4)
  return {
      'embedding': jax.random.normal(key_embedding, (vocab_size, embedding_size), jnp.float32),
      'encoder': init_cell(key_encoder, embedding_size, hidden_size),
      'decoder': init_cell(key_decoder, embedding_size, hidden_size),
      'W_out': jax.random.normal(key_out, (hidden_size, vocab_size), jnp.float32)
               * hidden_size ** -0.5,
      'b_out': jnp.zeros((vocab_size,), jnp.float32),
  }


def _check_ids(name: str, ids: Any, params: Params) -> None:
  """Checks ``<int>[B, steps]`` ids in [0, V), right-padded (values when concrete), and
  that the params share one floating dtype.

  Raises:
    ValueError: naming ``name`` (rank, dtype, range, a real id after a PAD) or
      ``params`` (two floating dtypes).
  """
  dtypes.compute_dtype(params)
  if jnp.ndim(ids) != 2:
    raise ValueError(f'{name}: expected rank 2 [B, steps] ids, got shape {jnp.shape(ids)}')
  batching.check_ids(name, ids, params['embedding'].shape[0])
  if not isinstance(ids, jax.core.Tracer):
    values = np.asarray(ids)
    rows = np.flatnonzero(((values[:, :-1] == PAD) & (values[:, 1:] != PAD)).any(axis=1))
    if rows.size:
      raise ValueError(f'{name}: expected right-padded rows (PAD = {PAD} only after the last '
                       f'real id; a real id after a PAD would be dropped), row {rows[0]} is '
                       f'{values[rows[0]].tolist()}')


def lengths_of(ids: jax.Array) -> jax.Array:
  """The number of non-pad ids of each right-padded row: ``<int32>[B]`` from ``<int>[B, T]``."""
  return jnp.sum(ids != PAD, axis=-1).astype(jnp.int32)


def encode(cell: str, params: Params, sources: jax.Array) -> jax.Array:
  """The encoder's state after each source's last real token.

  Args:
    cell: 'elman' or 'gru'.
    params: ``init``'s dict.
    sources: ``<int32>[B, S]`` ids, right-padded with PAD.

  Returns:
    ``[B, H]`` in the params' dtype; for an all-pad row, the zero initial
    state. Whatever the embedding holds at PAD reaches neither the state nor
    any gradient.

  Raises:
    ValueError: for an unknown cell, or sources or params as ``_check_ids``.
  """
  _check_cell(cell)
  _check_ids('sources', sources, params)
  initial = jnp.zeros((sources.shape[0], params['W_out'].shape[0]), jnp.float32)
  _, final = combinators.layer_for(cell)(params['encoder'], params['embedding'][sources], initial,
                                         lengths_of(sources))
  return final


def decoder_inputs(targets: jax.Array) -> jax.Array:
  """Teacher forcing: ``<bos>`` then the target shifted right, ``[B, T]`` from ``<int>[B, T]``."""
  bos = jnp.full((targets.shape[0], 1), BOS, targets.dtype)
  return jnp.concatenate([bos, targets[:, :-1]], axis=1)


def teacher_forced_logits(cell: str, params: Params, sources: jax.Array, targets: jax.Array
                          ) -> jax.Array:
  """The decoder's logits for every target position, given the true previous tokens.

  Args:
    cell: 'elman' or 'gru'.
    params: ``init``'s dict.
    sources: ``<int32>[B, S]``, right-padded with PAD.
    targets: ``<int32>[B, T]``, each ending in EOS, then right-padded with PAD.

  Returns:
    ``[B, T, V]`` in the params' dtype: position t scores target token t.
    The decoder runs with the targets' lengths, so positions past a
    target's end read nothing (their logits are ``b_out``) and the loss
    masks them.

  Raises:
    ValueError: for an unknown cell, or sources, targets or params as
      ``_check_ids``.
  """
  _check_ids('targets', targets, params)
  state = encode(cell, params, sources)
  outputs, _ = combinators.layer_for(cell)(params['decoder'],
                                           params['embedding'][decoder_inputs(targets)], state,
                                           lengths_of(targets))
  return outputs @ params['W_out'] + params['b_out']


def loss(cell: str, params: Params, sources: jax.Array, targets: jax.Array) -> jax.Array:
  """Mean negative log-likelihood per real target token (EOS included, PAD masked), nats.

  Args:
    cell, params, sources, targets: as ``teacher_forced_logits``.

  Returns:
    ``<float32>[]`` (summed in float32 whatever the params' dtype). Extra PAD
    columns on sources or targets leave it unchanged; padded positions are
    selected away (not multiplied by 0), so nothing there reaches the loss or
    its gradient.

  Raises:
    ValueError: as ``teacher_forced_logits``.
  """
  logits = teacher_forced_logits(cell, params, sources, targets)
  real = targets != PAD
  negative_log_likelihood = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  total = jnp.sum(jnp.where(real, negative_log_likelihood, 0.0), dtype=jnp.float32)
  return total / jnp.maximum(jnp.sum(real), 1)


def decode(cell: str, params: Params, sources: jax.Array, max_length: int,
           temperature: ArrayLike = 0.0, key: jax.Array | None = None) -> jax.Array:
  """Free-running decoding: each chosen token is the next input, until EOS or max_length.

  A ``jax.lax.scan`` over ``max_length`` steps with a done-mask: once a row
  has produced EOS every later token of that row is PAD. Each token is drawn
  by ``sampling.draw``, the rule every sampling path shares: temperature 0
  is greedy (argmax); temperature t > 0 draws from softmax(logits / t), with
  no overflow at any t (1e-45 gives the greedy tokens).

  A step of an unfinished row whose logits are not all finite gives
  ``INVALID`` (-1), never an id (argmax of NaN logits would be a plausible
  0, the PAD), and so does every later step of that row. Outside ``jit``
  that is a ValueError; under ``jit`` the tokens come back with the
  sentinel, and callers must check ``tokens == INVALID`` (``accuracies``
  raises on them) and report it.

  Args:
    cell: 'elman' or 'gru'.
    params: ``init``'s dict.
    sources: ``<int32>[B, S]``, right-padded with PAD.
    max_length: the number of decoding steps, >= 1 (static).
    temperature: a finite value >= 0 (static: 0 and > 0 are different
      programs).
    key: a ``jax.random`` key; needed when temperature > 0.

  Returns:
    ``<int32>[B, max_length]``: each row's tokens up to and including its
    first EOS, then PAD (no EOS within max_length: max_length tokens);
    traced only, ``INVALID`` from a row's first non-finite step on.

  Raises:
    ValueError: for an unknown cell, max_length < 1, a temperature that is
      not a finite value >= 0 (``sampling.check_temperature``), no key for
      temperature > 0, sources or params as ``_check_ids``, or,
      outside ``jit``, logits that are not finite (naming ``params`` and
      their non-finite entries).
  """
  step = step_function(cell)
  max_length = checks.integer('max_length', max_length, 1)
  temperature = sampling.check_temperature(temperature)
  if temperature > 0 and key is None:
    raise ValueError(f'key: expected a jax.random key to sample at temperature {temperature}, '
                     'got None')
  batch_size = sources.shape[0]
  state = encode(cell, params, sources)  # checks sources and params first

  def body(carry: tuple[jax.Array, jax.Array, jax.Array], step_key: jax.Array | None
           ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], jax.Array]:
    state, previous, done = carry
    state, output = step(params['decoder'], state, params['embedding'][previous])
    logits = output @ params['W_out'] + params['b_out']
    token = sampling.draw(step_key, logits, temperature)  # INVALID where not all finite
    token = jnp.where(done, PAD, jnp.where(previous == INVALID, INVALID, token))
    return (state, token, done | (token == EOS)), token

  carry = (state, jnp.full((batch_size,), BOS, jnp.int32), jnp.zeros((batch_size,), bool))
  step_keys = jax.random.split(key, max_length) if temperature > 0 and key is not None else None
  _, tokens = jax.lax.scan(body, carry, step_keys, length=max_length)
  tokens = tokens.T
  if not isinstance(tokens, jax.core.Tracer):
    rows, steps = np.nonzero(np.asarray(tokens) == INVALID)
    if rows.size:
      raise ValueError(sampling.not_finite_message(params, f'row {rows[0]}, step {steps[0]}'))
  return tokens


def accuracies(decoded: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Exact-match and per-token accuracy of decoded sequences.

  A row matches exactly when its tokens up to and including EOS equal the
  target's and it is PAD after (both are compared padded to the wider of
  the two). Per-token accuracy counts the real target positions (EOS
  included) where the decoded token is the target token.

  Args:
    decoded: ``<int32>[B, M]`` (``decode``'s output).
    targets: ``<int32>[B, T]``, each ending in EOS, then PAD.

  Returns:
    ``(exact <bool>[B], token_accuracy <float32>[])``.

  Raises:
    ValueError: if the batch sizes differ, or (when concrete) ``decoded``
      holds ``INVALID`` tokens: its logits were not finite, and no accuracy
      of such a decoding is meaningful.
  """
  if decoded.shape[0] != targets.shape[0]:
    raise ValueError(f'decoded: expected batch size {targets.shape[0]} (that of targets), '
                     f'got shape {decoded.shape}')
  if not isinstance(decoded, jax.core.Tracer):
    rows = np.flatnonzero(np.any(np.asarray(decoded) == INVALID, axis=1))
    if rows.size:
      raise ValueError(f'decoded: rows {rows.tolist()} hold INVALID ({INVALID}) tokens: the '
                       'decoder\'s logits were not finite (NaN or inf params or an overflow)')
  width = max(decoded.shape[1], targets.shape[1])
  widen = lambda ids: jnp.pad(ids, ((0, 0), (0, width - ids.shape[1])), constant_values=PAD)
  decoded, targets = widen(decoded), widen(targets)
  exact = jnp.all(decoded == targets, axis=1)
  real = targets != PAD
  token_accuracy = jnp.sum((decoded == targets) & real) / jnp.maximum(jnp.sum(real), 1)
  return exact, token_accuracy.astype(jnp.float32)
