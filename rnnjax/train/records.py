"""What a run records as it trains: metrics.jsonl, TensorBoard events, devices.json.

metrics.jsonl gets one JSON line per logged step, appended and flushed to disk;
a resumed run cuts it back to the step it resumed from, so every step has one
line whatever the kills. TensorBoard gets the same numbers; a resume marks
its step so that TensorBoard drops the events written after it.
"""

import json
import math
import pathlib
import sys
import time

from absl import logging

from rnnjax.train import folder as run_folder

__all__ = ['append_metrics', 'read_metrics', 'cut_metrics', 'tensorboard', 'write_scalars',
           'record_devices', 'SCALARS']

SCALARS = ('loss', 'bits', 'grad_norm', 'max_grad_norm', 'clipped_fraction', 'update_norm',
           'skipped', 'measured_spectral_radius', 'largest_lyapunov_exponent')  # TensorBoard's


def append_metrics(folder: pathlib.Path, line: dict) -> None:
  """Appends one JSON line to metrics.jsonl and flushes it to the disk."""
  run_folder.append_text(pathlib.Path(folder) / run_folder.METRICS,
                         json.dumps(line, allow_nan=True) + '\n', sync=True)


def read_metrics(folder: pathlib.Path) -> list[dict]:
  """The lines of metrics.jsonl: JSON objects with an int ``step``. The last line
  cut short by a kill is dropped; any other line that is not one (a damaged file)
  is skipped with a warning naming it, and the lines after it are kept."""
  path = pathlib.Path(folder) / run_folder.METRICS
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
  run_folder.write_text(pathlib.Path(folder) / run_folder.METRICS,
                        ''.join(json.dumps(line, allow_nan=True) + '\n' for line in kept))
  return kept


def _tensorboardx():
  """tensorboardX's event writer, summaries and protos, imported without torch
  (tensorboardX imports torch where it is installed only to recognise torch
  tensors, which a run never logs: seconds of every run process's start)."""
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
  """A new TensorBoard event file in ``<folder>/tensorboard`` (tensorboardX's, no
  TensorFlow needed), written in the caller's thread (so a full disk raises in the
  run, never in a writer thread of its own); ``purge_step`` makes TensorBoard drop
  the events of steps >= it written before a resume.

  Returns:
    the writer, for ``write_scalars`` and its own ``close()``.
  Raises:
    OSError: where the folder cannot be made or written.
  """
  event_file_writer, _, event_pb2 = _tensorboardx()
  logdir = pathlib.Path(folder) / run_folder.TENSORBOARD
  logdir.mkdir(parents=True, exist_ok=True)
  run_folder.check_links(folder)
  # named to the nanosecond: two starts within a second would otherwise share one file
  writer = event_file_writer.EventsWriter(str(logdir / 'events'), f'.{time.time_ns()}')
  if purge_step is not None:  # as tensorboardX's SummaryWriter marks a restart
    writer.write_event(event_pb2.Event(
        step=purge_step, wall_time=time.time(),
        session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))
  writer.flush()
  return writer


def write_scalars(writer, line: dict) -> None:
  """Writes a metrics line's finite ``SCALARS`` (as train/<name>) and its profile (as
  profile/k<k>) at its step, and flushes them to disk.

  Raises:
    OSError: from the write (ENOSPC on a full disk), in the caller's thread.
  """
  _, summary, event_pb2 = _tensorboardx()
  scalars = {f'train/{name}': line[name] for name in SCALARS
             if name in line and math.isfinite(line[name])}
  scalars.update({f'profile/k{k}': ratio for k, ratio in line.get('profile', {}).items()})
  now = time.time()
  for tag, value in scalars.items():
    writer.write_event(event_pb2.Event(step=line['step'], wall_time=now,
                                       summary=summary.scalar(tag, value)))
  writer.flush()


def record_devices(folder: pathlib.Path, devices: str, step: int) -> str | None:
  """Records that the run trains on ``devices`` (``train.devices.describe``) from
  ``step`` (0: from the start, which forgets earlier starts).

  Returns:
    a warning when a resumed run trains on other devices than the steps before
    it (their sums run in another order, so its numbers differ from those of a
    run never moved in the last digits); else None.
  """
  path = pathlib.Path(folder) / run_folder.DEVICES
  starts = [entry for entry in run_folder.read_json(path, list) or []
            if isinstance(entry, dict) and isinstance(entry.get('from_step'), int)
            and entry['from_step'] < step]
  run_folder.write_json(path, starts + [{'from_step': step, 'devices': devices}])
  if starts and starts[-1]['devices'] != devices:
    return (f'{folder}: resumed at step {step} on {devices}; the steps before it ran on '
            f'{starts[-1]["devices"]}, so its numbers differ in the last digits from a run '
            'that never moved')
  return None
