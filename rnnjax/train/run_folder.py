"""The run folder: the one place that reads and writes a run's files.

A run folder holds

  config.json     the run's full config (written first, atomically)
  metrics.jsonl   one JSON line per logged step (step 1, every log_every, the last)
  tensorboard/    TensorBoard event files of the same metrics
  checkpoint/     orbax checkpoints of the whole training state (the last two kept)
  summary.json    written last, atomically: its presence means the run ended
  timing.json     where the run's wall-clock time went (not a result: it differs
                  between two identical runs, so results files hold no time)
  devices.json    the devices each start of the run trained on, from which step
  .lock           held (flock) by the process that trains the run; names it

Rules (the run harness follows them in this order): the config and every input
are checked before anything here is touched; a folder whose config.json
differs from the run's config is refused with the differing keys named, unless
asked to overwrite, which clears the whole folder; a folder with the same
config resumes from its latest readable checkpoint, and a finished one is
reported, not trained again. Every file is written through a temporary file
and a rename, so a kill leaves either the old or the new file, never half of
one; metrics.jsonl, appended line by line, is cut back to the restored step
on resume.
"""

import fcntl
import json
import os
import pathlib
import shutil
import socket
import sys
import time

from absl import logging
import jax
import orbax.checkpoint as ocp

CONFIG = 'config.json'
METRICS = 'metrics.jsonl'
SUMMARY = 'summary.json'
TIMING = 'timing.json'
DEVICES = 'devices.json'
CHECKPOINTS = 'checkpoint'
TENSORBOARD = 'tensorboard'
LOCK = '.lock'
LOG = 'log.txt'  # the launcher's log of the process; kept by an overwrite
RUN_FILES = (CONFIG, METRICS, SUMMARY, TIMING, DEVICES, CHECKPOINTS, TENSORBOARD, LOCK, LOG)
ENDED = ('finished', 'diverged')


class ConfigMismatch(ValueError):
  """The folder holds a run of another config."""


class FolderInUse(RuntimeError):
  """Another process holds the folder's lock."""


def write_json(path: pathlib.Path, record) -> None:
  """Writes ``record`` as indented JSON through a temporary file, fsync and a rename
  (NaN and inf are written as NaN and Infinity).

  Raises:
    OSError: when the disk is full or the folder is not writable; the old
      file, if any, is left as it was.
  """
  path = pathlib.Path(path)
  partial = path.with_name(f'.{path.name}.{os.getpid()}.part')
  try:
    with open(partial, 'w') as f:
      f.write(json.dumps(record, indent=2, allow_nan=True) + '\n')
      f.flush()
      os.fsync(f.fileno())
    os.replace(partial, path)
  finally:
    partial.unlink(missing_ok=True)


def write_bytes(path: pathlib.Path, data: bytes) -> None:
  """Writes ``data`` through a temporary file and a rename (as ``write_json``)."""
  path = pathlib.Path(path)
  partial = path.with_name(f'.{path.name}.{os.getpid()}.part')
  try:
    partial.write_bytes(data)
    os.replace(partial, path)
  finally:
    partial.unlink(missing_ok=True)


def write_text(path: pathlib.Path, text: str) -> None:
  """Writes ``text`` through a temporary file and a rename (as ``write_json``)."""
  write_bytes(path, text.encode())


def read_json(path: pathlib.Path, kind: type = dict):
  """The JSON at ``path`` (an object, or with ``kind=list`` an array), or None if it
  is missing, unreadable (a folder, no permission), not valid JSON or of another kind
  (a damaged file reads as no file)."""
  try:
    value = json.loads(pathlib.Path(path).read_text())
  except (OSError, json.JSONDecodeError, UnicodeDecodeError):
    return None
  return value if isinstance(value, kind) else None


def _flatten(record, prefix=''):
  if isinstance(record, dict):
    flat = {}
    for key, value in record.items():
      flat.update(_flatten(value, f'{prefix}{key}.'))
    return flat
  return {prefix[:-1]: record}


def differing_keys(old: dict, new: dict) -> list[str]:
  """The dotted keys whose values differ between two configs (or exist in one only)."""
  old, new = _flatten(old), _flatten(new)
  return sorted(k for k in old.keys() | new.keys() if old.get(k, ...) != new.get(k, ...))


def status(folder: pathlib.Path, config: dict, overwrite: bool = False) -> str:
  """What a run of ``config`` in ``folder`` would do, read-only.

  Returns:
    'new' (nothing of a run there, or ``overwrite``), 'resume' (a run of
    this config that did not end) or 'ended' (summary.json says finished or
    diverged).

  Raises:
    ConfigMismatch: the folder's config.json differs from ``config`` (the
      message names the differing keys and says to pass --overwrite), or the
      folder holds run files but no config.json.
    ValueError: the folder's path or a parent of it is a file, or the folder
      holds files of no run and no config.json (even with ``overwrite``).
  """
  folder = pathlib.Path(folder)
  check_path(folder)
  saved = read_json(folder / CONFIG)
  if saved is None and folder.is_dir():
    foreign = sorted(entry.name for entry in folder.iterdir() if entry.name not in RUN_FILES
                     and not (entry.name.startswith('.') and entry.name.endswith('.part')))
    if foreign:  # a sweep's folder, a checkout, somebody's notes: never cleared
      raise ValueError(f'workdir: {folder} holds {", ".join(foreign[:4])}'
                       f'{" ..." if len(foreign) > 4 else ""} and no {CONFIG}: not a run '
                       'folder, so nothing in it is cleared; give a new or empty folder')
  if overwrite:
    return 'new'
  if saved is None:
    leftovers = [name for name in (METRICS, SUMMARY, CHECKPOINTS, TENSORBOARD)
                 if (folder / name).exists()]
    if leftovers:
      raise ConfigMismatch(f'{folder} holds {", ".join(leftovers)} but no readable {CONFIG}; '
                           'pass --overwrite to clear it')
    return 'new'
  keys = differing_keys(saved, config)
  if keys:
    shown = ', '.join(f'{k} ({_flatten(saved).get(k, "absent")!r} -> '
                      f'{_flatten(config).get(k, "absent")!r})' for k in keys[:8])
    raise ConfigMismatch(f'{folder} holds a run of another config: {shown}'
                         f'{" ..." if len(keys) > 8 else ""}; pass --overwrite to replace it')
  summary = read_json(folder / SUMMARY)
  if summary is not None and summary.get('status') in ENDED:
    return 'ended'
  return 'resume'


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


def lock(folder: pathlib.Path):
  """Takes the folder's lock for as long as the returned file stays open (or the
  process lives: the kernel drops it at exit, SIGKILL included).

  Returns:
    the open lock file; close it to release.

  Raises:
    FolderInUse: another process holds it; the message names its pid and host.
    ValueError: from ``check_path``.
    OSError: the folder or its lock cannot be made or written (a full disk, a
      read-only file system), with the error's errno and the folder named.
  """
  folder = pathlib.Path(folder)
  check_path(folder)
  try:
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / LOCK, 'a+')
  except OSError as error:
    raise OSError(error.errno, f'{folder}: cannot make it or its lock ({error.strerror})') from None
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    handle.seek(0)
    holder = handle.read().strip() or 'another process'
    handle.close()
    raise FolderInUse(f'{folder} is in use by {holder}; wait for it to end or stop it') from None
  try:  # unbuffered, so that a failed write leaves nothing for close() to write again
    os.ftruncate(handle.fileno(), 0)
    os.write(handle.fileno(), f'pid {os.getpid()} on host {socket.gethostname()}\n'.encode())
  except OSError as error:
    handle.close()
    raise OSError(error.errno, f'{folder}: cannot write its lock ({error.strerror})') from None
  return handle


def clear(folder: pathlib.Path) -> None:
  """Removes everything in a locked folder but its lock and the launcher's log.txt."""
  for entry in pathlib.Path(folder).iterdir():
    if entry.name in (LOCK, LOG):
      continue
    if entry.is_dir() and not entry.is_symlink():
      shutil.rmtree(entry)
    else:
      entry.unlink()


def start(folder: pathlib.Path, config: dict, overwrite: bool) -> None:
  """Prepares a locked folder for training ``config``: with ``overwrite`` clears
  everything in it (but its lock and the launcher's log.txt); a folder without
  config.json loses any leftover run files; then writes config.json."""
  folder = pathlib.Path(folder)
  if overwrite or read_json(folder / CONFIG) is None:
    clear(folder)
  write_json(folder / CONFIG, config)


def record_devices(folder: pathlib.Path, devices: str, step: int) -> str | None:
  """Records that the run trains on ``devices`` (``train.devices.describe``) from
  ``step`` (0: from the start, which forgets earlier starts).

  Returns:
    a warning when a resumed run trains on other devices than the steps before
    it (their sums run in another order, so its numbers differ from those of a
    run never moved in the last digits: 1e-6 relative after 600 steps over 2
    devices resumed over 1); else None.
  """
  path = pathlib.Path(folder) / DEVICES
  starts = [entry for entry in read_json(path, list) or []
            if isinstance(entry, dict) and isinstance(entry.get('from_step'), int)
            and entry['from_step'] < step]
  write_json(path, starts + [{'from_step': step, 'devices': devices}])
  if starts and starts[-1]['devices'] != devices:
    return (f'{folder}: resumed at step {step} on {devices}; the steps before it ran on '
            f'{starts[-1]["devices"]}, so its numbers differ in the last digits from a run '
            'that never moved')
  return None


def append_metrics(folder: pathlib.Path, line: dict) -> None:
  """Appends one JSON line to metrics.jsonl and flushes it to the disk."""
  with open(pathlib.Path(folder) / METRICS, 'a') as f:
    f.write(json.dumps(line, allow_nan=True) + '\n')
    f.flush()
    os.fsync(f.fileno())


def read_metrics(folder: pathlib.Path) -> list[dict]:
  """The lines of metrics.jsonl: JSON objects with an int ``step``. The last line
  cut short by a kill is dropped; any other line that is not one (a damaged file)
  is skipped with a warning naming it, and the lines after it are kept."""
  path = pathlib.Path(folder) / METRICS
  if not path.exists():
    return []
  texts = path.read_bytes().decode('utf-8', errors='replace').splitlines()
  lines = []
  for number, text in enumerate(texts, 1):
    try:
      line = json.loads(text)
    except json.JSONDecodeError:
      line = None
    if isinstance(line, dict) and isinstance(line.get('step'), int):
      lines.append(line)
    elif number < len(texts):
      logging.warning('%s: line %d is not a metrics line; skipped', path, number)
  return lines


def cut_metrics(folder: pathlib.Path, step: int) -> list[dict]:
  """Rewrites metrics.jsonl (atomically) with the lines of steps <= ``step``; returns them."""
  kept = [line for line in read_metrics(folder) if line['step'] <= step]
  write_text(pathlib.Path(folder) / METRICS,
             ''.join(json.dumps(line, allow_nan=True) + '\n' for line in kept))
  return kept


def checkpoints(folder: pathlib.Path) -> ocp.CheckpointManager:
  """The folder's orbax checkpoint manager: synchronous saves (each finalised by an
  atomic rename), the last two steps kept, and the temporary folders of saves that
  never finished (a process killed while saving) removed."""
  return ocp.CheckpointManager(
      (pathlib.Path(folder) / CHECKPOINTS).absolute(),
      options=ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=False,
                                           cleanup_tmp_directories=True))


def saved_steps(folder: pathlib.Path) -> list[int]:
  """The finalised checkpoint steps in a folder, oldest first, without opening orbax."""
  root = pathlib.Path(folder) / CHECKPOINTS
  if not root.is_dir():
    return []
  return sorted(int(p.name) for p in root.iterdir()
                if p.name.isdigit() and (p / '_CHECKPOINT_METADATA').exists())


def restore(manager: ocp.CheckpointManager, target, steps: list[int], folder) -> tuple:
  """Restores the newest readable step of ``steps`` into ``target``'s structure.

  A step that cannot be read (a truncated or missing file) is named in a
  warning, deleted, and the next older step is tried.

  Args:
    manager: ``checkpoints(folder)``.
    target: a pytree of ``jax.ShapeDtypeStruct`` (with shardings) giving the
      structure to restore into (optimizer states included).
    steps: the candidate steps, newest last.
    folder: the run folder (for messages).

  Returns:
    ``(step, state)``, or ``(None, None)`` when no step could be read.
  """
  for step in reversed(steps):
    try:
      return step, manager.restore(step, args=ocp.args.StandardRestore(target))
    except Exception as error:  # orbax raises many kinds for a damaged checkpoint
      logging.warning('%s: checkpoint of step %d cannot be read (%s: %s); deleting it and '
                      'trying an older one', folder, step, type(error).__name__,
                      str(error).splitlines()[0][:200] if str(error) else '')
      manager.delete(step)
  return None, None


def final_params(folder: pathlib.Path) -> tuple[dict, dict]:
  """The config and the params of the latest checkpoint of an ended run (a diverged
  run's are its last finite params).

  Returns:
    ``(config, params)``: config.json as a dict, and the params pytree (dicts
    of arrays, as the experiment's model built them).

  Raises:
    FileNotFoundError: the folder holds no ended run (no summary.json saying
      finished or diverged) or no checkpoint; the message says what to run.
  """
  folder = pathlib.Path(folder)
  summary = read_json(folder / SUMMARY)
  if summary is None or summary.get('status') not in ENDED:
    raise FileNotFoundError(f'{folder} holds no ended run (no summary.json with status finished '
                            f'or diverged); train one first with python -m launch.run '
                            f'--config=... --workdir={folder}')
  steps = saved_steps(folder)
  if not steps:
    raise FileNotFoundError(f'{folder} has no checkpoint; rerun it with --overwrite')
  here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])  # whatever it was saved on
  with ocp.CheckpointManager((folder / CHECKPOINTS).absolute(),
                             item_handlers=ocp.StandardCheckpointHandler()) as manager:
    target = jax.tree_util.tree_map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=here),
        manager.item_metadata(steps[-1]))
    state = manager.restore(steps[-1], args=ocp.args.StandardRestore(target))
  return read_json(folder / CONFIG), state['params']


def _tensorboardx():
  """tensorboardX's event writer, summaries and protos, imported without torch:
  tensorboardX imports torch where it is installed only to recognise torch tensors
  (which a run never logs), 1-2.5 s of every run process's start (the test extra
  installs torch)."""
  hide_torch = 'tensorboardX' not in sys.modules and 'torch' not in sys.modules
  if hide_torch:
    sys.modules['torch'] = None  # `import torch` raises ImportError: tensorboardX goes without
  try:
    from tensorboardX import event_file_writer
    from tensorboardX import summary
    from tensorboardX.proto import event_pb2
  finally:
    if hide_torch:
      del sys.modules['torch']
  return event_file_writer, summary, event_pb2


def tensorboard(folder: pathlib.Path, purge_step: int | None):
  """A TensorBoard event file (tensorboardX's, no TensorFlow needed), a new one in
  ``<folder>/tensorboard`` per call; ``purge_step`` makes TensorBoard drop the
  events of steps >= it written before a resume.

  Written by tensorboardX's ``EventsWriter`` in the caller's thread, not by its
  ``SummaryWriter``: that one writes from a thread of its own, which on a full disk
  died with a traceback and left the run waiting forever in its next ``add_scalar``
  (its queue of 10 events full).

  Returns:
    the writer, for ``write_scalars`` and its own ``close()``.
  Raises:
    OSError: where the folder cannot be made or written.
  """
  event_file_writer, _, event_pb2 = _tensorboardx()
  logdir = pathlib.Path(folder) / TENSORBOARD
  logdir.mkdir(parents=True, exist_ok=True)
  # named as tensorboardX names them, plus the nanoseconds: two starts within a second
  # would otherwise share (and truncate) one file
  writer = event_file_writer.EventsWriter(str(logdir / 'events'), f'.{time.time_ns()}')
  if purge_step is not None:  # as tensorboardX's SummaryWriter marks a restart
    writer.write_event(event_pb2.Event(
        step=purge_step, wall_time=time.time(),
        session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))
  writer.flush()
  return writer


def write_scalars(writer, step: int, scalars: dict[str, float]) -> None:
  """Writes ``scalars`` (tag -> value) at ``step`` and flushes them to disk (fsync).

  Raises:
    OSError: from the write (ENOSPC on a full disk), in the caller's thread.
  """
  _, summary, event_pb2 = _tensorboardx()
  now = time.time()
  for tag, value in scalars.items():
    writer.write_event(event_pb2.Event(step=step, wall_time=now,
                                       summary=summary.scalar(tag, value)))
  writer.flush()

