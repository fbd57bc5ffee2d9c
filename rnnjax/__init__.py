"""rnnjax: the Elman recurrent network in JAX, and the study of its vanishing and exploding
gradients.

  import rnnjax as rj

Cells are pure functions ``cell(params, carry, x) -> (carry, y)`` on plain pytrees, usable
under ``jit``, ``grad``, ``vmap`` and ``scan``. Which Elman layer to use:

  rj.elman_layer         the fused layer, for speed: one input projection, its own BPTT
  rj.scan(cell, ...)     any cell (Elman, GRU, LSTM, your own), with lengths and reverse
  rj.models.Elman        the flax.linen module, for flax users
  rj.elman_deer          all T steps at once by Newton's method (DEER, ELK), in parallel

The diagnostics: ``rj.state_gradients`` (dL/dh_t for every t in one pass),
``rj.gradient_norm_profile``, ``rj.jacobian_product_norms``, ``rj.gradient_norm_table``,
``rj.lyapunov_spectrum``; the regularizers ``rj.omega_penalty`` (Pascanu et al.) and
``rj.flossing_loss`` (Engelken); the run harness and sweeps in ``rnnjax.train``.
"""

import importlib.metadata
import os

# XLA's C++ log level is read once, when jaxlib loads. Unless set otherwise (importing jax
# first sets jax's default, 1), only its fatal lines: jaxlib 0.9 logs an error line about CPU
# features it then ignores and a warning line about versions for every program read back
# from the persistent compilation cache (hundreds of lines a run).
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from rnnjax import cells  # noqa: E402 -- after the log level
from rnnjax import clipping
from rnnjax import combinators
from rnnjax import convert
from rnnjax import diagnostics
from rnnjax import evaluation
from rnnjax import fused
from rnnjax import gradient_tables
from rnnjax import initializers
from rnnjax import lyapunov
from rnnjax import models
from rnnjax import norms
from rnnjax import parallel
from rnnjax import recurrence
from rnnjax import regularizers
from rnnjax import sampling
from rnnjax import seq2seq
from rnnjax.cells import elman
from rnnjax.cells import elman_cell
from rnnjax.cells import gru_cell
from rnnjax.cells import init_elman
from rnnjax.cells import init_gru
from rnnjax.cells import init_lstm
from rnnjax.cells import lstm_cell
from rnnjax.clipping import clip_pascanu
from rnnjax.clipping import clip_with_fallback
from rnnjax.combinators import bidirectional
from rnnjax.combinators import init_stack
from rnnjax.combinators import stack
from rnnjax.convert import elman_from_torch
from rnnjax.convert import elman_to_torch
from rnnjax.diagnostics import gradient_norm_profile
from rnnjax.diagnostics import growth_rate
from rnnjax.diagnostics import jacobian_product_norms
from rnnjax.diagnostics import state_gradients
from rnnjax.evaluation import cross_entropy
from rnnjax.evaluation import perplexity
from rnnjax.fused import checkpointed_elman_layer
from rnnjax.fused import elman_layer
from rnnjax.gradient_tables import gradient_norm_table
from rnnjax.initializers import gaussian_at_radius
from rnnjax.initializers import orthogonal_at_radius
from rnnjax.initializers import spectral_radius
from rnnjax.lyapunov import flossing_loss
from rnnjax.lyapunov import lyapunov_spectrum
from rnnjax.norms import global_norm
from rnnjax.parallel import elman_deer
from rnnjax.recurrence import scan
from rnnjax.recurrence import truncated_scan
from rnnjax.regularizers import omega
from rnnjax.regularizers import omega_penalty
from rnnjax.sampling import sample

__version__ = importlib.metadata.version('rnnjax')

__all__ = [
    # modules
    'cells', 'clipping', 'combinators', 'convert', 'diagnostics', 'evaluation', 'fused',
    'gradient_tables', 'initializers', 'lyapunov', 'models', 'norms', 'parallel', 'recurrence',
    'regularizers', 'sampling', 'seq2seq',
    # cells and layers
    'elman', 'elman_cell', 'gru_cell', 'lstm_cell', 'init_elman', 'init_gru', 'init_lstm',
    'scan', 'truncated_scan', 'elman_layer', 'checkpointed_elman_layer', 'elman_deer', 'stack',
    'bidirectional', 'init_stack',
    # initializers
    'spectral_radius', 'gaussian_at_radius', 'orthogonal_at_radius',
    # diagnostics
    'state_gradients', 'gradient_norm_profile', 'jacobian_product_norms', 'growth_rate',
    'gradient_norm_table', 'lyapunov_spectrum',
    # regularizers, clipping, norms
    'omega', 'omega_penalty', 'flossing_loss', 'clip_pascanu', 'clip_with_fallback',
    'global_norm',
    # language models
    'cross_entropy', 'perplexity', 'sample',
    # PyTorch
    'elman_from_torch', 'elman_to_torch',
    '__version__',
]
