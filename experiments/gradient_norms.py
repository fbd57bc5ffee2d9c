"""How gradient norms vanish or explode with distance, for W_hh at spectral radius rho.

  python -m experiments.gradient_norms --source=seed     # seed note 001's table, exactly
  python -m experiments.gradient_norms --source=jax      # 256 seeds x 11 radii, vmapped
  python -m experiments.gradient_norms --source=network --run=results/char_lm

--source=seed runs the linearised study of seed note 001 as written there
(numpy default_rng(1), H = 64, pre-activations N(0, 0.3), 60 steps) and
prints its table digit for digit (rho 0.7: 8.05e-05, 1.40e-08, 2.28e-12 ...;
under a second). --source=jax repeats it with jax.random over many seeds
(about 10 s). --source=network backpropagates through an Elman network on
Tiny Shakespeare text, at initialization for each rho and after the training
of a finished char_lm run (about 10 s). Each writes
gradient_norms_<source>.md, .csv and .png to --workdir.
"""

import logging as python_logging
import math
import pathlib

from absl import app
from absl import flags
from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import initializers
from rnnjax import models
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import run_folder

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (only when run as a program, so the module imports cleanly)."""
  flags.DEFINE_enum('source', 'seed', ['seed', 'jax', 'network'],
                              'seed: seed note 001 verbatim (numpy); jax: the same study over many '
                              'jax.random seeds; network: BPTT through a char_lm network.')
  flags.DEFINE_string('workdir', 'results/gradient_norms',
                                 'Folder for the table (.md, .csv) and the plot (.png).')
  flags.DEFINE_integer('seeds', 256, 'jax: number of random seeds, vmapped.')
  flags.DEFINE_list('radii', None, 'Spectral radii; default 0.7,1.0,1.3 (seed), '
                             '0.5,0.6,...,1.5 (jax), 0.5,0.9,1.0,1.1,1.5 (network).')
  flags.DEFINE_string('run', None, 'network: the folder of an ended char_lm run.')
  flags.DEFINE_integer('window', 61, 'network: steps of text per sequence (distances '
                                 'up to window - 1).')

HIDDEN_SIZE, STEPS, REPORTED = 64, 60, (20, 40, 60)
DEFAULT_RADII = {'seed': (0.7, 1.0, 1.3),
                 'jax': tuple(round(0.5 + 0.1 * i, 1) for i in range(11)),
                 'network': (0.5, 0.9, 1.0, 1.1, 1.5)}


def seed_study(radii=(0.7, 1.0, 1.3)):
  """Seed note 001's code, unchanged but for keeping every step's norm.

  Returns:
    ``{rho: <float64>[60]}``, ||delta|| after 1..60 backward steps.
  """
  rng = np.random.default_rng(1)
  norms = {}
  for rho in radii:
    w = rng.normal(0, 1, (HIDDEN_SIZE, HIDDEN_SIZE))
    w *= rho / max(abs(np.linalg.eigvals(w)))
    delta = rng.normal(0, 1, HIDDEN_SIZE)
    delta /= np.linalg.norm(delta)
    steps = []
    for _ in range(STEPS):
      a = rng.normal(0, 0.3, HIDDEN_SIZE)
      delta = w.T @ ((1.0 - np.tanh(a) ** 2) * delta)
      steps.append(np.linalg.norm(delta))
    norms[rho] = np.array(steps)
  return norms


def seed_lines(norms) -> list[str]:
  """The seed's printout: one line per rho with the norms after 20, 40, 60 steps."""
  return [f'rho = {rho:.1f}:  |grad| after 20 steps {n[19]:9.2e}, 40 steps {n[39]:9.2e}, '
          f'60 steps {n[59]:9.2e}' for rho, n in norms.items()]


def jax_study(key, radii, seeds: int):
  """The seed's study with jax.random, vmapped over seeds and radii.

  The vector is renormalised after every step and the log of its norm
  accumulated, so norms far below float32's range (rho = 0.5 after 60 steps:
  about 1e-18) are still exact.

  Returns:
    ``<float32>[len(radii), seeds, 60]`` natural logs of the norms after 1..60 steps.
  """
  def one(key, rho):
    key_w, key_delta, key_a = jax.random.split(key, 3)
    w = initializers.gaussian_at_radius(key_w, HIDDEN_SIZE, 1.0) * rho
    delta = jax.random.normal(key_delta, (HIDDEN_SIZE,))
    delta = delta / jnp.linalg.norm(delta)
    pre_activations = 0.3 * jax.random.normal(key_a, (STEPS, HIDDEN_SIZE))

    def step(carry, a):
      delta, log_norm = carry
      delta = w.T @ ((1.0 - jnp.tanh(a) ** 2) * delta)
      norm = jnp.linalg.norm(delta)
      log_norm = log_norm + jnp.log(norm)
      return (delta / norm, log_norm), log_norm

    return jax.lax.scan(step, (delta, jnp.float32(0.0)), pre_activations)[1]

  keys = jax.random.split(key, seeds)
  radii = jnp.asarray(radii, jnp.float32)
  return jax.jit(jax.vmap(jax.vmap(one, (0, None)), (None, 0)))(keys, radii)


def fitted_rate(log_norms) -> float:
  """exp of the least-squares slope of log ||delta|| against the step: the
  per-step factor by which the norm shrinks (< 1) or grows (> 1)."""
  steps = np.arange(1, len(log_norms) + 1)
  return float(np.exp(np.polyfit(steps, log_norms, 1)[0]))


def network_profiles(model, params, inputs, targets, distances):
  """Median over sequences of ||dL_T/dh_{T-k}|| / ||dL_T/dh_T|| (L_T: loss at the last step)."""
  variables = {'params': params}
  embedded = model.apply(variables, inputs, method=model.embed)

  def last_step_loss(states):
    logits = model.apply(variables, states[:, -1], method=model.logits)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets[:, -1]).sum()

  _, grads = diagnostics.state_gradients(cells.elman(model.activation),
                                         params['recurrence']['cell'], embedded,
                                         model.initial_state(inputs.shape[0]), last_step_loss)
  norms = jnp.linalg.norm(grads, axis=-1)  # [B, T]; each sequence's loss reaches only its states
  steps = inputs.shape[1]
  ratios = jnp.stack([norms[:, steps - 1 - k] for k in distances], axis=1) / norms[:, -1:]
  return np.median(np.asarray(ratios), axis=0)


def network_study(run: pathlib.Path, radii, window: int):
  config, trained = run_folder.final_params(run)
  corpus = corpora.read_text(config['corpus'], config['data_dir'] or None)
  vocabulary = text.char_vocabulary(corpus)
  _, held_out = text.split_train_validation(text.encode(corpus, vocabulary),
                                            config['validation_fraction'])
  inputs, targets = text.stream_windows(held_out, 64, window)
  inputs, targets = jnp.asarray(inputs[0]), jnp.asarray(targets[0])
  distances = tuple(range(1, window))
  settings = dict(vocab_size=len(vocabulary), hidden_size=config['hidden_size'],
                  embedding_size=config['embedding_size'], activation=config['activation'],
                  recurrent_init=config['recurrent_init'])
  rows = {}
  for rho in radii:
    model = models.LanguageModel(radius=rho, **settings)
    params = model.init(jax.random.key(config['seed']), inputs, model.initial_state(64))['params']
    rows[f'init, rho={rho}'] = network_profiles(model, params, inputs, targets, distances)
  model = models.LanguageModel(radius=config['spectral_radius'], **settings)
  radius = float(initializers.spectral_radius(trained['recurrence']['cell']['W_hh']))
  rows[f'trained ({run.name}), rho={radius:.2f}'] = network_profiles(
      model, trained, inputs, targets, distances)
  return rows, distances


def plot(curves: dict, path: pathlib.Path, xlabel: str, ylabel: str, title: str, bands=None):
  """Log-scale curves of norm against distance, one per row; optional (low, high) bands."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt

  figure, axis = plt.subplots(figsize=(6.4, 4.2))
  colors = plt.get_cmap('viridis')
  for i, (label, (x, y)) in enumerate(curves.items()):
    color = colors(i / max(len(curves) - 1, 1))
    axis.plot(x, y, color=color, label=label)
    if bands is not None:
      axis.fill_between(x, *bands[label], color=color, alpha=0.15)
  axis.set_yscale('log')
  axis.set_xlabel(xlabel)
  axis.set_ylabel(ylabel)
  axis.set_title(title, fontsize=10)
  axis.grid(True, which='both', alpha=0.3)
  axis.legend(fontsize=7, ncol=2)
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)


def write_table(workdir: pathlib.Path, name: str, row_name: str, rows: dict, columns) -> str:
  markdown, csv = diagnostics.norm_table(row_name, rows, columns)
  (workdir / f'{name}.md').write_text(markdown)
  (workdir / f'{name}.csv').write_text(csv)
  return markdown


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  logging.get_absl_handler().addFilter(lambda record: 'orbax' not in record.pathname)
  python_logging.getLogger('jax._src.xla_bridge').setLevel(python_logging.WARNING)  # no TPU line
  source = FLAGS.source
  radii = tuple(float(r) for r in FLAGS.radii) if FLAGS.radii else DEFAULT_RADII[source]
  if any(not 0 <= r < math.inf for r in radii):
    raise SystemExit(f'error: --radii: expected finite spectral radii >= 0, got {radii}')
  if FLAGS.seeds < 1 or FLAGS.window < 2:
    raise SystemExit(f'error: --seeds: expected >= 1 and --window: expected >= 2, got '
                         f'{FLAGS.seeds} and {FLAGS.window}')
  workdir = pathlib.Path(FLAGS.workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  name = f'gradient_norms_{source}'
  steps = np.arange(1, STEPS + 1)
  ylabel = '||dL/dh_{t-k}|| / ||dL/dh_t||'

  if source == 'seed':
    norms = seed_study(radii)
    print('\n'.join(seed_lines(norms)))
    rows = {rho: {k: float(n[k - 1]) for k in REPORTED} for rho, n in norms.items()}
    table = write_table(workdir, name, 'spectral_radius', rows, REPORTED)
    plot({f'rho={rho}': (steps, n) for rho, n in norms.items()}, workdir / f'{name}.png',
         'backward steps k', ylabel, 'seed note 001: linearised BPTT, H = 64, N(0, 0.3)')
  elif source == 'jax':
    log_norms = np.asarray(jax_study(jax.random.key(0), radii, FLAGS.seeds), np.float64)
    median = np.exp(np.median(log_norms, axis=1))  # [R, 60]; exp commutes with quantiles
    low = np.exp(np.percentile(log_norms, 10, axis=1))
    high = np.exp(np.percentile(log_norms, 90, axis=1))
    rows = {}
    for i, rho in enumerate(radii):
      rows[rho] = {f'median@{k}': float(median[i, k - 1]) for k in REPORTED}
      rows[rho].update({f'p10@{k}': float(low[i, k - 1]) for k in REPORTED})
      rows[rho].update({f'p90@{k}': float(high[i, k - 1]) for k in REPORTED})
      rows[rho]['rate'] = fitted_rate(np.log(median[i]))
    columns = ([f'median@{k}' for k in REPORTED] + [f'p10@{k}' for k in REPORTED] +
               [f'p90@{k}' for k in REPORTED] + ['rate'])
    table = write_table(workdir, name, 'spectral_radius', rows, columns)
    plot({f'rho={rho}': (steps, median[i]) for i, rho in enumerate(radii)},
         workdir / f'{name}.png', 'backward steps k', ylabel,
         f'jax.random, {FLAGS.seeds} seeds: median, 10th-90th percentile',
         bands={f'rho={rho}': (low[i], high[i]) for i, rho in enumerate(radii)})
  else:
    if not FLAGS.run:
      raise SystemExit('error: --source=network needs --run=<workdir of a finished char_lm run>')
    try:
      profiles, distances = network_study(pathlib.Path(FLAGS.run), radii, FLAGS.window)
    except FileNotFoundError as error:
      raise SystemExit(f'error: {error}') from None
    shown = [k for k in (1, 2, 5, 10, 20, 40, 60) if k in distances]
    rows = {label: {k: float(p[k - 1]) for k in shown} for label, p in profiles.items()}
    table = write_table(workdir, name, 'network', rows, shown)
    plot({label: (distances, p) for label, p in profiles.items()}, workdir / f'{name}.png',
         'distance k (steps)', ylabel,
         'Elman char LM on Tiny Shakespeare: median over 64 sequences')
  print(table)
  print(f'wrote {workdir / name}.md, .csv and .png')


if __name__ == '__main__':
  define_flags()
  app.run(main)
