"""A run folder's files, its lock, and the one way the harness writes a file.

A run folder holds

  config.json     the run's full config (written first, atomically)
  metrics.jsonl   one JSON line per logged step (``records``)
  tensorboard/    TensorBoard event files of the same metrics (``records``)
  checkpoint/     checkpoints of the whole training state (``checkpoints``)
  summary.json    written last, atomically: its presence means the run ended
  timing.json     where the run's wall-clock time went (not a result)
  devices.json    the devices each start of the run trained on, from which step
  result.json     how the last job of the run ended (status, reason, exit kind)
  log.txt         the log of the jobs that trained it (appended)
  .lock           held (flock) by the process that trains the run; names it

Every file is written through a temporary file and a rename, so a kill leaves
either the old or the new file, never half of one; no write follows a symbolic
link (``O_NOFOLLOW``; a run folder whose files are links is refused).
"""

import fcntl
import json
import os
import pathlib
import shutil
import socket

__all__ = ['CONFIG', 'METRICS', 'SUMMARY', 'TIMING', 'DEVICES', 'RESULT', 'CHECKPOINTS',
           'TENSORBOARD', 'LOCK', 'LOG', 'RUN_FILES', 'ENDED', 'FolderInUse', 'write_bytes',
           'write_json', 'write_text', 'append_text', 'read_json', 'check_path', 'check_links',
           'lock', 'clear']

CONFIG = 'config.json'
METRICS = 'metrics.jsonl'
SUMMARY = 'summary.json'
TIMING = 'timing.json'
DEVICES = 'devices.json'
RESULT = 'result.json'
CHECKPOINTS = 'checkpoint'
TENSORBOARD = 'tensorboard'
LOCK = '.lock'
LOG = 'log.txt'  # kept by an overwrite
RUN_FILES = (CONFIG, METRICS, SUMMARY, TIMING, DEVICES, RESULT, CHECKPOINTS, TENSORBOARD, LOCK,
             LOG)
ENDED = ('finished', 'diverged')


class FolderInUse(RuntimeError):
  """Another process holds the folder's lock."""


def _open(path: pathlib.Path, flags: int) -> int:
  """``os.open`` that never follows a link at ``path``.

  Raises:
    OSError: ELOOP naming the link, or the error of the open.
  """
  try:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
  except OSError as error:
    if error.errno == 40:  # ELOOP: the last component is a link
      raise OSError(error.errno, f'{path} is a symbolic link; the harness writes no file '
                    'through a link') from None
    raise


def write_bytes(path: pathlib.Path, data: bytes) -> None:
  """Writes ``data`` through a new temporary file, fsync and a rename (which replaces a
  link at ``path`` rather than writing through it).

  Raises:
    OSError: when the disk is full or the folder is not writable; the old file,
      if any, is left as it was.
  """
  path = pathlib.Path(path)
  partial = path.with_name(f'.{path.name}.{os.getpid()}.part')
  partial.unlink(missing_ok=True)
  try:
    handle = _open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
      view = memoryview(data)
      while view:
        view = view[os.write(handle, view):]
      os.fsync(handle)
    finally:
      os.close(handle)
    os.replace(partial, path)
  finally:
    partial.unlink(missing_ok=True)


def write_json(path: pathlib.Path, record) -> None:
  """Writes ``record`` as indented JSON atomically (NaN and inf as NaN and Infinity)."""
  write_bytes(path, (json.dumps(record, indent=2, allow_nan=True) + '\n').encode())


def write_text(path: pathlib.Path, text: str) -> None:
  """Writes ``text`` atomically (as ``write_bytes``)."""
  write_bytes(path, text.encode())


def append_text(path: pathlib.Path, text: str, sync: bool = False) -> None:
  """Appends ``text`` to ``path`` (made if missing, never through a link), in one write."""
  handle = _open(pathlib.Path(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
  try:
    os.write(handle, text.encode())
    if sync:
      os.fsync(handle)
  finally:
    os.close(handle)


def read_json(path: pathlib.Path, kind: type = dict):
  """The JSON at ``path`` (an object, or with ``kind=list`` an array), or None if it
  is missing, unreadable (a folder, no permission), not valid JSON or of another kind
  (a damaged file reads as no file)."""
  try:
    value = json.loads(pathlib.Path(path).read_text())
  except (OSError, json.JSONDecodeError, UnicodeDecodeError):
    return None
  return value if isinstance(value, kind) else None


def check_path(folder: pathlib.Path) -> None:
  """Raises ValueError where ``folder`` cannot be a folder: it, or the first of its
  parents that exists, is a file, or a link to nothing."""
  folder = pathlib.Path(folder)
  for path in (folder.absolute(), *folder.absolute().parents):
    if path.is_symlink() and not path.exists():
      raise ValueError(f'workdir: {path} is a link to {os.readlink(path)}, which does not exist')
    if path.exists():
      if not path.is_dir():
        raise ValueError(f'workdir: {path} is a file, expected a folder (the run folder {folder} '
                         'or one that holds it)')
      return


def check_links(folder: pathlib.Path) -> None:
  """Raises ValueError where a run file or folder of ``folder`` is a symbolic link (the
  harness would write through it into another place)."""
  for name in RUN_FILES:
    if (pathlib.Path(folder) / name).is_symlink():
      raise ValueError(f'{folder}: {name} is a symbolic link; a run folder holds no links')


def lock(folder: pathlib.Path):
  """Takes the folder's lock for as long as the returned file descriptor stays open (or
  the process lives: the kernel drops it at exit, SIGKILL included).

  Returns:
    the lock's file descriptor; ``os.close`` it to release.

  Raises:
    FolderInUse: another process holds it; the message names its pid and host.
    ValueError: from ``check_path``, or a lock that is a link.
    OSError: the folder or its lock cannot be made or written (a full disk, a
      read-only file system), with the error's errno and the folder named.
  """
  folder = pathlib.Path(folder)
  check_path(folder)
  try:
    folder.mkdir(parents=True, exist_ok=True)
    handle = _open(folder / LOCK, os.O_RDWR | os.O_CREAT)
  except OSError as error:
    if error.errno == 40:
      raise ValueError(str(error)) from None
    raise OSError(error.errno, f'{folder}: cannot make it or its lock ({error.strerror})') from None
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    holder = os.pread(handle, 200, 0).decode(errors='replace').strip() or 'another process'
    os.close(handle)
    raise FolderInUse(f'{folder} is in use by {holder}; wait for it to end or stop it') from None
  try:
    os.ftruncate(handle, 0)
    os.pwrite(handle, f'pid {os.getpid()} on host {socket.gethostname()}\n'.encode(), 0)
  except OSError as error:
    os.close(handle)
    raise OSError(error.errno, f'{folder}: cannot write its lock ({error.strerror})') from None
  return handle


def clear(folder: pathlib.Path) -> None:
  """Removes everything in a locked folder but its lock and log.txt (links are removed,
  never followed)."""
  for entry in pathlib.Path(folder).iterdir():
    if entry.name in (LOCK, LOG):
      continue
    if entry.is_dir() and not entry.is_symlink():
      shutil.rmtree(entry)
    else:
      entry.unlink()
