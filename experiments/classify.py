"""A text classifier: embedding -> recurrence -> last state -> linear.

The model is ``text_logits`` (plain functions on param dicts): an Elman, GRU or LSTM stack
(``rnnjax.combinators``), optionally bidirectional. Every text is cut or
padded to ``config.max_length`` words. With ``last_state='true'`` the
recurrence gets each text's length and the features are the state after its
last real word (bidirectional: that forward state and the backward state
after reading word 0, concatenated). With ``'padded_end'`` the recurrence
runs over the whole padded array without lengths and the features are the
state at the last column, after the pads: the mistake of reading the padded
end as the last state. The report: test accuracy (and the majority class's,
for comparison).
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import language_tasks as tasks
from rnnjax import cells
from rnnjax import combinators
from rnnjax import diagnostics
from rnnjax.data import batching
from rnnjax.data import classification
from rnnjax.train import experiment
from rnnjax.train import trainer


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


def encode_texts(texts: list[str], vocabulary: dict[str, int], max_length: int):
  """Tokenized, encoded and padded texts: ``(ids <int32>[N, max_length], lengths <int32>[N])``."""
  return batching.pad_sequences(
      [classification.encode(classification.tokenize(text), vocabulary) for text in texts],
      classification.PAD_ID, multiple=max_length, max_length=max_length)


def accuracy(params, ids, lengths, labels, cell: str, last_state: str, batch_size: int) -> float:
  """The fraction of ``labels <int>[N]`` that the argmax of ``text_logits`` gets
  right, computed ``batch_size`` texts at a time (other arguments as ``text_logits``)."""
  predict = jax.jit(lambda p, i, n: jnp.argmax(text_logits(p, i, n, cell, last_state),
                                               axis=-1))
  predictions = np.concatenate([
      np.asarray(predict(params, ids[start:start + batch_size],
                         lengths[start:start + batch_size]))
      for start in range(0, len(labels), batch_size)])
  return float(np.mean(predictions == np.asarray(labels)))


def task(config) -> trainer.Task:
  """Loads the dataset, builds the vocabulary and the padded arrays.

  Raises:
    ValueError: as ``classification.load_splits``, or a batch size above the
      number of training texts.
    corpora.CorpusError: a corpus file is missing or corrupt (naming it).
  """
  splits = classification.load_splits(config.dataset, config.data_dir or None,
                                      test_size=config.test_size, seed=config.split_seed)
  vocabulary = classification.build_vocabulary(
      [classification.tokenize(text) for text in splits.train_texts], config.min_count,
      config.max_vocabulary)
  train_ids, train_lengths = encode_texts(splits.train_texts, vocabulary, config.max_length)
  test_ids, test_lengths = encode_texts(splits.test_texts, vocabulary, config.max_length)
  if config.batch_size > len(train_ids):
    raise ValueError(f'config.batch_size: expected at most the {len(train_ids)} training texts, '
                     f'got {config.batch_size}')
  labels = splits.train_labels
  cell, last_state = config.cell, config.last_state
  step_cell = {'elman': cells.elman('tanh'), 'gru': cells.gru_cell}.get(cell)

  def init(run_config, key):
    return init_text_classifier(key, cell, len(vocabulary), len(splits.class_names),
                                       run_config.embedding_size, run_config.hidden_size,
                                       run_config.layers, run_config.bidirectional)

  def loss(params, carry, batch, key):
    scores = text_logits(params, batch['ids'], batch['lengths'], cell, last_state,
                                config.dropout_rate, key)
    return optax.softmax_cross_entropy_with_integer_labels(scores, batch['labels']).mean(), carry

  def batch(step):
    chosen = tasks.batch_indices(len(labels), config.batch_size, config.seed, step)
    return {'ids': train_ids[chosen], 'lengths': train_lengths[chosen], 'labels': labels[chosen]}

  def probe(params, carry, batch):
    """The loss as a function of the first layer's forward states (Elman and GRU: their
    carry is the state; an LSTM's (h, c) carry is not probed)."""
    del carry
    ids, lengths = batch['ids'], batch['lengths']
    hidden = params['output']['W'].shape[0] // len(params['recurrence'][0])
    return diagnostics.Probe(
        step_cell, params['recurrence'][0][0], params['embedding'][ids],
        jnp.zeros((ids.shape[0], hidden)),
        lambda states: optax.softmax_cross_entropy_with_integer_labels(
            text_logits(params, ids, lengths, cell, last_state, first_states=states),
            batch['labels']).mean(),
        jnp.maximum(lengths, 1) if last_state == 'true' else None)

  def report(run_config, params) -> dict:
    return {
        'test_accuracy': accuracy(params, test_ids, test_lengths, splits.test_labels, cell,
                                  last_state, config.batch_size),
        'majority_accuracy': float(np.bincount(splits.test_labels).max() /
                                   len(splits.test_labels)),
        'train_size': len(train_ids), 'test_size': len(test_ids),
        'vocabulary_size': len(vocabulary),
        'cut_fraction': float(np.mean(np.concatenate([train_lengths, test_lengths]) ==
                                      config.max_length))}

  return trainer.Task(init=init, loss=loss, batch=batch,
                      probe=probe if step_cell else None,
                      recurrent_weight=lambda params: diagnostics.recurrent_matrix(
                          params['recurrence'][0][0]), report=report)


Field = experiment.Field
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task,
    fields={
        'seed': experiment.TRAINER_FIELDS['seed']._replace(
            help='init, dropout and the batch order'),
        'dataset': Field('ag_news', experiment.one_of(classification.DATASETS), 'ag_news | sst2'),
        'data_dir': Field('', None, 'empty: $RNNJAX_DATA_DIR, else ./data'),
        'test_size': Field(1600, None, 'AG News rows held out, stratified (sst2: dev.tsv is the '
                                       'test set)'),
        'split_seed': Field(0, None, 'of the AG News split'),
        'min_count': Field(2, None, 'fewest occurrences in the training part for a word to get '
                                    'an id'),
        'max_vocabulary': Field(20000, None, 'most ids, pad (0) and unknown (1) included'),
        'max_length': Field(64, experiment.integer(1), 'words; longer texts are cut, every text '
                                                       'is padded to this length'),
        'cell': Field('gru', experiment.one_of(combinators.CELLS), 'elman | gru | lstm'),
        'bidirectional': Field(False),
        'layers': Field(1, experiment.integer(1)),
        'last_state': Field('true', experiment.one_of(LAST_STATES),
                            "true: the state at each text's last word | padded_end"),
        'embedding_size': Field(128, experiment.integer(1)),
        'hidden_size': Field(128, experiment.integer(1)),
        'dropout_rate': Field(0.3, experiment.number(0, high=1),
                              'on word embeddings, between layers and on the features'),
        'batch_size': Field(64, experiment.integer(1)),
    },
    report=('test_accuracy', 'majority_accuracy', 'train_loss_nats', 'final_measured_spectral_radius'),
    vmappable=())  # none: the seed sets the batch order, which a group shares
