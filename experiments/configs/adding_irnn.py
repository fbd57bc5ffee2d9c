"""Le, Jaitly & Hinton (2015): the adding problem at T = 150 to 400, IRNN against tanh RNNs.

  python -m launch.sweep --config=experiments/configs/adding_irnn.py \
      --workdir=results/adding_irnn --max_group_size=1

The sweep: T in {150, 200, 300, 400} x three initializations of the long-range sweep
(identity W_hh with relu: the IRNN; orthogonal W_hh with tanh; Gaussian W_hh at spectral
radius 1.0 with tanh) x 3 seeds: 36 runs of 100 units, batch 16, Adam at 1e-3 with
global-norm clipping at 1, W_xh ~ N(0, 0.01^2) (the IRNN's small input weights: at the
default 1/sqrt(2) the IRNN sums its inputs over T steps and starts at a loss of 29 at T =
150), at most 6,000 updates each, stopping once the test MSE on 1,000 fresh sequences is
under 0.01 (checked every 500 updates; the baseline that always predicts 1 has 0.167).
Le et al. train for up to about 10^6 updates with SGD; this budget is far smaller: about 90
CPU minutes (10 ms an update at T = 150, 50 ms at T = 400), so a run that has not succeeded
by 6,000 updates says what this budget reaches, not that it cannot learn.
"""

import itertools

from experiments import long_range

# (recurrent_init, spectral radius or gain, activation)
INITS = (('identity', 1.0, 'relu'), ('orthogonal', 1.0, 'tanh'), ('gaussian', 1.0, 'tanh'))


def get_config():
  return long_range.EXPERIMENT.config(
      task='adding', hidden_size=100, batch_size=16, steps=6000, optimizer='adam',
      learning_rate=1e-3, clipping='global_norm', clip_threshold=1.0, input_scale=0.01,
      solved_every=500, log_every=500, checkpoint_every=2000)


def get_sweep():
  """T x init x seed: 36 runs."""
  return [{'length': length, 'recurrent_init': init, 'spectral_radius': radius,
           'activation': activation, 'seed': seed}
          for length, (init, radius, activation), seed
          in itertools.product((150, 200, 300, 400), INITS, range(3))]
