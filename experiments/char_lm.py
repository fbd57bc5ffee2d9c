"""Trains a character-level Elman language model with truncated BPTT.

  python -m experiments.char_lm --config=experiments/configs/char_lm.py \
      --workdir=results/char_lm [--config.spectral_radius=1.5 ...]

Writes to the workdir: config.json, metrics.jsonl (one line per logged
step), summary.json (written last, atomically: its presence means the run
ended; its "status" says finished or diverged) and an orbax checkpoint.
Prints the validation loss and a greedy and a temperature sample.
"""

import json
import math
import os
import pathlib
import time

from absl import app
from absl import flags
from absl import logging
import jax
import numpy as np
from ml_collections import config_flags

from rnnjax import models
from rnnjax import sampling
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import language_model
from rnnjax.train import optimizers

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (only when run as a program, so the module imports cleanly)."""
  config_flags.DEFINE_config_file(
      'config', None, 'Path to a config file with get_config(), e.g. '
      'experiments/configs/char_lm.py; override fields with --config.NAME=VALUE.')
  flags.DEFINE_string(
      'workdir', None, 'Folder for this run: config.json, metrics.jsonl, summary.json, checkpoint/.')
  flags.mark_flags_as_required(['config', 'workdir'])


def write_json_atomically(path: pathlib.Path, record: dict) -> None:
  """Writes ``record`` to ``path`` through a temporary file and a rename."""
  partial = path.with_name(path.name + '.part')
  partial.write_text(json.dumps(record, indent=2, allow_nan=True) + '\n')
  os.replace(partial, path)


def run(config, workdir: pathlib.Path) -> dict:
  """Trains, evaluates and samples; returns the summary it writes."""
  started = time.perf_counter()
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / 'summary.json').unlink(missing_ok=True)
  (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2) + '\n')

  corpus = corpora.read_text(config.corpus, config.data_dir or None)
  vocabulary = text.char_vocabulary(corpus)
  train_ids, validation_ids = text.split_train_validation(
      text.encode(corpus, vocabulary), config.validation_fraction)
  train_inputs, train_targets = text.stream_windows(train_ids, config.batch_size,
                                                    config.truncation)
  validation_inputs, validation_targets = text.stream_windows(
      validation_ids, config.batch_size, config.truncation)

  model = models.CharLanguageModel(
      vocab_size=len(vocabulary), hidden_size=config.hidden_size,
      embedding_size=config.embedding_size, activation=config.activation,
      recurrent_init=config.recurrent_init, radius=config.spectral_radius)
  init_key, sample_key = jax.random.split(jax.random.key(config.seed))
  params = model.init(init_key, train_inputs[0], model.initial_state(config.batch_size))['params']
  optimizer = optimizers.make_optimizer(config.optimizer, config.learning_rate, config.clipping,
                                        config.clip_threshold, config.on_divergence)
  settings = language_model.LoopSettings(
      steps=config.steps, clipping=config.clipping, clip_threshold=config.clip_threshold,
      on_divergence=config.on_divergence, log_every=config.log_every,
      checkpoint_every=config.checkpoint_every)
  logging.info('%d train windows of [B=%d, tau=%d], vocabulary %d', train_inputs.shape[0],
               config.batch_size, config.truncation, len(vocabulary))
  params, record = language_model.train(model, params, optimizer, train_inputs, train_targets,
                                         settings, workdir)

  summary = dict(record, status='diverged' if record['diverged'] else 'finished',
                 vocab_size=len(vocabulary), chance_loss=math.log(len(vocabulary)))
  summary['final_train_bits_per_char'] = record['final_train_loss'] / math.log(2)
  if not record['diverged']:
    validation_loss = language_model.evaluate(model, params, validation_inputs,
                                              validation_targets)
    summary['validation_loss'] = validation_loss
    summary['validation_bits_per_char'] = validation_loss / math.log(2)
    prompt = text.encode(config.sample_prompt, vocabulary)
    for name, temperature in (('greedy', 0.0), ('temperature', config.sample_temperature)):
      ids = sampling.sample(model, params, prompt, config.sample_length, sample_key, temperature)
      summary[f'sample_{name}'] = config.sample_prompt + text.decode(np.asarray(ids), vocabulary)
  summary['elapsed_seconds'] = time.perf_counter() - started
  write_json_atomically(workdir / 'summary.json', summary)
  return summary


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.get_absl_handler().addFilter(lambda record: 'orbax' not in record.pathname)
  summary = run(FLAGS.config, pathlib.Path(FLAGS.workdir))
  if summary['status'] == 'diverged':
    print(f'diverged at step {summary["diverged_step"]} (non-finite loss); see '
          f'{FLAGS.workdir}/metrics.jsonl')
    return
  print(f'validation loss {summary["validation_loss"]:.4f} nats/char '
        f'({summary["validation_bits_per_char"]:.3f} bits/char; chance '
        f'{summary["chance_loss"]:.3f} nats) after {summary["steps_done"]} steps, '
        f'{summary["elapsed_seconds"]:.0f} s')
  print(f'--- greedy sample ---\n{summary["sample_greedy"]}')
  print(f'--- sample at temperature {FLAGS.config.sample_temperature} ---\n'
        f'{summary["sample_temperature"]}')


if __name__ == '__main__':
  define_flags()
  app.run(main)
