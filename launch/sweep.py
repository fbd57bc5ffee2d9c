"""Runs a config's sweep on an executor (local processes, Slurm, Ray) and tabulates it
(``rnnjax.train.commands``).

  python -m launch.sweep --config=experiments/configs/char_lm.py --workdir=results/char_lm_sweep
  python -m launch.sweep --config=experiments/configs/long_range.py --workdir=results/long_range \
      --executor=slurm --slurm.slurm_partition=debug --slurm.timeout_min=60
  python -m launch.sweep --config=experiments/configs/long_range.py --workdir=/shared/long_range \
      --executor=ray --ray.address=HEAD_HOST:6379
"""

from rnnjax import extras

if __name__ == '__main__':
  extras.sweep_main()  # as the installed rnnjax-sweep: [train] checked first
