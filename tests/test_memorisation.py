"""A char-level run: memorise a pangram, then regenerate it greedily."""

import math

import jax
import jax.numpy as jnp
import ml_collections
import pytest

from experiments import language_tasks as tasks
from rnnjax import models
from rnnjax import sampling
from rnnjax.data import text
from rnnjax.train import experiment
from rnnjax.train import records
from rnnjax.train import trainer

CORPUS = 'the quick brown fox jumps over the lazy dog. ' * 4


def test_memorises_the_quick_brown_fox(tmp_path):
  vocabulary = text.char_vocabulary(CORPUS)
  assert len(vocabulary) == 28
  inputs, targets = text.stream_windows(text.encode(CORPUS, vocabulary), 1, 24)
  assert inputs.shape == (7, 1, 24)  # 7 windows, then the carry resets

  model = models.LanguageModel(vocab_size=28, hidden_size=48, embedding_size=0)

  def init(config, key):
    """Every weight N(0, 0.01), biases zero."""
    params = tasks.init_language_model(model, key)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    return jax.tree_util.tree_unflatten(treedef, [
        0.01 * jax.random.normal(k, p.shape) if p.ndim == 2 else jnp.zeros_like(p)
        for k, p in zip(keys, leaves)])

  config = ml_collections.ConfigDict({name: field.default for name, field
                                      in experiment.TRAINER_FIELDS.items()})
  config.update(steps=1000, optimizer='adagrad', learning_rate=0.1, clipping='elementwise',
                clip_threshold=5.0)
  params, run_records, _ = trainer.train(
      tasks.truncated_bptt(model, inputs, targets, init, None), [config], [tmp_path])
  params, record = params[0], run_records[0]
  lines = records.read_metrics(tmp_path)
  assert lines[0]['step'] == 1
  assert lines[0]['loss'] == pytest.approx(math.log(28), abs=5e-4)  # 3.332 nats
  assert round(lines[0]['loss'], 3) == 3.332
  assert lines[-1]['step'] == 1000
  assert lines[-1]['loss'] < 0.05
  assert record['train_loss_nats'] == lines[-1]['loss']
  assert record['status'] == 'finished'

  prompt = text.encode('t', vocabulary)
  generated = sampling.sample(model, params, prompt, 60, jax.random.key(2), temperature=0.0)
  assert 't' + text.decode(generated, vocabulary) == CORPUS[:61]
  assert CORPUS[:61] == 'the quick brown fox jumps over the lazy dog. the quick brown '
