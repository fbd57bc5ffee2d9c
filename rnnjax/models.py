"""The models of the experiments: a language model, a text classifier, the network of
Pascanu et al. (2013).

The language model is flax.linen wrappers (embedding -> Elman recurrence ->
linear head). The modules only hold parameters; the computation is
``rnnjax.fused`` (the Elman layer with its hand-written backward pass, equal
to autodiff of ``rnnjax.recurrence.scan`` over ``rnnjax.cells.elman_cell``).
The Elman layer stores its cell params as one dict
(``params['recurrence']['cell'] = {'W_xh', 'W_hh', 'b'}``), so they can be
handed to the pure functions as they are.

The text classifier (``init_text_classifier``, ``text_features``,
``text_logits``: embedding -> Elman / GRU / LSTM stack -> last state ->
linear) and the network of Pascanu et al. (``init_pascanu``,
``pascanu_loss``, ``pascanu_errors``: one tanh Elman layer -> softmax of the
last state) are plain functions on param dicts.

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
import optax

from rnnjax import cells
from rnnjax import combinators
from rnnjax import fused
from rnnjax import initializers
from rnnjax import recurrence
from rnnjax import regularizers
from rnnjax.data import batching

__all__ = ['Elman', 'LanguageModel', 'readout_dot_general', 'LAST_STATES',
           'init_text_classifier', 'text_features', 'text_logits', 'PASCANU_INITS',
           'init_pascanu', 'last_states', 'pascanu_readout_loss', 'pascanu_loss',
           'pascanu_errors']


class Elman(nn.Module):
  """An Elman layer: ``(inputs [B, T, d], h0 [B, H]) -> (states [B, T, H], h_T [B, H])``,
  ``fused.elman_layer`` (its checks, its ``lengths`` and ``reverse``; h0 None: zeros).

  dtypes as flax modules take them: the params are made in ``param_dtype``
  (float32) and the recurrence computes in ``dtype``, the params cast to it
  (None: in ``param_dtype``); inputs and h0 are cast to that dtype, in which
  the states come back (``recurrence.in_params_dtype``).

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
      params = recurrence.cast_floating(params, self.dtype)
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


# The text classifier: embedding -> recurrence -> last state -> linear.

LAST_STATES = ('true', 'padded_end')


def init_text_classifier(key: jax.Array, cell: str, vocabulary_size: int, num_classes: int,
                         embedding_size: int, hidden_size: int, layers: int = 1,
                         bidirectional: bool = False) -> dict:
  """Params of the text classifier (``text_logits``).

  Args:
    key: a ``jax.random`` key.
    cell: 'elman', 'gru' or 'lstm'.
    vocabulary_size: V word ids (0 the pad, 1 the unknown word).
    num_classes: K.
    embedding_size: E.
    hidden_size: H.
    layers: recurrent layers.
    bidirectional: two directions per layer.

  Returns:
    ``{'embedding': <float32>[V, E] ~ N(0, 1), 'recurrence':
    combinators.init_stack params, 'output': {'W': <float32>[D H, K],
    'b': <float32>[K]}}`` with D directions; W is U(+-1/sqrt(D H)), b is 0.
    The pad's row of the embedding is trained like any other (no
    ``padding_idx``), so the padded-end variant reads learnt pad vectors.

  Raises:
    ValueError: as ``combinators.init_stack`` (unknown cell, bad sizes).
  """
  directions = 2 if bidirectional else 1
  embedding_key, recurrence_key, output_key = jax.random.split(key, 3)
  bound = (directions * hidden_size) ** -0.5
  return {
      'embedding': jax.random.normal(embedding_key, (vocabulary_size, embedding_size)),
      'recurrence': combinators.init_stack(recurrence_key, cell, embedding_size, hidden_size,
                                           layers, directions),
      'output': {'W': jax.random.uniform(output_key, (directions * hidden_size, num_classes),
                                         minval=-bound, maxval=bound),
                 'b': jnp.zeros((num_classes,))},
  }


def _dropout(inputs: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
  """Inverted dropout: each entry is zeroed with probability ``rate``, the others
  scaled by 1 / (1 - rate); ``inputs`` unchanged when ``key`` is None or rate is 0."""
  if key is None or not rate:
    return inputs
  keep = jax.random.bernoulli(key, 1 - rate, inputs.shape)
  return jnp.where(keep, inputs / (1 - rate), 0.0)


def _first_states_layer(layer: combinators.Layer, states: jax.Array) -> combinators.Layer:
  """``layer`` whose first forward call returns ``states`` (and the final state they
  imply) instead of running the recurrence."""
  calls: list[bool] = []

  def replaced(params: Any, inputs: jax.Array, initial_state: jax.Array,
               lengths: jax.Array | None = None, reverse: bool = False
               ) -> tuple[Any, Any]:
    if calls or reverse:
      return layer(params, inputs, initial_state, lengths, reverse)
    calls.append(True)
    last = (jnp.full((states.shape[0],), states.shape[1]) if lengths is None else lengths)
    final = jnp.take_along_axis(states, jnp.maximum(last - 1, 0)[:, None, None], axis=1)[:, 0]
    return states, jnp.where((last > 0)[:, None], final, initial_state)

  return replaced


def text_features(params: dict, ids: jax.typing.ArrayLike, lengths: jax.typing.ArrayLike | None,
                  cell: str, last_state: str, dropout_rate: float = 0.0,
                  key: jax.Array | None = None,
                  first_states: jax.Array | None = None) -> jax.Array:
  """The last layer's final states, one feature vector per text.

  Args:
    params: ``init_text_classifier`` params.
    ids: ``<int32>[B, T]`` word ids, each text followed by pads (0).
    lengths: ``<int32>[B]`` true lengths in [0, T] (not read with 'padded_end').
    cell: the params' cell, 'elman', 'gru' or 'lstm'.
    last_state: 'true' (the forward state after word ``lengths - 1``; the
      backward state after word 0, having read only real words) or
      'padded_end' (the recurrence ignores ``lengths``: the forward state
      after column T - 1, the backward one after reading the pads first).
    dropout_rate: p in [0, 1) of the dropout on the word embeddings, between
      layers and on the features (training only).
    key: ``jax.random`` key for dropout; None: no dropout.
    first_states: optional ``<float32>[B, T, H]``: the states of the first
      layer's forward direction, used instead of computing them (the
      gradient-norm probe differentiates the loss with respect to them).

  Returns:
    ``<float32>[B, D H]``: the forward then (bidirectional) the backward
    hidden state (LSTM: h, not c).

  Raises:
    ValueError: for an unknown last_state.
  """
  if last_state not in LAST_STATES:
    raise ValueError(f'last_state: expected one of {LAST_STATES}, got {last_state!r}')
  layers, directions = len(params['recurrence']), len(params['recurrence'][0])
  hidden_size = params['output']['W'].shape[0] // directions
  embedding_key, stack_key, features_key = (jax.random.split(key, 3) if key is not None
                                            else (None, None, None))
  lengths = lengths if last_state == 'true' else None
  initial = combinators.zero_state(cell, layers, directions, jnp.shape(ids)[0], hidden_size)
  inputs = _dropout(params['embedding'][ids], dropout_rate, embedding_key)
  layer = combinators.layer_for(cell)
  if first_states is not None:
    layer = _first_states_layer(layer, first_states)
  _, final = combinators.stack(layer, params['recurrence'], inputs, initial, lengths,
                               dropout_rate, stack_key)
  hidden = final[0] if cell == 'lstm' else final  # [layers, directions, B, H]
  return _dropout(jnp.concatenate(list(hidden[-1]), axis=-1), dropout_rate, features_key)


def text_logits(params: dict, ids: jax.typing.ArrayLike, lengths: jax.typing.ArrayLike | None,
                cell: str, last_state: str, dropout_rate: float = 0.0,
                key: jax.Array | None = None, first_states: jax.Array | None = None
                ) -> jax.Array:
  """``<float32>[B, K]`` class scores: ``text_features @ W + b`` (arguments as
  ``text_features``)."""
  return (text_features(params, ids, lengths, cell, last_state, dropout_rate, key, first_states)
          @ params['output']['W'] + params['output']['b'])


# The network of Pascanu et al. (2013): one tanh Elman layer, a softmax of the last state.

PASCANU_INITS = ('basic_tanh', 'smart_tanh')
BASIC_SCALE = 0.1  # RNN.py lines 116-121: W_uh, W_hh, W_hy ~ N(0, 0.1^2)
SMART_SCALE = 0.01  # RNN.py lines 126-137: W_uh, W_hy ~ N(0, 0.01^2)
SMART_NONZEROS = 15  # RNN.py line 132: non-zeros per row of W_hh (at most H)
SMART_RADIUS = 0.95  # RNN.py line 134


def init_pascanu(key: jax.Array, init: str, input_size: int, hidden_size: int,
                 num_classes: int) -> dict:
  """Params of the network of Pascanu et al., as the reference code initializes them.

  'basic_tanh': W_xh, W_hh, W_out ~ N(0, 0.1^2); 'smart_tanh': W_xh, W_out ~
  N(0, 0.01^2) and W_hh ``initializers.sparse_at_radius`` (min(15, H) non-zeros
  per row, spectral radius 0.95); biases 0. (``jax.jit`` it with ``init`` and
  the sizes static: its eager ops compile one by one.)

  Args:
    key: a ``jax.random`` key.
    init: one of ``PASCANU_INITS``.
    input_size: d (6 one-hot symbols for the temporal order problem).
    hidden_size: H.
    num_classes: K.

  Returns:
    ``{'cell': {'W_xh': <float32>[d, H], 'W_hh': [H, H], 'b': [H]}, 'W_out':
    <float32>[H, K], 'b_out': [K]}``.

  Raises:
    ValueError: for an ``init`` not in ``PASCANU_INITS``.

  References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training
    recurrent neural networks", section 5.1; github.com/pascanur/trainingRNNs,
    RNN.py lines 115-140.
  """
  if init not in PASCANU_INITS:
    raise ValueError(f'init: expected one of {PASCANU_INITS}, got {init!r}')
  key_x, key_h, key_out = jax.random.split(key, 3)
  scale = BASIC_SCALE if init == 'basic_tanh' else SMART_SCALE
  if init == 'basic_tanh':
    w_hh = BASIC_SCALE * jax.random.normal(key_h, (hidden_size, hidden_size), jnp.float32)
  else:
    w_hh = initializers.sparse_at_radius(key_h, hidden_size, min(SMART_NONZEROS, hidden_size),
                                         SMART_RADIUS)
  return {'cell': {'W_xh': scale * jax.random.normal(key_x, (input_size, hidden_size),
                                                     jnp.float32),
                   'W_hh': w_hh, 'b': jnp.zeros((hidden_size,), jnp.float32)},
          'W_out': scale * jax.random.normal(key_out, (hidden_size, num_classes), jnp.float32),
          'b_out': jnp.zeros((num_classes,), jnp.float32)}


def last_states(states: jax.Array, lengths: jax.typing.ArrayLike | None) -> jax.Array:
  """The state at each sequence's last step: ``[B, T, H]``, ``<int32>[B]`` (values in
  [1, T]) or None (every sequence T steps) -> ``[B, H]``."""
  if lengths is None:
    return states[:, -1]
  return jnp.take_along_axis(states, (jnp.asarray(lengths) - 1)[:, None, None], axis=1)[:, 0]


def pascanu_readout_loss(params: dict, last: jax.Array, targets: jax.typing.ArrayLike
                         ) -> jax.Array:
  """Mean cross-entropy (nats, ``<float32>[]``) of the softmax readout of the last
  states ``<float32>[B, H]`` against ``targets <int32>[B]`` in [0, K)."""
  logits = last @ params['W_out'] + params['b_out']
  return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def pascanu_loss(params: dict, inputs: jax.Array, targets: jax.typing.ArrayLike,
                 lengths: jax.typing.ArrayLike | None = None,
                 omega_weight: float = 0.0) -> jax.Array:
  """The training loss of a batch: ``(value, gradient source)`` in one scalar.

  The value is the cross-entropy of the last state's prediction (nats,
  ``pascanu_readout_loss``); with ``omega_weight`` alpha > 0 the gradient
  adds alpha times Omega's (``regularizers.omega_penalty`` with dE/dh_t of
  this cross-entropy, W_hh only), the value does not: the loss is
  ``E + alpha (Omega - stop_gradient(Omega))``.

  Args:
    params: ``init_pascanu`` params.
    inputs: ``<float32>[B, T, d]``.
    targets: ``<int32>[B]`` classes in [0, K).
    lengths: optional ``<int32>[B]`` in [1, T] (the state after each sequence's
      last step is read); None: every sequence T steps.
    omega_weight: alpha >= 0, a Python number (0: no Omega term is traced).

  Returns:
    ``<float32>[]`` nats.

  References:
    Pascanu, Mikolov & Bengio (2013), eq. 9-10; RNN.py line 217 (the Omega
    gradient added before clipping).
  """
  hidden = params['cell']['W_hh'].shape[0]
  initial = jnp.zeros((inputs.shape[0], hidden), jnp.float32)
  states, last = fused.elman_layer(params['cell'], inputs, initial, lengths)
  loss = pascanu_readout_loss(params, last, targets)
  if omega_weight:
    omega = regularizers.omega_penalty(
        params['cell'], inputs, initial,
        lambda s: pascanu_readout_loss(params, last_states(s, lengths), targets), 'tanh',
        lengths, states)
    loss = loss + omega_weight * (omega - jax.lax.stop_gradient(omega))
  return loss


def pascanu_errors(params: dict, inputs: jax.Array, targets: jax.typing.ArrayLike,
                   lengths: jax.typing.ArrayLike | None = None) -> jax.Array:
  """The number of sequences whose last state's argmax class is wrong, forward only.

  The recurrence is ``recurrence.scan`` of ``cells.elman('tanh')``: the final
  state is its carry, so under ``jax.jit`` no ``[B, T, H]`` buffer of states
  is kept (any T fits in memory).

  Args:
    params: ``init_pascanu`` params.
    inputs: ``<float32>[B, T, d]``.
    targets: ``<int32>[B]``.
    lengths: optional ``<int32>[B]`` in [1, T]; None: every sequence T steps.

  Returns:
    ``<float32>[]``: the count of errors, in [0, B].
  """
  initial = jnp.zeros((inputs.shape[0], params['cell']['W_hh'].shape[0]), jnp.float32)
  _, last = recurrence.scan(cells.elman('tanh'), params['cell'], inputs, initial, lengths)
  logits = last @ params['W_out'] + params['b_out']
  return jnp.sum(jnp.argmax(logits, -1) != targets).astype(jnp.float32)
