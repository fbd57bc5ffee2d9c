"""The gradient-norm table: how far back the gradient of an Elman network reaches.

For each spectral radius rho of W_hh and each distance k, the ratio
||dL/dh_{T-k}|| / ||dL/dh_T||: below 1 the gradient vanishes, above 1 it
explodes (Pascanu, Mikolov & Bengio 2013, eq. 7). Two protocols:

  'linearised'  the backward pass alone, delta <- W_hh^T (phi'(a_t) * delta),
                with pre-activations a_t ~ N(0, 0.3^2) drawn afresh at each step:
                the mild-activation regime, where tanh' is near 1 and the
                product of Jacobians behaves like powers of W_hh. Each radius
                draws from numpy's ``default_rng(seed)`` afresh (a Gaussian W, then
                the unit start vector, then the steps' pre-activations, a row of H
                a step), W rescaled to the radius: every radius draws the same
                numbers (common random numbers), so a row is a function of (seed,
                rho, H) alone, whatever other radii are asked, and its ratio at k
                of the first k steps alone, whatever other distances are asked.
                The one exception is the seed note's table: ``radii=None`` draws
                the note's radii (0.7, 1.0, 1.3) in turn from one stream, 60 steps
                a radius (max(distances) if larger), as the code of
                ``docs/reference_numbers.md`` does, so that ``seed=1`` gives its nine
                numbers to the digit (6.18e-02 at rho 1.0 and k 20); there rows 1.0
                and 1.3 follow the draws of the radii before them (asked alone,
                radius 1.0 gives 1.01e-01 at k 20). Pass ``radii=(0.7, 1.0, 1.3)``
                for rows of their own.
  'network'     a real Elman network: ``cells.init_elman`` at rho (or given
                params), driven by N(0, 1) inputs from a zero state; L is a
                fixed random projection of the last state, and the ratio is the
                median over the sequences of ``diagnostics.state_gradients``.
                The network's states saturate (tanh' well below 1), so its
                gradient vanishes faster than the linearised protocol's at the
                same rho: the two tables differ, and both are right. Each row
                also holds its W_hh's measured spectral radius. Every radius
                draws the same W_hh (rescaled), inputs and loss direction from
                ``jax.random.key(seed)``, so a row is a function of (seed, rho)
                and of the T = transient + max(distances) + 1 steps run, whatever
                other radii are asked. T is part of the measurement (the states
                at T - k have run T - k steps from the zero state): fewer distances
                with the same T give the same ratios, ``transient`` making up the
                steps (distances (20,) with transient 40 is distances (20, 60)'s
                k = 20).

``gradient_norm_spread`` gives the median and the 10-90% range of each ratio over
seeds seed, seed + 1, ...; ``spread_table`` the Markdown of
``docs/results/gradient_norm_spread.md``.

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
rho for large H. The Gaussian means are Gauss-Legendre rules over pieces on both of the
integrand's scales, 1 (tanh's) and sqrt(q) (the density's), accurate to about 1e-13 relative
at any q (tested against mpmath at q from 1e-4 to 1e4).

References:
  Poole, Lahiri, Raghu, Sohl-Dickstein & Ganguli (2016), "Exponential
  expressivity in deep neural networks through transient chaos" (the variance
  map, eq. 3, and chi, eq. 5); Pennington, Schoenholz & Ganguli (2017),
  "Resurrecting the sigmoid in deep learning through dynamical isometry"
  (the mean squared singular value of the Jacobian, rho^2 E[phi'^2]);
  Pascanu, Mikolov & Bengio (2013), section 3.1 (sigma_max < 1 / gamma).
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import checks
from rnnjax import diagnostics
from rnnjax import dtypes
from rnnjax import initializers
from rnnjax import norms

__all__ = ['PROTOCOLS', 'gradient_norm_table', 'gradient_norm_spread', 'spread_table',
           'mean_field_variance', 'mean_field_rate']

PROTOCOLS = ('linearised', 'network')
LINEARISED_VARIANCE = 0.3 ** 2  # of the linearised protocol's pre-activations
SEED_RADII = (0.7, 1.0, 1.3)  # the seed note's table (docs/reference_numbers.md), radii=None
SEED_DISTANCES = (20, 40, 60)
SEED_STEPS = 60  # the note's steps a radius, in its one stream
SPREAD_PERCENTILES = (50, 10, 90)  # gradient_norm_spread's (median, low, high)
_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # the quadrature's piece edges, in units
_TAIL = 40.0  # standard deviations: the density beyond is below e^-800
_NODES = 64  # Gauss-Legendre nodes a piece
_LEGENDRE = np.polynomial.legendre.leggauss(_NODES)


def _gaussian_mean(function: Callable[[np.ndarray], np.ndarray], variance: float) -> float:
  """E[function(a)], a ~ N(0, variance), for an even bounded ``function`` of numpy arrays
  (float64).

  2 int_0^{40 sqrt(variance)} function(a) exp(-a^2 / (2 variance)) da / sqrt(2 pi variance)
  by ``_NODES``-point Gauss-Legendre rules on pieces whose edges lie at 1/4 ... 32 on both
  scales of the integrand, tanh's (1) and the density's (sqrt(variance)): a narrow density
  (q = 1e-4) and a narrow function against a wide density (tanh'^2 at q = 1e4) are both
  resolved, where one Gauss-Hermite rule in z = a / sqrt(q) misses tanh'^2's peak of width
  1 / sqrt(q) (101 nodes gave sqrt(E[tanh'^2]) = 0.353 for 0.230 at q = 100). Each piece
  spans a factor of 2 of one scale, on which the integrand is analytic and smooth: 1e-13
  relative against mpmath at q from 1e-6 to 1e6 (``tests/test_gradient_norms.py``).
  ``function(0)`` at variance 0. numpy alone (the library needs no scipy).
  """
  if variance == 0:
    return float(function(np.zeros(1))[0])
  scale = float(np.sqrt(variance))
  end = _TAIL * scale
  edges = np.array(sorted({0.0, end} | {c for c in _SCALES if c < end} |
                          {c * scale for c in _SCALES if c * scale < end}))
  nodes, weights = _LEGENDRE
  low, high = edges[:-1, None], edges[1:, None]
  a = (low + high) / 2 + (high - low) / 2 * nodes  # [pieces, nodes]
  total = np.sum((high - low) / 2 * weights * function(a) * np.exp(-0.5 * (a / scale) ** 2))
  return float(2 * total / (scale * np.sqrt(2 * np.pi)))


def _root(function: Callable[[float], float], low: float, high: float) -> float:
  """The q in [low, high] (0 < low < high) where ``function`` changes sign from + at low to
  - at high, by bisection at the geometric mean to 1e-14 relative (at most 400 halvings)."""
  for _ in range(400):
    if high <= low * (1 + 1e-14):
      break
    middle = float(np.sqrt(low * high))
    if middle <= low or middle >= high:
      break
    if function(middle) > 0:
      low = middle
    else:
      high = middle
  return float(np.sqrt(low * high))


def _tanh_squared(a: np.ndarray) -> np.ndarray:
  return np.tanh(a) ** 2


def _tanh_derivative_squared(a: np.ndarray) -> np.ndarray:
  return (1 - np.tanh(a) ** 2) ** 2


def mean_field_variance(radius: float, input_scale: float) -> float:
  """q*, the variance of a unit's pre-activation in a large tanh Elman network at its
  fixed point, q = radius^2 E[tanh(sqrt(q) z)^2] + input_scale^2 (module docstring).

  Args:
    radius: rho >= 0, the spectral radius of a Gaussian W_hh (entries' variance
      rho^2 / H).
    input_scale: sigma_in >= 0, the standard deviation of each unit's drive
      x_t W_xh + b.

  Returns:
    q* (dimensionless, a Python float): the limit of the variance map iterated from any
    q > 0. The map V(q) is increasing and concave with V(q) <= rho^2 + sigma_in^2, so for
    sigma_in > 0 it has one fixed point, in [sigma_in^2, sigma_in^2 + rho^2]; for sigma_in =
    0 it is 0 where rho <= 1 (V(q) < q for q > 0) and else the positive root of
    rho^2 E[tanh(sqrt(q) z)^2] / q = 1 in (0, rho^2]. Solved by bisection to 1e-14
    relative, the means by piecewise quadrature (``_gaussian_mean``): about 1e-12
    relative at any q (at rho 10, sigma_in 0: 91.705, where 101-node Gauss-Hermite gave
    87.28).

  Raises:
    ValueError: naming the argument, for a value that is not a finite number >= 0.

  References:
    Poole et al. (2016), eq. 3.
  """
  for name, value in (('radius', radius), ('input_scale', input_scale)):
    initializers.check_radius(name, value)
  rho_squared, drive = float(radius) ** 2, float(input_scale) ** 2
  if rho_squared == 0:
    return drive
  if drive == 0:
    if rho_squared <= 1:
      return 0.0

    def excess(q: float) -> float:  # rho^2 E[tanh^2] / q - 1: rho^2 - 1 > 0 as q -> 0
      return rho_squared * _gaussian_mean(_tanh_squared, q) / q - 1.0
    return _root(excess, 1e-200, rho_squared)

  def gap(q: float) -> float:
    return rho_squared * _gaussian_mean(_tanh_squared, q) + drive - q
  return _root(gap, drive, drive + rho_squared)


def mean_field_rate(radius: float, variance: float) -> float:
  """sqrt(chi) = radius sqrt(E[tanh'(sqrt(variance) z)^2]): the mean-field factor by which
  one backward step scales ||dL/dh|| (module docstring).

  Args:
    radius: rho >= 0 of a Gaussian W_hh.
    variance: q >= 0 of the pre-activations (``mean_field_variance`` for a network,
      ``LINEARISED_VARIANCE`` for the linearised protocol).

  Returns:
    the rate per step (a Python float): < 1 vanishing, > 1 exploding. The mean by piecewise
    quadrature (``_gaussian_mean``), about 1e-13 relative at any q (at rho 1, q 100:
    0.23045, where 101-node Gauss-Hermite gave 0.353).

  Raises:
    ValueError: naming the argument, for a value that is not a finite number >= 0.

  References:
    Poole et al. (2016), eq. 5; Pennington et al. (2017).
  """
  for name, value in (('radius', radius), ('variance', variance)):
    initializers.check_radius(name, value)
  return float(radius) * float(np.sqrt(_gaussian_mean(_tanh_derivative_squared,
                                                      float(variance))))


@jax.jit
def _linearised_profile(w: jax.Array, delta: jax.Array, pre_activations: jax.Array
                        ) -> tuple[jax.Array, jax.Array]:
  """||delta_k|| = lengths[k - 1] 2^exponents[k - 1] for k = 1 ... steps, delta_k =
  W^T (tanh'(a_k) * delta_{k-1}) (w ``<float32>[H, H]``, delta ``<float32>[H]``,
  pre_activations ``<float32>[steps, H]``; lengths ``<float32>[steps]``, exponents
  ``<int32>[steps]``).

  delta is carried as 2^e u with u's entries below 1 (``norms.scale_exponent``, exact): at
  rho = 3 delta passes float32's range near k = 80, and then W^T (tanh' * inf) would be
  inf - inf = NaN. The caller forms ||delta|| = 2^e ||u|| on the host in float64, so a ratio
  is neither inf nor 0 where float64 holds it.
  """
  def step(carry: tuple[jax.Array, jax.Array], a: jax.Array
           ) -> tuple[tuple[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    unit, exponent = carry
    unit = w.T @ (cells.activation_derivative(jnp.tanh(a), 'tanh') * unit)
    shift = norms.scale_exponent(jnp.max(jnp.abs(unit)))
    unit, exponent = norms.ldexp(unit, -shift), exponent + shift
    return (unit, exponent), (norms.vector_norm(unit), exponent)
  _, (lengths, exponents) = jax.lax.scan(step, (delta, jnp.zeros((), jnp.int32)),
                                         pre_activations)
  return lengths, exponents


def _linearised_row(rng: np.random.Generator, rho: float, hidden_size: int, steps: int,
                    distances: tuple[int, ...]) -> dict[int | str, float]:
  """One radius's row, drawing W, the start vector and ``steps`` steps from ``rng``."""
  w = rng.normal(0, 1, (hidden_size, hidden_size))
  w *= rho / initializers.host_spectral_radius(w)
  delta = rng.normal(0, 1, hidden_size)
  delta /= float(norms.vector_norm(delta))
  pre_activations = rng.normal(0, 0.3, (steps, hidden_size))  # as one draw a step
  lengths, exponents = _linearised_profile(jnp.asarray(w, jnp.float32),
                                           jnp.asarray(delta, jnp.float32),
                                           jnp.asarray(pre_activations, jnp.float32))
  host = np.ldexp(np.asarray(lengths, np.float64), np.asarray(exponents))
  return {k: float(host[k - 1]) for k in distances}


def _linearised(radii: tuple[float, ...] | None, distances: tuple[int, ...], hidden_size: int,
                seed: int) -> dict[float, dict[int | str, float]]:
  """The 'linearised' rows (module docstring): each radius from ``default_rng(seed)``
  afresh, or (``radii`` None) the seed note's radii in turn from one stream."""
  if radii is None:
    shared = np.random.default_rng(seed)
    steps = max(SEED_STEPS, *distances)
    return {rho: _linearised_row(shared, rho, hidden_size, steps, distances)
            for rho in SEED_RADII}
  return {rho: _linearised_row(np.random.default_rng(seed), rho, hidden_size, max(distances),
                               distances)
          for rho in radii}


def _network(radii: tuple[float, ...], distances: tuple[int, ...], hidden_size: int, seed: int,
             sequences: int, params: Mapping[str, Any] | None, input_scale: float,
             transient: int, dtype: Any) -> dict[float, dict[int | str, float]]:
  """The 'network' rows (module docstring): every radius from the same keys of
  ``jax.random.key(seed)``."""
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
    direction = norms.ldexp(direction, -norms.scale_exponent(norms.vector_norm(direction)))
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


def _a_sequence(name: str, value: Any, example: str) -> tuple[Any, ...]:
  """``value``'s entries as a tuple: a list, tuple, 1-d array or other iterable, not a string,
  mapping or scalar (the one-line error names the argument, the type given and the fix)."""
  if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 1:
    return tuple(value.tolist() if isinstance(value, np.ndarray) else np.asarray(value).tolist())
  if not isinstance(value, (str, bytes, Mapping, np.ndarray, jax.Array)):
    try:
      return tuple(value)
    except TypeError:
      pass
  kind = type(value).__name__ if not isinstance(value, (np.ndarray, jax.Array)) else (
      f'{np.ndim(value)}-d array')
  raise ValueError(f'{name}: expected {example}, got the {kind} {checks.shown(value)}; pass '
                   f'{name}=({checks.shown(value)},) for one')


def _checked_radii(radii: Any) -> tuple[float, ...]:
  """``radii`` as a non-empty tuple of finite numbers >= 0 (as given: 1 stays an int)."""
  values = _a_sequence('radii', radii, 'a sequence of spectral radii such as (1.0,)')
  if not values:
    raise ValueError('radii: expected at least one spectral radius, got (); pass e.g. '
                     'radii=(1.0,), or None for (0.7, 1.0, 1.3)')
  for i, rho in enumerate(values):
    initializers.check_radius(f'radii[{i}]', rho)
  return values


def _checked_distances(distances: Any) -> tuple[int, ...]:
  """``distances`` as a non-empty tuple of Python ints >= 1 (numpy's integers are ints)."""
  values = _a_sequence('distances', distances,
                       'a sequence of distances k >= 1 in steps such as (20, 40, 60)')
  if not values:
    raise ValueError('distances: expected at least one distance, got none; pass e.g. '
                     'distances=(20, 40, 60)')
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
                        distances: Sequence[int] = SEED_DISTANCES, protocol: str = 'network',
                        hidden_size: int = 64, seed: int = 1, sequences: int = 64,
                        params: Mapping[str, Any] | None = None, input_scale: float = 1.0,
                        transient: int = 0, dtype: Any = jnp.float32
                        ) -> dict[float, dict[int | str, float]]:
  """||dL/dh_{T-k}|| / ||dL/dh_T|| for each spectral radius and distance k.

  A row is a function of what it names (the seed, its radius, the protocol's sizes; the
  module docstring): the same whatever other radii or distances are asked, but for
  'linearised' with ``radii=None``, the seed note's table drawn in one stream over its radii
  (``seed=1``: ``docs/reference_numbers.md``'s nine numbers), and for 'network', whose
  sequences run T = transient + max(distances) + 1 steps (the same T, the same ratios).

  Args:
    radii: spectral radii rho >= 0 of W_hh, the rows' keys (a sequence: ``(1.0,)`` for
      one). None: (0.7, 1.0, 1.3), for 'linearised' the seed note's one stream. With
      ``params``: the one row's key (the radius the params were made at, say), one radius
      or None (then their W_hh's measured radius rounded to 6 digits, so that W_hh at 1.0 in
      float32 is row 1.0).
    distances: k >= 1, in steps (a sequence: ``(20,)`` for one).
    protocol: 'linearised' or 'network' (the module docstring).
    hidden_size: H, the units: W_hh is ``[H, H]``; a fresh 'network' reads
      inputs ``<float32>[B, T, H]`` (d = H) with T = transient + max(distances) + 1.
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
    transient: 'network': steps >= 0 run from the zero state before the max(distances) + 1
      steps measured, so that the states there are stationary.
    dtype: a floating dtype; 'network': of the params, inputs and state gradients (float64
      needs ``jax.enable_x64``: ratios below float32's 1.2e-38 stay measurable).

  Returns:
    ``{rho: {k: ratio}}``, each ratio a scalar (Python floats); a 'network' row also holds
    ``'measured_spectral_radius'``, its W_hh's (float32, on the host). No ratio overflows
    where its value fits: 'linearised' carries delta as 2^e u (u's entries below 1) and forms
    each ratio in float64, so it is finite and nonzero wherever a float64 is (3^100 at rho
    3); 'network' is finite wherever the ratio fits ``dtype`` (its dL/dh_T has a norm below
    1, so no dL/dh_{T-k} is larger than its ratio; ``norms.norm_ratio``).

  Raises:
    ValueError: naming the argument in one line, with the value given and the fix, for an
      unknown protocol, radii or distances that are not a sequence (a bare 1.0, say), radii
      that are not finite numbers >= 0 (or more than one with ``params``), distances that
      are not ints >= 1 (numpy's integers are ints), sizes < 1, a seed outside [0, 2^63),
      a dtype that is not floating (or float64 for 'network' without ``jax.enable_x64``),
      params with 'linearised' (it draws its own W_hh), or params that are not an Elman
      cell's (a whole model's, say).

  References:
    Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
    neural networks", eq. 7; the linearised table: ``docs/reference_numbers.md``.
  """
  checks.one_of('protocol', protocol, PROTOCOLS)
  if params is not None and protocol == 'linearised':
    raise ValueError("params: expected None with protocol 'linearised' (it draws its own "
                     "W_hh), got an Elman cell's params; pass protocol='network' to measure "
                     'them')
  if params is not None:
    _check_cell_params(params)
  given_radii = None if radii is None else _checked_radii(radii)
  if params is not None and given_radii is not None and len(given_radii) != 1:
    raise ValueError(f"radii: expected one radius with params (the row's key) or None, got "
                     f'{given_radii!r}; pass radii=({given_radii[0]!r},) or None')
  if params is not None and given_radii is None:
    given_radii = (round(float(initializers.host_spectral_radius(
        np.asarray(params['W_hh']))), 6),)
  distances = _checked_distances(distances)
  hidden_size = checks.integer('hidden_size', hidden_size, 1)
  sequences = checks.integer('sequences', sequences, 1)
  seed = checks.integer('seed', seed, 0, 2 ** 63 - 1)
  initializers.check_radius('input_scale', input_scale)
  transient = checks.integer('transient', transient, 0)
  dtype = dtypes.floating_dtype(dtype, held_by_jax=protocol == 'network')
  if protocol == 'linearised':
    return _linearised(given_radii, distances, hidden_size, seed)
  return _network(SEED_RADII if given_radii is None else given_radii, distances, hidden_size,
                  seed, sequences, params, float(input_scale), transient, dtype)


def gradient_norm_spread(seeds: int = 200, seed: int = 1, **table_arguments: Any
                         ) -> dict[float, dict[int | str, tuple[float, float, float]]]:
  """The median and the 10-90% range of each ``gradient_norm_table`` entry over ``seeds``
  draws, seeds seed, seed + 1, ..., seed + seeds - 1.

  Args:
    seeds: N >= 1, the draws.
    seed: the first draw's seed, an int in [0, 2^63 - N].
    **table_arguments: ``gradient_norm_table``'s other arguments (radii, distances,
      protocol, hidden_size, sequences, params, input_scale, transient, dtype), checked
      there. ``radii=None`` is (0.7, 1.0, 1.3), each radius drawn afresh from its seed in
      every protocol (not the seed note's one stream: the spread of each row on its own).

  Returns:
    ``{rho: {k: (median, p10, p90)}}`` (Python floats: the 50th, 10th and 90th
    percentiles over the N tables' entries, numpy's linear interpolation, so that p10 <=
    median <= p90); a 'network' row's ``'measured_spectral_radius'`` likewise. Each draw is
    the table ``gradient_norm_table(radii, ..., seed=s)`` gives, so the spread of a row is
    the same whatever other radii and distances are asked (as each row is).

  Raises:
    ValueError: naming the argument in one line, for seeds < 1, a seed outside [0, 2^63 -
      seeds], an argument ``gradient_norm_table`` does not take, or any it refuses.

  References:
    The draws: ``gradient_norm_table``; the table of ``docs/results/gradient_norm_spread.md``:
    ``spread_table``.
  """
  seeds = checks.integer('seeds', seeds, 1)
  seed = checks.integer('seed', seed, 0, 2 ** 63 - seeds)
  unknown = sorted(set(table_arguments) - {'radii', 'distances', 'protocol', 'hidden_size',
                                           'sequences', 'params', 'input_scale', 'transient',
                                           'dtype'})
  if unknown:
    raise ValueError(f'table_arguments: expected gradient_norm_table\'s arguments but seed, '
                     f'got {unknown}; pass seed= and seeds= for the draws')
  if table_arguments.get('radii') is None and table_arguments.get('params') is None:
    table_arguments = {**table_arguments, 'radii': SEED_RADII}
  tables = [gradient_norm_table(**table_arguments, seed=seed + i) for i in range(seeds)]
  first = tables[0]

  def spread(rho: float, k: Any) -> tuple[float, float, float]:
    median, low, high = np.percentile([t[rho][k] for t in tables], SPREAD_PERCENTILES)
    return float(median), float(low), float(high)
  return {rho: {k: spread(rho, k) for k in first[rho]} for rho in first}


def spread_table(seeds: int = 200, seed: int = 1) -> str:
  """The Markdown of ``docs/results/gradient_norm_spread.md``: the seed note's linearised
  table (H = 64, seed 1, one stream over the radii) beside each entry's median and 10-90%
  range over ``seeds`` draws, each radius drawn afresh from its seed (``gradient_norm_spread``).

  Args:
    seeds: N >= 1, the draws (seeds ``seed`` ... ``seed + N - 1``).
    seed: the first draw's seed.

  Returns:
    the page's text (a str, ending in a newline): a sentence and a table of a row per (rho,
    k): the note's draw, seed 1's draw of the radius afresh, the median, the 10th and the
    90th percentile, every ratio in ``.2e``.

  Raises:
    ValueError: naming the argument, for seeds < 1 or a seed outside [0, 2^63 - seeds].

  References:
    ``docs/reference_numbers.md``, "Gradients through time".
  """
  note = gradient_norm_table(protocol='linearised')
  afresh = gradient_norm_table(SEED_RADII, protocol='linearised')
  spread = gradient_norm_spread(seeds, seed, protocol='linearised', distances=SEED_DISTANCES)
  lines = [
      f"The linearised gradient-norm table (H = 64): the seed note's draw "
      f"(`gradient_norm_table(protocol='linearised')`, seed 1, one stream over the radii) "
      f'beside the median and the 10th to 90th percentile over {seeds} seeds ({seed} to '
      f'{seed + seeds - 1}, each radius drawn afresh from its seed: '
      f"`gradient_tables.gradient_norm_spread({seeds}, {seed}, protocol='linearised')`), "
      f"and seed 1's draw of each radius afresh (`gradient_norm_table((0.7, 1.0, 1.3), "
      f"protocol='linearised')`). Written by "
      f'`rnnjax.gradient_tables.spread_table({seeds}, {seed})`.',
      '',
      "| rho | k | the seed note's draw | seed 1, the radius drawn afresh | median over the "
      'seeds | 10th percentile | 90th percentile |',
      '|---|---|---|---|---|---|---|']
  for rho in SEED_RADII:
    for k in SEED_DISTANCES:
      median, low, high = spread[rho][k]
      lines.append(f'| {rho} | {k} | {note[rho][k]:.2e} | {afresh[rho][k]:.2e} | '
                   f'{median:.2e} | {low:.2e} | {high:.2e} |')
  return '\n'.join(lines) + '\n'
