"""Where a group's training state and batches live: one mesh over every device.

The mesh has one axis, 'devices', over ``jax.devices()`` (every process's under
``jax.distributed``). Layouts: 'data' splits the batch axis of batches and carry over the
devices (params and optimizer state replicated, XLA sums the gradients); 'runs' splits the run
axis of a vmapped group (batches replicated); 'auto' takes 'runs' where the runs divide over
the devices, else 'data' where the batch does, else one device. With one device nothing is
placed. Host values become global arrays through ``jax.make_array_from_callback``, so every
process passes the same host value and keeps its own shards.
"""

import os
from typing import Any, NamedTuple

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np

__all__ = ['LAYOUTS', 'Placement', 'memory_bytes', 'placement', 'needs_one_step_at_a_time',
           'place_state', 'place_batch', 'replicated', 'to_host', 'put_like', 'describe']

LAYOUTS = ('auto', 'data', 'runs')


def memory_bytes() -> int:
  """Bytes of this process's first device: XLA's limit (GPU, TPU), else the host's memory."""
  stats = jax.local_devices()[0].memory_stats() or {}
  if stats.get('bytes_limit'):
    return int(stats['bytes_limit'])
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')


class Placement(NamedTuple):
  """A layout on a mesh; ``mesh`` None: one device, nothing placed."""
  layout: str  # 'data', 'runs' or 'single'
  mesh: jax.sharding.Mesh | None


def placement(layout: str, runs: int, batch: Any) -> Placement:
  """The ``Placement`` on ``jax.devices()`` for ``layout`` of a group of ``runs`` runs whose
  batches look like ``batch`` (leading axes: the batch axis).

  Raises:
    ValueError: naming ``config.layout``: unknown, or one the group cannot take.
  """
  if layout not in LAYOUTS:
    raise ValueError(f'config.layout: expected one of {LAYOUTS}, got {layout!r}')
  count = len(jax.devices())
  sizes = {np.shape(leaf)[0] for leaf in jax.tree_util.tree_leaves(batch) if np.ndim(leaf)}
  batch_size = sizes.pop() if len(sizes) == 1 else None  # None: no one batch axis
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
    raise ValueError("config.layout: 'data' needs batches with a batch axis to split; this task's "
                     "steps draw their batches inside the compiled program (use 'runs' or 'auto')")
  if layout == 'data' and batch_size is not None and batch_size % count:
    raise ValueError(f"config.layout: 'data' needs a batch size divisible by the {count} "
                     f'devices, got {batch_size}')
  return Placement(layout, jax.sharding.Mesh(np.array(jax.devices()), ('devices',)))


def needs_one_step_at_a_time(where: Placement) -> bool:
  """Whether a step over ``where`` must finish before the next is dispatched: over several CPU
  devices, where XLA:CPU's client deadlocks with two such programs in flight (a device's next step
  waits for inputs its previous step, queued behind it, would write, while the other device waits in
  the all-reduce); waiting is also faster there. GPUs and TPUs keep their asynchronous dispatch."""
  return where.mesh is not None and where.mesh.devices.flat[0].platform == 'cpu'


def _global(value: Any, sharding: jax.sharding.Sharding) -> jax.Array:
  host = np.asarray(value)
  return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _place(mesh: jax.sharding.Mesh, tree: Any, axis: int | None) -> Any:
  """``tree`` as global arrays on ``mesh``, each leaf's ``axis`` split (None, or none: copies)."""
  def one(leaf: Any) -> jax.Array:
    spec = jax.sharding.PartitionSpec()
    if axis is not None and np.ndim(leaf) > axis:
      spec = jax.sharding.PartitionSpec(*[None] * axis, 'devices')
    return _global(leaf, jax.sharding.NamedSharding(mesh, spec))
  return jax.tree_util.tree_map(one, tree)


def place_state(where: Placement, state: Any) -> Any:
  """A ``trainer.TrainState`` laid out for ``where`` (one device: put there): 'runs' splits
  every leaf's run axis 0, 'data' the carry's batch axis 1."""
  if where.mesh is None:
    return jax.device_put(state)
  runs = where.layout == 'runs'
  placed = {name: _place(where.mesh, value, 0 if runs else None)
            for name, value in state._asdict().items() if name != 'carry'}
  return state._replace(**placed, carry=_place(where.mesh, state.carry, 0 if runs else 1))


def place_batch(where: Placement, batch: Any) -> Any:
  """A batch laid out for ``where``: split on its batch axis for 'data', else replicated."""
  if where.mesh is None:
    return batch
  return _place(where.mesh, batch, 0 if where.layout == 'data' else None)


def replicated(where: Placement) -> jax.sharding.Sharding:
  """The sharding that restores a checkpoint onto every device of ``where``."""
  if where.mesh is None:
    return jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return jax.sharding.NamedSharding(where.mesh, jax.sharding.PartitionSpec())


def to_host(tree: Any) -> Any:
  """Numpy copies of a pytree of (possibly global, possibly other processes') arrays."""
  def host(leaf: Any) -> np.ndarray:
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
      if leaf.is_fully_replicated:
        return np.asarray(leaf.addressable_data(0))
      return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
    return np.asarray(leaf)
  return jax.tree_util.tree_map(host, tree)


def put_like(value: Any, reference: jax.Array) -> jax.Array:
  """A host value as an array laid out as ``reference`` (its sharding, every process)."""
  if isinstance(reference, jax.Array) and not reference.is_fully_addressable:
    return _global(value, reference.sharding)
  return jax.device_put(np.asarray(value), reference.sharding)


def describe(where: Placement) -> str:
  """One line: the devices, processes and what is split over them."""
  if where.mesh is None:
    return 'one device'
  return (f'{where.mesh.devices.size} devices ({jax.process_count()} process(es)), '
          f'{"batch" if where.layout == "data" else "runs"} split over them')
