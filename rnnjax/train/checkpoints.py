"""A run's checkpoints: orbax underneath, each step verified against a record of what was saved.

``checkpoint/<step>/`` holds ``state/`` and ``checksum/`` (per leaf, by its orbax name
'opt_state.0.mu.w', the dtype, shape and sha256 of the bytes, and the sha256 of those entries),
finalised together by one rename; the last two steps are kept. A read gives the state bit for
bit, or raises ``Damaged`` (not the bytes saved: OCDBT's data carry no checksum), ``StorageError``
(the file system refused: the step may be good) or ``ValueError`` (another structure); only
``Damaged`` lets a group fall back to an older step. Nothing is deleted: a step is moved aside
to ``<step>.damaged``, ``<step>.unused`` (newer than the step resumed) or ``<step>.superseded``.

References: orbax's CheckpointManager; TensorStore's OCDBT format
(https://google.github.io/tensorstore/kvstore/ocdbt/index.html).
"""

import asyncio
import concurrent.futures
import contextlib
import errno
import functools
import hashlib
import json
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

from rnnjax import checks
from rnnjax.train import devices
from rnnjax.train import run_folder

__all__ = ['CHECKPOINTS', 'CheckpointError', 'Damaged', 'StorageError', 'manager', 'save',
           'saved_steps', 'restore', 'restore_group', 'final_params']

CHECKPOINTS = run_folder.CHECKPOINTS  # the run folder's subfolder of steps
# Refusals of the file system, not faults of the bytes: errnos, and TensorStore's status words.
_REFUSED = {errno.EACCES, errno.EPERM, errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT,
            errno.EIO, errno.EROFS, errno.ENOMEM, errno.ESTALE, errno.ETIMEDOUT, errno.EAGAIN,
            errno.EBUSY, errno.EFBIG, 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'UNAVAILABLE',
            'DEADLINE_EXCEEDED'}
# TensorStore's error of a file it cannot decode: 'WORD: Error reading "key" in ... "/file": cause'
_DECODING = re.compile(r'[A-Z_]+: (?:Error reading "([^"]+)")?.*"/[^"]+": (.*)')
_name = functools.partial(jax.tree_util.keystr, simple=True, separator='.')  # as orbax names leaves


class CheckpointError(Exception):
  """A step that cannot be used: one line naming ``path`` (a file or the step) and ``step``."""

  def __init__(self, message: str, path: pathlib.Path, step: int | None):
    super().__init__(message)
    self.path, self.step = pathlib.Path(path), step


class Damaged(CheckpointError):
  """The bytes are not what was saved; ``reason``: 'checksum' (an array differs from the
  record), 'undecodable' (a file cannot be decoded) or 'unverified' (no record)."""

  def __init__(self, message: str, path: pathlib.Path, step: int | None, reason: str):
    super().__init__(message, path, step)
    self.reason = reason


class StorageError(CheckpointError, OSError):
  """The file system refused a read or a write: an ``OSError`` with the cause's ``errno``
  (None where TensorStore named only a status word) and ``filename``."""

  def __init__(self, message: str, path: pathlib.Path, step: int | None, number: int | None):
    super().__init__(message, path, step)
    self.errno, self.filename = number, str(path)

  def __str__(self) -> str:  # the message, not OSError's '[Errno 13] ...'
    return self.args[0]


def _record(state: Any) -> dict:
  leaves = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(devices.to_host(state))[0]:
    host = np.asarray(leaf)
    digest = hashlib.sha256(f'{host.dtype}|{list(host.shape)}|'.encode() + host.tobytes())
    leaves[_name(path)] = {'dtype': str(host.dtype), 'shape': list(host.shape),
                           'sha256': digest.hexdigest()}
  return {'leaves': leaves, 'sha256': _digest(leaves)}


def _digest(leaves: dict) -> str:
  return hashlib.sha256(json.dumps(leaves, sort_keys=True).encode()).hexdigest()


def _classify(error: BaseException, path: pathlib.Path, step: int | None, doing: str,
              folder: pathlib.Path | None = None) -> BaseException:
  """What ``error`` or one it was raised from is: the device's own (out of memory) as it is;
  a ``StorageError`` for an errno or TensorStore status word of ``_REFUSED``; else, reading
  a step of ``folder``, ``Damaged`` naming the file TensorStore names (else ``path``)."""
  chain: list[BaseException] = [error]
  while (cause := chain[-1].__cause__ or chain[-1].__context__) and cause not in chain:
    chain.append(cause)
  for link in chain:
    if isinstance(link, (jax.errors.JaxRuntimeError, MemoryError)):
      return link
    text = re.split(r' \[(?:tensorstore_spec|source locations)', f'{link}\n'.splitlines()[0])[0]
    word = (re.match(r'([A-Z_]+): ', text) or [None, None])[1]
    number = run_folder.errno_of(link)
    files = [pathlib.Path(name) for name in re.findall(r'"(/[^"]+)"', text)]
    where = pathlib.Path(getattr(link, 'filename', None) or (files or [path])[-1])
    if number in _REFUSED or (number is None and word in _REFUSED):
      why = f'{os.strerror(number)} ({errno.errorcode[number]})' if number else word
      return StorageError(f'{where}: cannot {doing}: {why}; nothing was deleted', where, step,
                          number)
    if folder and (read := _DECODING.match(text)):
      return Damaged(f'{folder}: the checkpoint of step {step} is damaged: {where} cannot be '
                     f'decoded{f" (reading {read[1]})" if read[1] else ""}: {word}: '
                     f'{read[2][:200]}', where, step, 'undecodable')
  text = f'{type(error).__name__}: {error}\n'.splitlines()[0][:200]
  return Damaged(f'{folder}: the checkpoint of step {step} is damaged: {path} cannot be decoded '
                 f'({text})', path, step, 'undecodable') if folder else error


class _Threads(concurrent.futures.ThreadPoolExecutor):
  """The threads of every ``_Loop``'s ``to_thread`` calls, kept: a loop's own default executor
  would start its threads anew for each of orbax's calls."""

  def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
    del wait, cancel_futures  # a loop's close; the threads end with the process


_THREADS = _Threads(thread_name_prefix='rnnjax-checkpoints')


class _Loop(asyncio.SelectorEventLoop):
  """Closes once the reads still running after one failed are done (else they report to a
  closed loop, 'Event loop is closed', and hold their files open); its ``to_thread`` calls run
  on ``_THREADS``."""

  def __init__(self) -> None:
    selector = selectors.DefaultSelector()
    try:
      super().__init__(selector)
    except OSError:  # EMFILE making its own pipe: nothing left open, nothing to close later
      selector.close()
      self._closed = True
      raise
    self.set_default_executor(_THREADS)

  def close(self) -> None:
    pending = [task for task in asyncio.all_tasks(self) if not task.done()]
    if pending and not self.is_closed():
      self.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    super().close()


@contextlib.contextmanager
def _draining(quiet: bool = False) -> Iterator[None]:
  """Orbax's calls within (it makes an event loop per call) run on ``_Loop``s. ``quiet`` (a
  save, mid-training): they log their warnings and errors only, unless absl's verbosity is
  above INFO (``-v 1``: debugging); a worker shows no library's INFO at verbosity 0
  (``job.setup_process``), and the records of orbax's INFO lines are not made at all. (Absl's
  verbosity is the process's: not for a restore, which may run beside a job's task loading
  and its INFO lines.)"""
  policy = asyncio.get_event_loop_policy()
  asyncio.set_event_loop_policy(type('Policy', (type(policy),),
                                     {'new_event_loop': lambda self: _Loop()})())
  level = logging.get_verbosity()
  quiet = quiet and level == logging.INFO
  if quiet:
    logging.set_verbosity(logging.WARNING)
  try:
    yield
  finally:
    asyncio.set_event_loop_policy(policy)
    if quiet:
      logging.set_verbosity(level)


class _Rename(ocp.path.atomicity.AtomicRenameTemporaryPath):
  """orbax's rename of a step or an item, less commit_success.txt (read in commit-file mode)."""

  async def finalize(self, *args: Any, **kwargs: Any) -> None:
    await super().finalize(*args, **kwargs)
    (self.get_final() / ocp.path.atomicity.COMMIT_SUCCESS_FILE).unlink(missing_ok=True)


def manager(folder: pathlib.Path) -> ocp.CheckpointManager:
  """The run folder's manager for ``save`` (synchronous, the last two steps kept, temporary
  folders of killed saves removed, no 4 KiB commit_success.txt files). Close it when done."""
  return ocp.CheckpointManager(
      (pathlib.Path(folder) / CHECKPOINTS).absolute(),
      item_handlers={'state': ocp.StandardCheckpointHandler(),
                     'checksum': ocp.JsonCheckpointHandler()},
      options=ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=False,
                                           cleanup_tmp_directories=True,
                                           temporary_path_class=_Rename))


def saved_steps(folder: pathlib.Path) -> list[int]:
  """The finalised steps of a run folder, oldest first (not those moved aside); raises
  ``StorageError`` where the file system refuses to list them."""
  root = pathlib.Path(folder) / CHECKPOINTS
  try:
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit()
                  and (p / '_CHECKPOINT_METADATA').exists()) if root.is_dir() else []
  except OSError as error:
    raise _classify(error, root, None, 'list the checkpoints') from None


def _move_aside(folder: pathlib.Path, step: int, why: str) -> pathlib.Path:
  """Renames ``checkpoint/<step>`` to ``<step>.<why>`` (``-2``, ... where taken) on the first
  process; returns the new path."""
  step_dir, count = folder / CHECKPOINTS / str(step), 1
  aside = step_dir.with_name(f'{step}.{why}')
  while aside.exists():
    count += 1
    aside = step_dir.with_name(f'{step}.{why}-{count}')
  if jax.process_index() == 0:
    step_dir.rename(aside)
  return aside


def save(checkpoint_manager: ocp.CheckpointManager, step: int, state: Any) -> bool:
  """Saves ``state`` (a pytree of arrays; each process calls) as the checkpoint of ``step``
  (>= 0) with its record, atomically, into ``checkpoint_manager`` (``manager(folder)``); saved
  steps at or after ``step`` with other values are first moved aside (``<step>.superseded``).

  Returns:
    True when written; False when the step was already saved with these values.

  Raises:
    ValueError: ``step`` is not an int >= 0.
    StorageError: the file system refused the write (ENOSPC, EACCES, ...); the steps saved
      before are kept.
  """
  step, record = checks.integer('step', step, 0), _record(state)
  folder = pathlib.Path(checkpoint_manager.directory).parent
  for later in [s for s in saved_steps(folder) if s >= step]:
    if later == step and record == run_folder.read_json(
        folder / CHECKPOINTS / str(step) / 'checksum' / 'metadata'):
      return False
    logging.warning('%s: the checkpoint of step %d holds other values than the run saving step '
                    '%d; moved it aside to %s', folder, later, step,
                    _move_aside(folder, later, 'superseded'), extra=run_folder.about(folder))
  if jax.process_count() > 1:  # the steps moved aside by the first process
    multihost_utils.sync_global_devices('rnnjax.checkpoints.save')
  try:
    with _draining(quiet=True):
      if sorted(checkpoint_manager.all_steps()) != saved_steps(folder):
        checkpoint_manager.reload()  # forgets the steps moved aside, here or by another process
      return bool(checkpoint_manager.save(step, force=True, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), checksum=ocp.args.JsonSave(record))))
  except Exception as error:  # pylint: disable=broad-exception-caught
    raise _classify(error, folder / CHECKPOINTS, step,
                    f'write the checkpoint of step {step}') from None


def _restore(folder: pathlib.Path, step: int, target: Any = None) -> Any:
  """The verified state of a step, restored into ``target`` (None: as saved, in numpy)."""
  wanted = {}
  for key, leaf in jax.tree_util.tree_flatten_with_path(target)[0]:
    if not (hasattr(leaf, 'shape') and hasattr(leaf, 'dtype')):
      raise ValueError('target: expected leaves with a shape and a dtype '
                       f'(jax.ShapeDtypeStruct), got {type(leaf).__name__} at {_name(key)}')
    wanted[_name(key)] = (str(np.dtype(leaf.dtype)), list(leaf.shape))
  step_dir = folder / CHECKPOINTS / str(step)
  doing, path = f'read the checkpoint of step {step}', step_dir / 'checksum' / 'metadata'
  try:
    record = json.loads(path.read_bytes())
    if record['sha256'] != _digest(record['leaves']):
      raise ValueError('the record does not match its own sha256')
  except FileNotFoundError:
    raise Damaged(f'{folder}: the checkpoint of step {step} has no checksum record ({path} is '
                  'missing), so what it holds cannot be verified', path, step,
                  'unverified') from None
  except (OSError, ValueError, TypeError, KeyError) as error:  # also JSON that does not decode
    raise _classify(error, path, step, doing, folder) from None
  saved = {name: (entry['dtype'], entry['shape']) for name, entry in record['leaves'].items()}
  differ = sorted(n for n in wanted.keys() | saved.keys() if wanted.get(n) != saved.get(n))
  if target is not None and differ:
    raise ValueError(
        f'target: {folder}: the checkpoint of step {step} holds a state of another structure: '
        + ', '.join(f'{n} (saved {saved.get(n, "absent")}, expected {wanted.get(n, "absent")})'
                    for n in differ[:3]) + (' ...' if len(differ) > 3 else ''))
  handler = ocp.StandardCheckpointHandler()
  try:
    with _draining():
      state = handler.restore((step_dir / 'state').absolute(),
                              args=ocp.args.StandardRestore(target))
  except Exception as error:  # pylint: disable=broad-exception-caught
    raise _classify(error, step_dir, step, doing, folder) from None
  finally:
    handler.close()
  got = _record(state)['leaves']
  differ = sorted(n for n in got.keys() | record['leaves'].keys()
                  if got.get(n) != record['leaves'].get(n))
  if differ:
    raise Damaged(f'{folder}: the checkpoint of step {step} is damaged: {len(differ)} of its '
                  f'{len(got)} arrays differ from the checksum recorded when it was saved '
                  f'({", ".join(differ[:3])}{" ..." if len(differ) > 3 else ""})', step_dir,
                  step, 'checksum')
  return state


def restore(folder: pathlib.Path, step: int, target: Any) -> Any:
  """The state saved in run ``folder`` as the checkpoint of ``step``, bit for bit, restored
  into ``target`` (``jax.ShapeDtypeStruct`` leaves; without shardings: numpy arrays).

  Raises:
    Damaged: an array differs from the record ('checksum'), a file cannot be decoded
      ('undecodable': cut short, garbled, missing), or no record ('unverified').
    StorageError: the file system refused a read (EACCES, EMFILE, ...), one line naming the file.
    ValueError: ``step`` is not a saved step; ``target`` is not the step's structure.
  """
  if step not in (steps := saved_steps(folder)):
    raise ValueError(f'step: expected one of the saved steps {steps} of {folder}, got {step!r}')
  return _restore(pathlib.Path(folder), int(step), target)


def restore_group(folders: Sequence[pathlib.Path], target: Any) -> tuple[int, list]:
  """The newest step that the R run ``folders`` of a group all restore and verify into
  ``target`` (``restore``'s), with their R states; ``(0, [])`` when there is none.

  A ``Damaged`` step is named in a warning and the next older common step tried; then each
  folder's steps newer than the one chosen are moved aside (to ``<step>.damaged``, or else
  ``<step>.unused``), so that the group's saves go on from it. Other errors move nothing.

  Raises:
    StorageError, ValueError: as ``restore``.
  """
  folders = [pathlib.Path(folder) for folder in folders]
  common = set.intersection(*(set(saved_steps(f)) for f in folders)) if folders else set()
  damaged: set[tuple[pathlib.Path, int]] = set()
  chosen, states = 0, list[Any]()
  for step in sorted(common, reverse=True):
    try:
      states = []
      for folder in folders:
        states.append(_restore(folder, step, target))
      chosen = step
      break
    except Damaged as error:
      logging.warning('%s; using an older step', error, extra=run_folder.about(folder))
      damaged.add((folder, step))
      states = []
  for folder in folders:
    for step in [s for s in saved_steps(folder) if s > chosen]:
      aside = _move_aside(folder, step, 'damaged' if (folder, step) in damaged else 'unused')
      logging.warning('%s: moved the checkpoint of step %d aside to %s (resuming from step %d)',
                      folder, step, aside, chosen, extra=run_folder.about(folder))
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices('rnnjax.checkpoints.restore_group')
  return chosen, states


def final_params(folder: pathlib.Path) -> tuple[dict, Any]:
  """``(config, params)`` of the ended run in ``folder``: config.json as a dict and the params
  of its latest checkpoint, verified, on this process's first device (a diverged run's are
  its last finite params).

  Raises:
    FileNotFoundError: no ended run or no checkpoint in ``folder`` (says what to run).
    Damaged: the checkpoint is damaged (one line: the run, the step, what to do).
    StorageError: the file system refused a read (one line naming the file).
  """
  folder = pathlib.Path(folder)
  summary = run_folder.read_json(folder / run_folder.SUMMARY)
  if summary is None or summary.get('status') not in run_folder.ENDED:
    raise FileNotFoundError(f'{folder} holds no ended run (no {run_folder.SUMMARY} with status '
                            'finished or diverged); train one first with rnnjax-run '
                            f'--config=... --workdir={folder}')
  if not (steps := saved_steps(folder)):
    raise FileNotFoundError(f'{folder} has no checkpoint; train the run again with --overwrite')
  try:
    state = _restore(folder, steps[-1])
  except Damaged as error:
    raise Damaged(f'{error}; it holds the final params of the run: train the run again with '
                  '--overwrite', error.path, error.step, error.reason) from None
  params = jax.device_put(state['params'], jax.local_devices()[0])
  return run_folder.read_json(folder / run_folder.CONFIG), params
