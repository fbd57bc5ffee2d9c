"""The run harness: run folders, the trainer, sweeps on local processes or Slurm, the commands.

Needs the [train] extra (``pip install 'rnnjax[train]'``); without it, importing any module of
this package raises one line saying so (``rnnjax.extras``).
"""

from rnnjax import extras

extras.require('train', 'rnnjax.train')
