"""Predictability implies parallelizability: DEER's iterations against T and lambda_1.

  python -m launch.sweep --config=experiments/configs/char_lm.py --workdir=results/char_lm_sweep
  python -m launch.sweep --config=experiments/configs/parallel_in_time.py \
      --workdir=results/parallel_in_time

The sweep: method (deer, quasi, elk, quasi_elk; the damped ones at the reference code's
damping 1e-6) x H in {16, 32} x 15 spectral radii from 0.6 to 5.0 x 5 seeds (600 runs), and
the main job's 20 trained cells (the first command above; without it those runs fail their
checks and the rest is measured) with each method (80 runs). Every cell is float64, driven by
one stream of held-out Tiny Shakespeare per seed (a fresh embedding: a weak drive), and
solved from the zero guess for its first T steps, T = 16, 32, ..., 4,096, to elman_deer's
certified tolerance 1e-5; each run reports the iterations at every T, the slope of log
iterations against log T, the solver's seconds and lambda_1 over 4,096 steps after a
transient of 1,024. Caps: T (at most 1,024) iterations for DEER and quasi-DEER, 256 for the
damped methods, and 6.4e10 multiply-adds a full-Jacobian solve. Budget: about 3 CPU hours.
"""

import itertools

from experiments import parallel_in_time
from experiments.configs import gradient_norms

RADII = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.25, 2.5, 2.75, 3.0, 3.5, 4.0, 5.0)
HIDDEN_SIZES = (16, 32)
SEEDS = 5
LENGTHS = tuple(2 ** k for k in range(4, 13))
METHODS = ('deer', 'quasi', 'elk', 'quasi_elk')


def get_config():
  return parallel_in_time.EXPERIMENT.config(
      dtype='float64', lengths=LENGTHS, sequences=1, damped_max_iterations=256,
      lyapunov_transient=1024, lyapunov_steps=4096)


def get_sweep():
  """Method x H x radius x seed at initialization, and method x the main job's trained cells:
  680 runs, each a dict of config overrides."""
  fresh = [{'method': method, 'hidden_size': hidden, 'spectral_radius': rho, 'seed': seed,
            'trained_run': ''}
           for method, hidden, rho, seed in itertools.product(METHODS, HIDDEN_SIZES, RADII,
                                                              range(SEEDS))]
  trained = [{'method': method, 'hidden_size': 128, 'spectral_radius': 0.0, 'seed': 0,
              'trained_run': folder}
             for method, folder in itertools.product(METHODS, gradient_norms.main_job_runs())]
  return fresh + trained
