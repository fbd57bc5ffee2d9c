"""Trains a character-level Elman language model with truncated BPTT.

  python -m experiments.char_lm --config=experiments/configs/char_lm.py \
      --workdir=results/char_lm [--config.spectral_radius=1.5 ...]

Writes to the workdir: config.json, metrics.jsonl (one line per logged
step), summary.json (written last, atomically: its presence means the run
ended; its "status" says finished or diverged) and an orbax checkpoint.
Prints the validation loss and a greedy and a temperature sample.
"""

import copy
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
  flags.DEFINE_string(
      'group', None, 'Instead of --workdir: a JSON file listing runs {"workdir", "overrides"} '
      'that differ only in VMAPPABLE_KEYS; they train together in one vmapped program.')
  flags.mark_flags_as_required(['config'])
  flags.mark_flags_as_mutual_exclusive(['workdir', 'group'], required=True)


def write_json_atomically(path: pathlib.Path, record: dict) -> None:
  """Writes ``record`` to ``path`` through a temporary file and a rename."""
  partial = path.with_name(path.name + '.part')
  partial.write_text(json.dumps(record, indent=2, allow_nan=True) + '\n')
  os.replace(partial, path)


# Config fields that change no shape and no program: runs that differ only in
# these train together in one vmapped program (launch.sweep groups them).
VMAPPABLE_KEYS = ('spectral_radius', 'recurrent_init', 'seed', 'learning_rate', 'clip_threshold',
                  'clipping')


def group_key(config) -> tuple:
  """Runs with equal keys can share one vmapped program: every field but the
  vmappable ones, with clipping reduced to its family (none is global norm
  at an infinite threshold)."""
  fields = config.to_dict()
  family = 'elementwise' if fields['clipping'] == 'elementwise' else 'global_norm'
  return tuple(sorted((k, repr(v)) for k, v in fields.items() if k not in VMAPPABLE_KEYS)) + (
      ('clipping_family', family),)


def check_config(config) -> None:
  """Checks the fields that would otherwise fail only deep inside JAX or after training.

  Raises:
    ValueError: naming the field, with the expected and the given value.
  """
  for name in ('hidden_size', 'batch_size', 'truncation', 'steps', 'log_every'):
    value = config[name]
    if not isinstance(value, int) or value < 1:
      raise ValueError(f'config.{name}: expected an int >= 1, got {value!r}')
  for name in ('embedding_size', 'sample_length'):
    value = config[name]
    if not isinstance(value, int) or value < 0:
      raise ValueError(f'config.{name}: expected an int >= 0, got {value!r}')
  if not config.sample_temperature >= 0:
    raise ValueError(f'config.sample_temperature: expected a value >= 0 (0: greedy), got '
                     f'{config.sample_temperature!r}')
  if not config.sample_prompt:
    raise ValueError('config.sample_prompt: expected at least one character, got an empty prompt')


def run(config, workdir: pathlib.Path) -> dict:
  """Trains, evaluates and samples one run; returns the summary it writes."""
  return run_group([config], [workdir])[0]


def run_group(configs, workdirs) -> list[dict]:
  """Trains runs that share a ``group_key`` together, then evaluates and samples each.

  Each run gets its own folder with config.json, metrics.jsonl, checkpoint/
  and summary.json (written last, atomically).

  Raises:
    ValueError: if the configs do not share one group key.
  """
  started = time.perf_counter()
  if any(group_key(c) != group_key(configs[0]) for c in configs):
    raise ValueError('configs: expected runs that differ only in '
                     f'{VMAPPABLE_KEYS} (and clipping none / global_norm)')
  for config in configs:
    check_config(config)
  for config, workdir in zip(configs, workdirs):
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / 'summary.json').unlink(missing_ok=True)
    (workdir / 'config.json').write_text(config.to_json_best_effort(indent=2) + '\n')
  first = configs[0]
  corpus = corpora.read_text(first.corpus, first.data_dir or None)
  vocabulary = text.char_vocabulary(corpus)
  train_ids, validation_ids = text.split_train_validation(
      text.encode(corpus, vocabulary), first.validation_fraction)
  train_inputs, train_targets = text.stream_windows(train_ids, first.batch_size, first.truncation)
  validation_inputs, validation_targets = text.stream_windows(
      validation_ids, first.batch_size, first.truncation)

  def model_for(config):
    return models.LanguageModel(
        vocab_size=len(vocabulary), hidden_size=config.hidden_size,
        embedding_size=config.embedding_size, activation=config.activation,
        recurrent_init=config.recurrent_init, radius=config.spectral_radius)

  try:  # fail before training, not after
    prompts = [text.encode(c.sample_prompt, vocabulary) for c in configs]
  except ValueError as error:
    raise ValueError(f'config.sample_prompt: {error}') from None
  model = model_for(first)  # its apply serves every run of the group
  params, optimizers_, sample_keys = [], [], []
  for config in configs:
    init_key, sample_key = jax.random.split(jax.random.key(config.seed))
    params.append(model_for(config).init(init_key, train_inputs[0],
                                         model.initial_state(config.batch_size))['params'])
    optimizers_.append(optimizers.make_optimizer(config.optimizer, config.learning_rate,
                                                 config.clipping, config.clip_threshold,
                                                 config.on_divergence))
    sample_keys.append(sample_key)
  settings = language_model.LoopSettings(
      steps=first.steps, clipping=first.clipping, on_divergence=first.on_divergence,
      log_every=first.log_every, checkpoint_every=first.checkpoint_every)
  logging.info('%d run(s); %d train windows of [B=%d, tau=%d], vocabulary %d', len(configs),
               train_inputs.shape[0], first.batch_size, first.truncation, len(vocabulary))
  params, records = language_model.train_group(model, params, optimizers_, train_inputs,
                                               train_targets, settings, workdirs)

  summaries = []
  for config, workdir, run_params, record, sample_key, prompt in zip(
      configs, workdirs, params, records, sample_keys, prompts):
    summary = dict(record, status='diverged' if record['diverged'] else 'finished',
                   vocab_size=len(vocabulary), chance_loss=math.log(len(vocabulary)),
                   group_size=len(configs))
    summary['final_train_bits_per_char'] = record['final_train_loss'] / math.log(2)
    if not record['diverged']:
      validation_loss = language_model.evaluate(model, run_params, validation_inputs,
                                                validation_targets)
      summary['validation_loss'] = validation_loss
      summary['validation_bits_per_char'] = validation_loss / math.log(2)
      for name, temperature in (('greedy', 0.0), ('temperature', config.sample_temperature)):
        ids = sampling.sample(model, run_params, prompt, config.sample_length, sample_key,
                              temperature)
        summary[f'sample_{name}'] = config.sample_prompt + text.decode(np.asarray(ids),
                                                                       vocabulary)
    summary['elapsed_seconds'] = time.perf_counter() - started
    write_json_atomically(workdir / 'summary.json', summary)
    summaries.append(summary)
  return summaries


def read_group(path: pathlib.Path, config):
  """The (configs, workdirs) of a group file: a JSON list of
  ``{"workdir": ..., "overrides": {field: value}}`` applied to ``config``."""
  entries = json.loads(path.read_text())
  configs, workdirs = [], []
  for entry in entries:
    run_config = copy.deepcopy(config)
    with run_config.unlocked():
      run_config.update_from_flattened_dict(entry['overrides'])
    configs.append(run_config)
    workdirs.append(pathlib.Path(entry['workdir']))
  return configs, workdirs


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.get_absl_handler().addFilter(lambda record: 'orbax' not in record.pathname)
  if FLAGS.group:
    summaries = run_group(*read_group(pathlib.Path(FLAGS.group), FLAGS.config))
    for summary in summaries:
      print(f'{summary["status"]}: validation '
            f'{summary.get("validation_bits_per_char", math.nan):.3f} bits/char')
    return
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
