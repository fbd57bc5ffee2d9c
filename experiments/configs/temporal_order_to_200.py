"""Pascanu, Mikolov & Bengio (2013), Figure 7 at its longest lengths: the temporal order
problem at fixed T = 150 and T = 200, trained to success.

  python -m launch.sweep --config=experiments/configs/temporal_order_to_200.py \
      --workdir=results/temporal_order_to_200 --max_group_size=1

The protocol of experiments/configs/temporal_order.py (50 tanh units, SGD at lr 0.01 without
momentum, batch 20, every batch at the run's T, the error on 10,000 test sequences checked
every 1,000 updates, success below 1% errors, each run alone so that it stops when it
succeeds) at T in {150, 200} x MSGD-C and MSGD-CR (MSGD, which solved none of its 20 runs at
T = 50 and 100, is left out) x the basic and smart tanh initializations x 5 seeds: 40 runs of
at most ``STEPS`` updates. Budget: up to 40 x 200,000 updates at 1 to 5 ms an update on one
core (T = 200; Omega about doubles it): 10 to 20 CPU hours if no run succeeds early.

The criterion, stated before any of these runs (docs/studies/pascanu.md): at each T, MSGD-CR
solves at least ``CRITERION_SOLVED`` of its 10 runs (both initializations), and more runs than
MSGD-C, with the exact stratified test over the two initializations (two-sided, as the page's
tests at T = 50 and 100; ``experiments.temporal_order.exact_stratified``) below
``CRITERION_P``. Either part failing at a T is reported as the result at that T.
"""

from experiments.configs import temporal_order

LENGTHS = (150, 200)
MEASURED = ('MSGD-C', 'MSGD-CR')
CRITERION_SOLVED = 8  # of the 10 MSGD-CR runs at a T
CRITERION_P = 0.05  # two-sided, MSGD-CR against MSGD-C over the inits as strata

get_config = temporal_order.get_config  # 200,000 updates at most, the paper's budget 5e6


def get_sweep():
  """T x method x init x seed: 40 runs, each a dict of config overrides."""
  return temporal_order.runs(LENGTHS, MEASURED)
