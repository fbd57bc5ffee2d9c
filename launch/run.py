"""Trains one run of a config through the run harness (``rnnjax.train.commands``).

  python -m launch.run --config=experiments/configs/char_lm.py --workdir=results/char_lm \
      [--config.spectral_radius=1.1 ...] [--overwrite]
"""

from rnnjax import extras

if __name__ == '__main__':
  extras.run_main()  # as the installed rnnjax-run: [train] checked first
