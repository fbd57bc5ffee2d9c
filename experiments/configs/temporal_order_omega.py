"""Pascanu et al.'s temporal order problem with Omega at the paper's weight (4) and the code's (2).

  python -m launch.sweep --config=experiments/configs/temporal_order_omega.py \
      --workdir=results/temporal_order_omega --max_group_size=1

MSGD-CR as experiments/configs/temporal_order.py trains it (50 tanh units, SGD at 0.01,
batch 20, clipping at 1 with the reference fallback, to under 1% errors on 10,000 fresh
sequences, checked every 1,000 updates, at most 200,000 updates), with Omega's weight at 2
(RNN.py line 467) and at 4 (the paper, section 4.1), at T in {50, 100}, both tanh
initializations, 5 seeds: 40 runs. The weight-2 runs repeat the ones of temporal_order.py
(same configs, so the same numbers), so that Fisher's exact test compares the two weights
within one table. Budget: about 4 CPU hours.
"""

import itertools

from experiments.configs import temporal_order as study

WEIGHTS = (2.0, 4.0)


def get_config():
  return study.get_config()


def get_sweep():
  """T x Omega's weight x init x seed: 40 runs."""
  return [{'length': length, 'method': 'MSGD-CR', 'clipping': 'pascanu', 'omega_weight': weight,
           'init': init, 'seed': seed}
          for length, weight, init, seed
          in itertools.product(study.LENGTHS, WEIGHTS, study.INITS, range(study.SEEDS))]
