"""Character language model on Tiny Shakespeare: an Elman network, truncated BPTT.

One run (about 2 minutes on 2 CPU cores, validation about 1.6 nats/char):

  python -m launch.run --config=experiments/configs/char_lm.py --workdir=results/char_lm

The sweep beside it (``get_sweep``: spectral radius x clipping x tau, 20
runs of a smaller network trained with plain SGD, so that clipping matters;
about a minute on 2 cores), the main job:

  python -m launch.sweep --config=experiments/configs/char_lm.py \
      --workdir=results/char_lm_sweep

Chance is ln 65 = 4.17 nats (6.02 bits) per character.
"""

import itertools

from experiments import char_lm


def get_config():
  return char_lm.EXPERIMENT.config(steps=3000, optimizer='adam', learning_rate=2e-3,
                                   clipping='global_norm', checkpoint_every=500)


def get_sweep():
  """Spectral radius x clipping x tau: 20 runs, each a dict of config overrides."""
  fixed = {'hidden_size': 128, 'embedding_size': 32, 'batch_size': 32, 'steps': 1500,
           'optimizer': 'sgd', 'learning_rate': 1.0, 'log_every': 100,
           'sample_length': 100}
  grid = itertools.product([0.5, 0.9, 1.0, 1.1, 1.5], ['none', 'global_norm'], [16, 64])
  return [dict(fixed, spectral_radius=rho, clipping=clipping, truncation=tau)
          for rho, clipping, tau in grid]
