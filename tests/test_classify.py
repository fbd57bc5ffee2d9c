"""The text classifier: data (split, words, ids), the last state, training, the experiment."""

import json

import jax
import ml_collections
import numpy as np
import optax
import pytest

from experiments import classify
from experiments import language_tasks as tasks
from experiments.configs import classify as classify_config
from rnnjax import combinators
from rnnjax.data import classification
from rnnjax.data import corpora
from rnnjax.train import experiment
from rnnjax.train import harness
from rnnjax.train import records
from rnnjax.train import trainer

V, E, H = 12, 5, 7
# one compile a shape
features = jax.jit(classify.text_features, static_argnames=('cell', 'last_state'))


@pytest.fixture
def classification_data_dir(shared_data_dir):
  """The shared data folder, if it holds AG News and SST-2."""
  for relative in ('ag_news/test.csv', 'sst2/train.tsv', 'sst2/dev.tsv'):
    if not (shared_data_dir / relative).exists():
      pytest.skip(f'no {relative} under {shared_data_dir}')
  return shared_data_dir


def test_stratified_split_keeps_exact_proportions_and_is_deterministic():
  labels = np.random.default_rng(0).permutation([0] * 40 + [1] * 20 + [2] * 20)
  train, test = classification.stratified_split(labels, 20, seed=3)
  assert np.bincount(labels[test]).tolist() == [10, 5, 5]
  assert np.bincount(labels[train]).tolist() == [30, 15, 15]
  assert not set(train) & set(test)
  assert sorted(np.concatenate([train, test])) == list(range(80))
  again_train, again_test = classification.stratified_split(labels, 20, seed=3)
  np.testing.assert_array_equal(again_test, test)
  np.testing.assert_array_equal(again_train, train)
  _, other_test = classification.stratified_split(labels, 20, seed=4)
  assert not np.array_equal(other_test, test)
  with pytest.raises(ValueError, match=r'class 1 \(20 examples\) 2.5 test examples'):
    classification.stratified_split(labels, 10, seed=3)
  with pytest.raises(ValueError, match=r'test_size: expected an int in \[1, 79\]'):
    classification.stratified_split(labels, 80, seed=3)


def test_words_and_vocabulary_ids():
  assert classification.tokenize("Oil's UP 5%\\prices") == ['oil', "'", 's', 'up', '5', '%',
                                                            'prices']
  texts = [['b', 'a', 'b', 'c'], ['d', 'a', 'b']]
  vocabulary = classification.build_vocabulary(texts, min_count=2, max_size=100)
  assert vocabulary == {'<pad>': 0, '<unk>': 1, 'b': 2, 'a': 3}
  assert classification.build_vocabulary(texts, min_count=1, max_size=4) == {
      '<pad>': 0, '<unk>': 1, 'b': 2, 'a': 3}  # c and d (once each) do not fit
  assert classification.build_vocabulary(texts, min_count=1, max_size=6)['c'] == 4
  np.testing.assert_array_equal(classification.encode(['a', 'never', 'b', 'c'], vocabulary),
                                [3, 1, 2, 1])
  ids, lengths = classify.encode_texts(['B a', 'zebra a b a b'], vocabulary, max_length=4)
  np.testing.assert_array_equal(ids, [[2, 3, 0, 0], [1, 3, 2, 3]])  # cut to 4, pad 0
  np.testing.assert_array_equal(lengths, [2, 4])
  with pytest.raises(ValueError, match='max_size: expected an int >= 2'):
    classification.build_vocabulary(texts, min_count=1, max_size=1)


def padded_batch(key, lengths, steps):
  """``<int32>[B, steps]`` random word ids in [2, V), pads (0) after each length."""
  ids = np.array(jax.random.randint(key, (len(lengths), steps), 2, V), np.int32)
  ids[np.arange(steps)[None, :] >= np.asarray(lengths)[:, None]] = classification.PAD_ID
  return ids


@pytest.mark.parametrize('cell', ['elman', 'gru', 'lstm'])
@pytest.mark.parametrize('bidirectional', [False, True])
def test_true_last_state_is_the_state_of_each_text_alone(key, cell, bidirectional):
  params = classify.init_text_classifier(key, cell, V, 3, E, H, bidirectional=bidirectional)
  lengths = np.array([5, 1, 8, 3], np.int32)
  ids = padded_batch(jax.random.key(1), lengths, 8)
  true = features(params, ids, lengths, cell, 'true')
  assert true.shape == (4, (2 if bidirectional else 1) * H)
  for row, length in enumerate(lengths):  # alone: no pads, no lengths, the last column
    alone = features(params, ids[row:row + 1, :length], None, cell, 'padded_end')
    np.testing.assert_allclose(true[row], alone[0], atol=1e-6)
  more_pads = np.pad(ids, ((0, 0), (0, 16)))
  np.testing.assert_allclose(features(params, more_pads, lengths, cell, 'true'), true,
                             atol=1e-6)
  padded_end = features(params, ids, lengths, cell, 'padded_end')
  padded_end_more = features(params, more_pads, lengths, cell, 'padded_end')
  assert np.abs(np.asarray(padded_end_more - padded_end)).max() > 1e-3
  assert np.abs(np.asarray(padded_end[1] - true[1])).max() > 1e-3  # 7 pads read


@pytest.mark.parametrize('last_state', ['true', 'padded_end'])
def test_batch_permutation_permutes_the_logits(key, last_state):
  params = classify.init_text_classifier(key, 'gru', V, 3, E, H, bidirectional=True)
  lengths = np.array([5, 1, 8, 3, 6], np.int32)
  ids = padded_batch(jax.random.key(2), lengths, 8)
  scores = classify.text_logits(params, ids, lengths, 'gru', last_state)
  order = np.array([3, 0, 4, 1, 2])
  np.testing.assert_allclose(classify.text_logits(params, ids[order], lengths[order], 'gru',
                                                last_state), scores[order], atol=1e-6)
  assert np.abs(np.asarray(scores[1:] - scores[:-1])).min() > 1e-4  # rows do differ


def test_missing_corpus_names_the_file(tmp_path):
  with pytest.raises(corpora.CorpusError, match=r'is missing; put the file at .*ag_news/test.csv'):
    classification.load_splits('ag_news', tmp_path, download=False)
  with pytest.raises(corpora.CorpusError, match=r'is missing; put the file at .*sst2/train.tsv'):
    classification.load_splits('sst2', tmp_path, download=False)
  with pytest.raises(ValueError, match=r"dataset: expected one of \('ag_news', 'sst2'\)"):
    classification.load_splits('imdb', tmp_path, download=False)


def test_training_on_a_separable_task_reaches_high_accuracy():
  """The class is the text's first word (ids 2..5) and ten other words follow it,
  some of them: a GRU must carry it to the true last state."""
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 4, 640).astype(np.int32)
  lengths = rng.integers(2, 11, 640).astype(np.int32)
  ids = np.asarray(rng.integers(6, 16, (640, 12)), np.int32)
  ids[:, 0] = labels + 2
  ids[np.arange(12)[None, :] >= lengths[:, None]] = classification.PAD_ID
  def loss(params, carry, batch, key):
    scores = classify.text_logits(params, batch['ids'], batch['lengths'], 'gru', 'true')
    return optax.softmax_cross_entropy_with_integer_labels(scores, batch['labels']).mean(), carry

  def batch(step):
    chosen = tasks.batch_indices(512, 32, 0, step)
    return {'ids': ids[chosen], 'lengths': lengths[chosen], 'labels': labels[chosen]}

  task = trainer.Task(init=lambda c, k: classify.init_text_classifier(k, 'gru', 16, 4, 8, 16),
                      loss=loss, batch=batch)
  config = ml_collections.ConfigDict({name: field.default for name, field
                                      in experiment.TRAINER_FIELDS.items()})
  config.update(steps=150, log_every=50, optimizer='adam', learning_rate=1e-2,
                clipping='global_norm')
  params, records, _ = trainer.train(task, [config])
  params, record = params[0], records[0]
  assert record['steps_done'] == 150 and record['train_loss_nats'] < 0.1
  assert classify.accuracy(params, ids[512:], lengths[512:], labels[512:], 'gru', 'true',
                           batch_size=64) >= 0.95


def test_corpora_are_split_and_read(classification_data_dir):
  splits = classification.load_splits('ag_news', classification_data_dir, download=False)
  assert (len(splits.train_texts), len(splits.test_texts)) == (6000, 1600)
  assert np.bincount(splits.train_labels).tolist() == [1500] * 4
  assert np.bincount(splits.test_labels).tolist() == [400] * 4
  assert not set(splits.train_texts) & set(splits.test_texts)
  again = classification.load_splits('ag_news', classification_data_dir, download=False)
  assert again.test_texts == splits.test_texts
  sst2 = classification.load_splits('sst2', classification_data_dir, download=False)
  assert np.bincount(sst2.train_labels).tolist() == [29780, 37569]
  assert np.bincount(sst2.test_labels).tolist() == [428, 444]
  assert sst2.test_texts[0] == "it 's a charming and often affecting journey . "


@pytest.mark.parametrize('cell', ['elman', 'gru'])
def test_run_writes_the_summary_and_the_diagnostics(classification_data_dir, tmp_path, cell):
  config = experiment.override(classify_config.get_config(), dict(
      data_dir=str(classification_data_dir), max_length=16, embedding_size=8, hidden_size=8,
      batch_size=32, steps=3, log_every=1, cell=cell))
  summary, = harness.run_group(classify.EXPERIMENT, [config], [tmp_path])
  assert json.loads((tmp_path / 'summary.json').read_text()) == summary
  assert summary['status'] == 'finished' and summary['steps_done'] == 3
  assert (summary['train_size'], summary['test_size']) == (6000, 1600)
  assert summary['majority_accuracy'] == 0.25 and 0 <= summary['test_accuracy'] <= 1
  assert 2 < summary['vocabulary_size'] <= config.max_vocabulary
  lines = records.read_metrics(tmp_path)
  assert [line['step'] for line in lines] == [1, 2, 3]
  assert all(0 < line['measured_spectral_radius'] < 10 for line in lines)
  assert set(lines[0]['profile']) == {'1', '2', '5', '10'}  # k < T = 16
  assert all(0 < ratio < 10 for ratio in lines[0]['profile'].values())
  # a rerun with a bad value fails before it touches the finished run
  before = {p: p.read_bytes() for p in tmp_path.rglob('*') if p.is_file()}
  for field, value, message in (('batch_size', 7000, 'batch_size'),
                                ('optimizer', 'adamx', "config.optimizer: expected one of")):
    bad = config.copy_and_resolve_references()
    bad[field] = value
    with pytest.raises(ValueError, match=message):
      harness.run_group(classify.EXPERIMENT, [bad], [tmp_path])
  assert {p: p.read_bytes() for p in tmp_path.rglob('*') if p.is_file()} == before


def test_the_probe_differentiates_the_first_layer_states(key):
  """The probe's loss of the first layer's forward states equals the model's loss."""
  for bidirectional, layers in ((False, 1), (True, 2)):
    params = classify.init_text_classifier(key, 'gru', V, 3, E, H, layers, bidirectional)
    lengths = np.array([5, 1, 8, 3], np.int32)
    ids = padded_batch(jax.random.key(1), lengths, 8)
    states, _ = combinators.layer_for('gru')(
        params['recurrence'][0][0], params['embedding'][ids], np.zeros((4, H), np.float32),
        lengths)
    np.testing.assert_allclose(
        classify.text_logits(params, ids, lengths, 'gru', 'true', first_states=states),
        classify.text_logits(params, ids, lengths, 'gru', 'true'), atol=1e-6)
