"""Sequence to sequence on digit reversal: a GRU (default) or Elman encoder-decoder.

  python -m launch.run --config=experiments/configs/seq2seq.py \
      --workdir=results/seq2seq_gru
  python -m launch.run --config=experiments/configs/seq2seq.py \
      --workdir=results/seq2seq_elman --config.cell=elman

or both over 3 seeds (``get_sweep``: 6 runs), their tables in results/seq2seq/results.md and
results_over_seeds.md:

  python -m launch.sweep --config=experiments/configs/seq2seq.py --workdir=results/seq2seq

Sources are 1 to 8 digits; the target is the digits reversed, then <eos>.
Exact match by chance is 10^-L for L digits.
"""

from experiments import seq2seq


def get_config():
  config = seq2seq.EXPERIMENT.config(steps=3000, optimizer='adam', learning_rate=3e-3,
                                     clipping='global_norm', log_every=250,
                                     checkpoint_every=1000)
  # Decoding stops at <eos> or after max_digits + 1 tokens (the longest target), whatever
  # max_digits the command line sets.
  config.max_decode_length = config.get_ref('max_digits') + 1
  return config


def get_sweep():
  """The two cells (GRU and Elman encoder-decoders) x 3 seeds: 6 runs."""
  return [{'cell': cell, 'seed': seed} for cell in ('gru', 'elman') for seed in range(3)]
