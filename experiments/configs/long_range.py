"""The classic long-range tasks: where does an Elman network stop learning as T grows?

  python -m experiments.long_range --config=experiments/configs/long_range.py \
      --workdir=results/long_range

The default sweeps the adding problem over T in {10, 25, 50, 100}, six
initializations (Gaussian W_hh at spectral radius 0.5, 1.0, 1.2 and 1.5 with
tanh, orthogonal with tanh, identity with relu = IRNN) and three clipping
settings (none, global norm 1 and 10), with 3 seeds each: 216 runs, vmapped
into one compiled program per T and activation, in 6 to 7 minutes on a
quiet 2-CPU-core machine. Success: test MSE below 0.01 on 1000 fresh
sequences (the trivial baseline, always predicting 1, has 0.167). Measured:
at T = 50 the IRNN with global-norm clipping succeeds (3 of 3 seeds at
threshold 10, test MSE 0.0009; 2 of 3 at threshold 1) and fails without
clipping; the tanh inits fail at T = 50 (orthogonal with clipping at 1: 1
of 3).
"""

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.task = 'adding'  # adding | temporal_order | copy
  config.lengths = (10, 25, 50, 100)  # T
  # Each init is 'gaussian:<rho>', 'orthogonal:<rho>' (tanh) or 'identity:<gain>' (relu, IRNN).
  config.inits = ('gaussian:0.5', 'gaussian:1.0', 'gaussian:1.2', 'gaussian:1.5',
                  'orthogonal:1.0', 'identity:1.0')
  config.clip_thresholds = (0.0, 1.0, 10.0)  # global norm; 0 means no clipping
  config.seeds = 3
  config.hidden_size = 64
  config.batch_size = 32
  config.steps = 2000
  config.optimizer = 'adam'
  config.learning_rate = 2e-3
  config.test_size = 1000
  config.success_threshold = 0.01  # test error: MSE (adding), error rate (others)
  config.copy_memory = 10
  return config
