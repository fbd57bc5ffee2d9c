"""Seed note 001's char-level run: memorise a pangram, then regenerate it greedily."""

import json
import math

import jax
import jax.numpy as jnp
import pytest

from rnnjax import models
from rnnjax import sampling
from rnnjax.data import text
from rnnjax.train import language_model
from rnnjax.train import optimizers

CORPUS = 'the quick brown fox jumps over the lazy dog. ' * 4


def test_memorises_the_quick_brown_fox(tmp_path):
  vocabulary = text.char_vocabulary(CORPUS)
  assert len(vocabulary) == 28
  inputs, targets = text.stream_windows(text.encode(CORPUS, vocabulary), 1, 24)
  assert inputs.shape == (7, 1, 24)  # as the seed's loop: 7 windows, then the carry resets

  model = models.LanguageModel(vocab_size=28, hidden_size=48, embedding_size=0)
  params = model.init(jax.random.key(0), inputs[0], model.initial_state(1))['params']
  # Seed: every weight N(0, 0.01), biases zero.
  leaves, treedef = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.key(1), len(leaves))
  params = jax.tree_util.tree_unflatten(treedef, [
      0.01 * jax.random.normal(k, p.shape) if p.ndim == 2 else jnp.zeros_like(p)
      for k, p in zip(keys, leaves)])

  optimizer = optimizers.make_optimizer('adagrad', 0.1, 'elementwise', 5.0)
  settings = language_model.LoopSettings(steps=1000, clipping='elementwise',
                                         log_every=100)
  params, record = language_model.train(model, params, optimizer, inputs, targets, settings,
                                        tmp_path)
  lines = [json.loads(l) for l in (tmp_path / 'metrics.jsonl').read_text().splitlines()]
  assert lines[0]['step'] == 1
  assert lines[0]['loss'] == pytest.approx(math.log(28), abs=5e-4)  # 3.332 nats
  assert round(lines[0]['loss'], 3) == 3.332
  assert lines[-1]['step'] == 1000
  assert lines[-1]['loss'] < 0.05
  assert record['final_train_loss'] == lines[-1]['loss']
  assert not record['diverged']

  prompt = text.encode('t', vocabulary)
  generated = sampling.sample(model, params, prompt, 60, jax.random.key(2), temperature=0.0)
  assert 't' + text.decode(generated, vocabulary) == CORPUS[:61]
  assert CORPUS[:61] == 'the quick brown fox jumps over the lazy dog. the quick brown '
