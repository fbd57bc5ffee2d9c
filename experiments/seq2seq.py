"""Trains a sequence-to-sequence model (encoder-decoder, GRU or Elman) on digit reversal.

  python -m experiments.seq2seq --config=experiments/configs/seq2seq.py \
      --workdir=results/seq2seq_gru [--config.cell=elman ...]

Trains with teacher forcing on a fixed training set, then decodes a test
set drawn with another key, greedily and by sampling at
``sample_temperature``, until <eos> or ``max_decode_length`` tokens. Writes
to the workdir: config.json, metrics.jsonl (one line per logged step),
summary.json (written last, atomically: its presence means the run ended;
its "status" says finished or diverged) and an orbax checkpoint. Prints
the greedy exact match, per-token accuracy, sampled exact match and the
training time.
"""

import math
import pathlib
import time

from absl import app
from absl import flags
from absl import logging
import jax
import numpy as np
from ml_collections import config_flags

from experiments.char_lm import write_json_atomically
from rnnjax import seq2seq
from rnnjax.data import batching
from rnnjax.data import synthetic
from rnnjax.train import optimizers
from rnnjax.train import supervised

FLAGS = flags.FLAGS
EXAMPLES = 5  # test examples written to the summary and printed


def define_flags():
  """Defines the command-line flags (only when run as a program, so the module imports cleanly)."""
  config_flags.DEFINE_config_file(
      'config', None, 'Path to a config file with get_config(), e.g. '
      'experiments/configs/seq2seq.py; override fields with --config.NAME=VALUE.')
  flags.DEFINE_string(
      'workdir', None,
      'Folder for this run: config.json, metrics.jsonl, summary.json, checkpoint/.')
  flags.mark_flags_as_required(['config', 'workdir'])


def check_config(config) -> None:
  """Checks the fields that would otherwise fail only deep inside JAX or after training.

  Raises:
    ValueError: naming the field, with the expected and the given value.
  """
  if config.cell not in seq2seq.CELLS:
    raise ValueError(f'config.cell: expected one of {seq2seq.CELLS}, got {config.cell!r}')
  for name in ('min_digits', 'max_digits', 'train_size', 'test_size', 'embedding_size',
               'hidden_size', 'batch_size', 'steps', 'log_every', 'max_decode_length'):
    value = config[name]
    if not isinstance(value, int) or value < 1:
      raise ValueError(f'config.{name}: expected an int >= 1, got {value!r}')
  if config.min_digits > config.max_digits:
    raise ValueError(f'config.min_digits: expected at most max_digits = {config.max_digits}, '
                     f'got {config.min_digits}')
  if config.max_decode_length < config.max_digits + 1:
    raise ValueError(f'config.max_decode_length: expected at least max_digits + 1 = '
                     f'{config.max_digits + 1} (the longest target, <eos> included), got '
                     f'{config.max_decode_length}')
  if config.batch_size > config.train_size:
    raise ValueError(f'config.batch_size: expected at most train_size = {config.train_size}, '
                     f'got {config.batch_size}')
  if not config.sample_temperature >= 0:
    raise ValueError(f'config.sample_temperature: expected a value >= 0 (0: greedy), got '
                     f'{config.sample_temperature!r}')
  optimizers.make_optimizer(config.optimizer, config.learning_rate, config.clipping,
                            config.clip_threshold, config.on_divergence)


def digits_text(ids) -> str:
  """The digits of a reversal sequence as text, stopping at <eos> or PAD."""
  text = ''
  for token in np.asarray(ids).tolist():
    if token < synthetic.REVERSAL_FIRST_DIGIT:
      break
    text += str(token - synthetic.REVERSAL_FIRST_DIGIT)
  return text


def evaluate(config, params, sources, targets, seen, key) -> dict:
  """Greedy and sampled exact match, per-token accuracy and loss on a test set.

  Args:
    config: the run's config.
    params: trained ``seq2seq.init`` params.
    sources: ``<int32>[N, S]`` test sources.
    targets: ``<int32>[N, T]`` their targets.
    seen: ``<bool>[N]``, whether each source is also in the training set.
    key: ``jax.random`` key for the sampled decoding.

  Returns:
    A dict: exact_match (greedy), token_accuracy (greedy, over real target
    tokens), sampled_exact_match (at sample_temperature), test_loss (nats
    per target token, teacher-forced), exact_match_unseen (greedy, on the
    sources not in the training set; NaN if none), exact_match_by_digits
    ({L: rate}) and a few examples.
  """
  decode = jax.jit(seq2seq.decode, static_argnames=('cell', 'max_length', 'temperature'))
  greedy = decode(config.cell, params, sources, config.max_decode_length)
  sampled = decode(config.cell, params, sources, config.max_decode_length,
                   config.sample_temperature, key)
  exact, token_accuracy = seq2seq.accuracies(greedy, targets)
  sampled_exact, _ = seq2seq.accuracies(sampled, targets)
  exact = np.asarray(exact)
  digits = np.asarray(seq2seq.lengths_of(sources))
  return {
      'exact_match': float(exact.mean()),
      'token_accuracy': float(token_accuracy),
      'sampled_exact_match': float(np.mean(sampled_exact)),
      'test_loss': float(jax.jit(seq2seq.loss, static_argnums=0)(config.cell, params, sources,
                                                                  targets)),
      'exact_match_unseen': float(exact[~seen].mean()) if (~seen).any() else math.nan,
      'exact_match_by_digits': {int(length): float(exact[digits == length].mean())
                                for length in np.unique(digits)},
      'examples': [{'source': digits_text(sources[i]), 'target': digits_text(targets[i]),
                    'greedy': digits_text(greedy[i]), 'sampled': digits_text(sampled[i])}
                   for i in range(min(EXAMPLES, len(sources)))],
  }


def run(config, workdir: pathlib.Path) -> dict:
  """Trains and evaluates one run; returns the summary it writes to summary.json.

  Raises:
    ValueError: from ``check_config``, before any training.
  """
  started = time.perf_counter()
  check_config(config)
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / 'summary.json').unlink(missing_ok=True)
  (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2) + '\n')
  key_data, key_init, key_fit, key_sample = jax.random.split(jax.random.key(config.seed), 4)
  key_train, key_test = jax.random.split(key_data)
  draw = jax.jit(synthetic.reverse_digits, static_argnums=(1, 2, 3))  # one program, not op by op
  train_sources, train_targets = jax.device_get(draw(key_train, config.train_size,
                                                     config.max_digits, config.min_digits))
  test_sources, test_targets = jax.device_get(draw(key_test, config.test_size, config.max_digits,
                                                   config.min_digits))
  seen = {row.tobytes() for row in train_sources}
  test_seen = np.array([row.tobytes() in seen for row in test_sources])

  params = jax.jit(seq2seq.init, static_argnums=(1, 2, 3, 4))(
      key_init, config.cell, synthetic.REVERSAL_VOCAB_SIZE, config.embedding_size,
      config.hidden_size)
  optimizer = optimizers.make_optimizer(config.optimizer, config.learning_rate, config.clipping,
                                        config.clip_threshold, config.on_divergence)
  batches = ({'sources': train_sources[rows], 'targets': train_targets[rows]}
             for rows in batching.epoch_batches(config.train_size, config.batch_size, config.seed))

  def loss_fn(params, batch, _):
    return seq2seq.loss(config.cell, params, batch['sources'], batch['targets'])

  logging.info('%s seq2seq: %d training examples of %d to %d digits, %d test examples',
               config.cell, config.train_size, config.min_digits, config.max_digits,
               config.test_size)
  params, record = supervised.fit(loss_fn, params, optimizer, batches, config.steps, key_fit,
                                  clipping=config.clipping, on_divergence=config.on_divergence,
                                  log_every=config.log_every, workdir=workdir)
  summary = dict(record, status='diverged' if record['diverged'] else 'finished',
                 cell=config.cell, train_seconds=record['seconds'],
                 test_seen_in_training_fraction=float(test_seen.mean()))
  summary.update(evaluate(config, params, test_sources, test_targets, test_seen, key_sample))
  summary['elapsed_seconds'] = time.perf_counter() - started
  write_json_atomically(workdir / 'summary.json', summary)
  return summary


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.get_absl_handler().addFilter(lambda record: 'orbax' not in record.pathname)
  summary = run(FLAGS.config, pathlib.Path(FLAGS.workdir))
  if summary['status'] == 'diverged':
    print(f'diverged at step {summary["diverged_step"]} (non-finite loss); evaluated the '
          f'params of step {summary["steps_done"]}')
  print(f'{summary["cell"]} seq2seq, digit reversal: exact match {summary["exact_match"]:.4f} '
        f'(greedy), per-token accuracy {summary["token_accuracy"]:.4f}, sampled exact match '
        f'{summary["sampled_exact_match"]:.4f} at temperature '
        f'{FLAGS.config.sample_temperature:g}; test loss {summary["test_loss"]:.4f} nats/token; '
        f'trained {summary["steps_done"]} steps in {summary["train_seconds"]:.0f} s')
  for example in summary['examples']:
    print(f'  {example["source"]:>{FLAGS.config.max_digits}} -> greedy {example["greedy"]}, '
          f'sampled {example["sampled"]} (target {example["target"]})')


if __name__ == '__main__':
  define_flags()
  app.run(main)
