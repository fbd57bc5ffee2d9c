"""The run harness: experiments, the trainer, run folders, jobs, executors, sweeps, reports.

Needs the [train] extra (``pip install 'rnnjax[train]'``); without it, importing any module of
this package raises one line saying so (``rnnjax.extras``).
"""

from rnnjax import extras

extras.require('train', 'rnnjax.train')
