"""Numbers quoted in the seed notes, computed by the library."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnjax import cells
from rnnjax import models
from rnnjax import recurrence

import counts


def scalar_linear(w):
  return {'W_xh': jnp.ones((1, 1)), 'W_hh': jnp.full((1, 1), w), 'b': jnp.zeros((1,))}


def test_fifty_steps_at_weight_two():
  # Seed note 000: w = 2 in the linear regime multiplies the gradient by 2^50 ~ 1.13e15 in 50 steps.
  def h50(h0):
    _, final = recurrence.scan(cells.elman('linear'), scalar_linear(2.0), jnp.zeros((1, 50, 1)), h0)
    return final[0, 0]

  gradient = float(jax.grad(h50)(jnp.ones((1, 1)))[0, 0])
  assert gradient == 2.0 ** 50
  assert f'{gradient:.2e}' == '1.13e+15'


def test_first_of_fifty_inputs_at_weight_point_nine():
  # Seed note 002: a linear RNN with w_hh = 0.9 gives x_1 a weight 0.9^49 ~ 0.0057 in h_50.
  def h50(inputs):
    _, final = recurrence.scan(cells.elman('linear'), scalar_linear(0.9), inputs, jnp.zeros((1, 1)))
    return final[0, 0]

  weights = jax.grad(h50)(jnp.zeros((1, 50, 1)))[0, :, 0]
  assert float(weights[0]) == pytest.approx(0.9 ** 49, rel=1e-5)
  assert round(float(weights[0]), 4) == 0.0057
  np.testing.assert_allclose(weights, 0.9 ** np.arange(49, -1, -1), rtol=1e-5)


@pytest.mark.parametrize('biases, expected', [(2, (640, 1920, 2560)), (1, (620, 1860, 2480))])
def test_cell_parameter_counts(biases, expected, key):
  # Seed note 002: d = 10, h = 20; PyTorch (two biases) 640 / 1920 / 2560, one bias 620 / 1860 / 2480.
  found = (counts.count_parameters(cells.init_elman(key, 10, 20, biases=biases)),
           counts.count_parameters(cells.init_gru(key, 10, 20, biases=biases)),
           counts.count_parameters(cells.init_lstm(key, 10, 20, biases=biases)))
  assert found == expected


def test_bpe_language_model_count():
  # Seed note 000: |V| = 37,580, E = 256, H = 512 (nn.RNN, two biases):
  # 9.6 M embedding, 0.39 M cell, 19.3 M output, 29.3 M in total.
  model = models.LanguageModel(vocab_size=37_580, hidden_size=512, embedding_size=256,
                                   biases=2)
  shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32),
                          model.initial_state(1))['params']
  parts = {name: counts.count_parameters(shapes[name])
           for name in ('embedding', 'recurrence', 'head')}
  assert parts == {'embedding': 9_620_480, 'recurrence': 394_240, 'head': 19_278_540}
  assert [round(parts[n] / 1e6, 1) for n in ('embedding', 'head')] == [9.6, 19.3]
  assert round(parts['recurrence'] / 1e6, 2) == 0.39
  assert round(counts.count_parameters(shapes) / 1e6, 1) == 29.3


def test_gru_classifier_count(key):
  # Seed note 000: GRU(100, 128) and a linear layer to 4 classes: 88,836 parameters.
  gru = cells.init_gru(key, 100, 128, biases=2)
  head = nn.Dense(4).init(key, jnp.zeros((1, 128)))
  assert counts.count_parameters(gru) + counts.count_parameters(head) == 88_836
  assert counts.count_parameters(gru) == 3 * (100 * 128 + 128 * 128 + 2 * 128)


def test_ngram_versus_rnn_exercise():
  # Seed note 003, exercise 4: |V| = 10,000, k = 20, h = d = 256.
  table = counts.ngram_table_entries(10_000, 20)
  assert table == 10 ** 84
  assert counts.ngram_table_entries(10_000, 21) == table * 10_000  # x |V| per context token
  model = models.LanguageModel(vocab_size=10_000, hidden_size=256, embedding_size=256)
  shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 21), jnp.int32),
                          model.initial_state(1))['params']
  # |V| d + h (d + h + 1) + h |V| + |V|, whatever k is.
  assert counts.count_parameters(shapes) == 10_000 * 256 + 256 * (256 + 256 + 1) + 256 * 10_000 + 10_000
  assert counts.count_parameters(shapes) == 5_261_328
  with pytest.raises(ValueError, match='context: expected an int k >= 0, got -1'):
    counts.ngram_table_entries(10, -1)
