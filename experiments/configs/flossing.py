"""Gradient flossing (Engelken 2023) against clipping and Omega, where plain training fails.

  python -m launch.sweep --config=experiments/configs/flossing.py --workdir=results/flossing \
      --max_group_size=1

Pascanu et al.'s temporal order problem at T = 50 from the basic tanh initialization
(W_hh ~ N(0, 0.1^2): spectral radius about 0.7, the gradient vanishes; MSGD-C alone stays at
chance there), 50 tanh units, SGD at lr 0.01, batch 20, the same budget for every method:
at most 50,000 updates, stopping at under 1% errors on 10,000 fresh sequences (checked
every 1,000 updates). The methods: MSGD, MSGD-C, MSGD-CR (Omega, weight 2) and, with
gradient flossing, MSGD-F and MSGD-CF: the largest Lyapunov exponent of the network's
trajectory on 100 fixed sequences pushed to 0 with weight 1 (``flossing_loss``, k = 1)
during the first 5,000 updates. 5 seeds each: 25 runs. Budget: about 20 CPU minutes.
"""

import itertools

from experiments import temporal_order

# label -> (method, clipping, omega_weight, flossing_weight)
METHODS = {'MSGD': ('MSGD', 'none', 0.0, 0.0), 'MSGD-C': ('MSGD-C', 'pascanu', 0.0, 0.0),
           'MSGD-CR': ('MSGD-CR', 'pascanu', 2.0, 0.0), 'MSGD-F': ('MSGD', 'none', 0.0, 1.0),
           'MSGD-CF': ('MSGD-C', 'pascanu', 0.0, 1.0)}


def get_config():
  return temporal_order.EXPERIMENT.config(
      length=50, init='basic_tanh', steps=50_000, solved_every=1000, log_every=1000,
      flossing_exponents=1, flossing_steps=5000, measure_lyapunov=True,
      checkpoint_every=5000)  # a stopped sweep resumes each run from here


def get_sweep():
  """Method x seed: 25 runs."""
  return [{'method': method, 'clipping': clipping, 'omega_weight': omega,
           'flossing_weight': flossing, 'seed': seed}
          for (method, clipping, omega, flossing), seed
          in itertools.product(METHODS.values(), range(5))]
