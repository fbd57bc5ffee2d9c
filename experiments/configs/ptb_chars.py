"""Character-level Penn Treebank, MSGD vs MSGD-C vs MSGD-CR to convergence (Table 1).

  python -m launch.sweep --config=experiments/configs/ptb_chars.py --workdir=results/ptb_chars

The sweep (``get_sweep``): the three methods x 3 seeds, 256 tanh units, one-hot characters,
truncated BPTT over 32 streams x 50 characters (an epoch: 3,135 SGD updates over the
5,017,482 training characters). The validation set is scored after every epoch and the
learning rate follows it as Mikolov's RNNLM toolkit does: from the first epoch that improves
validation by less than 0.3% the rate is halved every epoch, and the next such epoch ends the
run; at most ``EPOCHS`` epochs. MSGD-C and MSGD-CR start at rate 1.0 (the largest stable rate
found at this size) with clipping at 1 and the reference fallback; MSGD at its own rate, the
best of the one-epoch grid experiments/configs/ptb_chars_learning_rate.py; MSGD-CR adds Omega
at weight 2 decaying as 1/t with a one-epoch constant (the paper: natural problems need a
1/t schedule of the weight). Budget: about 1.5 CPU hours (MSGD-CR twice MSGD-C: Omega's state
gradients). The paper's test bits per character: 1.50 / 1.42 / 1.41; Mikolov's RNNLM toolkit
reaches 1.43 with 1,000 hidden units (its example 9-char-based-lm), four times this model's
width and 16 times its recurrent cost, beyond this machine's budget for 9 runs.
"""

import itertools

from experiments import ptb_chars

EPOCH = 3135  # updates: 5,017,482 characters / (32 streams x 50)
EPOCHS = 10
MSGD_RATE = 0.3  # ptb_chars_learning_rate.py's best validation bits per character after an epoch
# method -> (clipping, omega_weight, learning_rate)
METHODS = {'MSGD': ('none', 0.0, MSGD_RATE), 'MSGD-C': ('pascanu', 0.0, 1.0),
           'MSGD-CR': ('pascanu', 2.0, 1.0)}
SEEDS = 3
COMMON = dict(hidden_size=256, validate_every=EPOCH, log_every=500, checkpoint_every=EPOCH,
              omega_decay_steps=EPOCH)


def get_config():
  return ptb_chars.EXPERIMENT.config(**COMMON, steps=EPOCHS * EPOCH, plateau_decay=0.5,
                                     plateau_threshold=0.003)


def get_sweep():
  """Method x seed: 9 runs, each a dict of config overrides."""
  return [{'method': method, 'clipping': clipping, 'omega_weight': weight,
           'learning_rate': rate, 'seed': seed}
          for (method, (clipping, weight, rate)), seed in itertools.product(METHODS.items(),
                                                                            range(SEEDS))]
