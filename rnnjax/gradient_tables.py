"""The gradient-norm table: how far back the gradient of an Elman network reaches.

For each spectral radius rho of W_hh and each distance k, the ratio
||dL/dh_{T-k}|| / ||dL/dh_T||: below 1 the gradient vanishes, above 1 it
explodes (Pascanu, Mikolov & Bengio 2013, eq. 7). Two protocols:

  'linearised'  the backward pass alone, delta <- W_hh^T (phi'(a_t) * delta),
                with pre-activations a_t ~ N(0, 0.3^2) drawn afresh at each step:
                the mild-activation regime, where tanh' is near 1 and the
                product of Jacobians behaves like powers of W_hh. Drawn with
                numpy's ``default_rng(seed)`` in one stream over the radii (W,
                then the unit start vector, then the steps' pre-activations),
                so ``seed=1, radii=(0.7, 1.0, 1.3), distances=(20, 40, 60)``
                gives the table of ``docs/reference_numbers.md`` to the digit.
  'network'     a real Elman network: ``cells.init_elman`` at rho (or given
                params), driven by N(0, 1) inputs from a zero state; L is a
                fixed random projection of the last state, and the ratio is the
                median over the sequences of ``diagnostics.state_gradients``.
                The network's states saturate (tanh' well below 1), so its
                gradient vanishes faster than the linearised protocol's at the
                same rho: the two tables differ, and both are right.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import initializers

__all__ = ['PROTOCOLS', 'gradient_norm_table']

PROTOCOLS = ('linearised', 'network')


def _linearised(radii: Sequence[float], distances: Sequence[int], hidden_size: int,
                seed: int) -> dict[float, dict[int, float]]:
  rng = np.random.default_rng(seed)
  steps = max(distances)
  rows: dict[float, dict[int, float]] = {}
  for rho in radii:
    w = rng.normal(0, 1, (hidden_size, hidden_size))
    w *= rho / initializers.host_spectral_radius(w)
    delta = rng.normal(0, 1, hidden_size)
    delta /= np.linalg.norm(delta)
    pre_activations = rng.normal(0, 0.3, (steps, hidden_size))  # as one draw a step

    def step(delta: jax.Array, a: jax.Array, w: jax.Array = jnp.asarray(w, jnp.float32)
             ) -> tuple[jax.Array, jax.Array]:
      delta = w.T @ (cells.activation_derivative(jnp.tanh(a), 'tanh') * delta)
      return delta, jnp.linalg.norm(delta)
    _, norms = jax.lax.scan(step, jnp.asarray(delta, jnp.float32),
                            jnp.asarray(pre_activations, jnp.float32))
    host_norms = np.asarray(norms)
    rows[rho] = {k: float(host_norms[k - 1]) for k in distances}
  return rows


def _network(radii: Sequence[float], distances: Sequence[int], hidden_size: int, seed: int,
             sequences: int, params: Mapping[str, Any] | None
             ) -> dict[float, dict[int, float]]:
  steps = max(distances) + 1
  key_inputs, key_loss, key_params = jax.random.split(jax.random.key(seed), 3)
  rows: dict[float, dict[int, float]] = {}
  for rho in radii:
    cell_params = params if params is not None else cells.init_elman(
        key_params, hidden_size, hidden_size, 'gaussian', rho)
    size = cell_params['W_xh'].shape[0]
    inputs = jax.random.normal(key_inputs, (sequences, steps, size))
    direction = jax.random.normal(key_loss, (cell_params['W_hh'].shape[0],))
    initial = jnp.zeros((sequences, cell_params['W_hh'].shape[0]))
    _, gradients = diagnostics.state_gradients(
        cells.elman('tanh'), cell_params, inputs, initial,
        lambda states: jnp.sum(states[:, -1] @ direction))
    norms = jnp.linalg.norm(gradients, axis=-1)  # [B, T]: each sequence's own loss
    ratios = np.median(np.stack([np.asarray(norms[:, -1 - k] / norms[:, -1])
                                 for k in distances], axis=1), axis=0)
    label = float(initializers.host_spectral_radius(np.asarray(cell_params['W_hh']))
                  ) if params is not None else rho
    rows[label] = {k: float(r) for k, r in zip(distances, ratios)}
  return rows


def gradient_norm_table(radii: Sequence[float] = (0.7, 1.0, 1.3),
                        distances: Sequence[int] = (20, 40, 60), protocol: str = 'network',
                        hidden_size: int = 64, seed: int = 1, sequences: int = 64,
                        params: Mapping[str, Any] | None = None) -> dict[float, dict[int, float]]:
  """||dL/dh_{T-k}|| / ||dL/dh_T|| for each spectral radius and distance k.

  Args:
    radii: spectral radii rho >= 0 of W_hh (ignored with ``params``).
    distances: k >= 1, in steps.
    protocol: 'linearised' or 'network' (the module docstring).
    hidden_size: H, the units: W_hh is ``[H, H]``; a fresh 'network' reads
      inputs ``<float32>[B, T, H]`` (d = H) with T = max(distances) + 1.
    seed: numpy's seed ('linearised') or ``jax.random.key(seed)`` ('network').
    sequences: B, the sequences whose median a 'network' ratio is.
    params: 'network': an Elman cell's params ``{'W_xh': [d, H], 'W_hh': [H, H],
      'b': [H]}`` (a trained run's, e.g.
      ``rnnjax.train.checkpoints.final_params(folder)``'s cell) instead of a fresh
      init; the row is labelled with their W_hh's spectral radius.

  Returns:
    ``{rho: {k: ratio}}``, each ratio a scalar (Python floats; format it with
    ``diagnostics.norm_table``).

  Raises:
    ValueError: naming the argument, for an unknown protocol, radii that are
      not finite numbers >= 0, distances that are not ints >= 1, or sizes < 1.

  References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
    neural networks", eq. 7; the linearised table: ``docs/reference_numbers.md``.
  """
  if protocol not in PROTOCOLS:
    raise ValueError(f'protocol: expected one of {PROTOCOLS}, got {protocol!r}')
  radii = tuple(radii)
  for rho in radii:
    initializers.check_radius('radii', rho)
  distances = tuple(distances)
  if not distances or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1
                              for k in distances):
    raise ValueError(f'distances: expected ints >= 1, got {distances!r}')
  for name, value in (('hidden_size', hidden_size), ('sequences', sequences)):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
      raise ValueError(f'{name}: expected an int >= 1, got {value!r}')
  if protocol == 'linearised':
    return _linearised(radii, distances, hidden_size, seed)
  return _network(radii, distances, hidden_size, seed, sequences, params)
