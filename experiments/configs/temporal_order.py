"""Pascanu, Mikolov & Bengio (2013), Figure 7: the temporal order problem against its length.

  python -m launch.sweep --config=experiments/configs/temporal_order.py \
      --workdir=results/temporal_order

The sweep (``get_sweep``): T in {50, 100, 150, 200} x the three methods
(MSGD: SGD alone; MSGD-C: clipping at 1 with the reference fallback;
MSGD-CR: the same plus Omega, weight 2 as RNN.py line 467) x the two tanh
initializations (basic: N(0, 0.1^2); smart: sparse W_hh at spectral radius
0.95) x 5 seeds: 120 runs, one vmapped program (10 runs) per (T, method).
Each run: 50 tanh units, SGD at lr 0.01 without momentum, batch 20, every
batch at the run's T (Figure 7: success rate against T), ``steps`` updates;
success = under 1% errors on 10,000 fresh sequences. The paper trains for
up to 5e6 updates, stopping at a validation error under 0.01%; the step
budget here (``STEPS``) is what fits about 20 minutes of 2 CPU cores for the
whole sweep, so success at larger T is cut short by the budget, not by the
method alone.

The generalization test of the paper (one MSGD-CR model trained on lengths
drawn from [50, 200), tested on longer sequences) is the 'range' mode:

  python -m launch.run --config=experiments/configs/temporal_order.py \
      --workdir=results/temporal_order_range --config.mode=range \
      --config.steps=4000 --config.test_lengths='(50, 200, 500, 1000)'

Chance: 75% errors (4 classes), ln 4 = 1.386 nats.
"""

import itertools

from experiments import temporal_order

# method -> (clipping, omega_weight); clip_threshold 1.0 as RNN.py line 495
METHODS = {'MSGD': ('none', 0.0), 'MSGD-C': ('pascanu', 0.0), 'MSGD-CR': ('pascanu', 2.0)}
LENGTHS = (50, 100, 150, 200)
INITS = ('basic_tanh', 'smart_tanh')
SEEDS = 5
STEPS = 1000  # per run of the sweep: the CPU budget (see the module docstring)


def get_config():
  return temporal_order.EXPERIMENT.config(steps=STEPS)


def get_sweep():
  """T x method x init x seed: 120 runs, each a dict of config overrides."""
  return [{'length': length, 'method': method, 'clipping': METHODS[method][0],
           'omega_weight': METHODS[method][1], 'init': init, 'seed': seed}
          for length, method, init, seed
          in itertools.product(LENGTHS, METHODS, INITS, range(SEEDS))]
