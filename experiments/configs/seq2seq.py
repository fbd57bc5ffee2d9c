"""Sequence to sequence on digit reversal: a GRU (default) or Elman encoder-decoder.

  python -m launch.run --config=experiments/configs/seq2seq.py \
      --workdir=results/seq2seq_gru
  python -m launch.run --config=experiments/configs/seq2seq.py \
      --workdir=results/seq2seq_elman --config.cell=elman

or both (``get_sweep``), their table in results/seq2seq/results.md:

  python -m launch.sweep --config=experiments/configs/seq2seq.py --workdir=results/seq2seq

Sources are 1 to 8 digits; the target is the digits reversed, then <eos>.
Exact match by chance is 10^-L for L digits.
"""

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.experiment = 'seq2seq'  # the module experiments.seq2seq
  config.seed = 0  # params, training data and batch order; the test set uses another key
  config.cell = 'gru'  # gru | elman, encoder and decoder both
  config.min_digits = 1
  config.max_digits = 8
  config.train_size = 100_000  # a fixed training set, shuffled per epoch
  config.test_size = 2000
  # Decoding stops at <eos> or after this many tokens (the longest target is max_digits + 1).
  config.max_decode_length = config.get_ref('max_digits') + 1

  config.embedding_size = 32
  config.hidden_size = 128

  config.batch_size = 128
  config.steps = 3000
  config.optimizer = 'adam'  # sgd | adagrad | adam | adamw
  config.learning_rate = 3e-3
  config.clipping = 'global_norm'  # none | global_norm | elementwise | pascanu
  config.clip_threshold = 1.0
  config.on_divergence = 'stop'  # stop | skip
  config.layout = 'auto'  # auto | data | runs: over several devices, split the batch or the runs
  config.log_every = 250
  config.checkpoint_every = 1000  # steps between checkpoints (0: only at the end)

  config.sample_temperature = 1.0  # sampled decoding is reported beside greedy
  return config


def get_sweep():
  """The two cells: GRU and Elman encoder-decoders."""
  return [{'cell': 'gru'}, {'cell': 'elman'}]
