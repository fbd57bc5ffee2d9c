"""Pascanu, Mikolov & Bengio (2013), section 4.1.1: one model for every length.

  python -m launch.sweep --config=experiments/configs/temporal_order_generalization.py \
      --workdir=results/temporal_order_generalization

One MSGD-CR network of 50 tanh units (basic init, as the paper's generalization run),
trained on batches whose length is drawn in [50, 200) (RNN.py line 321), until under 1% of
10,000 fresh sequences of those lengths are misclassified (checked every 1,000 updates) or
500,000 updates; then tested on 10,000 fresh sequences at each of T = 50, 100, 200, 500,
1,000, 2,000 and 5,000 (the paper: 0 errors at each up to 5,000). Budget: one seed, about
45 CPU minutes (5 ms an update: every batch padded to 199 steps, Omega's state gradients).
"""

from experiments import temporal_order


def get_config():
  return temporal_order.EXPERIMENT.config(
      mode='range', init='basic_tanh', method='MSGD-CR', clipping='pascanu', omega_weight=2.0,
      steps=500_000, solved_every=1000, log_every=2000, checkpoint_every=10_000,
      test_lengths=(50, 100, 200, 500, 1000, 2000, 5000))


def get_sweep():
  """One run: seed 0."""
  return [{'seed': 0}]
