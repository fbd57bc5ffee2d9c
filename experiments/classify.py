"""Trains a text classifier: embedding -> recurrence -> last state -> linear.

  python -m experiments.classify --config=experiments/configs/classify.py \
      --workdir=results/classify/run [--config.cell=elman --config.dataset=sst2 ...]
  python -m experiments.classify --config=experiments/configs/classify.py \
      --table=results/classify

The recurrence is an Elman, GRU or LSTM stack (``rnnjax.combinators``),
optionally bidirectional. Every text is cut or padded to
``config.max_length`` words. With ``last_state='true'`` the recurrence gets
each text's length and the features are the state after its last real word
(bidirectional: that forward state and the backward state after reading
word 0, concatenated). With ``'padded_end'`` the recurrence runs over the
whole padded array without lengths and the features are the state at the
last column, after the pads: the mistake seed note 000 warns about.

A run writes to its workdir: config.json, metrics.jsonl, an orbax
checkpoint and summary.json (written last, atomically), and prints the test
accuracy. ``--table`` runs ``configs/classify.get_table()`` one run after
another into ``<table>/<name>`` (a run whose summary says finished is kept
on relaunch if its config.json equals the config it would run with) and writes and prints ``<table>/table.md``.
"""

import json
import pathlib
import time

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax
from ml_collections import config_flags

from experiments.char_lm import write_json_atomically
from experiments.configs import classify as classify_config
from rnnjax import combinators
from rnnjax.data import batching
from rnnjax.data import classification
from rnnjax.train import optimizers
from rnnjax.train import supervised

FLAGS = flags.FLAGS
LAST_STATES = ('true', 'padded_end')


def define_flags():
  """Defines the command-line flags (only when run as a program, so the module imports cleanly)."""
  config_flags.DEFINE_config_file(
      'config', None, 'Path to a config file with get_config(), e.g. '
      'experiments/configs/classify.py; override fields with --config.NAME=VALUE.')
  flags.DEFINE_string(
      'workdir', None,
      'Folder for this run: config.json, metrics.jsonl, summary.json, checkpoint/.')
  flags.DEFINE_string(
      'table', None, 'Instead of --workdir: a folder for the runs of configs/classify.get_table() '
      '(one subfolder each, on top of --config) and their table.md.')
  flags.mark_flags_as_required(['config'])
  flags.mark_flags_as_mutual_exclusive(['workdir', 'table'], required=True)


def check_config(config) -> None:
  """Checks the fields that would otherwise fail only deep inside JAX or after loading.

  Raises:
    ValueError: naming the field, with the expected and the given value.
  """
  for name, allowed in (('dataset', classification.DATASETS), ('cell', combinators.CELLS),
                        ('last_state', LAST_STATES)):
    if config[name] not in allowed:
      raise ValueError(f'config.{name}: expected one of {allowed}, got {config[name]!r}')
  for name in ('max_length', 'layers', 'embedding_size', 'hidden_size', 'batch_size', 'steps',
               'log_every'):
    value = config[name]
    if not isinstance(value, int) or value < 1:
      raise ValueError(f'config.{name}: expected an int >= 1, got {value!r}')
  if not 0 <= config.dropout_rate < 1:
    raise ValueError(f'config.dropout_rate: expected a value in [0, 1), got '
                     f'{config.dropout_rate!r}')
  try:  # the optimizer's own checks (name, learning rate, clipping, threshold, on_divergence)
    optimizers.make_optimizer(config.optimizer, config.learning_rate, config.clipping,
                              config.clip_threshold, config.on_divergence)
  except ValueError as error:
    raise ValueError(f'config.{error}') from None


def init_classifier(key, cell: str, vocabulary_size: int, num_classes: int,
                    embedding_size: int, hidden_size: int, layers: int = 1,
                    bidirectional: bool = False) -> dict:
  """Params of the classifier.

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


def dropout(inputs, rate: float, key):
  """Inverted dropout: each entry is zeroed with probability ``rate``, the others
  scaled by 1 / (1 - rate); ``inputs`` unchanged when ``key`` is None or rate is 0."""
  if key is None or not rate:
    return inputs
  keep = jax.random.bernoulli(key, 1 - rate, inputs.shape)
  return jnp.where(keep, inputs / (1 - rate), 0.0)


def features(params, ids, lengths, cell: str, last_state: str, dropout_rate: float = 0.0,
             key=None):
  """The last layer's final states, one feature vector per text.

  Args:
    params: ``init_classifier`` params.
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
  initial = combinators.zero_state(cell, layers, directions, ids.shape[0], hidden_size)
  _, final = combinators.stack(
      combinators.layer_for(cell), params['recurrence'],
      dropout(params['embedding'][ids], dropout_rate, embedding_key), initial,
      lengths if last_state == 'true' else None, dropout_rate, stack_key)
  hidden = final[0] if cell == 'lstm' else final  # [layers, directions, B, H]
  return dropout(jnp.concatenate(list(hidden[-1]), axis=-1), dropout_rate, features_key)


def logits(params, ids, lengths, cell: str, last_state: str, dropout_rate: float = 0.0,
           key=None):
  """``<float32>[B, K]`` class scores: ``features @ W + b`` (arguments as ``features``)."""
  return (features(params, ids, lengths, cell, last_state, dropout_rate, key)
          @ params['output']['W'] + params['output']['b'])


def encode_texts(texts: list[str], vocabulary: dict[str, int], max_length: int):
  """Tokenized, encoded and padded texts.

  Returns:
    ``(ids <int32>[N, max_length], lengths <int32>[N])``: words past
    ``max_length`` are cut, pads (0) follow each text.
  """
  return batching.pad_sequences(
      [classification.encode(classification.tokenize(text), vocabulary) for text in texts],
      classification.PAD_ID, multiple=max_length, max_length=max_length)


def accuracy(params, ids, lengths, labels, cell: str, last_state: str, batch_size: int) -> float:
  """The fraction of ``labels <int>[N]`` that the argmax of ``logits`` gets right,
  computed ``batch_size`` texts at a time (other arguments as ``features``)."""
  predict = jax.jit(lambda p, i, n: jnp.argmax(logits(p, i, n, cell, last_state), axis=-1))
  predictions = np.concatenate([
      np.asarray(predict(params, ids[start:start + batch_size],
                         lengths[start:start + batch_size]))
      for start in range(0, len(labels), batch_size)])
  return float(np.mean(predictions == np.asarray(labels)))


def train_classifier(config, ids, lengths, labels, vocabulary_size: int, num_classes: int,
                     workdir=None):
  """Trains ``config.steps`` steps of mean cross-entropy with ``supervised.fit``.

  Args:
    config: a ``get_config()`` config.
    ids: ``<int32>[N, T]`` padded training texts.
    lengths: ``<int32>[N]`` their true lengths.
    labels: ``<int32>[N]`` in [0, K).
    vocabulary_size: V.
    num_classes: K.
    workdir: folder for metrics.jsonl and the checkpoint, or None.

  Returns:
    ``(params, record)`` as ``supervised.fit``.

  Raises:
    ValueError: as ``check_config``, or a batch size above N.
  """
  check_config(config)
  init_key, train_key = jax.random.split(jax.random.key(config.seed))
  params = init_classifier(init_key, config.cell, vocabulary_size, num_classes,
                           config.embedding_size, config.hidden_size, config.layers,
                           config.bidirectional)

  def loss_fn(params, batch, key):
    scores = logits(params, batch['ids'], batch['lengths'], config.cell, config.last_state,
                    config.dropout_rate, key)
    return optax.softmax_cross_entropy_with_integer_labels(scores, batch['labels']).mean()

  batches = ({'ids': ids[chosen], 'lengths': lengths[chosen], 'labels': labels[chosen]}
             for chosen in batching.epoch_batches(len(labels), config.batch_size, config.seed))
  optimizer = optimizers.make_optimizer(config.optimizer, config.learning_rate, config.clipping,
                                        config.clip_threshold, config.on_divergence)
  return supervised.fit(loss_fn, params, optimizer, batches, config.steps, train_key,
                        clipping=config.clipping, on_divergence=config.on_divergence,
                        log_every=config.log_every, workdir=workdir)


def run(config, workdir: pathlib.Path) -> dict:
  """Loads the data, trains, tests; returns the summary it writes to the workdir.

  Raises:
    ValueError: as ``check_config`` or ``classification.load_splits``.
    corpora.CorpusError: a corpus file is missing or corrupt (naming it).
  """
  started = time.perf_counter()
  check_config(config)
  splits = classification.load_splits(config.dataset, config.data_dir or None,
                                      test_size=config.test_size, seed=config.split_seed)
  vocabulary = classification.build_vocabulary(
      [classification.tokenize(text) for text in splits.train_texts], config.min_count,
      config.max_vocabulary)
  train_ids, train_lengths = encode_texts(splits.train_texts, vocabulary, config.max_length)
  test_ids, test_lengths = encode_texts(splits.test_texts, vocabulary, config.max_length)
  logging.info('%s: %d train and %d test texts, vocabulary %d, %.1f%% of the test words '
               'unknown', config.dataset, len(train_ids), len(test_ids), len(vocabulary),
               100 * np.mean(test_ids[test_ids != 0] == classification.UNKNOWN_ID))
  if config.batch_size > len(train_ids):
    raise ValueError(f'config.batch_size: expected at most the {len(train_ids)} training texts, '
                     f'got {config.batch_size}')
  workdir.mkdir(parents=True, exist_ok=True)  # all checks passed: replace an earlier run
  (workdir / 'summary.json').unlink(missing_ok=True)
  (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2) + '\n')
  params, record = train_classifier(config, train_ids, train_lengths, splits.train_labels,
                                    len(vocabulary), len(splits.class_names), workdir)
  summary = dict(
      record, status='diverged' if record['diverged'] else 'finished', dataset=config.dataset,
      cell=config.cell, bidirectional=config.bidirectional, last_state=config.last_state,
      test_accuracy=accuracy(params, test_ids, test_lengths, splits.test_labels, config.cell,
                             config.last_state, config.batch_size),
      majority_accuracy=float(np.bincount(splits.test_labels).max() / len(splits.test_labels)),
      train_size=len(train_ids), test_size=len(test_ids), vocabulary_size=len(vocabulary),
      cut_fraction=float(np.mean(np.concatenate([train_lengths, test_lengths]) ==
                                 config.max_length)))
  summary['elapsed_seconds'] = time.perf_counter() - started
  write_json_atomically(workdir / 'summary.json', summary)
  return summary


def table(summaries: dict) -> str:
  """Markdown: one row per dataset and cell, the test accuracy of each last state.

  Args:
    summaries: run name -> summary (``run``), with both last states of each
      dataset and cell.

  Returns:
    the table, a header and one line per (dataset, cell, bidirectional).

  Raises:
    KeyError: for a dataset and cell without a run of each last state.
  """
  rows = {}
  for summary in summaries.values():
    row = (summary['dataset'], summary['cell'], summary['bidirectional'])
    rows.setdefault(row, {})[summary['last_state']] = summary
  lines = ['| dataset | cell | test accuracy, true last state | test accuracy, padded end '
           '| cost of the padded end (points) | seconds (true / padded end) |',
           '|---|---|---|---|---|---|']
  for (dataset, cell, bidirectional), runs in rows.items():
    true, padded = runs['true'], runs['padded_end']
    lines.append(
        f'| {dataset} | {"bidirectional " if bidirectional else ""}{cell} '
        f'| {100 * true["test_accuracy"]:.1f}% | {100 * padded["test_accuracy"]:.1f}% '
        f'| {100 * (true["test_accuracy"] - padded["test_accuracy"]):.1f} '
        f'| {true["elapsed_seconds"]:.0f} / {padded["elapsed_seconds"]:.0f} |')
  return '\n'.join(lines) + '\n'


def run_table(config, folder: pathlib.Path) -> str:
  """Runs ``get_table()`` on top of ``config`` one after another; writes and returns
  ``<folder>/table.md``. A run whose summary.json says finished, with the same config,
  is not run again; one with another config is run again."""
  summaries = {}
  for name, overrides in classify_config.get_table():
    run_config = config.copy_and_resolve_references()
    run_config.update_from_flattened_dict(overrides)
    summary_path, config_path = folder / name / 'summary.json', folder / name / 'config.json'
    if (summary_path.exists() and json.loads(summary_path.read_text())['status'] == 'finished'
        and config_path.read_text() == run_config.to_json_best_effort(indent=2) + '\n'):
      summaries[name] = json.loads(summary_path.read_text())
    else:
      summaries[name] = run(run_config, folder / name)
    print(f'{name}: test accuracy {summaries[name]["test_accuracy"]:.4f} '
          f'({summaries[name]["elapsed_seconds"]:.0f} s)', flush=True)
  markdown = table(summaries)
  write_json_atomically(folder / 'table.json', summaries)
  (folder / 'table.md').write_text(markdown)
  return markdown


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.get_absl_handler().addFilter(lambda record: 'orbax' not in record.pathname)
  if FLAGS.table:
    print(run_table(FLAGS.config, pathlib.Path(FLAGS.table)))
    return
  summary = run(FLAGS.config, pathlib.Path(FLAGS.workdir))
  print(f'{summary["status"]}: {summary["dataset"]} {summary["cell"]} '
        f'(last state: {summary["last_state"]}) test accuracy {summary["test_accuracy"]:.4f} '
        f'(majority class {summary["majority_accuracy"]:.4f}) after {summary["steps_done"]} '
        f'steps, {summary["elapsed_seconds"]:.0f} s')


if __name__ == '__main__':
  define_flags()
  app.run(main)
