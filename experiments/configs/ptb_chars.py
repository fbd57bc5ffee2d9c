"""Character-level Penn Treebank, MSGD vs MSGD-C vs MSGD-CR for 10 epochs (Table 1).

  python -m launch.sweep --config=experiments/configs/ptb_chars.py --workdir=results/ptb_chars

The sweep (``get_sweep``): the three methods, one run each (seed 0: the same init and
data order for all), 10 epochs of the 5,017,482 training characters (31,350 SGD updates
of 32 streams x 50 characters), 512 tanh units. The paper's main text gives neither the
hidden size nor the schedule (they are in its supplementary material); here SGD at lr 1.0
(the largest stable rate found at 256 units; 3 and more blow up), halved every epoch from
the sixth, clipping at 1 with the reference fallback (MSGD-C, MSGD-CR), and Omega's weight
2 decaying as 1/t with a one-epoch constant (the paper: natural problems need a 1/t
schedule of the weight). Budget: about 70 CPU minutes for the three runs (MSGD-CR three
times MSGD: Omega's state gradients). The paper's test bits per character: 1.50 / 1.42 /
1.41.
"""

from experiments import ptb_chars

# method -> (clipping, omega_weight)
METHODS = {'MSGD': ('none', 0.0), 'MSGD-C': ('pascanu', 0.0), 'MSGD-CR': ('pascanu', 2.0)}


EPOCH = 3135  # updates: 5,017,482 characters / (32 streams x 50)


def get_config():
  return ptb_chars.EXPERIMENT.config(
      steps=10 * EPOCH, hidden_size=512, learning_rate=1.0, learning_rate_decay=0.5,
      decay_every=EPOCH, decay_begin=5 * EPOCH, omega_decay_steps=EPOCH, log_every=500,
      checkpoint_every=EPOCH)


def get_sweep():
  """The three methods: 3 runs, each a dict of config overrides."""
  return [{'method': method, 'clipping': clipping, 'omega_weight': weight}
          for method, (clipping, weight) in METHODS.items()]
