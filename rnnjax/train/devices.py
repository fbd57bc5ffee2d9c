"""Where a group's training state and batches live: one mesh over every device.

The mesh has one axis, 'devices', over ``jax.devices()`` (every process's
devices when several processes run under ``jax.distributed``). Two layouts:

  'data'  data parallel: the batch axis of every batch and of the recurrent
          carry is split over the devices; params, optimizer state and
          counters are replicated, and XLA sums the gradients across devices.
  'runs'  the run axis of a vmapped group is split over the devices: each
          device trains its slice of the runs (the natural way to spread a
          sweep over a multi-GPU node); batches are replicated.

'auto' (the default) uses every device: 'runs' when the group's runs divide
evenly over them, else 'data' when the batch does, else one device. With one
device nothing is placed at all. Host values become global arrays through
``jax.make_array_from_callback``, so every process passes the same host
value (the same seeds, the same batch) and keeps only its own shards.
"""

import math
import os
from typing import NamedTuple

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

LAYOUTS = ('auto', 'data', 'runs')


def memory_bytes() -> int:
  """The memory of this process's first device in bytes: the limit XLA reports for it
  (GPUs, TPUs), else the host's physical memory (CPU)."""
  stats = jax.local_devices()[0].memory_stats() or {}
  if stats.get('bytes_limit'):
    return int(stats['bytes_limit'])
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')


class Placement(NamedTuple):
  """A layout on a mesh; ``mesh`` None: one device, nothing placed."""
  layout: str  # 'data', 'runs' or 'single'
  mesh: jax.sharding.Mesh | None


def _batch_size(batch):
  sizes = {np.shape(leaf)[0] for leaf in jax.tree_util.tree_leaves(batch) if np.ndim(leaf)}
  return sizes.pop() if len(sizes) == 1 else None


def placement(layout: str, runs: int, batch) -> Placement:
  """The placement of a group of ``runs`` runs whose batches look like ``batch``.

  Args:
    layout: 'auto', 'data' or 'runs' (``config.layout``).
    runs: R, the runs of the group.
    batch: a batch of the task (its leading axes are the batch axis).

  Returns:
    a ``Placement`` on ``jax.devices()``.

  Raises:
    ValueError: naming ``config.layout`` for an unknown layout, or a layout the
      group cannot take (runs or batch not divisible by the number of devices).
  """
  if layout not in LAYOUTS:
    raise ValueError(f'config.layout: expected one of {LAYOUTS}, got {layout!r}')
  devices = jax.devices()
  count, batch_size = len(devices), _batch_size(batch)
  if count == 1:
    return Placement('single', None)
  if layout == 'auto':
    layout = ('runs' if runs % count == 0 else
              'data' if batch_size and batch_size % count == 0 else 'single')
    if layout == 'single':
      logging.warning('layout auto: neither the %d runs nor the batch (%s) divide over the %d '
                      'devices; training on one device', runs, batch_size, count)
      return Placement('single', None)
  if layout == 'runs' and runs % count:
    raise ValueError(f"config.layout: 'runs' needs a number of runs divisible by the "
                     f'{count} devices, got a group of {runs} (a sweep cuts each group into '
                     f'--processes jobs of at most --max_group_size runs)')
  if layout == 'data' and batch_size is None:
    raise ValueError("config.layout: 'data' needs batches with a batch axis to split; this "
                     "task's steps draw their batches inside the compiled program (use 'runs' or "
                     "'auto')")
  if layout == 'data' and batch_size % count:
    raise ValueError(f"config.layout: 'data' needs a batch size divisible by the {count} "
                     f'devices, got {batch_size}')
  return Placement(layout, jax.sharding.Mesh(np.array(devices), ('devices',)))


def needs_one_step_at_a_time(where: Placement) -> bool:
  """Whether a step over ``where`` must finish before the next is dispatched: over
  several CPU devices. XLA:CPU's client (jaxlib 0.10.2) deadlocks when two of
  these programs are in flight at once: a device's next step holds the device and
  waits for the inputs its previous step, queued behind it, would write, while
  the other device waits in the step's all-reduce (gdb stacks; 5 of 5 tries of
  8,000 data-parallel steps over 2 devices hung, none of 5 after).
  Over several CPU devices waiting is also faster: 32 runs split over 2 devices
  trained 200 steps in 4.4 s waiting, 6.9 s not. GPUs and TPUs keep their
  asynchronous dispatch."""
  return where.mesh is not None and where.mesh.devices.flat[0].platform == 'cpu'


def _global(value, sharding):
  host = np.asarray(value)
  return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _spec(leaf, axis):
  """A PartitionSpec splitting ``axis`` of ``leaf`` over 'devices' (None: replicated)."""
  if axis is None or np.ndim(leaf) <= axis:
    return jax.sharding.PartitionSpec()
  return jax.sharding.PartitionSpec(*([None] * axis + ['devices']))


def place_state(where: Placement, state):
  """A ``trainer.TrainState`` as global arrays laid out for ``where`` (on one device: put
  there): 'runs' splits every per-run leaf's axis 0, 'data' the carry's batch axis 1."""
  if where.mesh is None:
    return jax.device_put(state)

  def place(tree, axis):
    return jax.tree_util.tree_map(lambda leaf: _global(leaf, jax.sharding.NamedSharding(
        where.mesh, _spec(leaf, axis))), tree)

  per_run = 0 if where.layout == 'runs' else None
  placed = {name: place(value, per_run) for name, value in state._asdict().items()}
  return state._replace(**placed, carry=place(state.carry, 0 if where.layout == 'runs' else 1),
                        step=place(state.step, None))


def place_batch(where: Placement, batch):
  """A batch as global arrays: split on its batch axis for 'data', else replicated."""
  if where.mesh is None:
    return batch
  axis = 0 if where.layout == 'data' else None
  return jax.tree_util.tree_map(
      lambda leaf: _global(leaf, jax.sharding.NamedSharding(where.mesh, _spec(leaf, axis))),
      batch)


def replicated(where: Placement):
  """The sharding that restores a checkpoint onto every device of ``where`` (whatever
  devices it was saved from)."""
  if where.mesh is None:
    return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return jax.sharding.NamedSharding(where.mesh, jax.sharding.PartitionSpec())


def to_host(tree):
  """Numpy copies of a pytree of (possibly global, possibly other processes') arrays."""
  def host(leaf):
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
      if leaf.is_fully_replicated:
        return np.asarray(leaf.addressable_data(0))
      return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
    return np.asarray(leaf)
  return jax.tree_util.tree_map(host, tree)


def put_like(value, reference: jax.Array) -> jax.Array:
  """A host value as an array laid out as ``reference`` (its sharding, every process)."""
  if isinstance(reference, jax.Array) and not reference.is_fully_addressable:
    return _global(value, reference.sharding)
  return jax.device_put(np.asarray(value), reference.sharding)


def describe(where: Placement) -> str:
  if where.mesh is None:
    return 'one device'
  count = math.prod(where.mesh.devices.shape)
  return (f'{count} devices ({jax.process_count()} process(es)), '
          f'{"batch" if where.layout == "data" else "runs"} split over them')
