"""Character language model on Tiny Shakespeare: an Elman network, truncated BPTT.

One run (about 2 minutes on 2 CPU cores, validation about 1.6 nats/char):

  python -m launch.run --config=experiments/configs/char_lm.py --workdir=results/char_lm

The sweep beside it (``get_sweep``: spectral radius x clipping x tau, 20
runs of a smaller network trained with plain SGD, so that clipping matters;
about a minute on 2 cores):

  python -m launch.sweep --config=experiments/configs/char_lm.py \
      --workdir=results/char_lm_sweep

Chance is ln 65 = 4.17 nats (6.02 bits) per character.
"""

import itertools

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.experiment = 'char_lm'  # the module experiments.char_lm
  config.seed = 0
  config.corpus = 'tinyshakespeare'
  config.data_dir = ''  # empty: $RNNJAX_DATA_DIR, else ./data
  config.validation_fraction = 0.1  # the last 10% of the text is held out

  config.embedding_size = 64  # 0: one-hot inputs
  config.hidden_size = 256
  config.activation = 'tanh'
  config.recurrent_init = 'gaussian'  # gaussian | orthogonal | identity | uniform
  config.spectral_radius = 1.0  # of W_hh at init (the gain for identity)
  config.dropout_rate = 0.0  # on the recurrence's inputs and outputs, never the recurrent path

  config.batch_size = 64  # parallel streams
  config.truncation = 64  # tau, BPTT window in steps
  config.steps = 3000  # training steps, one window each

  config.optimizer = 'adam'  # sgd | adagrad | adam | adamw
  config.learning_rate = 2e-3
  config.clipping = 'global_norm'  # none | global_norm | elementwise | pascanu
  config.clip_threshold = 1.0
  config.on_divergence = 'stop'  # stop | skip
  config.layout = 'auto'  # auto | data | runs: over several devices, split the batch or the runs

  config.log_every = 100
  config.checkpoint_every = 500  # steps between checkpoints (0: only at the end)
  config.sample_prompt = 'ROMEO:'
  config.sample_length = 300
  config.sample_temperature = 0.8
  return config


def get_sweep():
  """Spectral radius x clipping x tau: 20 runs, each a list of config overrides."""
  fixed = {'hidden_size': 128, 'embedding_size': 32, 'batch_size': 32, 'steps': 1500,
           'optimizer': 'sgd', 'learning_rate': 1.0, 'log_every': 100,
           'sample_length': 100}
  grid = itertools.product([0.5, 0.9, 1.0, 1.1, 1.5], ['none', 'global_norm'], [16, 64])
  return [dict(fixed, spectral_radius=rho, clipping=clipping, truncation=tau)
          for rho, clipping, tau in grid]
