"""rnnjax: the Elman recurrent network in JAX, and the study of its vanishing and exploding
gradients.

  import rnnjax as rj

Cells are pure functions ``cell(params, carry, x) -> (carry, y)`` on plain pytrees, usable
under ``jit``, ``grad``, ``vmap`` and ``scan``. Which Elman layer to use:

  rj.elman_layer         the fused layer, for speed: one input projection, its own BPTT
  rj.scan(cell, ...)     any cell (Elman, GRU, LSTM, your own), with lengths and reverse
  rj.models.Elman        the flax.linen module, for flax users (``rnnjax[flax]``)
  rj.elman_deer          all T steps at once by Newton's method (DEER, ELK), in parallel

The diagnostics: ``rj.state_gradients`` (dL/dh_t for every t in one pass),
``rj.gradient_norm_profile``, ``rj.jacobian_product_norms``, ``rj.gradient_norm_table``,
``rj.lyapunov_spectrum``; the regularizers ``rj.omega_penalty`` (Pascanu et al.) and
``rj.flossing_loss`` (Engelken); the run harness and sweeps in ``rnnjax.train``
(``rnnjax[train]``).

The names below load on first use (PEP 562): ``import rnnjax`` itself imports no JAX, and
``rnnjax.models`` alone imports flax. Importing rnnjax changes nothing in the process's
environment.
"""

import importlib
import importlib.metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as the type checker sees them; at run time ``__getattr__``
  from rnnjax import cells, clipping, combinators, convert, diagnostics, evaluation, fused
  from rnnjax import gradient_tables, initializers, lyapunov, models, norms, parallel
  from rnnjax import recurrence, regularizers, sampling, seq2seq
  from rnnjax.cells import (elman, elman_cell, gru_cell, init_elman, init_gru, init_lstm,
                            lstm_cell)
  from rnnjax.clipping import clip_pascanu, clip_with_fallback
  from rnnjax.combinators import bidirectional, init_stack, stack
  from rnnjax.convert import elman_from_torch, elman_to_torch
  from rnnjax.diagnostics import (gradient_norm_profile, growth_rate, jacobian_product_norms,
                                  state_gradients)
  from rnnjax.evaluation import cross_entropy, perplexity
  from rnnjax.fused import checkpointed_elman_layer, elman_layer, elman_layer_with
  from rnnjax.gradient_tables import gradient_norm_table
  from rnnjax.initializers import gaussian_at_radius, orthogonal_at_radius, spectral_radius
  from rnnjax.lyapunov import flossing_loss, lyapunov_spectrum
  from rnnjax.norms import global_norm
  from rnnjax.parallel import elman_deer
  from rnnjax.recurrence import scan, truncated_scan
  from rnnjax.regularizers import omega, omega_penalty
  from rnnjax.sampling import sample

_MODULES = ('cells', 'clipping', 'combinators', 'convert', 'diagnostics', 'evaluation', 'fused',
            'gradient_tables', 'initializers', 'lyapunov', 'models', 'norms', 'parallel',
            'recurrence', 'regularizers', 'sampling', 'seq2seq')

_NAMES = {  # name -> the module that defines it
    **dict.fromkeys(('elman', 'elman_cell', 'gru_cell', 'lstm_cell', 'init_elman', 'init_gru',
                     'init_lstm'), 'cells'),
    **dict.fromkeys(('scan', 'truncated_scan'), 'recurrence'),
    **dict.fromkeys(('elman_layer', 'elman_layer_with', 'checkpointed_elman_layer'), 'fused'),
    'elman_deer': 'parallel',
    **dict.fromkeys(('stack', 'bidirectional', 'init_stack'), 'combinators'),
    **dict.fromkeys(('spectral_radius', 'gaussian_at_radius', 'orthogonal_at_radius'),
                    'initializers'),
    **dict.fromkeys(('state_gradients', 'gradient_norm_profile', 'jacobian_product_norms',
                     'growth_rate'), 'diagnostics'),
    'gradient_norm_table': 'gradient_tables',
    **dict.fromkeys(('lyapunov_spectrum', 'flossing_loss'), 'lyapunov'),
    **dict.fromkeys(('omega', 'omega_penalty'), 'regularizers'),
    **dict.fromkeys(('clip_pascanu', 'clip_with_fallback'), 'clipping'),
    'global_norm': 'norms',
    **dict.fromkeys(('cross_entropy', 'perplexity'), 'evaluation'),
    'sample': 'sampling',
    **dict.fromkeys(('elman_from_torch', 'elman_to_torch'), 'convert'),
}

__version__ = importlib.metadata.version('rnnjax')

__all__ = [*_MODULES, *_NAMES, '__version__']


def __getattr__(name: str) -> Any:
  """A submodule or a name of the public API, imported on first use."""
  if name in _MODULES:
    value = importlib.import_module(f'rnnjax.{name}')
  elif name in _NAMES:
    value = getattr(importlib.import_module(f'rnnjax.{_NAMES[name]}'), name)
  else:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  globals()[name] = value
  return value


def __dir__() -> list[str]:
  return sorted({*globals(), *__all__})
