"""The optional parts of rnnjax, which packages each needs, and the commands' entry points.

rnnjax installed without an extra is the core: the cells, layers, diagnostics and
regularizers, on jax, numpy and optax alone. The rest comes with an extra:

  rnnjax[flax]   ``rnnjax.models`` (flax.linen modules)
  rnnjax[train]  ``rnnjax.train``, the run harness and sweeps, and the commands
                 ``rnnjax-run`` and ``rnnjax-sweep`` (flax, orbax, absl, ml_collections, ...)
  rnnjax[data]   ``rnnjax.data.subwords`` (sentencepiece's BPE)
  rnnjax[torch]  PyTorch, to load the converters' state dicts (``rnnjax.convert`` itself
                 needs none)

A module of an extra checks, before importing any of them, that its packages are there
(``require``), and says in one line which extra to install where one is missing. This module
imports nothing beyond the standard library, so the commands' entry points (``run_main``,
``sweep_main``) can say so before anything heavy is loaded.
"""

import importlib.util
import os
import signal
import sys

__all__ = ['EXTRAS', 'MissingExtra', 'missing', 'require', 'run_main', 'sweep_main']

EXTRAS: dict[str, dict[str, str]] = {
    'flax': {'flax': 'flax'},
    'train': {'flax': 'flax', 'orbax.checkpoint': 'orbax-checkpoint', 'absl': 'absl-py',
              'ml_collections': 'ml_collections', 'tqdm': 'tqdm', 'tensorboardX': 'tensorboardX',
              'matplotlib': 'matplotlib', 'submitit': 'submitit', 'scipy': 'scipy'},
    'data': {'sentencepiece': 'sentencepiece'},
    'torch': {'torch': 'torch'},
}
"""Each extra's packages: the module imported -> the distribution pip installs."""


class MissingExtra(ImportError):
  """A module of an extra was imported without the extra's packages (one line: what to
  install)."""


def missing(extra: str) -> list[str]:
  """The distributions of ``extra`` (a key of ``EXTRAS``) that are not installed, found
  without importing them.

  Raises:
    ValueError: for an unknown extra.
  """
  if extra not in EXTRAS:
    raise ValueError(f'extra: expected one of {sorted(EXTRAS)}, got {extra!r}')
  absent = []
  for module, distribution in EXTRAS[extra].items():
    try:
      found = importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package that is not there (orbax for orbax.checkpoint)
      found = False
    if not found:
      absent.append(distribution)
  return absent


def require(extra: str, what: str) -> None:
  """Raises ``MissingExtra`` naming ``pip install 'rnnjax[extra]'`` unless every package of
  ``extra`` is installed.

  Args:
    extra: a key of ``EXTRAS``.
    what: the module or command that needs it, for the message.

  Raises:
    MissingExtra: (an ImportError) with one line: ``what``, the missing distributions and the
      command that installs them.
  """
  absent = missing(extra)
  if absent:
    raise MissingExtra(f"{what} needs {', '.join(absent)}: pip install 'rnnjax[{extra}]'")


def _command(name: str) -> None:
  """Runs ``rnnjax.train.commands.{name}_main`` after checking the [train] extra (one line
  on stderr and exit status 1 without it)."""
  # From the first line, SIGINT, SIGTERM and SIGHUP (a closed terminal) are requests to stop,
  # acted on once the command can.
  received: list[int] = []
  for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(signum, lambda signum, frame: received.append(signum))
  try:
    require('train', f'rnnjax-{name}')
  except MissingExtra as error:
    sys.exit(f'error: {error}')
  # XLA's C++ log level is read once, when jaxlib loads (before any import of jax here): the
  # commands' processes, and the workers they start, log its fatal lines only, unless the
  # user set it. jaxlib 0.9 logs two lines for every program read back from the compilation
  # cache, hundreds a run.
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  from rnnjax.train import commands
  getattr(commands, f'{name}_main')(received)


def run_main() -> None:
  """The ``rnnjax-run`` command (``rnnjax.train.commands.run_main``)."""
  _command('run')


def sweep_main() -> None:
  """The ``rnnjax-sweep`` command (``rnnjax.train.commands.sweep_main``)."""
  _command('sweep')
