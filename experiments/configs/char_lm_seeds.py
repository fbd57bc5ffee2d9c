"""The main job over 3 seeds, with the finite-time Lyapunov exponent: the spread of its table.

  python -m launch.sweep --config=experiments/configs/char_lm_seeds.py \
      --workdir=results/char_lm_seeds

The main job's 20 settings (``char_lm.get_sweep``: spectral radius x clipping x tau) x seeds
0, 1 and 2, with ``measure_lyapunov`` (the largest exponent of the training window at every
metrics line): 60 runs. ``results_over_seeds.md`` gives each setting's median and
interquartile range over the seeds. Seed 0's runs train in other vmapped groups than the main
job's, so its numbers may differ from the main job's table in float rounding (the unclipped
runs, chaotic, by much). Budget: about 5 CPU minutes.
"""

from experiments.configs import char_lm

SEEDS = 3


def get_config():
  return char_lm.get_config()


def get_sweep():
  """The main job's runs x 3 seeds, each with the Lyapunov exponent measured: 60 runs."""
  return [dict(run, seed=seed, measure_lyapunov=True) for run in char_lm.get_sweep()
          for seed in range(SEEDS)]
