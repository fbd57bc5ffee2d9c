"""A run's checkpoints: orbax underneath, every step verified by a checksum of what was saved.

A run folder's ``checkpoint/`` holds one folder per saved step, the last two kept
(orbax's ``CheckpointManager``, synchronous saves):

  checkpoint/<step>/state/     the training state, as orbax's ``StandardSave`` writes it
  checkpoint/<step>/checksum/  its record: for each leaf, by its orbax name
                               ('opt_state.0.mu.w'), the dtype, the shape and the sha256
                               of the bytes saved; and the sha256 of those entries
  checkpoint/<step>.damaged    a step found damaged, moved aside (nothing is deleted)
  checkpoint/<step>.unused     a step newer than the one a group resumed from, moved aside
  checkpoint/<step>.superseded a step saved again with other values, moved aside

Both items of a step are written into one temporary folder that orbax renames to
``<step>`` once both are complete, so a kill at any moment leaves either a step
with its record or a temporary folder (removed by the next ``manager`` before its
first save). A step
is never trusted without its record: the array data of an OCDBT checkpoint
carries no checksum of its own (its manifest and b-tree nodes do), so a flipped
bit in an array chunk restores, without the record, as other values.

Reading a step ends in one of four ways:
  its state, bit for bit what was saved;
  ``Damaged``: its bytes are not what was saved: an array differs from the record
    (reason 'checksum'), a file that orbax or TensorStore cannot decode (cut
    short, garbled or missing; 'undecodable'), or no record ('unverified');
  ``StorageError``: the file system refused a read (permission, too many open
    files, an I/O error): the step may be good, so it is neither used nor moved;
  ``ValueError``: the step holds a state of another structure than asked for.
Only ``Damaged`` lets a group fall back to an older step.

References: orbax-checkpoint, CheckpointManager
(https://orbax.readthedocs.io/en/latest/guides/checkpoint/checkpoint_manager.html);
TensorStore's OCDBT format (https://google.github.io/tensorstore/kvstore/ocdbt/index.html).
"""

import asyncio
import contextlib
import errno
import hashlib
import json
import logging as python_logging
import os
import pathlib
import re
import selectors
from typing import Any, Iterator, Sequence

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from rnnjax.train import devices

__all__ = ['CHECKPOINTS', 'CheckpointError', 'Damaged', 'StorageError', 'manager', 'save',
           'saved_steps', 'restore', 'restore_group', 'final_params']

CHECKPOINTS = 'checkpoint'  # the run folder's subfolder of steps
_STATE = 'state'  # the orbax item of the training state
_RECORD = 'checksum'  # the orbax item of the record (JSON)
_RECORD_FILE = 'metadata'  # the file orbax's JsonSave writes into its item folder
_CONFIG, _SUMMARY, _ENDED = 'config.json', 'summary.json', ('finished', 'diverged')

# Errors of the file system, not of the bytes read: the checkpoint may be good.
_STORAGE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EMFILE, errno.ENFILE,
                             errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.ENOMEM,
                             errno.ESTALE, errno.ETIMEDOUT, errno.EAGAIN, errno.EBUSY})
# TensorStore's status codes of the same kind, where its text carries no errno.
_STORAGE_CODES = {'PERMISSION_DENIED': errno.EACCES, 'RESOURCE_EXHAUSTED': None,
                  'UNAVAILABLE': None, 'DEADLINE_EXCEEDED': None}


class CheckpointError(Exception):
  """A checkpoint step that cannot be used; the message is one line naming it.

  Attributes:
    path: the file, or the step's folder, the message names.
    step: the step.
  """

  def __init__(self, message: str, path: pathlib.Path, step: int | None):
    super().__init__(message)
    self.path, self.step = pathlib.Path(path), step


class Damaged(CheckpointError):
  """The step's bytes are not what was saved; ``reason`` is 'checksum' (an array differs
  from the record), 'undecodable' (a file cannot be decoded) or 'unverified' (no record)."""

  def __init__(self, message: str, path: pathlib.Path, step: int | None, reason: str):
    super().__init__(message, path, step)
    self.reason = reason


class StorageError(CheckpointError, OSError):
  """The file system refused a read or a write of a checkpoint; an ``OSError`` whose
  ``errno`` is the cause (EACCES, EMFILE, ENOSPC, EIO, ...; None where TensorStore
  named none) and whose ``filename`` is ``path``."""

  def __init__(self, message: str, path: pathlib.Path, step: int | None, number: int | None):
    super().__init__(message, path, step)
    self.errno, self.filename = number, str(path)

  def __str__(self) -> str:  # the message, not OSError's '[Errno 13] ...'
    return self.args[0]


def _leaf_name(path) -> str:
  """A leaf's key path as orbax names it: keys joined by dots ('opt_state.0.mu.w')."""
  parts = []
  for key in path:
    for field in ('key', 'name', 'idx'):
      if hasattr(key, field):
        parts.append(str(getattr(key, field)))
        break
    else:
      parts.append(str(key))
  return '.'.join(parts)


def _record(state) -> dict:
  """The record of ``state`` (a pytree of arrays): per leaf name its dtype, shape and the
  sha256 of dtype, shape and C-order bytes of its host copy; the sha256 of those entries."""
  leaves = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(devices.to_host(state))[0]:
    host = np.asarray(leaf)
    digest = hashlib.sha256(f'{host.dtype}|{list(host.shape)}|'.encode())
    digest.update(host.tobytes(order='C'))
    leaves[_leaf_name(path)] = {'dtype': str(host.dtype), 'shape': list(host.shape),
                                'sha256': digest.hexdigest()}
  return {'leaves': leaves, 'sha256': _entries_digest(leaves)}


def _entries_digest(leaves: dict) -> str:
  return hashlib.sha256(json.dumps(leaves, sort_keys=True).encode()).hexdigest()


def _describe(number: int | None) -> str:
  if number is None:
    return 'refused by the file system'
  name = errno.errorcode.get(number, str(number))
  return f'{os.strerror(number)} ({name})'


def _storage_error(error: BaseException, fallback: pathlib.Path, step: int | None,
                   doing: str) -> StorageError | None:
  """The ``StorageError`` that ``error`` (or an error it was raised from) is, else None:
  an ``OSError`` of a file-system errno, or a TensorStore error with such an errno
  (``os_error_code='13'``, ``[OS error 13: ...]``) or status code (PERMISSION_DENIED)."""
  for link in _chain(error):
    if isinstance(link, OSError) and link.errno in _STORAGE_ERRNOS:
      path = pathlib.Path(link.filename) if link.filename else fallback
      return StorageError(f'{path}: cannot {doing}: {_describe(link.errno)}; nothing was '
                          'deleted', path, step, link.errno)
    text = _first_line(link)
    code = re.match(r'([A-Z_]+): ', text)
    found = re.search(r"os_error_code='(\d+)'|OS error (\d+)", str(link))
    number = int(found.group(1) or found.group(2)) if found else None
    if number in _STORAGE_ERRNOS or (number is None and code and code.group(1) in _STORAGE_CODES):
      if number is None:
        number = _STORAGE_CODES[code.group(1)]
      files = re.findall(r'"(/[^"]+)"', text)
      path = pathlib.Path(files[-1]) if files else fallback
      cause = _describe(number) if number is not None else code.group(1)
      return StorageError(f'{path}: cannot {doing}: {cause}; nothing was deleted', path, step,
                          number)
  return None


def _chain(error: BaseException) -> Iterator[BaseException]:
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    yield error
    error = error.__cause__ or error.__context__


def _first_line(error: BaseException) -> str:
  """The first line of an error's text without TensorStore's spec ('[tensorstore_spec=...')."""
  text = str(error).splitlines()[0] if str(error) else ''
  return re.split(r' \[(?:tensorstore_spec|source locations)', text)[0]


def _damage(error: BaseException, folder: pathlib.Path, step: int) -> Damaged:
  """``error``, raised by orbax or TensorStore while reading a step, as ``Damaged``: the
  file named by TensorStore's message (else the step's folder) and its cause in one line."""
  step_dir = folder / CHECKPOINTS / str(step)
  for link in _chain(error):
    text = _first_line(link)
    code = re.match(r'([A-Z_]+): ', text)
    files = re.findall(r'"(/[^"]+)"', text)
    if code and files:  # TensorStore's: 'CODE: Error reading "key" ... file "/a/b": cause'
      cause = text.rsplit(f'"{files[-1]}"', 1)[-1].lstrip(': ')
      key = re.search(r'Error reading "([^"/][^"]*)"', text)
      path = pathlib.Path(files[-1])
      return Damaged(f'{folder}: the checkpoint of step {step} is damaged: {path} cannot be '
                     f'decoded{f" (reading {key.group(1)})" if key else ""}: '
                     f'{code.group(1)}: {cause[:200]}', path, step, 'undecodable')
  text = _first_line(error)
  return Damaged(f'{folder}: the checkpoint of step {step} is damaged: {step_dir} cannot be '
                 f'decoded ({type(error).__name__}: {text[:200]})', step_dir, step, 'undecodable')


class _DrainingLoop(asyncio.SelectorEventLoop):
  """An event loop that, on close, waits for the tasks still running (TensorStore's reads
  of other arrays, after one of them failed) and drops the errors reported after the call
  ended: those are of the same checkpoint as the error the call raised. Without it every
  failed read prints 'Event loop is closed' tracebacks and TensorStore's spec later on."""

  def call_exception_handler(self, context: dict) -> None:
    del context

  def __del__(self) -> None:  # one whose own pipe could not be made (EMFILE) has none to close
    if hasattr(self, '_ssock'):
      super().__del__()

  def close(self) -> None:
    pending = [task for task in asyncio.all_tasks(self) if not task.done()]
    if pending and not self.is_closed():
      self.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    super().close()


def _not_a_thread_traceback(record: python_logging.LogRecord) -> bool:
  """False for orbax's log of an error in one of its threads (a traceback), which the call
  that waits on the thread raises again."""
  return not (record.levelno >= python_logging.ERROR and 'orbax' in record.pathname
              and 'raised an exception' in record.getMessage())


@contextlib.contextmanager
def _quiet_orbax():
  """Orbax's calls within run on ``_DrainingLoop``s (it makes a new loop per call), and its
  threads' tracebacks are not logged: the errors are raised, in one line, by the caller."""
  policy = asyncio.get_event_loop_policy()

  class Policy(type(policy)):
    def new_event_loop(self):
      selector = selectors.DefaultSelector()
      try:
        return _DrainingLoop(selector)
      except OSError:  # EMFILE: the loop's own pipe; its selector is not left open
        selector.close()
        raise

  asyncio.set_event_loop_policy(Policy())
  absl_logger = python_logging.getLogger('absl')
  absl_logger.addFilter(_not_a_thread_traceback)
  try:
    yield
  finally:
    absl_logger.removeFilter(_not_a_thread_traceback)
    asyncio.set_event_loop_policy(policy)


def _handlers() -> dict:
  return {_STATE: ocp.StandardCheckpointHandler(), _RECORD: ocp.JsonCheckpointHandler()}


def manager(folder: pathlib.Path) -> ocp.CheckpointManager:
  """The run folder's checkpoint manager for ``save``: synchronous saves (each finalised
  by an atomic rename), the last two steps kept, and the temporary folders of saves that
  never finished (a process killed while saving) removed. Close it when done."""
  return ocp.CheckpointManager(
      (pathlib.Path(folder) / CHECKPOINTS).absolute(),
      item_handlers=_handlers(),
      options=ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=False,
                                           cleanup_tmp_directories=True))


def saved_steps(folder: pathlib.Path) -> list[int]:
  """The finalised checkpoint steps of a run folder, oldest first, without opening orbax
  (steps moved aside are not among them).

  Raises:
    StorageError: the file system refused to list the folder (EACCES, EMFILE, EIO, ...).
  """
  root = pathlib.Path(folder) / CHECKPOINTS
  try:
    if not root.is_dir():
      return []
    return sorted(int(p.name) for p in root.iterdir()
                  if p.name.isdigit() and (p / '_CHECKPOINT_METADATA').exists())
  except OSError as error:
    storage = _storage_error(error, root, None, 'list the checkpoints')
    if storage is None:
      raise
    raise storage from None


def _move_aside(folder: pathlib.Path, step: int, why: str) -> pathlib.Path:
  """Renames ``checkpoint/<step>`` to ``checkpoint/<step>.<why>`` (``-2``, ``-3``, ... when
  taken), on the first process; returns the new path.

  Raises:
    StorageError: the rename failed (a read-only file system, no permission).
  """
  root = folder / CHECKPOINTS
  aside, count = root / f'{step}.{why}', 1
  while aside.exists():
    count += 1
    aside = root / f'{step}.{why}-{count}'
  if jax.process_index() == 0:
    try:
      (root / str(step)).rename(aside)
    except OSError as error:
      raise StorageError(f'{root / str(step)}: cannot move the checkpoint of step {step} aside '
                         f'to {aside.name}: {_describe(error.errno)}', root / str(step), step,
                         error.errno) from None
  return aside


def save(checkpoint_manager: ocp.CheckpointManager, step: int, state: Any) -> bool:
  """Saves ``state`` as the checkpoint of ``step`` with its record, atomically.

  A step already saved with the same record (the same values) is kept and nothing is
  written; saved steps at or after ``step`` with other values (a run that went on from
  an older step) are moved aside to ``<step>.superseded`` first, with a warning.

  Args:
    checkpoint_manager: ``manager(folder)``.
    step: the step (>= 0).
    state: a pytree of arrays (numpy, or jax arrays on any devices), the same on every
      process of a multi-process run (each calls ``save``).

  Returns:
    True when written; False when the step was already saved with these values.

  Raises:
    ValueError: ``step`` is not an int >= 0.
    StorageError: the file system refused the write (ENOSPC, EDQUOT, EACCES, EIO, ...),
      one line naming the file and the cause; the steps saved before are left as they were.
  """
  if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
    raise ValueError(f'step: expected an int >= 0, got {step!r}')
  step = int(step)
  folder = pathlib.Path(checkpoint_manager.directory).parent
  record = _record(state)
  for later in [s for s in saved_steps(folder) if s >= step]:
    if later == step and _same_record(folder, step, record):
      return False
    aside = _move_aside(folder, later, 'superseded')
    logging.warning('%s: the checkpoint of step %d holds other values than the run saving '
                    'step %d; moved it aside to %s', folder, later, step, aside)
  _sync('rnnjax.checkpoints.save')
  try:
    with _quiet_orbax():
      checkpoint_manager.reload()
      written = checkpoint_manager.save(
          step, args=ocp.args.Composite(**{_STATE: ocp.args.StandardSave(state),
                                           _RECORD: ocp.args.JsonSave(record)}), force=True)
  except Exception as error:  # pylint: disable=broad-exception-caught
    storage = _storage_error(error, folder / CHECKPOINTS, step,
                             f'write the checkpoint of step {step}')
    if storage is None:
      raise
    raise storage from None
  return bool(written)


def _same_record(folder: pathlib.Path, step: int, record: dict) -> bool:
  try:
    return _read_record(folder, step) == record
  except Damaged:
    return False


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def _check_access(folder: pathlib.Path, step: int) -> None:
  """Opens every file of a step for reading, so that a file the file system refuses is
  named (a read inside TensorStore names its database, not the file).

  Raises:
    StorageError: a file or folder refused (EACCES, EMFILE, EIO, ...).
  """
  def refused(error: OSError):
    storage = _storage_error(error, folder / CHECKPOINTS / str(step), step,
                             f'read the checkpoint of step {step}')
    if storage is not None:
      raise storage from None

  for root, _, names in os.walk(folder / CHECKPOINTS / str(step), onerror=refused):
    for name in names:
      try:
        os.close(os.open(os.path.join(root, name), os.O_RDONLY))
      except OSError as error:
        refused(error)


def _read_record(folder: pathlib.Path, step: int) -> dict:
  """The step's record, checked against its own sha256.

  Raises:
    Damaged: no record ('unverified'), or one that cannot be decoded or fails its own
      sha256 ('undecodable').
    StorageError: the file system refused the read.
  """
  path = folder / CHECKPOINTS / str(step) / _RECORD / _RECORD_FILE
  try:
    record = json.loads(path.read_bytes())
  except FileNotFoundError:
    raise Damaged(f'{folder}: the checkpoint of step {step} has no checksum record ({path} is '
                  'missing), so what it holds cannot be verified', path, step,
                  'unverified') from None
  except OSError as error:
    storage = _storage_error(error, path, step, f'read the checkpoint of step {step}')
    if storage is None:
      raise _damage(error, folder, step) from None
    raise storage from None
  except ValueError as error:  # JSON or UTF-8 that does not decode
    raise Damaged(f'{folder}: the checkpoint of step {step} is damaged: its checksum record '
                  f'{path} cannot be decoded ({type(error).__name__}: {_first_line(error)})',
                  path, step, 'undecodable') from None
  leaves = record.get('leaves') if isinstance(record, dict) else None
  if not isinstance(leaves, dict) or record.get('sha256') != _entries_digest(leaves):
    raise Damaged(f'{folder}: the checkpoint of step {step} is damaged: its checksum record '
                  f'{path} does not match its own sha256', path, step, 'undecodable')
  return record


def _mismatch(record: dict, target) -> str | None:
  """Where ``target``'s leaves (names, shapes, dtypes) are not the record's, the first
  three named; None where they are."""
  wanted = {_leaf_name(path): (str(np.dtype(leaf.dtype)), list(leaf.shape))
            for path, leaf in jax.tree_util.tree_flatten_with_path(target)[0]}
  saved = {name: (entry.get('dtype'), entry.get('shape'))
           for name, entry in record['leaves'].items() if isinstance(entry, dict)}
  names = sorted(name for name in wanted.keys() | saved.keys()
                 if wanted.get(name) != saved.get(name))
  if not names:
    return None
  return ', '.join(f'{name} (saved {saved.get(name, "absent")}, expected '
                   f'{wanted.get(name, "absent")})' for name in names[:3]) + (
                       ' ...' if len(names) > 3 else '')


def _orbax(folder: pathlib.Path, step: int, read):
  """``read(handler, path)`` with orbax's handler of the state and the path of the step's
  state, its errors classified (``_classified``). Reads go to the step's folder alone: a
  manager would open every step's metadata."""
  handler = ocp.StandardCheckpointHandler()
  try:
    with _quiet_orbax():
      return read(handler, (folder / CHECKPOINTS / str(step) / _STATE).absolute())
  except Exception as error:  # pylint: disable=broad-exception-caught
    raise _classified(error, folder, step) from None
  finally:
    handler.close()


def _metadata_tree(handler: ocp.StandardCheckpointHandler, path: pathlib.Path):
  metadata = handler.metadata(path)
  return getattr(metadata, 'tree', metadata)  # newer orbax wraps the tree in a TreeMetadata


def _restore(folder: pathlib.Path, step: int, target=None):
  """The verified state of a step, restored into ``target`` (None: the structure, shapes and
  dtypes of orbax's metadata of the step, onto this process's first device)."""
  _check_access(folder, step)
  record = _read_record(folder, step)
  if target is None:
    here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree_util.tree_map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=here),
        _orbax(folder, step, _metadata_tree))
    mismatch = _mismatch(record, target)
    if mismatch:
      raise Damaged(f'{folder}: the checkpoint of step {step} is damaged: its orbax metadata '
                    f'differs from its checksum record: {mismatch}',
                    folder / CHECKPOINTS / str(step) / _STATE, step, 'undecodable')
  else:
    mismatch = _mismatch(record, target)
    if mismatch:
      raise ValueError(f'target: {folder}: the checkpoint of step {step} holds a state of '
                       f'another structure: {mismatch}')
  state = _orbax(folder, step, lambda handler, path: handler.restore(
      path, args=ocp.args.StandardRestore(target)))
  got = _record(state)['leaves']
  differ = sorted(name for name, entry in record['leaves'].items() if got.get(name) != entry)
  if differ:
    raise Damaged(f'{folder}: the checkpoint of step {step} is damaged: {len(differ)} of its '
                  f'{len(got)} arrays differ from the checksum recorded when it was saved '
                  f'({", ".join(differ[:3])}{" ..." if len(differ) > 3 else ""})',
                  folder / CHECKPOINTS / str(step), step, 'checksum')
  return state


def _classified(error: Exception, folder: pathlib.Path, step: int) -> Exception:
  """What an error orbax raised while reading a step is: the device's own errors (out of
  memory) as they are, a ``StorageError``, or else ``Damaged``."""
  for link in _chain(error):
    if isinstance(link, (jax.errors.JaxRuntimeError, MemoryError)):
      return link
  storage = _storage_error(error, folder / CHECKPOINTS / str(step), step,
                           f'read the checkpoint of step {step}')
  return storage if storage is not None else _damage(error, folder, step)


def restore(folder: pathlib.Path, step: int, target: Any) -> Any:
  """The state saved as the checkpoint of ``step`` in a run folder, verified against its
  record: bit for bit what was saved.

  Args:
    folder: the run folder.
    step: a step of ``saved_steps(folder)``.
    target: the pytree to restore into (one run's state, optimizer state included):
      ``jax.ShapeDtypeStruct`` leaves with the shardings to place them on, or without
      (numpy arrays).

  Returns:
    ``target``'s structure with ``jax.Array`` leaves (numpy where ``target`` has no
    shardings).

  Raises:
    Damaged: an array differs from the record ('checksum'), a file cannot be decoded
      ('undecodable': cut short, garbled, missing), or no record ('unverified').
    StorageError: the file system refused a read (EACCES, EMFILE, EIO, ...), one line
      naming the file.
    ValueError: the step holds leaves of other names, shapes or dtypes than ``target``;
      ``step`` is not a saved step; a leaf of ``target`` has no shape or dtype.
  """
  folder = pathlib.Path(folder)
  _check_target(target)
  steps = saved_steps(folder)
  if step not in steps:
    raise ValueError(f'step: expected one of the saved steps {steps} of {folder}, got {step!r}')
  return _restore(folder, int(step), target)


def _check_target(target) -> None:
  for path, leaf in jax.tree_util.tree_flatten_with_path(target)[0]:
    if not (hasattr(leaf, 'shape') and hasattr(leaf, 'dtype')):
      raise ValueError(f'target: expected leaves with a shape and a dtype (jax.ShapeDtypeStruct), '
                       f'got {type(leaf).__name__} at {_leaf_name(path)}')


def restore_group(folders: Sequence[pathlib.Path], target: Any) -> tuple[int, list]:
  """The newest step that every run folder of a group holds and can restore and verify,
  with each run's state.

  A damaged step (``Damaged``) is named in a warning (run folder, step, why) and the
  next older common step is tried. Once a step is chosen, each folder's steps newer
  than it are moved aside, never deleted: damaged ones to ``<step>.damaged``, the
  others (whose step another run of the group could not restore) to ``<step>.unused``;
  so that the group's saves from there on start from a folder whose newest step is the
  one resumed. Any other error stops the restore with nothing moved.

  Args:
    folders: the R run folders of the group.
    target: one run's state to restore into (``restore``'s ``target``); the same for
      every run of the group.

  Returns:
    ``(step, states)``: the step and the R states (``target``'s structure); ``(0, [])``
    when no step is common to all, or every common one is damaged somewhere.

  Raises:
    StorageError: from ``restore``: a file the file system refused (one line).
    ValueError: a step of another structure than ``target`` (one line).
  """
  _check_target(target)
  folders = [pathlib.Path(folder) for folder in folders]
  common = set.intersection(*(set(saved_steps(f)) for f in folders)) if folders else set()
  damaged, chosen, states = set(), 0, []
  for step in sorted(common, reverse=True):
    states = []
    for folder in folders:
      try:
        states.append(_restore(folder, step, target))
      except Damaged as error:
        logging.warning('%s; using an older step', error)
        damaged.add((folder, step))
        break
    if len(states) == len(folders):
      chosen = step
      break
  else:
    states = []
  for folder in folders:
    for step in saved_steps(folder):
      if step > chosen:
        why = 'damaged' if (folder, step) in damaged else 'unused'
        logging.warning('%s: moved the checkpoint of step %d aside to %s (resuming from step '
                        '%d)', folder, step, _move_aside(folder, step, why), chosen)
  _sync('rnnjax.checkpoints.restore_group')
  return chosen, states


def final_params(folder: pathlib.Path) -> tuple[dict, Any]:
  """The config and the params of an ended run's latest checkpoint, verified (a diverged
  run's are its last finite params).

  Returns:
    ``(config, params)``: config.json as a dict, and the ``params`` entry of the saved
    state (dicts of arrays as the experiment's model built them) on this process's
    first device.

  Raises:
    FileNotFoundError: the folder holds no ended run (no summary.json saying finished
      or diverged) or no checkpoint; the message says what to run.
    Damaged: the latest checkpoint is damaged; one line naming the run, the step and
      to train the run again with --overwrite.
    StorageError: the file system refused a read (one line naming the file).
  """
  folder = pathlib.Path(folder)
  summary = _read_json(folder / _SUMMARY)
  if summary is None or summary.get('status') not in _ENDED:
    raise FileNotFoundError(f'{folder} holds no ended run (no {_SUMMARY} with status finished '
                            f'or diverged); train one first with python -m launch.run '
                            f'--config=... --workdir={folder}')
  steps = saved_steps(folder)
  if not steps:
    raise FileNotFoundError(f'{folder} has no checkpoint; train the run again with --overwrite')
  try:
    state = _restore(folder, steps[-1])
  except Damaged as error:
    raise Damaged(f'{error}; it holds the final params of the run: train the run again with '
                  '--overwrite', error.path, error.step, error.reason) from None
  return _read_json(folder / _CONFIG), state['params']


def _read_json(path: pathlib.Path) -> dict | None:
  """The JSON object at ``path``, or None where it is missing, unreadable or not one."""
  try:
    value = json.loads(pathlib.Path(path).read_text())
  except (OSError, ValueError):
    return None
  return value if isinstance(value, dict) else None
