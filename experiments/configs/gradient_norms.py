"""Gradient norms against distance, for W_hh at spectral radius 0.5 ... 1.5: a measurement.

  python -m launch.sweep --config=experiments/configs/gradient_norms.py \
      --workdir=results/gradient_norms

The sweep: protocol (linearised, network) x 11 spectral radii x 8 seeds, 176
runs that train nothing; ``results_over_seeds.md`` holds the median ratio
||dL/dh_{T-k}|| / ||dL/dh_T|| over the seeds at k = 1 ... 60. A trained char_lm
run's cell: ``--config.trained_run=results/char_lm`` (protocol network).
"""

import itertools

from experiments import gradient_norms


def get_config():
  return gradient_norms.EXPERIMENT.config()


def get_sweep():
  """Protocol x spectral radius x seed: 176 runs, each a dict of config overrides."""
  radii = [round(0.5 + 0.1 * i, 1) for i in range(11)]
  return [{'protocol': protocol, 'spectral_radius': rho, 'seed': seed}
          for protocol, rho, seed in itertools.product(('linearised', 'network'), radii,
                                                       range(8))]
