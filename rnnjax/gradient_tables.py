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
                same rho: the two tables differ, and both are right. Each row
                also holds its W_hh's measured spectral radius.

Mean-field theory predicts both rates (``mean_field_variance``,
``mean_field_rate``). With W_hh's entries of variance rho^2 / H (a Gaussian
matrix of spectral radius rho, for large H) and each unit's drive x_t W_xh + b of
variance sigma_in^2, a unit's pre-activation is Gaussian for large H with variance

  q* = rho^2 E[tanh(sqrt(q*) z)^2] + sigma_in^2,   z ~ N(0, 1)

(the fixed point of the variance map), and one backward step multiplies the squared
norm of dL/dh by chi = rho^2 E[tanh'(sqrt(q*) z)^2] in expectation: the gradient
shrinks or grows by the per-step rate sqrt(chi) = rho sqrt(E[tanh'(sqrt(q*) z)^2]),
below 1 vanishing, above 1 exploding. The linearised protocol is the same with its
pre-activations' variance fixed at 0.3^2. Pascanu et al.'s sufficient condition
for vanishing, sigma_max(W_hh) < 1 / gamma (gamma = 1, the bound of tanh'), is
far from this edge: a Gaussian W_hh of spectral radius rho has sigma_max near 2
rho for large H.

References:
  Poole, Lahiri, Raghu, Sohl-Dickstein & Ganguli (2016), "Exponential
  expressivity in deep neural networks through transient chaos" (the variance
  map, eq. 3, and chi, eq. 5); Pennington, Schoenholz & Ganguli (2017),
  "Resurrecting the sigmoid in deep learning through dynamical isometry"
  (the mean squared singular value of the Jacobian, rho^2 E[phi'^2]);
  Pascanu, Mikolov & Bengio (2013), section 3.1 (sigma_max < 1 / gamma).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import checks
from rnnjax import diagnostics
from rnnjax import initializers
from rnnjax import norms

__all__ = ['PROTOCOLS', 'gradient_norm_table', 'mean_field_variance', 'mean_field_rate']

PROTOCOLS = ('linearised', 'network')
LINEARISED_VARIANCE = 0.3 ** 2  # of the linearised protocol's pre-activations
_QUADRATURE = np.polynomial.hermite_e.hermegauss(101)  # nodes, weights of E over N(0, 1)


def _gaussian_mean(function: Any, variance: float) -> float:
  """E[function(sqrt(variance) z)], z ~ N(0, 1), by Gauss-Hermite quadrature (float64)."""
  nodes, weights = _QUADRATURE
  return float(np.sum(weights * function(np.sqrt(variance) * nodes)) / np.sqrt(2 * np.pi))


def mean_field_variance(radius: float, input_scale: float) -> float:
  """q*, the variance of a unit's pre-activation in a large tanh Elman network at its
  fixed point, q = radius^2 E[tanh(sqrt(q) z)^2] + input_scale^2 (module docstring).

  Args:
    radius: rho >= 0, the spectral radius of a Gaussian W_hh (entries' variance
      rho^2 / H).
    input_scale: sigma_in >= 0, the standard deviation of each unit's drive
      x_t W_xh + b.

  Returns:
    q* (dimensionless, a Python float), iterated from input_scale^2 + 1 to a change
    below 1e-12 (at most 10,000 iterations; at rho = 1 and sigma_in = 0 the map
    approaches 0 slowly, as q ~ 1 / t).

  Raises:
    ValueError: naming the argument, for a value that is not a finite number >= 0.

  References:
    Poole et al. (2016), eq. 3.
  """
  for name, value in (('radius', radius), ('input_scale', input_scale)):
    initializers.check_radius(name, value)
  q = float(input_scale) ** 2 + 1.0
  for _ in range(10_000):
    following = radius ** 2 * _gaussian_mean(lambda a: np.tanh(a) ** 2, q) + input_scale ** 2
    if abs(following - q) < 1e-12:
      return following
    q = following
  return q


def mean_field_rate(radius: float, variance: float) -> float:
  """sqrt(chi) = radius sqrt(E[tanh'(sqrt(variance) z)^2]): the mean-field factor by which
  one backward step scales ||dL/dh|| (module docstring).

  Args:
    radius: rho >= 0 of a Gaussian W_hh.
    variance: q >= 0 of the pre-activations (``mean_field_variance`` for a network,
      ``LINEARISED_VARIANCE`` for the linearised protocol).

  Returns:
    the rate per step (a Python float): < 1 vanishing, > 1 exploding.

  Raises:
    ValueError: naming the argument, for a value that is not a finite number >= 0.

  References:
    Poole et al. (2016), eq. 5; Pennington et al. (2017).
  """
  for name, value in (('radius', radius), ('variance', variance)):
    initializers.check_radius(name, value)
  return float(radius) * np.sqrt(_gaussian_mean(lambda a: (1 - np.tanh(a) ** 2) ** 2,
                                                float(variance)))


def _linearised(radii: Sequence[float], distances: Sequence[int], hidden_size: int,
                seed: int) -> dict[float, dict[int | str, float]]:
  rng = np.random.default_rng(seed)
  steps = max(distances)
  rows: dict[float, dict[int | str, float]] = {}
  for rho in radii:
    w = rng.normal(0, 1, (hidden_size, hidden_size))
    w *= rho / initializers.host_spectral_radius(w)
    delta = rng.normal(0, 1, hidden_size)
    delta /= float(norms.vector_norm(delta))
    pre_activations = rng.normal(0, 0.3, (steps, hidden_size))  # as one draw a step

    # delta is carried as 2^e u with u's entries below 1 (``norms.scale_exponent``, exact):
    # at rho = 3 delta passes float32's range near k = 80, and then W^T (tanh' * inf) would
    # be inf - inf = NaN. ||delta|| = 2^e ||u|| is formed on the host in float64, so a ratio
    # is neither inf nor 0 where float64 holds it.
    def step(carry: tuple[jax.Array, jax.Array], a: jax.Array,
             w: jax.Array = jnp.asarray(w, jnp.float32)
             ) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
      unit, exponent = carry
      unit = w.T @ (cells.activation_derivative(jnp.tanh(a), 'tanh') * unit)
      shift = norms.scale_exponent(jnp.max(jnp.abs(unit)))
      unit, exponent = jnp.ldexp(unit, -shift), exponent + shift
      return (unit, exponent), (norms.vector_norm(unit), exponent)
    start = (jnp.asarray(delta, jnp.float32), jnp.zeros((), jnp.int32))
    _, (lengths, exponents) = jax.lax.scan(step, start, jnp.asarray(pre_activations, jnp.float32))
    host = np.ldexp(np.asarray(lengths, np.float64), np.asarray(exponents))
    rows[rho] = {k: float(host[k - 1]) for k in distances}
  return rows


def _network(radii: Sequence[float], distances: Sequence[int], hidden_size: int, seed: int,
             sequences: int, params: Mapping[str, Any] | None, input_scale: float,
             transient: int, dtype: Any) -> dict[float, dict[int | str, float]]:
  steps = transient + max(distances) + 1
  key_inputs, key_loss, key_params = jax.random.split(jax.random.key(seed), 3)
  rows: dict[float, dict[int | str, float]] = {}
  for rho in radii:
    cell_params = params if params is not None else cells.init_elman(
        key_params, hidden_size, hidden_size, 'gaussian', rho,
        input_scale=input_scale / hidden_size ** 0.5)
    cell_params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, dtype), cell_params)
    size = cell_params['W_xh'].shape[0]
    inputs = jax.random.normal(key_inputs, (sequences, steps, size), dtype)
    direction = jax.random.normal(key_loss, (cell_params['W_hh'].shape[0],), dtype)
    # dL/dh_T is the direction; scaled (exactly) to a norm in [1/2, 1), every ||dL/dh_{T-k}||
    # is below the ratio it gives, so no gradient overflows where the ratio fits the dtype.
    direction = jnp.ldexp(direction, -norms.scale_exponent(norms.vector_norm(direction)))
    initial = jnp.zeros((sequences, cell_params['W_hh'].shape[0]), dtype)
    _, gradients = diagnostics.state_gradients(
        cells.elman('tanh'), cell_params, inputs, initial,
        lambda states: jnp.sum(states[:, -1] @ direction))
    # [B, len(distances)]: each sequence's own ratio, the median over them
    ratios = np.median(np.stack([np.asarray(norms.norm_ratio(gradients[:, -1 - k],
                                                             gradients[:, -1]))
                                 for k in distances], axis=1), axis=0)
    measured = float(initializers.host_spectral_radius(np.asarray(cell_params['W_hh'])))
    rows[rho] = {**{k: float(r) for k, r in zip(distances, ratios)},
                 'measured_spectral_radius': measured}
  return rows


def _checked_distances(distances: Any) -> tuple[int, ...]:
  """``distances`` as a non-empty tuple of Python ints >= 1 (numpy's integers are ints)."""
  try:
    values = tuple(distances)
  except TypeError:
    raise ValueError(f'distances: expected a sequence of ints >= 1, got '
                     f'{checks.shown(distances)}') from None
  if not values:
    raise ValueError('distances: expected at least one distance, got none')
  return tuple(checks.integer(f'distances[{i}]', k, 1) for i, k in enumerate(values))


def _check_cell_params(params: Any) -> None:
  """An Elman cell's params, not a whole model's: one line naming what is expected."""
  if not isinstance(params, Mapping) or not {'W_xh', 'W_hh'} <= set(params):
    given = sorted(params) if isinstance(params, Mapping) else type(params).__name__
    raise ValueError("params: expected an Elman cell's {'W_xh': [d, H], 'W_hh': [H, H], "
                     "'b': [H]} (a model's cell: e.g. params['recurrence']['cell'] of a "
                     f'models.LanguageModel), got {given}')
  hidden = jnp.shape(params['W_hh'])[-1:]
  cells.check_step('elman', params, jnp.zeros(hidden), jnp.shape(params['W_xh'])[:1],
                   ('W_xh', 'W_hh'))


def gradient_norm_table(radii: Sequence[float] | None = None,
                        distances: Sequence[int] = (20, 40, 60), protocol: str = 'network',
                        hidden_size: int = 64, seed: int = 1, sequences: int = 64,
                        params: Mapping[str, Any] | None = None, input_scale: float = 1.0,
                        transient: int = 0, dtype: Any = jnp.float32
                        ) -> dict[float, dict[int | str, float]]:
  """||dL/dh_{T-k}|| / ||dL/dh_T|| for each spectral radius and distance k.

  Args:
    radii: spectral radii rho >= 0 of W_hh, the rows' keys; None is (0.7, 1.0,
      1.3). With ``params``: the one row's key (the radius the params were
      made at, say), one radius or None (then their W_hh's measured radius
      rounded to 6 digits, so that W_hh at 1.0 in float32 is row 1.0).
    distances: k >= 1, in steps.
    protocol: 'linearised' or 'network' (the module docstring).
    hidden_size: H, the units: W_hh is ``[H, H]``; a fresh 'network' reads
      inputs ``<float32>[B, T, H]`` (d = H) with T = max(distances) + 1.
    seed: an int in [0, 2^63): numpy's seed ('linearised') or ``jax.random.key(seed)``
      ('network').
    sequences: B, the sequences whose median a 'network' ratio is.
    params: 'network': an Elman cell's params ``{'W_xh': [d, H], 'W_hh': [H, H],
      'b': [H]}`` (a trained run's, e.g.
      ``rnnjax.train.checkpoints.final_params(folder)``'s cell) instead of a fresh
      init: one row, computed once.
    input_scale: 'network', a fresh init: sigma_in >= 0, the standard deviation of
      each unit's drive x_t W_xh (W_xh ~ N(0, sigma_in^2 / d), b = 0); 1.0 is
      ``cells.init_elman``'s default.
    transient: 'network': steps >= 0 run from the zero state before the T =
      max(distances) + 1 steps measured, so that the states there are stationary.
    dtype: 'network': of the params, inputs and state gradients (float64 needs
      ``jax.enable_x64``: ratios below float32's 1.2e-38 stay measurable).

  Returns:
    ``{rho: {k: ratio}}``, each ratio a scalar (Python floats); a 'network' row also holds
    ``'measured_spectral_radius'``, its W_hh's (float32, on the host). No ratio overflows
    where its value fits: 'linearised' carries delta as 2^e u (u's entries below 1) and forms
    each ratio in float64, so it is finite and nonzero wherever a float64 is (3^100 at rho
    3); 'network' is finite wherever the ratio fits ``dtype`` (its dL/dh_T has a norm below
    1, so no dL/dh_{T-k} is larger than its ratio; ``norms.norm_ratio``).

  Raises:
    ValueError: naming the argument in one line, for an unknown protocol, radii that are
      not finite numbers >= 0 (or more than one with ``params``), distances that are not
      ints >= 1 (numpy's integers are ints), sizes < 1, a seed outside [0, 2^63), or params
      that are not an Elman cell's (a whole model's, say).

  References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
    neural networks", eq. 7; the linearised table: ``docs/reference_numbers.md``.
  """
  checks.one_of('protocol', protocol, PROTOCOLS)
  if params is not None:
    _check_cell_params(params)
  if params is not None and radii is not None and len(tuple(radii)) != 1:
    raise ValueError(f'radii: expected one radius with params (the row\'s key) or None, got '
                     f'{tuple(radii)!r}')
  if params is not None and radii is None:
    radii = (round(float(initializers.host_spectral_radius(np.asarray(params['W_hh']))), 6),)
  radii = (0.7, 1.0, 1.3) if radii is None else tuple(radii)
  for rho in radii:
    initializers.check_radius('radii', rho)
  distances = _checked_distances(distances)
  hidden_size = checks.integer('hidden_size', hidden_size, 1)
  sequences = checks.integer('sequences', sequences, 1)
  seed = checks.integer('seed', seed, 0, 2 ** 63 - 1)
  initializers.check_radius('input_scale', input_scale)
  transient = checks.integer('transient', transient, 0)
  if protocol == 'linearised':
    return _linearised(radii, distances, hidden_size, seed)
  return _network(radii, distances, hidden_size, seed, sequences, params, float(input_scale),
                  transient, dtype)
