"""The classic long-range tasks: where does an Elman network stop learning as T grows?

  python -m launch.sweep --config=experiments/configs/long_range.py \
      --workdir=results/long_range

The sweep (``get_sweep``) trains the adding problem over T in {10, 25, 50,
100}, six initializations (Gaussian W_hh at spectral radius 0.5, 1.0, 1.2
and 1.5 with tanh, orthogonal with tanh, identity with relu = IRNN) and
three clipping settings (none, global norm 1 and 10), with 3 seeds each:
216 runs, one vmapped program per T and activation. Success: test MSE below
0.01 on 1000 fresh sequences (the trivial baseline, always predicting 1,
has 0.167). ``results.md`` gives every run; ``results_over_seeds.md`` the
success rate per (T, init, clipping).
"""

import itertools

from experiments import long_range

# (recurrent_init, spectral_radius or gain, activation)
INITS = (('gaussian', 0.5, 'tanh'), ('gaussian', 1.0, 'tanh'), ('gaussian', 1.2, 'tanh'),
         ('gaussian', 1.5, 'tanh'), ('orthogonal', 1.0, 'tanh'), ('identity', 1.0, 'relu'))
CLIPPINGS = (('none', 1.0), ('global_norm', 1.0), ('global_norm', 10.0))


def get_config():
  return long_range.EXPERIMENT.config(steps=2000, optimizer='adam', learning_rate=2e-3,
                                      checkpoint_every=1000)


def get_sweep():
  """T x init x clipping x seed: 216 runs, each a dict of config overrides."""
  return [{'length': length, 'recurrent_init': init, 'spectral_radius': radius,
           'activation': activation, 'clipping': clipping, 'clip_threshold': threshold,
           'seed': seed}
          for length, (init, radius, activation), (clipping, threshold), seed
          in itertools.product((10, 25, 50, 100), INITS, CLIPPINGS, range(3))]
