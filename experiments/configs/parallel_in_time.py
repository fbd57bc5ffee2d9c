"""Predictability implies parallelizability: DEER's iterations against T and lambda_1.

  python -m launch.sweep --config=experiments/configs/char_lm.py --workdir=results/char_lm_sweep
  python -m launch.sweep --config=experiments/configs/parallel_in_time.py \
      --workdir=results/parallel_in_time

The sweep, at initialization: DEER at H in {16, 32} x 15 spectral radii from 0.6 to 5.0 x
5 seeds, T = 16, 32, ..., 4,096; quasi-DEER and quasi-ELK the same to T = 1,024 (their
diagonal steps need about T iterations wherever W_hh's off-diagonal part dominates, so
longer T add cost and no contrast); ELK (full Jacobians and a Kalman filter, about 300 times
DEER's time an iteration here in float64) at H = 16, 5 radii, 5 seeds, to T = 1,024: 475 runs.
And the main job's 20 trained cells (the first command above; without it those runs fail
their checks and the rest is measured) with DEER, quasi-DEER and quasi-ELK (60 runs). The
damped methods at the reference code's damping 1e-6. Every cell is float64, driven by one
stream of held-out Tiny Shakespeare per seed (a fresh embedding: a weak drive), and solved from
the zero guess for its first T steps, T doubling from 16, to elman_deer's certified tolerance
1e-5; each run reports the iterations at every T, the slope of log iterations against log T,
the solver's seconds and lambda_1 over 4,096 steps after a transient of 1,024. Caps: T (at
most 1,024) iterations for DEER and quasi-DEER, 256 for the damped methods, and 6.4e10
multiply-adds a full-Jacobian solve. Budget: about 2 CPU hours.
"""

import itertools

from experiments import parallel_in_time
from experiments.configs import gradient_norms

RADII = (0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.25, 2.5, 2.75, 3.0, 3.5, 4.0, 5.0)
HIDDEN_SIZES = (16, 32)
SEEDS = 5
LENGTHS = tuple(2 ** k for k in range(4, 13))
ELK_RADII = (0.6, 1.0, 1.6, 2.5, 4.0)


def get_config():
  return parallel_in_time.EXPERIMENT.config(
      dtype='float64', lengths=LENGTHS, sequences=1, damped_max_iterations=256,
      lyapunov_transient=1024, lyapunov_steps=4096)


def get_sweep():
  """Fresh cells (method x H x radius x seed) and the main job's trained cells: 535 runs, each
  a dict of config overrides."""
  def fresh(method, sizes, radii, longest):
    return [{'method': method, 'hidden_size': hidden, 'spectral_radius': rho, 'seed': seed,
             'longest': longest, 'trained_run': ''}
            for hidden, rho, seed in itertools.product(sizes, radii, range(SEEDS))]
  trained = [{'method': method, 'hidden_size': 128, 'spectral_radius': 0.0, 'seed': 0,
              'longest': 0 if method == 'deer' else 1024, 'trained_run': folder}
             for method, folder in itertools.product(('deer', 'quasi', 'quasi_elk'),
                                                     gradient_norms.main_job_runs())]
  # DEER's cells (the criterion) and the trained cells first: a sweep stopped early has them.
  return (fresh('deer', HIDDEN_SIZES, RADII, 0) + trained
          + fresh('quasi', HIDDEN_SIZES, RADII, 1024)
          + fresh('quasi_elk', HIDDEN_SIZES, RADII, 1024) + fresh('elk', (16,), ELK_RADII, 1024))
