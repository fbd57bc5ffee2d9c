"""A run folder's files, its lock, and the one way the harness writes a file.

  config.json     the run's full config (written first)
  metrics.jsonl   one JSON line per logged step; tensorboard/: the same as events
  checkpoint/     checkpoints of the whole training state (``checkpoints``)
  summary.json    written last: its presence means the run ended
  timing.json     where the run's wall-clock time went; devices.json: where it trained
  log.txt         the logs of the jobs that trained it (appended)
  .lock           held (flock) by the process that trains the run; names it

Every file is written through a temporary file and a rename, so a kill leaves the old or
the new file, never half of one; no write follows a symbolic link.
"""

import errno
import fcntl
import json
import os
import pathlib
import re
import shutil
import socket
from typing import Any

__all__ = ['CONFIG', 'METRICS', 'SUMMARY', 'TIMING', 'DEVICES', 'CHECKPOINTS', 'TENSORBOARD',
           'LOCK', 'LOG', 'SWEEP_INDEX', 'RUN_FILES', 'ENDED', 'FolderInUse', 'write',
           'write_json', 'append_text', 'read_json', 'check_path', 'check_links', 'nested', 'lock',
           'clear', 'about', 'errno_of']

CONFIG = 'config.json'
METRICS = 'metrics.jsonl'
SUMMARY = 'summary.json'
TIMING = 'timing.json'
DEVICES = 'devices.json'
CHECKPOINTS = 'checkpoint'
TENSORBOARD = 'tensorboard'
LOCK = '.lock'
LOG = 'log.txt'  # kept by an overwrite
SWEEP_INDEX = 'runs.json'  # a sweep's folder: its run folders' names and values
RUN_FILES = (CONFIG, METRICS, SUMMARY, TIMING, DEVICES, CHECKPOINTS, TENSORBOARD, LOCK, LOG)
ENDED = ('finished', 'diverged')


class FolderInUse(RuntimeError):
  """Another process holds the folder's lock."""


def _open(path: pathlib.Path, flags: int) -> int:
  """``os.open`` that never follows a link at ``path`` (OSError ELOOP naming it)."""
  try:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
  except OSError as error:
    if error.errno == errno.ELOOP:
      raise OSError(error.errno, f'{path} is a symbolic link; the harness writes no file '
                    'through a link') from None
    raise


def write(path: pathlib.Path, data: bytes | str) -> None:
  """Writes ``data`` (text as UTF-8) through a temporary file, fsync and a rename (which
  replaces a link at ``path``). Raises OSError (a full disk...), the old file left as it was."""
  path = pathlib.Path(path)
  view = memoryview(data.encode() if isinstance(data, str) else data)
  partial = path.with_name(f'.{path.name}.{os.getpid()}.part')
  partial.unlink(missing_ok=True)
  try:
    handle = _open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
      while view:
        view = view[os.write(handle, view):]
      os.fsync(handle)
    finally:
      os.close(handle)
    os.replace(partial, path)
  finally:
    partial.unlink(missing_ok=True)


def write_json(path: pathlib.Path, record: Any) -> None:
  """Writes ``record`` as indented JSON (NaN and inf as NaN and Infinity), as ``write``."""
  write(path, json.dumps(record, indent=2, allow_nan=True) + '\n')


def append_text(path: pathlib.Path, text: str, sync: bool = False) -> None:
  """Appends ``text`` to ``path`` (made if missing, never through a link) in one write."""
  handle = _open(pathlib.Path(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
  try:
    os.write(handle, text.encode())
    if sync:
      os.fsync(handle)
  finally:
    os.close(handle)


def read_json(path: pathlib.Path, kind: type = dict) -> Any:
  """The JSON object (or with ``kind=list`` array) at ``path``; None where it is missing,
  unreadable, not JSON or of another kind (a damaged file reads as no file)."""
  try:
    value = json.loads(pathlib.Path(path).read_text())
  except (OSError, json.JSONDecodeError, UnicodeDecodeError):
    return None
  return value if isinstance(value, kind) else None


def check_path(folder: pathlib.Path, kind: str = '') -> None:
  """Raises ValueError where ``folder`` cannot be a folder: its path is not UTF-8 (the run's
  files and logs record it); it, or the first of its parents that exists, is a file or a link
  to nothing; or, for ``kind`` 'run' or 'sweep', where it holds the other kind: a folder is a
  run's (config.json) or a sweep's (runs.json), never both, and a run folder holds no other run
  or sweep below it (``nested``), so that clearing a run never deletes another."""
  folder = pathlib.Path(folder)
  try:
    str(folder.absolute()).encode()
  except UnicodeEncodeError:  # bytes that are not UTF-8 arrive as surrogates (PEP 383)
    shown = os.fsencode(folder.absolute()).decode(errors='backslashreplace')
    raise ValueError(f"workdir: expected a path in UTF-8, got '{shown}' (\\x: bytes that are "
                     'not UTF-8); give a folder whose name is UTF-8 text') from None
  for path in (folder.absolute(), *folder.absolute().parents):
    if path.is_symlink() and not path.exists():
      raise ValueError(f'workdir: {path} is a link to {os.readlink(path)}, which does not exist')
    if path.exists():
      if not path.is_dir():
        raise ValueError(f'workdir: {path} is a file, expected a folder (the run folder {folder} '
                         'or one that holds it)')
      break
  other = {'run': SWEEP_INDEX, 'sweep': CONFIG}.get(kind)
  if other and (folder / other).exists():
    raise ValueError(f'workdir: {folder} holds {other}, so it is not a {kind} folder (a folder '
                     f"is a run's or a sweep's, never both); give the {kind} another folder")
  if kind == 'run' and (below := nested(folder)):
    raise ValueError(f'workdir: {folder} holds another run or sweep in {below.parent} (its '
                     f'{below.name}), so nothing in it is cleared or trained; move that one out '
                     'or give the run another folder')


def nested(folder: pathlib.Path) -> pathlib.Path | None:
  """The first config.json or runs.json in a folder below run ``folder`` (links not followed),
  None where there is none: the mark of another run or sweep, which clearing the run would
  delete. Without a config.json of its own, only the run's subfolders (``RUN_FILES``) are
  searched: a folder that holds anything else is no run folder and is never cleared (``plan``)."""
  folder = pathlib.Path(folder)
  if not folder.is_dir() or folder.is_symlink():
    return None
  own = (folder / CONFIG).is_file()
  for entry in sorted(folder.iterdir()):
    if not entry.is_dir() or entry.is_symlink() or not (own or entry.name in RUN_FILES):
      continue
    for parent, _, files in sorted(os.walk(entry)):
      for name in (CONFIG, SWEEP_INDEX):
        if name in files:
          return pathlib.Path(parent) / name
  return None


def check_links(folder: pathlib.Path) -> None:
  """Raises ValueError where a run file of ``folder`` is a symbolic link."""
  for name in RUN_FILES:
    if (pathlib.Path(folder) / name).is_symlink():
      raise ValueError(f'{folder}: {name} is a symbolic link; a run folder holds no links')


def lock(folder: pathlib.Path) -> int:
  """Takes the folder's lock (made with the folder) while the returned descriptor is open
  (``os.close`` it) or the process lives; writes the holder's pid and host into it.

  Raises:
    FolderInUse: another process holds it (naming its pid and host).
    ValueError: from ``check_path``, or a lock that is a link.
    OSError: the folder or its lock cannot be made or written, naming the folder.
  """
  folder = pathlib.Path(folder)
  check_path(folder)
  handle = -1
  try:
    folder.mkdir(parents=True, exist_ok=True)
    handle = _open(folder / LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(handle, 0)
    os.pwrite(handle, f'pid {os.getpid()} on host {socket.gethostname()}\n'.encode(), 0)
    return handle
  except BlockingIOError:
    holder = os.pread(handle, 200, 0).decode(errors='replace').strip() or 'another process'
    os.close(handle)
    raise FolderInUse(f'{folder} is in use by {holder}; wait for it to end or stop it') from None
  except OSError as error:
    if handle >= 0:
      os.close(handle)
    if error.errno == errno.ELOOP:
      raise ValueError(error.strerror) from None  # what the link is, without "[Errno 40]"
    raise OSError(error.errno, f'{folder}: cannot make it or its lock ({error.strerror})') from None


def clear(folder: pathlib.Path) -> None:
  """Removes everything in a locked folder but its lock and log.txt (links are removed,
  never followed); raises ValueError (``check_path``), deleting nothing, where another run or
  sweep is below it."""
  check_path(folder, 'run')
  for entry in pathlib.Path(folder).iterdir():
    if entry.is_dir() and not entry.is_symlink():
      shutil.rmtree(entry)
    elif entry.name not in (LOCK, LOG):
      entry.unlink()


def about(folder: pathlib.Path | None) -> dict:
  """logging's ``extra`` for a line about the run in ``folder``: a job writes it to that
  run's log.txt alone (``job``)."""
  return {'run_folder': folder}


def errno_of(error: BaseException) -> int | None:
  """The errno of an error: its ``errno`` attribute, else the number TensorStore writes into
  its text (``[os_error_code='28']``, ``OS error 28``, ``[Errno 28]``); None where it has none."""
  number = getattr(error, 'errno', None)
  if isinstance(number, int):
    return number
  found = re.search(r"(?:OS error |\[Errno |os_error_code=')(\d+)", str(error))
  return int(found[1]) if found else None
