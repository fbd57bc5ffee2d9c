"""Character-level Penn Treebank, MSGD vs MSGD-C vs MSGD-CR at an equal budget (Table 1).

  python -m launch.sweep --config=experiments/configs/ptb_chars.py --workdir=results/ptb_chars

The sweep (``get_sweep``): the three methods, one run each (seed 0: the same
init and data order for all), the same number of SGD updates. Each run is a
few minutes on 2 CPU cores (MSGD-CR about twice MSGD: Omega's state
gradients); the paper trains to convergence, so these runs stop far before
its 1.50 / 1.42 / 1.41 test bits per character (see the report of issue 15).
"""

import ml_collections

# method -> (clipping, omega_weight)
METHODS = {'MSGD': ('none', 0.0), 'MSGD-C': ('pascanu', 0.0), 'MSGD-CR': ('pascanu', 2.0)}


def get_config():
  config = ml_collections.ConfigDict()
  config.experiment = 'ptb_chars'  # the module experiments.ptb_chars
  config.seed = 0
  config.data_dir = ''  # empty: $RNNJAX_DATA_DIR, else ./data
  config.max_eval_chars = 0  # score only the first N characters of valid and test (0: all)

  config.hidden_size = 256
  config.recurrent_init = 'gaussian'  # gaussian | orthogonal | identity | uniform
  config.spectral_radius = 0.95  # of W_hh at init
  config.method = 'MSGD-CR'  # label: MSGD | MSGD-C | MSGD-CR (checked against the two below)
  config.omega_weight = 2.0  # alpha of Omega (RNN.py line 467); 0: none

  config.batch_size = 32  # parallel streams
  config.truncation = 50  # tau, BPTT window in characters
  config.steps = 2000  # SGD updates, one window each

  config.optimizer = 'sgd'
  config.learning_rate = 1.0
  config.clipping = 'pascanu'  # none | pascanu (global norm with the reference fallback)
  config.clip_threshold = 1.0
  config.on_divergence = 'stop'  # stop | skip
  config.layout = 'auto'  # auto | data | runs: over several devices, split the batch or the runs
  config.log_every = 100
  config.checkpoint_every = 500  # steps between checkpoints (0: only at the end)
  return config


def get_sweep():
  """The three methods: 3 runs, each a dict of config overrides."""
  return [{'method': method, 'clipping': clipping, 'omega_weight': weight}
          for method, (clipping, weight) in METHODS.items()]
