"""Character-level Penn Treebank, MSGD vs MSGD-C vs MSGD-CR at an equal budget (Table 1).

  python -m launch.sweep --config=experiments/configs/ptb_chars.py --workdir=results/ptb_chars

The sweep (``get_sweep``): the three methods, one run each (seed 0: the same
init and data order for all), the same number of SGD updates. Each run is a
few minutes on 2 CPU cores (MSGD-CR about twice MSGD: Omega's state
gradients); the paper trains to convergence, so these runs stop far before
its 1.50 / 1.42 / 1.41 test bits per character.
"""

from experiments import ptb_chars

# method -> (clipping, omega_weight)
METHODS = {'MSGD': ('none', 0.0), 'MSGD-C': ('pascanu', 0.0), 'MSGD-CR': ('pascanu', 2.0)}


def get_config():
  return ptb_chars.EXPERIMENT.config(steps=2000, learning_rate=1.0, checkpoint_every=500)


def get_sweep():
  """The three methods: 3 runs, each a dict of config overrides."""
  return [{'method': method, 'clipping': clipping, 'omega_weight': weight}
          for method, (clipping, weight) in METHODS.items()]
