"""A text classifier: embedding -> recurrence -> last state -> linear.

The model is ``models.text_logits``: an Elman, GRU or LSTM stack
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

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import language_tasks as tasks
from rnnjax import cells
from rnnjax import combinators
from rnnjax import diagnostics
from rnnjax import models
from rnnjax.data import batching
from rnnjax.data import classification
from rnnjax.train import experiment
from rnnjax.train import trainer


def encode_texts(texts: list[str], vocabulary: dict[str, int], max_length: int):
  """Tokenized, encoded and padded texts: ``(ids <int32>[N, max_length], lengths <int32>[N])``."""
  return batching.pad_sequences(
      [classification.encode(classification.tokenize(text), vocabulary) for text in texts],
      classification.PAD_ID, multiple=max_length, max_length=max_length)


def accuracy(params, ids, lengths, labels, cell: str, last_state: str, batch_size: int) -> float:
  """The fraction of ``labels <int>[N]`` that the argmax of ``models.text_logits`` gets
  right, computed ``batch_size`` texts at a time (other arguments as ``text_logits``)."""
  predict = jax.jit(lambda p, i, n: jnp.argmax(models.text_logits(p, i, n, cell, last_state),
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
    return models.init_text_classifier(key, cell, len(vocabulary), len(splits.class_names),
                                       run_config.embedding_size, run_config.hidden_size,
                                       run_config.layers, run_config.bidirectional)

  def loss(params, carry, batch, key):
    scores = models.text_logits(params, batch['ids'], batch['lengths'], cell, last_state,
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
            models.text_logits(params, ids, lengths, cell, last_state, first_states=states),
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
        'last_state': Field('true', experiment.one_of(models.LAST_STATES),
                            "true: the state at each text's last word | padded_end"),
        'embedding_size': Field(128, experiment.integer(1)),
        'hidden_size': Field(128, experiment.integer(1)),
        'dropout_rate': Field(0.3, experiment.number(0, high=1),
                              'on word embeddings, between layers and on the features'),
        'batch_size': Field(64, experiment.integer(1)),
    },
    report=('test_accuracy', 'majority_accuracy', 'train_loss_nats', 'final_measured_spectral_radius'),
    vmappable=())  # none: the seed sets the batch order, which a group shares
