"""Pascanu, Mikolov & Bengio (2013), section 4.1.1: one model for every length, to T = 5,000.

  python -m launch.sweep --config=experiments/configs/temporal_order_generalization.py \
      --workdir=results/temporal_order_generalization

A network of 50 tanh units (basic init, as the paper's generalization run) trained on batches
of 20 whose length is drawn in [50, 200) (RNN.py line 321), SGD at 0.01 with clipping at 1 and
the reference fallback, until under 1% of the run's test set of those lengths (10,000
sequences drawn once) are misclassified (checked every 1,000 updates) or ``STEPS`` updates;
then tested on 10,000 sequences at each of T = 50, 200, 500, 1,000, 2,000 and 5,000 (the
paper: 5 of 5 seeds solve 50-200, and the trained model makes 0 errors at each length up to
5,000). Two arms of 5 seeds (vmapped in groups by the harness): MSGD-CR (Omega at the
paper's weight, 4) and MSGD-CF (gradient flossing of the largest Lyapunov exponent, weight 1,
in Omega's place, during the first 5,000 updates). Budget: STEPS updates a run (the paper
allows 5 million).
"""

import itertools

from experiments import temporal_order

STEPS = 100_000
SEEDS = 5
# arm -> (method, omega_weight, flossing_weight)
ARMS = {'MSGD-CR': ('MSGD-CR', 4.0, 0.0), 'MSGD-CF': ('MSGD-C', 0.0, 1.0)}
TEST_LENGTHS = (50, 200, 500, 1000, 2000, 5000)


def get_config():
  return temporal_order.EXPERIMENT.config(
      mode='range', init='basic_tanh', clipping='pascanu', steps=STEPS, solved_every=1000,
      log_every=2000, checkpoint_every=10_000, test_lengths=TEST_LENGTHS, flossing_exponents=1,
      flossing_steps=5000, measure_lyapunov=True)


def get_sweep():
  """Arm x seed: 10 runs."""
  return [{'method': method, 'omega_weight': omega, 'flossing_weight': flossing, 'seed': seed}
          for (method, omega, flossing), seed in itertools.product(ARMS.values(), range(SEEDS))]
