"""Word-level and BPE language models: corpora, vocabularies, subwords, perplexity, training."""

import csv
import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import bpe_lm
from experiments import language_tasks as tasks
from experiments.configs import bpe_lm as bpe_lm_config
from rnnjax import models
from rnnjax.data import batching
from rnnjax.data import corpora
from rnnjax.data import subwords
from rnnjax.data import text
from rnnjax import evaluation
from rnnjax.train import experiment
from rnnjax.train import harness
from rnnjax.train import records

# (name, words + one <eos> per line) from ../shared/data/README.md.
TOKEN_COUNTS = [('ptb.train', 929_589), ('ptb.valid', 73_760), ('ptb.test', 82_430),
                ('wikitext-2.valid', 217_646), ('wikitext-2.test', 245_569)]


@pytest.mark.parametrize('name, tokens', TOKEN_COUNTS)
def test_word_corpora_have_their_published_token_counts(shared_data_dir, name, tokens):
  lines = corpora.read_text(name, shared_data_dir, download=False).splitlines()
  assert len(text.words_with_eos(lines)) == tokens


def test_ptb_vocabulary_is_ten_thousand_words_and_covers_test(shared_data_dir):
  read = lambda split: corpora.read_text(f'ptb.{split}', shared_data_dir, download=False)
  vocabulary = text.word_vocabulary(text.words_with_eos(read('train').splitlines()))
  assert len(vocabulary) == 10_000
  assert vocabulary[:3] == ['the', '<unk>', '<eos>']  # most frequent first
  ids = text.encode_words(text.words_with_eos(read('test').splitlines()), vocabulary)
  assert ids.shape == (82_430,) and ids.max() < 10_000


def test_every_registered_file_is_verified(shared_data_dir):
  for name in corpora.CORPORA:
    assert corpora.corpus_path(name, shared_data_dir, download=False).exists()


def test_unknown_words_are_named():
  with pytest.raises(ValueError, match=r"2 words are not in the vocabulary, e\.g\. \['x', 'y'\]"):
    text.encode_words(['a', 'x', 'y'], ['a', 'b'])


LINES = ['the cat sat on the mat', 'the dog sat on the log', 'a cat and a dog <unk>',
         'the mat and the log'] * 5


def test_bpe_special_ids_do_not_collide():
  processor, _ = subwords.train_bpe(LINES, 40)
  assert (processor.pad_id(), processor.unk_id(), processor.bos_id(),
          processor.eos_id()) == (0, 1, 2, 3)
  assert processor.vocab_size() == 40
  pieces = [processor.id_to_piece(i) for i in range(40)]
  assert len(set(pieces)) == 40
  literal = processor.piece_to_id('<unk>')  # the corpus's own word, not the unknown id
  assert literal >= 4
  for sequence in subwords.encode_lines(processor, LINES + ['', 'the zebra']):
    assert sequence[0] == subwords.BOS and sequence[-1] == subwords.EOS
    assert (sequence[1:-1] > subwords.EOS).all() or subwords.UNK in sequence  # no pad/bos/eos
    assert sequence.max() < 40
  assert literal in subwords.encode_lines(processor, ['a cat and a dog <unk>'])[0]
  assert len(subwords.encode_lines(processor, LINES + ['', '  '])) == len(LINES)


def test_bpe_vocabulary_too_large_for_the_corpus_is_a_clear_error():
  with pytest.raises(ValueError, match=r'vocab_size: 5000 is too large for this training text '
                                       r'.*Please set it to a value <= \d+'):
    subwords.train_bpe(LINES, 5000)
  with pytest.raises(ValueError, match=r'vocab_size: expected an int >= 6'):
    subwords.train_bpe(LINES, 5)
  with pytest.raises(ValueError, match=r'vocab_size: 8 is too small for this training text'):
    subwords.train_bpe(LINES, 8)  # fewer pieces than the corpus has characters
  with pytest.raises(ValueError, match="lines: expected an iterable of str lines, got a single str"):
    subwords.train_bpe('the cat sat on the mat', 20)
  with pytest.raises(ValueError, match='lines: expected at least one non-empty line, got none'):
    subwords.train_bpe(['', '  '], 20)


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size_and_padding_changes_nothing():
  vocab = 37
  targets = jnp.array([[5, 9, 3, 0, 0], [1, 2, 0, 0, 0]])
  mask = targets != 0
  uniform = jnp.zeros((2, 5, vocab))
  total, count = evaluation.masked_nll(uniform, targets, mask)
  assert count == 5
  assert evaluation.perplexity(total, count) == pytest.approx(vocab, rel=1e-6)
  # more padding, with arbitrary logits at the padded positions: same numbers
  padded_targets = jnp.pad(targets, ((0, 0), (0, 3)))
  logits = jax.random.normal(jax.random.key(0), (2, 8, vocab)) * 50
  logits = logits.at[:, :5].set(0.0)
  total2, count2 = evaluation.masked_nll(logits, padded_targets, padded_targets != 0)
  assert (float(total2), float(count2)) == (pytest.approx(float(total), rel=1e-6), 5.0)


def test_masked_nll_checks_its_arguments():
  logits = jnp.zeros((2, 3, 10))
  targets = jnp.ones((2, 3), jnp.int32)
  with pytest.raises(ValueError, match=r'mask: expected shape \[B, T\] = \(2, 3\).* got \(3,\)'):
    evaluation.masked_nll(logits, targets, jnp.ones(3, bool))
  with pytest.raises(ValueError, match=r'targets: expected shape \(2, 3\) = the leading axes of '
                                       r'logits \(2, 3, 10\), got \(3,\)'):
    evaluation.masked_nll(logits, targets[0], jnp.ones((2, 3), bool))
  with pytest.raises(ValueError, match='mask: expected dtype bool, got float32'):
    evaluation.masked_nll(logits, targets, jnp.full((2, 3), 0.5))
  with pytest.raises(ValueError, match=r'targets: expected ids in \[0, V\) = \[0, 10\), got min -1'):
    evaluation.masked_nll(logits, targets.at[0, 0].set(-1), targets > 0)


def test_perplexity_is_inf_above_the_cap_not_an_overflow():
  assert evaluation.perplexity(20.0 * 10, 10) == pytest.approx(math.exp(20.0))
  assert evaluation.perplexity(20.5 * 10, 10) == math.inf
  assert evaluation.perplexity(1e6, 1) == math.inf
  assert evaluation.perplexity(math.nan, 3) == math.inf
  assert evaluation.perplexity(0.0, 3) == 1.0
  assert evaluation.perplexity(np.float32(3.0), np.int64(3)) == pytest.approx(math.e, rel=1e-6)
  with pytest.raises(ValueError, match='count: expected a finite number of tokens > 0, got 0'):
    evaluation.perplexity(1.0, 0)
  with pytest.raises(ValueError, match='count: expected a finite number of tokens > 0, got inf'):
    evaluation.perplexity(1.0, math.inf)  # not 1.0
  with pytest.raises(ValueError, match='nll_sum: expected a summed negative log-likelihood >= 0'):
    evaluation.perplexity(-5.0, 3)
  with pytest.raises(ValueError, match="nll_sum: expected .* got '3'"):
    evaluation.perplexity('3', 3)
  with pytest.raises(ValueError, match='max_loss: expected a number of nats >= 0, got nan'):
    evaluation.perplexity(1.0, 3, max_loss=math.nan)


def test_pad_sequences_rounds_up_and_cuts():
  ids, lengths = batching.pad_sequences([[5, 6, 7], [8], [1, 2, 3, 4, 5, 6]], multiple=4,
                                        max_length=5)
  assert lengths.tolist() == [3, 1, 5]
  assert ids.tolist() == [[5, 6, 7, 0, 0, 0, 0, 0], [8, 0, 0, 0, 0, 0, 0, 0],
                          [1, 2, 3, 4, 5, 0, 0, 0]]
  with pytest.raises(ValueError, match='multiple: expected an int >= 1, got 0'):
    batching.pad_sequences([[1]], multiple=0)
  with pytest.raises(ValueError, match=r'sequence 1 has shape \(2,\) and dtype float64'):
    batching.pad_sequences([[1], [1.7, 2.2]])
  with pytest.raises(ValueError, match=r'pad_id: expected an int id.*, got 2.5'):
    batching.pad_sequences([[1]], pad_id=2.5)


def test_batch_indices_cover_each_example_once_per_epoch():
  first_epoch = np.concatenate([tasks.batch_indices(10, 3, 0, step) for step in (1, 2, 3)])
  assert len(set(first_epoch.tolist())) == 9  # the tenth is the dropped partial batch
  np.testing.assert_array_equal(tasks.batch_indices(10, 3, 0, 4), tasks.batch_indices(10, 3, 0, 4))
  assert tasks.batch_indices(10, 3, 0, 4).tolist() != tasks.batch_indices(10, 3, 0, 1).tolist()
  with pytest.raises(ValueError, match=r'batch_size: expected an int in \[1, 10\]'):
    tasks.batch_indices(10, 11, 0, 1)


def _tiny_corpus(folder: pathlib.Path, monkeypatch):
  """A PTB-shaped corpus under tmp data dir, registered with its own sha256."""
  rng = np.random.default_rng(0)
  words = ['the', 'cat', 'dog', 'sat', 'ran', 'on', 'mat', 'log', '<unk>', 'N']
  for split, lines in (('train', 400), ('valid', 40), ('test', 40)):
    path = folder / 'ptb' / f'ptb.{split}.txt'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(''.join(' ' + ' '.join(rng.choice(words, rng.integers(3, 9))) + ' \n'
                            for _ in range(lines)))
    monkeypatch.setitem(corpora.CORPORA, f'ptb.{split}',
                        (f'ptb/ptb.{split}.txt', 'https://example.invalid',
                         corpora.sha256(path)))


@pytest.mark.parametrize('tokens', ['word', 'bpe'])
def test_experiment_runs_end_to_end(tmp_path, monkeypatch, tokens):
  _tiny_corpus(tmp_path / 'data', monkeypatch)
  config = experiment.override(bpe_lm_config.get_config(), dict(
      data_dir=str(tmp_path / 'data'), tokens=tokens, vocab_size=30, hidden_size=16,
      embedding_size=8, batch_size=4, truncation=8, steps=60, log_every=30, learning_rate=1e-2,
      dropout_rate=0.0, sample_prompt='the cat', sample_length=5))
  summary, = harness.run_group(bpe_lm.EXPERIMENT, [config], [tmp_path / 'run'])
  assert summary['status'] == 'finished'
  saved = json.loads((tmp_path / 'run' / 'summary.json').read_text())
  # random words: uniform over 10 words and <eos> would be 11; a short run comes near it
  assert 5 < saved['test_word_perplexity'] < 16
  if tokens == 'word':
    assert saved['vocab_size'] == 11
    assert saved['test_perplexity'] == saved['test_word_perplexity']
  else:
    assert saved['test_tokens'] > saved['test_words']  # pieces per word >= 1, plus <eos>
    assert (tmp_path / 'run' / 'bpe.model').exists()
  assert saved['sample_greedy'].startswith('the cat | ')
  lines = records.read_metrics(tmp_path / 'run')
  assert [line['step'] for line in lines] == [1, 30, 60]
  assert lines[0]['measured_spectral_radius'] == pytest.approx(1.0, abs=1e-4)  # the init's rho
  assert set(lines[0]['profile']) >= {'1', '2'}
  # a prompt outside the vocabulary fails before training, in a fresh folder too
  config = experiment.override(config, dict(sample_prompt='the zebra', vocab_size=10_000))
  with pytest.raises(ValueError, match=r"config.sample_prompt: words: 1 words are not in the "
                                       r"vocabulary|config.vocab_size: 10000 is too large"):
    harness.run_group(bpe_lm.EXPERIMENT, [config], [tmp_path / 'other'])
  assert not (tmp_path / 'other').exists()
  assert json.loads((tmp_path / 'run' / 'summary.json').read_text()) == saved


@pytest.mark.parametrize('field, value, message', [
    ('corpus', 'ptb2', r"config.corpus: expected one of \('ptb', 'wikitext-2'\), got 'ptb2'"),
    ('tokens', 'char', r"config.tokens: expected one of \('word', 'bpe'\), got 'char'"),
    ('vocab_size', 0, 'config.vocab_size: expected an int >= 1, got 0'),
    ('sample_temperature', -1.0, 'config.sample_temperature: expected a value >= 0'),
    ('sample_length', -1, 'config.sample_length: expected an int >= 0, got -1'),
    ('sample_prompt', ' ', "config.sample_prompt: expected at least one word, got ' '"),
    ('activation', 'sigmoid', "config.activation: expected one of .* got 'sigmoid'"),
    ('recurrent_init', 'eye', "config.recurrent_init: expected one of .* got 'eye'"),
    ('optimizer', 'adamx', "config.optimizer: expected one of .* got 'adamx'"),
    ('learning_rate', -1.0, 'config.learning_rate: expected a finite value > 0, got -1.0'),
])
def test_bad_config_is_named(field, value, message):
  config = bpe_lm_config.get_config()
  config[field] = value
  with pytest.raises(ValueError, match=message):
    experiment.check(bpe_lm.EXPERIMENT, config)


def test_sequence_scores_equal_scoring_each_sequence_alone(shared_data_dir):
  lines = corpora.read_text('ptb.train', shared_data_dir, download=False).splitlines()[:500]
  processor, _ = subwords.train_bpe(lines, 300)
  sequences = subwords.encode_lines(processor, lines[:40])
  model = models.LanguageModel(300, 32, 16)
  params = tasks.init_language_model(model, jax.random.key(0))
  sequence_scores = bpe_lm.sequence_scorer(model)
  total, tokens = sequence_scores(params, sequences, batch_size=16)
  alone = [sequence_scores(params, [s], batch_size=1) for s in sequences]
  assert tokens == sum(len(s) - 1 for s in sequences) == sum(t for _, t in alone)
  assert total == pytest.approx(sum(n for n, _ in alone), rel=1e-5)
  assert total / tokens == pytest.approx(math.log(300), abs=0.1)  # untrained: near uniform


def test_dropout_acts_only_in_training():
  ids = jnp.array([[3, 1, 4, 1, 5, 9]])
  plain = models.LanguageModel(10, 8, 4)
  dropped = models.LanguageModel(10, 8, 4, dropout_rate=0.5)
  params = plain.init(jax.random.key(0), ids, plain.initial_state(1))['params']
  expected, _ = plain.apply({'params': params}, ids, plain.initial_state(1))
  evaluated, _ = dropped.apply({'params': params}, ids, plain.initial_state(1))
  np.testing.assert_array_equal(evaluated, expected)
  train = lambda seed: dropped.apply({'params': params}, ids, plain.initial_state(1),
                                     deterministic=False, rngs={'dropout': jax.random.key(seed)})[0]
  assert not np.allclose(train(1), expected)
  assert not np.allclose(train(1), train(2))
  np.testing.assert_array_equal(train(1), train(1))


def test_perplexity_over_seeds_gives_mean_and_sample_standard_deviation(tmp_path):
  def run(corpus, seed, perplexity, status='finished'):
    return {'status': status, 'values': {'corpus': corpus, 'seed': seed},
            'summary': {'valid_perplexity': perplexity + 1, 'test_perplexity': perplexity,
                        'test_word_perplexity': perplexity * 2}}
  runs = [run('ptb', 0, 120.0), run('ptb', 1, 124.0), run('ptb', 2, 128.0),
          run('ptb', 3, 1e9, status='failed'), run('wikitext-2', 0, 60.0)]
  bpe_lm.perplexity_over_seeds(runs, ['corpus', 'seed'], tmp_path, '')
  rows = list(csv.DictReader((tmp_path / 'perplexity_over_seeds.csv').open()))
  assert [(r['corpus'], r['seeds'], r['not finished']) for r in rows] == [
      ('ptb', '3', '1'), ('wikitext-2', '1', '0')]
  assert float(rows[0]['test_perplexity mean']) == 124.0
  assert float(rows[0]['test_perplexity standard deviation']) == 4.0  # n - 1: sqrt(32 / 2)
  assert float(rows[0]['test_word_perplexity highest']) == 256.0
  assert rows[1]['test_perplexity standard deviation'] == ''  # one seed has no spread
  assert '| ptb | 3 | 1 | 125.000 | 4.000 |' in (tmp_path / 'perplexity_over_seeds.md').read_text()
  unfinished = [run('ptb', 0, 0.0, status='failed')]
  bpe_lm.perplexity_over_seeds(unfinished, ['corpus', 'seed'], tmp_path / 'none', '')
  assert not (tmp_path / 'none').exists()  # no finished run: no table
