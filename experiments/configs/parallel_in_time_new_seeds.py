"""Criterion 1 corrected, judged on new cells, and what predicts DEER's iterations
(docs/studies/parallel_in_time.md, "Criterion 1, corrected").

  python -m launch.sweep --config=experiments/configs/parallel_in_time_new_seeds.py \
      --workdir=results/parallel_in_time_new_seeds

DEER alone on fresh cells of seeds 5 to 9 (none of the first sweep's 535 runs, whose seeds
were 0 to 4): H in {16, 32} x the same 15 spectral radii, T = 16, ..., 4,096, the first
sweep's settings otherwise; each run also measures the predictors along DEER's iterates
from the zero guess on its first 256 steps (``parallel_in_time.predictors``): 150 runs.
"""

import itertools

from experiments.configs import parallel_in_time as first_sweep

SEEDS = range(5, 10)
PREDICTOR_LENGTH = 256


def get_config():
  config = first_sweep.get_config()
  config.predictor_length = PREDICTOR_LENGTH
  return config


def get_sweep():
  """DEER's cells (H x radius x seed): 150 runs, each a dict of config overrides."""
  return [{'method': 'deer', 'hidden_size': hidden, 'spectral_radius': rho, 'seed': seed,
           'longest': 0, 'trained_run': ''}
          for hidden, rho, seed in itertools.product(first_sweep.HIDDEN_SIZES, first_sweep.RADII,
                                                     SEEDS)]


