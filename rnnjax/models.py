"""The language model of the experiments, as flax.linen modules.

The language model is flax.linen wrappers (embedding -> Elman recurrence ->
linear head). The modules only hold parameters; the computation is
``rnnjax.fused`` (the Elman layer with its hand-written backward pass, equal
to autodiff of ``rnnjax.recurrence.scan`` over ``rnnjax.cells.elman_cell``).
The Elman layer stores its cell params as one dict
(``params['recurrence']['cell'] = {'W_xh', 'W_hh', 'b'}``), so they can be
handed to the pure functions as they are.

Inputs follow the rules of ``rnnjax.recurrence`` (its module docstring):
the Elman layer computes in its params' dtype (float32 as initialised; cast
the params for bfloat16), casting inputs and initial state to it; lengths
may be a list; padded steps reach no output or gradient; T = 0 and B = 0 are
valid. Token ids are checked to lie in [0, V) when concrete (not under
``jit``): a negative id would read the last embedding row.

Needs the [flax] extra (``pip install 'rnnjax[flax]'``; ``rnnjax[train]`` has it too).
"""

from typing import Any

from rnnjax import extras

extras.require('flax', 'rnnjax.models')

import flax.linen as nn  # noqa: E402 -- after the check, which names the extra to install
import jax
import jax.numpy as jnp

from rnnjax import cells
from rnnjax import dtypes
from rnnjax import fused
from rnnjax import recurrence
from rnnjax.data import batching

__all__ = ['Elman', 'LanguageModel', 'readout_dot_general']


class Elman(nn.Module):
  """An Elman layer: ``(inputs [B, T, d], h0 [B, H]) -> (states [B, T, H], h_T [B, H])``,
  ``fused.elman_layer`` (its checks, its ``lengths`` and ``reverse``; h0 None: zeros).

  dtypes as flax modules take them: the params are made in ``param_dtype``
  (float32) and the recurrence computes in ``dtype``, the params cast to it
  (None: in ``param_dtype``); inputs and h0 are cast to that dtype, in which
  the states come back (``dtypes.in_params_dtype``).

  Called with token ids ``<int>[B, T]`` and ``table`` (``[V, d]``, e.g. an
  embedding), the input at step t is ``table[ids[t]]``; its projection
  x_t W_xh is then a lookup in the ``[V, H]`` product ``table W_xh``: one
  small matmul instead of B T rows of x W_xh forward and two backward (the
  gradient of the projection is scattered into V rows). The same result.

  Attributes:
    hidden_size: H.
    activation: 'tanh' or 'relu'.
    recurrent_init: see ``cells.init_elman``.
    radius: spectral radius of W_hh at init.
    biases: 1, or 2 as PyTorch (see ``cells.init_elman``).
    dtype: the computation's dtype (None: ``param_dtype``).
    param_dtype: the params' dtype.
  """
  hidden_size: int
  activation: str = 'tanh'
  recurrent_init: str = 'gaussian'
  radius: float = 1.0
  biases: int = 1
  dtype: Any = None
  param_dtype: Any = 'float32'  # as jnp.float32 (a name: autodoc documents a class twice)

  @nn.compact
  def __call__(self, inputs: jax.Array, initial_state: jax.Array | None = None,
               lengths: recurrence.Lengths = None, reverse: bool = False,
               table: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    input_size = inputs.shape[-1] if table is None else table.shape[-1]
    params = self.param('cell', lambda key: cells.init_elman(
        key, input_size, self.hidden_size, self.recurrent_init, self.radius,
        biases=self.biases, dtype=self.param_dtype))
    if self.dtype is not None:
      params = dtypes.cast_floating(params, self.dtype)
    if table is None:
      return fused.elman_layer(params, inputs, initial_state, lengths, reverse, self.activation)
    projection = (table @ params['W_xh'])[inputs]  # [V, H] rows gathered: [B, T, H]
    return fused.elman_layer(params, projection, initial_state, lengths, reverse,
                             self.activation, projected=True)


@jax.custom_vjp
def _readout(states: jax.Array, kernel: jax.Array) -> jax.Array:
  return states @ kernel


def _readout_forward(states: jax.Array, kernel: jax.Array
                     ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
  return states @ kernel, (states, kernel)


def _readout_backward(residuals: tuple[jax.Array, jax.Array], g_logits: jax.Array
                      ) -> tuple[jax.Array, jax.Array]:
  states, kernel = residuals
  flat_grads = g_logits.reshape(-1, g_logits.shape[-1])
  return g_logits @ kernel.T, states.reshape(-1, states.shape[-1]).T @ flat_grads


_readout.defvjp(_readout_forward, _readout_backward)


def readout_dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                        precision: Any = None, preferred_element_type: Any = None
                        ) -> jax.Array:
  """``nn.Dense``'s contraction ``<float>[..., H] x [H, V] -> [..., V]`` (its
  ``dot_general``), with the kernel's gradient formed as one ``[H, N] x [N, V]``
  matmul over the N = B T flattened positions.

  The same values as ``jax.lax.dot_general``. Autodiff's transpose of the
  contraction leaves XLA's CPU backend a gradient of the logits laid out
  ``[R, V, N]`` under ``vmap``: a copy, and a slower matmul than this one.

  Raises:
    ValueError: for a contraction other than the last axis of ``lhs`` with
      the first of a 2-D ``rhs`` (the only one ``nn.Dense`` makes), or a
      precision or preferred element type (not supported).
  """
  if (dimension_numbers != (((lhs.ndim - 1,), (0,)), ((), ())) or rhs.ndim != 2 or
      precision is not None or preferred_element_type is not None):
    raise ValueError(f'readout_dot_general: expected [..., H] x [H, V] with default precision, '
                     f'got {jnp.shape(lhs)} x {jnp.shape(rhs)}, {dimension_numbers}, '
                     f'precision {precision}, preferred_element_type {preferred_element_type}')
  return _readout(lhs, rhs)


class LanguageModel(nn.Module):
  """A language model over any tokens (characters, words, BPE pieces) with an Elman recurrence.

  ``(ids <int32>[B, T], h0 <float>[B, H]) -> (logits <float>[B, T, V], h_T [B, H])``;
  logits at step t score the token at t + 1 (teacher forcing).
  Ids outside [0, V) are a ValueError naming ``ids`` (when concrete); h0 (None:
  zeros) is cast to the recurrence's dtype, in which h_T comes back. dtypes as
  flax modules take them: params in ``param_dtype`` (float32), the embedding,
  recurrence and head computing in ``dtype`` (None: ``param_dtype``).

  Attributes:
    vocab_size: V.
    hidden_size: H.
    embedding_size: E; 0 feeds one-hot vectors (d = V).
    activation, recurrent_init, radius, biases: of the Elman layer.
    dropout_rate: dropout on the recurrence's inputs and outputs (never on
      the recurrent connection; Zaremba et al. 2014), active only when
      called with ``deterministic=False`` and a 'dropout' rng.
    dtype: the computation's dtype (None: ``param_dtype``).
    param_dtype: the params' dtype.
  """
  vocab_size: int
  hidden_size: int
  embedding_size: int = 0
  activation: str = 'tanh'
  recurrent_init: str = 'gaussian'
  radius: float = 1.0
  biases: int = 1
  dropout_rate: float = 0.0
  dtype: Any = None
  param_dtype: Any = 'float32'  # as jnp.float32 (a name: autodoc documents a class twice)

  def setup(self) -> None:
    dtype = self.param_dtype if self.dtype is None else self.dtype
    if self.embedding_size:
      self.embedding = nn.Embed(self.vocab_size, self.embedding_size, dtype=dtype,
                                param_dtype=self.param_dtype)
    self.recurrence = Elman(self.hidden_size, self.activation, self.recurrent_init, self.radius,
                            self.biases, self.dtype, self.param_dtype)
    self.head = nn.Dense(self.vocab_size, dot_general=readout_dot_general, dtype=dtype,
                         param_dtype=self.param_dtype)
    self.dropout = nn.Dropout(self.dropout_rate)

  def embed(self, ids: jax.Array) -> jax.Array:
    """``<int32>[B, T] -> <float>[B, T, d]`` (an embedding or one-hot, in ``dtype``).

    Raises:
      ValueError: for ids outside [0, V) or not ints (checked when concrete).
    """
    batching.check_ids('ids', ids, self.vocab_size)
    if self.embedding_size:
      return self.embedding(ids)
    return jax.nn.one_hot(ids, self.vocab_size, dtype=self._dtype())

  def _dtype(self) -> Any:
    return self.param_dtype if self.dtype is None else self.dtype

  def logits(self, states: jax.Array) -> jax.Array:
    """``<float>[..., H] -> <float>[..., V]``."""
    return self.head(states)

  def __call__(self, ids: jax.Array, initial_state: jax.Array | None = None,
               deterministic: bool = True) -> tuple[jax.Array, jax.Array]:
    no_input_dropout = deterministic or not self.dropout_rate
    if no_input_dropout and self.vocab_size <= jnp.size(ids):  # a lookup is cheaper (Elman)
      batching.check_ids('ids', ids, self.vocab_size)
      table = (self.embedding.embedding if self.embedding_size else
               jnp.eye(self.vocab_size, dtype=self._dtype()))
      states, final = self.recurrence(ids, initial_state, table=table)
    else:
      inputs = self.dropout(self.embed(ids), deterministic=deterministic)
      states, final = self.recurrence(inputs, initial_state)
    return self.logits(self.dropout(states, deterministic=deterministic)), final

  def initial_state(self, batch_size: int) -> jax.Array:
    """``<param_dtype>[B, H]`` zeros, the state at step 0."""
    return jnp.zeros((batch_size, self.hidden_size), self.param_dtype)
