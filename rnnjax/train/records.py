"""What a run records as it trains: metrics.jsonl, TensorBoard events, devices.json.

A resumed run cuts metrics.jsonl back to the step it resumed from, and marks that step in
TensorBoard (which then drops the events written after it), so every step has one record
whatever the kills.
"""

import json
import math
import pathlib
import sys
import time
from typing import Any

from absl import logging

from rnnjax.train import run_folder

__all__ = ['append_metrics', 'read_metrics', 'cut_metrics', 'tensorboard', 'write_scalars',
           'record_devices', 'SCALARS']

SCALARS = ('loss', 'bits', 'grad_norm', 'max_grad_norm', 'clipped_fraction', 'update_norm',
           'skipped', 'measured_spectral_radius', 'largest_lyapunov_exponent')  # TensorBoard's


def append_metrics(folder: pathlib.Path, line: dict) -> None:
  """Appends one JSON line to metrics.jsonl and flushes it to the disk."""
  run_folder.append_text(pathlib.Path(folder) / run_folder.METRICS,
                         json.dumps(line, allow_nan=True) + '\n', sync=True)


def read_metrics(folder: pathlib.Path) -> list[dict]:
  """The lines of metrics.jsonl, JSON objects with an int ``step``. A last line cut short
  by a kill is dropped; another line that is not one is skipped with a warning."""
  path = pathlib.Path(folder) / run_folder.METRICS
  texts = (path.read_bytes().decode('utf-8', errors='replace').splitlines()
           if path.exists() else [])
  lines = []
  for number, text in enumerate(texts, 1):
    try:
      line = json.loads(text)
    except json.JSONDecodeError:
      line = None
    if isinstance(line, dict) and isinstance(line.get('step'), int):
      lines.append(line)
    elif number < len(texts):
      logging.warning('%s: line %d is not a metrics line; skipped', path, number,
                      extra=run_folder.about(folder))
  return lines


def cut_metrics(folder: pathlib.Path, step: int) -> list[dict]:
  """Rewrites metrics.jsonl with the lines of steps <= ``step``; returns them."""
  kept = [line for line in read_metrics(folder) if line['step'] <= step]
  run_folder.write(pathlib.Path(folder) / run_folder.METRICS,
                   ''.join(json.dumps(line, allow_nan=True) + '\n' for line in kept))
  return kept


def _tensorboardx() -> tuple[Any, Any, Any]:
  """tensorboardX's modules, imported without torch (seconds of every start, for its tensors)."""
  hide_torch = 'tensorboardX' not in sys.modules and 'torch' not in sys.modules
  if hide_torch:
    # `import torch` raises ImportError (None in sys.modules, which typeshed does not know)
    sys.modules['torch'] = None  # type: ignore[assignment]
  try:
    from tensorboardX import event_file_writer
    from tensorboardX import summary
    from tensorboardX.proto import event_pb2
  finally:
    if hide_torch:
      del sys.modules['torch']
  return event_file_writer, summary, event_pb2


def tensorboard(folder: pathlib.Path, purge_step: int | None) -> Any:
  """A new event file's writer (``write_scalars``, ``close()``) in ``<folder>/tensorboard``,
  writing in the caller's thread (a full disk raises OSError in the run); TensorBoard drops the
  events of steps >= ``purge_step`` written before."""
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


def write_scalars(writer: Any, line: dict) -> None:
  """Writes a metrics line's finite ``SCALARS`` (train/<name>) and its profile
  (profile/k<k>) at its step and flushes them (OSError on a full disk)."""
  _, summary, event_pb2 = _tensorboardx()
  scalars = {f'train/{name}': line[name] for name in SCALARS
             if name in line and math.isfinite(line[name])}
  scalars.update({f'profile/k{k}': ratio for k, ratio in line.get('profile', {}).items()})
  for tag, value in scalars.items():
    writer.write_event(event_pb2.Event(step=line['step'], wall_time=time.time(),
                                       summary=summary.scalar(tag, value)))
  writer.flush()


def record_devices(folder: pathlib.Path, devices: str, step: int, group: str = '') -> str | None:
  """Records that the run trains on ``devices`` and in ``group`` (alone, or a vmapped group of N)
  from ``step`` (0 forgets earlier starts); a warning where a resumed run moved to other devices
  or grouping (its numbers then differ in the last digits from a run never moved), else None."""
  path = pathlib.Path(folder) / run_folder.DEVICES
  starts = [entry for entry in run_folder.read_json(path, list) or [] if isinstance(entry, dict)
            and isinstance(entry.get('from_step'), int) and entry['from_step'] < step]
  entry = {'from_step': step, 'devices': devices, **({'group': group} if group else {})}
  run_folder.write_json(path, starts + [entry])
  before = starts[-1] if starts else entry
  moved = [key for key in ('devices', 'group') if before.get(key, entry.get(key)) != entry.get(key)]
  if not moved:
    return None
  where = lambda start: ' '.join(('on ' if key == 'devices' else '') + str(start.get(key))
                                 for key in moved)
  return (f'{folder}: resumed at step {step} {where(entry)}; the steps before it ran '
          f'{where(before)}, so its numbers differ in the last digits from a run that never moved')
