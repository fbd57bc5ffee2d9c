"""Pascanu, Mikolov & Bengio (2013), Figure 7: the temporal order problem, trained to success.

  python -m launch.sweep --config=experiments/configs/temporal_order.py \
      --workdir=results/temporal_order --max_group_size=1

The sweep (``get_sweep``): T in {50, 100} x the three methods (MSGD: SGD alone;
MSGD-C: clipping at 1 with the reference fallback; MSGD-CR: the same plus Omega,
weight 2 as RNN.py line 467) x the two tanh initializations (basic: N(0, 0.1^2);
smart: sparse W_hh at spectral radius 0.95) x 5 seeds: 60 runs. Each run: 50 tanh
units, SGD at lr 0.01 without momentum, batch 20, every batch at the run's T, at
most ``STEPS`` updates; every 1,000 updates its error on the 10,000 test sequences
is checked (a screen of 1,000 first) and a run under 1% (the paper's success)
stops there, as the reference code stops. ``--max_group_size=1`` trains each run
alone, so that a run stops when it succeeds (in a vmapped group the stopped runs'
lanes go on computing until the last run stops). ``results_over_seeds.md`` gives,
per (T, method, init), the fraction of the 5 runs solved within 10k ... 200k
updates and the median updates to success. Budget: 2.5 to 5.5 CPU hours for the
60 runs (0.5 ms an update at T = 50 without Omega, 1.3 ms with it, twice that at T
= 100, on one core of this 2-core machine; more with other jobs beside it).

The generalization test of the paper (one basic-tanh MSGD-CR model trained on
lengths drawn from [50, 200), tested on longer sequences) is the 'range' mode:
experiments/configs/temporal_order_generalization.py.

Chance: 75% errors (4 classes), ln 4 = 1.386 nats.
"""

import itertools

from experiments import temporal_order

# method -> (clipping, omega_weight); clip_threshold 1.0 as RNN.py line 495
METHODS = {'MSGD': ('none', 0.0), 'MSGD-C': ('pascanu', 0.0), 'MSGD-CR': ('pascanu', 2.0)}
LENGTHS = (50, 100)
INITS = ('basic_tanh', 'smart_tanh')
SEEDS = 5
STEPS = 200_000  # most updates a run of the sweep takes (the paper's budget is 5e6)
CHECKPOINT_EVERY = 5_000  # updates: a stopped sweep resumes each run from its last one


def get_config():
  return temporal_order.EXPERIMENT.config(steps=STEPS, solved_every=1000, log_every=1000,
                                          checkpoint_every=CHECKPOINT_EVERY)


def runs(lengths, methods) -> list[dict]:
  """lengths x methods (names of ``METHODS``) x ``INITS`` x ``SEEDS`` seeds, each a dict of
  config overrides."""
  return [{'length': length, 'method': method, 'clipping': METHODS[method][0],
           'omega_weight': METHODS[method][1], 'init': init, 'seed': seed}
          for length, method, init, seed
          in itertools.product(lengths, methods, INITS, range(SEEDS))]


def get_sweep():
  """T x method x init x seed: 60 runs."""
  return runs(LENGTHS, METHODS)
