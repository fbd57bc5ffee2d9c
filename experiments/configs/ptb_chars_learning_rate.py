"""MSGD's own learning rate on character-level Penn Treebank: a one-epoch grid.

  python -m launch.sweep --config=experiments/configs/ptb_chars_learning_rate.py \
      --workdir=results/ptb_chars_learning_rate

MSGD (SGD without clipping or Omega) at 256 tanh units, as experiments/configs/ptb_chars.py
trains it, for one epoch (3,135 updates of 32 streams x 50 characters) at each learning rate of
``RATES``: 5 runs of one vmapped program. The rate of MSGD's runs in ptb_chars.py is the one
with the lowest validation bits per character here (the rule, fixed before the grid ran).
Budget: about 5 CPU minutes.
"""

from experiments import ptb_chars
from experiments.configs import ptb_chars as study

RATES = (0.01, 0.03, 0.1, 0.3, 1.0)


def get_config():
  return ptb_chars.EXPERIMENT.config(
      **study.COMMON, steps=study.EPOCH, method='MSGD', clipping='none', omega_weight=0.0)


def get_sweep():
  """One run a learning rate."""
  return [{'learning_rate': rate} for rate in RATES]
