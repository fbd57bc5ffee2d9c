"""Gradient norms against distance beside mean-field theory: spectral radius x size x input scale.

  python -m launch.sweep --config=experiments/configs/char_lm.py --workdir=results/char_lm_sweep
  python -m launch.sweep --config=experiments/configs/gradient_norms.py \
      --workdir=results/gradient_norms

The sweep: the 'network' protocol at spectral radius 0.3 to 2.0 (step 0.1) x H in {64, 256,
1024} x input scale sigma_in in {0.18, 0.5, 1.0} x 8 seeds (1,296 runs), the 'linearised'
protocol at the same radii, H = 64, 8 seeds (144 runs), and the 20 trained cells of the main
job (the first command above; without it those 20 runs fail their checks and the rest is
measured). Each run measures ||dL/dh_{T-k}|| / ||dL/dh_T|| at k = 1 ... 60 after a transient
of 50 steps (the median over 64 sequences at H = 64, 32 at 256, 16 at 1,024: the larger the
network, the less the sequences differ), in float64 up to H = 256 and float32 at 1,024, and
fits the per-step rate over k = 10 ... 60. ``gradient_theory.md`` / ``.csv`` set the rates
beside mean field's (``gradient_tables.mean_field_rate``) and ``gradient_theory.png`` draws
them. Budget: about 1 CPU hour.
"""

import itertools

from experiments import gradient_norms
from experiments.configs import char_lm
from rnnjax.train import plan
from rnnjax.train import sweep

RADII = tuple(round(0.3 + 0.1 * i, 1) for i in range(18))
SIZES = {64: ('float64', 64), 256: ('float64', 32), 1024: ('float32', 16)}  # dtype, sequences
INPUT_SCALES = (0.18, 0.5, 1.0)
SEEDS = 8
MAIN_JOB = 'results/char_lm_sweep'  # the README's first command's workdir


def get_config():
  return gradient_norms.EXPERIMENT.config(transient=50)


def main_job_runs() -> list[str]:
  """The folders of the main job's 20 runs, named as its sweep names them."""
  runs = char_lm.get_sweep()
  return [f'{MAIN_JOB}/{name}' for name in plan.folder_names(runs, sweep.swept_keys(runs))]


def get_sweep():
  """Network (radius x size x input scale x seed), linearised (radius x seed) and the main
  job's trained cells: 1,460 runs, each a dict of config overrides."""
  network = [{'protocol': 'network', 'spectral_radius': rho, 'hidden_size': size,
              'dtype': SIZES[size][0], 'sequences': SIZES[size][1], 'input_scale': scale,
              'seed': seed, 'trained_run': ''}
             for rho, size, scale, seed in itertools.product(RADII, SIZES, INPUT_SCALES,
                                                             range(SEEDS))]
  linearised = [{'protocol': 'linearised', 'spectral_radius': rho, 'hidden_size': 64,
                 'dtype': 'float64', 'sequences': 64, 'input_scale': 1.0, 'seed': seed,
                 'trained_run': ''} for rho, seed in itertools.product(RADII, range(SEEDS))]
  trained = [{'protocol': 'network', 'spectral_radius': 1.0, 'hidden_size': 128,
              'dtype': 'float64', 'sequences': 64, 'input_scale': 1.0, 'seed': 0,
              'trained_run': folder} for folder in main_job_runs()]
  return network + linearised + trained
