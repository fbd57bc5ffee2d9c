"""Where DEER, quasi-DEER, ELK and quasi-ELK converge: radius x length x size, a measurement.

  python -m launch.sweep --config=experiments/configs/parallel_in_time.py \
      --workdir=results/parallel_in_time

The sweep: method (deer, quasi, elk, quasi_elk; the damped ones at the reference code's
damping 1e-6) x spectral radius in {0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5} x T in {64, 256,
1024} x H in {4, 16}: 168 runs that train nothing, each beside the largest Lyapunov
exponent of its cell. Budget: about 20 CPU minutes (T = 4096 and H = 64, which the earlier
table had, take hours: add them to LENGTHS and HIDDEN_SIZES where time allows).
A trained char_lm run's cell: ``--config.trained_run=results/char_lm`` with a sweep over
method and length only (edit get_sweep).
"""

import itertools

from experiments import parallel_in_time

RADII = (0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5)
LENGTHS = (64, 256, 1024)
HIDDEN_SIZES = (4, 16)


def get_config():
  return parallel_in_time.EXPERIMENT.config()


def get_sweep():
  """Method x hidden size x spectral radius x length, each a dict of config overrides."""
  return [{'method': method, 'hidden_size': hidden, 'spectral_radius': rho, 'length': length}
          for method, hidden, rho, length in itertools.product(
              ('deer', 'quasi', 'elk', 'quasi_elk'), HIDDEN_SIZES, RADII, LENGTHS)]
