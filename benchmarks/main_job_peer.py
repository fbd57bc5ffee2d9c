"""The main job against its PyTorch peers: the char-LM sweep, end to end and per step.

  python -m benchmarks.main_job_peer [--steps=1500] [--runs=20] [--modes=...]

The main job is the sweep of ``experiments/configs/char_lm.py`` ``get_sweep()``:
20 runs of a character-level Elman LM on Tiny Shakespeare (H = 128, E = 32,
V = 65, B = 32, tau in {16, 64}, spectral radius in {0.5, 0.9, 1.0, 1.1, 1.5},
clipping none or global norm 1, plain SGD at lr 1, 1500 steps a run; ``--steps``
cuts it for a quicker look). Every variant trains those runs in fresh processes
and is timed end to end, wall clock, from the start of its first process to the
end of its last:

  torch            the sweep as a PyTorch user writes it: nn.Embedding ->
                   nn.RNN(tanh) -> nn.Linear, SGD, clip_grad_norm_ for the
                   clipped runs, the state detached between windows (truncated
                   BPTT) and reset at window 0; one process,
                   ``torch.set_num_threads(2)`` (``--torch_threads``), the runs
                   one after another. nn.RNN's default two biases are kept (the
                   same work; under SGD their sum moves twice as fast as
                   rnnjax's one b). The loss is read (``.item()``) at rnnjax's
                   logged steps (1, every ``log_every``, the last), where a run
                   that is not finite stops. Its data (``peer_windows``) are
                   rnnjax's windows, cut in numpy: the peer never imports JAX or
                   rnnjax (checked), and gets its run configs and the corpus's
                   verified path as JSON from this process.
  torch_expert     what an expert runs for many small runs on a CPU: one process
                   per core, pinned to it (``os.sched_setaffinity``),
                   ``torch.set_num_threads(1)``, each training its share of the
                   runs one after another (``shares``: balanced by work, a
                   share's runs ordered by tau, so that the processes train one
                   tau at a time). Small recurrent matmuls run faster on one
                   thread than split over two. Timed first and last (the
                   machine's speed drifts); its row is the mean of the two.
  torch_compiled   torch_expert with the window's loss (the model's forward and
                   the cross-entropy; the backward through AOTAutograd)
                   ``torch.compile``d (``dynamic=False``: a program for each
                   tau's shapes), in a fresh inductor cache, so that its
                   compilation counts. Dynamo stops its graph at nn.RNN (the
                   recurrence runs eagerly) unless ``--compile_rnn``
                   (``torch._dynamo.config.allow_rnn``), which unrolls it.
  sweep_cold       ``python -m launch.sweep`` on a fresh workdir, JAX's persistent
                   compilation cache in a fresh folder: the launcher, one worker
                   per core, imports, data, compilation (writing the cache),
                   training, metrics and TensorBoard, checkpoints, evaluation
                   and two samples a run, the tables and the plot.
  sweep_warm       the same command on another fresh workdir, the cache filled
                   (by sweep_cold, or else by an untimed sweep before it).

Training steps alone, as run-steps per second at each tau: PyTorch's step loop
from step 2 on (step 1 compiles in torch_compiled), rnnjax's ``train_steps``
phase (``timing.json``: compilation, metrics and checkpoints excluded), each as
workers x run-steps / step-seconds summed over the workers (the machine's rate
with every worker at that tau). The ratios are against the fastest PyTorch
variant of the same invocation, per column (the least wall time, the most
run-steps per second): above 1, faster than it.
"""

import concurrent.futures
import datetime
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import types

from absl import app
from absl import flags
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

__all__ = ['MODES', 'sweep_overrides', 'run_configs', 'tokens', 'logged', 'peer_windows',
           'CharRNN', 'torch_model', 'torch_window_loss', 'train_torch_run', 'train_share',
           'serve_peer', 'shares', 'run_peer', 'run_launch_sweep', 'benchmark', 'markdown']

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODES = ('torch', 'torch_expert', 'torch_compiled', 'sweep_cold', 'sweep_warm')

_STEPS = flags.DEFINE_integer('steps', 1500, 'Training steps per run (the main job: 1500).')
_RUNS = flags.DEFINE_integer('runs', 20, 'The first N runs of get_sweep() (all: 20).')
_THREADS = flags.DEFINE_integer('torch_threads', 2, 'torch.set_num_threads of the torch variant.')
_MODES = flags.DEFINE_list('modes', list(MODES), f'Variants to time, of {MODES}.')
_COMPILE_RNN = flags.DEFINE_bool('compile_rnn', False, 'torch_compiled: trace through nn.RNN '
                                 '(dynamo allow_rnn; minutes of compilation a process).')


def sweep_overrides(steps: int, runs: int = 20) -> list[dict]:
  """The first ``runs`` runs of the main job's ``get_sweep()``, at ``steps`` steps each."""
  from experiments.configs import char_lm as char_lm_config
  return [dict(o, steps=steps) for o in char_lm_config.get_sweep()[:runs]]


def run_configs(overrides: list[dict]) -> list:
  """Each run's full config, as ``python -m launch.sweep`` makes them (no command-line
  fields)."""
  from experiments.configs import char_lm as char_lm_config
  from rnnjax.train import sweep
  return sweep.run_configs(char_lm_config.get_config(), overrides, {})


def tokens(configs) -> int:
  """Tokens trained on, summed over runs: steps x B x tau."""
  return sum(c.steps * c.batch_size * c.truncation for c in configs)


def logged(step: int, steps: int, log_every: int) -> bool:
  """rnnjax's logged steps: 1, every ``log_every``, the last."""
  return step == 1 or step % log_every == 0 or step == steps


# --- The PyTorch peer (no JAX, no rnnjax) -----------------------------------------------

def peer_windows(config, corpus: str) -> tuple[np.ndarray, np.ndarray, int]:
  """The text ``corpus`` cut as a PyTorch user cuts it, in numpy: ``(inputs, targets)``
  ``<int64>[W, B, tau]`` and V; the same windows as ``text.stream_windows`` of the
  first ``1 - validation_fraction`` of the ids (B streams, the state carried from window
  to window)."""
  chars = sorted(set(corpus))
  lookup = np.zeros(max(map(ord, chars)) + 1, np.int64)
  lookup[[ord(c) for c in chars]] = np.arange(len(chars))
  ids = lookup[np.frombuffer(corpus.encode('utf-32-le'), np.uint32)]
  ids = ids[:int(round(len(ids) * (1 - config.validation_fraction)))]
  batch_size, tau = config.batch_size, config.truncation
  length = (len(ids) - 1) // batch_size
  used = length // tau * tau
  streams = np.stack([ids[b * length:b * length + used + 1] for b in range(batch_size)])
  cut = lambda s: s.reshape(batch_size, -1, tau).transpose(1, 0, 2)
  return cut(streams[:, :-1]), cut(streams[:, 1:]), len(chars)


class CharRNN(nn.Module):
  """The char LM as a PyTorch user writes it (one class, so that a compiled loss serves
  every run's model without recompiling)."""

  def __init__(self, vocab_size: int, embedding_size: int, hidden_size: int):
    super().__init__()
    self.embedding = nn.Embedding(vocab_size, embedding_size)
    self.rnn = nn.RNN(embedding_size, hidden_size, batch_first=True, nonlinearity='tanh')
    self.head = nn.Linear(hidden_size, vocab_size)

  def forward(self, ids, h):  # ids <int64>[B, T], h [1, B, H] -> logits [B, T, V], h
    states, h = self.rnn(self.embedding(ids), h)
    return self.head(states), h


def torch_model(vocab_size: int, embedding_size: int, hidden_size: int,
                radius: float) -> CharRNN:
  """A ``CharRNN`` with W_hh Gaussian, rescaled to spectral radius ``radius`` (rnnjax's
  'gaussian' init); everything else PyTorch's default init (draws from torch's global
  generator)."""
  model = CharRNN(vocab_size, embedding_size, hidden_size)
  with torch.no_grad():
    w = torch.randn(hidden_size, hidden_size)
    model.rnn.weight_hh_l0.copy_(w * (radius / torch.linalg.eigvals(w).abs().max()))
  return model


def torch_window_loss(model, inputs, targets, h):
  """One window's mean cross-entropy (nats) and the final state: inputs, targets
  ``<int64>[B, tau]``, h ``[1, B, H]``."""
  logits, h = model(inputs, h)
  return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), h


def train_torch_run(config, inputs, targets, vocab_size: int, model=None,
                    window_loss=torch_window_loss) -> dict:
  """One run of the peer: truncated BPTT over ``[W, B, tau]`` windows (int64 tensors).

  Args:
    config: the run's fields (attributes: seed, steps, learning_rate, clipping,
      clip_threshold, log_every, embedding_size, hidden_size, spectral_radius).
    inputs, targets: ``<int64>[W, B, tau]`` tensors.
    vocab_size: V.
    model: the model to train (default: ``torch_model`` after
      ``torch.manual_seed(config.seed)``).
    window_loss: ``torch_window_loss`` or a compiled form of it.

  Returns:
    ``{'losses': [(step, loss nats)], 'status': 'finished' | 'diverged', 'steps_done',
    'first_step_seconds', 'steps_seconds' (steps 2 to the last), 'model'}``.
  """
  if model is None:
    torch.manual_seed(config.seed)
    model = torch_model(vocab_size, config.embedding_size, config.hidden_size,
                        config.spectral_radius)
  optimizer = torch.optim.SGD(model.parameters(), lr=config.learning_rate)
  clip = config.clipping == 'global_norm'
  windows, batch_size = inputs.shape[0], inputs.shape[1]
  h = torch.zeros(1, batch_size, config.hidden_size)
  losses, status, first_seconds = [], 'finished', 0.0
  started = time.perf_counter()
  for step in range(1, config.steps + 1):
    window = (step - 1) % windows
    if window == 0:
      h = torch.zeros(1, batch_size, config.hidden_size)
    loss, h = window_loss(model, inputs[window], targets[window], h.detach())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip:
      torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_threshold)
    optimizer.step()
    if logged(step, config.steps, config.log_every):
      value = loss.item()
      losses.append((step, value))
      if not math.isfinite(value):
        status = 'diverged'
        break
    if step == 1:
      first_seconds = time.perf_counter() - started
      started = time.perf_counter()
  return {'losses': losses, 'status': status, 'steps_done': step,
          'first_step_seconds': first_seconds,
          'steps_seconds': time.perf_counter() - started if step > 1 else 0.0, 'model': model}


def train_share(job: dict) -> dict:
  """The body of a peer process: trains its runs one after another.

  Args:
    job: ``{'configs': [config dicts (``experiment.as_dict``)], 'corpora': {name: the
      path of its text file, verified}, 'threads': int, 'compiled': bool,
      'compile_rnn': bool}``.

  Returns:
    ``{'records': train_torch_run's records without the model, 'seconds': this
    body's wall time, 'cores': the cores this process may run on, 'threads',
    'imported': which of jax and rnnjax this process imported (none: its time
    includes neither)}``.
  """
  started = time.perf_counter()
  torch.set_num_threads(job['threads'])
  window_loss = torch_window_loss
  if job['compiled']:
    torch._dynamo.config.allow_rnn = bool(job['compile_rnn'])  # pylint: disable=protected-access
    window_loss = torch.compile(torch_window_loss, dynamic=False)  # a program per tau
  data, records = {}, []
  for values in job['configs']:
    config = types.SimpleNamespace(**values)
    key = (config.corpus, config.validation_fraction, config.batch_size, config.truncation)
    if key not in data:
      corpus = pathlib.Path(job['corpora'][config.corpus]).read_text(encoding='utf-8')
      inputs, targets, vocab_size = peer_windows(config, corpus)
      data[key] = (torch.from_numpy(inputs), torch.from_numpy(targets), vocab_size)
    record = train_torch_run(config, *data[key], window_loss=window_loss)
    del record['model']
    records.append(record)
  return {'records': records, 'seconds': time.perf_counter() - started,
          'cores': sorted(os.sched_getaffinity(0)), 'threads': torch.get_num_threads(),
          'imported': [name for name in ('jax', 'rnnjax') if name in sys.modules]}


def serve_peer() -> None:
  """A peer process (``run_peer``): reads its job (JSON) on stdin, prints its result as
  one JSON line."""
  print(json.dumps(train_share(json.loads(sys.stdin.read()))))


def shares(configs, processes: int) -> list[list[int]]:
  """Run indices for each of up to ``processes`` workers: each run, the most work first,
  to the worker with the least work so far (work: ``char_lm.work`` x steps, as the
  sweep weighs its jobs); within a share, runs by (tau, index), so that workers train
  one tau at a time together."""
  from experiments import char_lm
  loads = [0.0] * max(1, min(processes, len(configs)))
  out = [[] for _ in loads]
  for i in sorted(range(len(configs)),
                  key=lambda i: -char_lm.work(configs[i]) * configs[i].steps):
    worker = loads.index(min(loads))
    out[worker].append(i)
    loads[worker] += char_lm.work(configs[i]) * configs[i].steps
  return [sorted(share, key=lambda i: (configs[i].truncation, i)) for share in out]


# A peer process: pinned (where a core is given) before torch starts its threads.
PEER_CODE = '''import os, sys
if len(sys.argv) > 1:
  os.sched_setaffinity(0, {int(sys.argv[1])})
from benchmarks import main_job_peer
main_job_peer.serve_peer()'''


def run_peer(configs, processes: int, threads: int, compiled: bool = False,
             compile_rnn: bool = False) -> dict:
  """Trains the runs on ``processes`` fresh PyTorch processes of ``threads`` threads
  each (``serve_peer``), their shares ``shares(configs, processes)``; with more than
  one process, process n is pinned to the n-th core of this process's.

  Returns:
    ``{'seconds': wall time from the first start to the last end, 'records': in run
    order, 'workers': each process's result without its records}``.

  Raises:
    RuntimeError: a process that failed (with its output's tail) or imported JAX or
      rnnjax.
  """
  from rnnjax.data import corpora
  from rnnjax.train import experiment
  cores = sorted(os.sched_getaffinity(0))
  parts = shares(configs, processes)
  paths = {c.corpus: str(corpora.corpus_path(c.corpus, c.data_dir or None)) for c in configs}
  with tempfile.TemporaryDirectory(prefix='main_job_peer_inductor_') as cache:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
    jobs = [json.dumps({'configs': [experiment.as_dict(configs[i]) for i in part],
                        'corpora': paths, 'threads': threads, 'compiled': compiled,
                        'compile_rnn': compile_rnn})
            for part in parts]
    pins = [[str(cores[n % len(cores)])] if len(parts) > 1 else [] for n in range(len(parts))]
    started = time.perf_counter()
    children = [subprocess.Popen([sys.executable, '-c', PEER_CODE, *pin], cwd=ROOT, env=env,
                                 text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE) for pin in pins]
    with concurrent.futures.ThreadPoolExecutor(len(children)) as pool:
      outputs = list(pool.map(lambda c, j: c.communicate(j), children, jobs))
    seconds = time.perf_counter() - started
  records, workers = [None] * len(configs), []
  for child, part, (stdout, stderr) in zip(children, parts, outputs):
    if child.returncode != 0:
      raise RuntimeError(f'a PyTorch peer process failed ({child.returncode}):\n'
                         f'{(stdout + stderr)[-3000:]}')
    result = json.loads(stdout.strip().splitlines()[-1])
    if result['imported']:
      raise RuntimeError(f'a PyTorch peer process imported {result["imported"]} (its time '
                         'would include them)')
    for i, record in zip(part, result.pop('records')):
      records[i] = record
    workers.append(result)
  return {'seconds': seconds, 'records': records, 'workers': workers}


def peer_rates(configs, records, workers: int) -> dict:
  """tau -> run-steps per second of the step loops (steps 2 on), as workers x run-steps
  / step-seconds summed over runs."""
  done, spent = {}, {}
  for config, record in zip(configs, records):
    tau = config.truncation
    done[tau] = done.get(tau, 0) + record['steps_done'] - 1
    spent[tau] = spent.get(tau, 0.0) + record['steps_seconds']
  return {tau: workers * done[tau] / spent[tau] if spent[tau] else math.nan for tau in done}


# --- rnnjax through launch.sweep --------------------------------------------------------

CONFIG_FILE = """\"\"\"The main job, {runs} run(s) x {steps} steps (benchmarks.main_job_peer).\"\"\"
from experiments.configs import char_lm as _main

get_config = _main.get_config


def get_sweep():
  return {overrides!r}
"""


def run_launch_sweep(overrides: list[dict], cache: str) -> dict:
  """``python -m launch.sweep`` on a fresh temporary workdir, ``RNNJAX_COMPILATION_CACHE=cache``
  ('': off).

  Returns:
    ``{'seconds': wall time, 'summaries': in run order, 'phases': seconds per trainer
    phase summed over jobs (each job's shared phases once, 'report' over runs),
    'jobs': their number, 'rates': tau -> run-steps per second of the train_steps
    phase, as workers (one per core) x run-steps / seconds summed over jobs}``.

  Raises:
    RuntimeError: with the output's tail, when the sweep fails.
  """
  from rnnjax.train import plan
  from rnnjax.train import run_folder
  from rnnjax.train import sweep
  names = plan.folder_names(overrides, sweep.swept_keys(overrides))
  with tempfile.TemporaryDirectory(prefix='main_job_peer_') as tmp:
    tmp = pathlib.Path(tmp)
    config_file = tmp / 'char_lm_peer_config.py'
    config_file.write_text(CONFIG_FILE.format(steps=overrides[0]['steps'], runs=len(overrides),
                                              overrides=overrides))
    workdir = tmp / 'sweep'
    env = dict(os.environ, RNNJAX_COMPILATION_CACHE=cache)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, '-m', 'launch.sweep', f'--config={config_file}',
                             f'--workdir={workdir}'], cwd=ROOT, env=env, capture_output=True,
                            text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
      raise RuntimeError(f'launch.sweep failed ({result.returncode}):\n'
                         f'{(result.stdout + result.stderr)[-3000:]}')
    summaries = [run_folder.read_json(workdir / name / run_folder.SUMMARY) for name in names]
    timings = [run_folder.read_json(workdir / name / run_folder.TIMING) for name in names]
  phases, seen, done, spent = {}, set(), {}, {}
  for values, summary, timing in zip(overrides, summaries, timings):
    shared = dict(timing['seconds'])
    phases['report'] = phases.get('report', 0.0) + shared.pop('report', 0.0)
    shared.pop('total', None)
    tau = values['truncation']
    job = (tau, tuple(sorted(shared.items())))  # the runs of a job share the trainer's seconds
    if job in seen:
      continue
    seen.add(job)
    for name, value in shared.items():
      phases[name] = phases.get(name, 0.0) + value
    done[tau] = done.get(tau, 0) + timing['group_size'] * summary['steps_done']
    spent[tau] = spent.get(tau, 0.0) + shared['train_steps']
  workers = len(os.sched_getaffinity(0))
  return {'seconds': seconds, 'summaries': summaries, 'phases': phases, 'jobs': len(seen),
          'rates': {tau: min(workers, len(seen)) * done[tau] / spent[tau] for tau in done}}


# --- The table --------------------------------------------------------------------------

def markdown(rows, columns) -> str:
  """A Markdown table of ``rows`` (dicts) in ``columns``; floats to 3 significant digits."""
  def cell(v):
    if isinstance(v, float):
      return '' if math.isnan(v) else f'{v:.3g}' if abs(v) < 1e4 else f'{v:,.0f}'
    return str(v)
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell(r.get(c, '')) for c in columns) + ' |' for r in rows]
  return '\n'.join(lines)


def _torch_losses(records) -> str:
  values = [r['losses'][-1][1] for r in records]
  return (f'median loss at the last step {np.nanmedian(values):.4f} nats, diverged '
          f'{sum(r["status"] == "diverged" for r in records)}')


def _rnnjax_losses(summaries) -> str:
  values = [s['train_loss_nats'] for s in summaries]
  return (f'median train loss since the last logged step {np.nanmedian(values):.4f} nats, '
          f'diverged {sum(s["status"] == "diverged" for s in summaries)}')


def _loss_differences(configs, records, others) -> str:
  """The largest relative differences of the loss between two peers' records, at the
  first logged step and at the last of the clipped and of the unclipped runs."""
  def largest(index, runs):
    gaps = [abs(r['losses'][index][1] - o['losses'][index][1]) / abs(r['losses'][index][1])
            for i, (r, o) in enumerate(zip(records, others))
            if i in runs and math.isfinite(r['losses'][index][1])]
    return f'{max(gaps):.1e}' if gaps else 'none'
  clipped = {i for i, c in enumerate(configs) if c.clipping != 'none'}
  unclipped = set(range(len(configs))) - clipped
  return (f'at step 1 {largest(0, clipped | unclipped)}, at the last step {largest(-1, clipped)} '
          f'(clipped runs) and {largest(-1, unclipped)} (unclipped)')


def benchmark(overrides: list[dict], modes, threads: int = 2,
              compile_rnn: bool = False) -> tuple[list[dict], list[str]]:
  """Times the variants in ``modes`` (module docstring) on the runs ``overrides``, in
  the order torch_expert, sweep_cold, torch, sweep_warm, torch_compiled, torch_expert.

  Returns:
    ``(rows, notes)``: a table row per variant (keys 'variant', 'processes',
    'wall s', f'steps/s tau={tau}', 'x end to end', f'x tau={tau}') and lines of what
    each variant spent and computed.
  """
  configs = run_configs(overrides)
  taus = sorted({c.truncation for c in configs})
  cores = len(os.sched_getaffinity(0))
  expert = min(cores, len(configs))
  results, notes, peers = {}, [], {}

  def peer(mode, processes, threads_each, compiled=False):
    out = run_peer(configs, processes, threads_each, compiled, compile_rnn)
    peers.setdefault(mode, []).append(out)
    workers = ', '.join(f'{w["seconds"]:.1f} s on cores {w["cores"]} ({w["threads"]} '
                        'thread(s))' for w in out['workers'])
    first = sum(r['first_step_seconds'] for r in out['records'])
    starts = out['seconds'] - max(w['seconds'] for w in out['workers'])
    notes.append(f'{mode}: {out["seconds"]:.1f} s, of which {starts:.1f} s before and after '
                 f'the longest process\'s training (python start, imports); processes '
                 f'(data, init, training): {workers}; first steps {first:.1f} s in all; '
                 f'{_torch_losses(out["records"])}')
    return out['seconds'], peer_rates(configs, out['records'], len(out['workers']))

  if 'torch_expert' in modes:
    results['torch_expert'] = [peer('torch_expert', expert, 1)]
  cache = tempfile.mkdtemp(prefix='main_job_peer_xla_')
  try:
    for mode in ('sweep_cold', 'torch', 'sweep_warm', 'torch_compiled'):
      if mode not in modes:
        continue
      if mode == 'torch':
        results[mode] = [peer(mode, 1, threads)]
      elif mode == 'torch_compiled':
        results[mode] = [peer(mode, expert, 1, compiled=True)]
      else:
        if mode == 'sweep_warm' and 'sweep_cold' not in modes:
          run_launch_sweep(overrides, cache)  # fills the cache, untimed
        out = run_launch_sweep(overrides, cache)
        results[mode] = [(out['seconds'], out['rates'])]
        phases = ', '.join(f'{k} {v:.1f}' for k, v in out['phases'].items())
        notes.append(f'{mode}: {out["seconds"]:.1f} s; its {out["jobs"]} job(s) report, '
                     f'summed over jobs that run side by side, one per core: {phases} '
                     f'(report: evaluation and samples, all runs); beside them the '
                     f'processes\' starts and imports, the tables and the plot; '
                     f'{_rnnjax_losses(out["summaries"])}')
  finally:
    shutil.rmtree(cache, ignore_errors=True)
  if 'torch_expert' in modes:
    results['torch_expert'].append(peer('torch_expert', expert, 1))
  for mode in ('torch', 'torch_compiled'):  # the same work: the same losses, to rounding
    if mode in peers and 'torch_expert' in peers:
      differences = _loss_differences(configs, peers['torch_expert'][0]['records'],
                                      peers[mode][0]['records'])
      notes.append(f'largest relative difference of the loss, {mode} against torch_expert: '
                   f'{differences}; SGD at lr 1 amplifies float rounding (the unclipped '
                   'runs are chaotic)')

  pinned = f'{expert} pinned x 1 thread'
  labels = {
      'torch': ('PyTorch, one process', f'1 x {threads} threads'),
      'torch_expert': ('PyTorch expert (mean of first and last)', pinned),
      'torch_compiled': ('PyTorch expert + torch.compile'
                         + (' (through nn.RNN)' if compile_rnn else ' (nn.RNN eager)'), pinned),
      'sweep_cold': ('rnnjax launch.sweep, cold cache', f'{cores} pinned x 1 thread'),
      'sweep_warm': ('rnnjax launch.sweep, warm cache', f'{cores} pinned x 1 thread'),
  }
  rows = []
  for mode in ('torch', 'torch_expert', 'torch_compiled', 'sweep_cold', 'sweep_warm'):
    if mode not in results:
      continue
    measured = results[mode]
    row = {'mode': mode, 'variant': labels[mode][0], 'processes': labels[mode][1],
           'wall s': float(np.mean([seconds for seconds, _ in measured]))}
    for tau in taus:
      row[f'steps/s tau={tau}'] = float(np.mean([rates.get(tau, math.nan)
                                                 for _, rates in measured]))
    rows.append(row)
  torch_rows = [row for row in rows if row['mode'].startswith('torch')]
  if torch_rows:
    fastest = min(torch_rows, key=lambda row: row['wall s'])
    notes.append(f'fastest PyTorch variant end to end: {fastest["variant"]}')
    best = {tau: max(row[f'steps/s tau={tau}'] for row in torch_rows) for tau in taus}
    for row in rows:
      row['x end to end'] = fastest['wall s'] / row['wall s']
      for tau in taus:
        row[f'x tau={tau}'] = row[f'steps/s tau={tau}'] / best[tau]
  return rows, notes


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  unknown = set(_MODES.value) - set(MODES)
  if unknown:
    raise SystemExit(f'error: --modes: unknown {sorted(unknown)}; expected some of {MODES}')
  import jax
  from experiments import char_lm
  from rnnjax.train import experiment
  from rnnjax.train import sweep
  overrides = sweep_overrides(_STEPS.value, _RUNS.value)
  configs = run_configs(overrides)
  groups = {}
  for config in configs:
    key = experiment.group_key(char_lm.EXPERIMENT, config)
    groups[key] = groups.get(key, 0) + 1
  where = sweep.provenance()
  print(f'{where["date"]} at {where["commit"]} on {where["host"]}: jax {jax.__version__}, '
        f'torch {torch.__version__}, {len(os.sched_getaffinity(0))} cores; load average '
        f'{" ".join(f"{v:.2f}" for v in os.getloadavg())} at the start')
  print(f'{len(configs)} runs x {_STEPS.value} steps (the main job: 20 x 1500), '
        f'{tokens(configs):,} tokens; rnnjax trains them as {len(groups)} vmapped group(s) of '
        f'{list(groups.values())} runs', flush=True)
  started = datetime.datetime.now()
  rows, notes = benchmark(overrides, _MODES.value, _THREADS.value, _COMPILE_RNN.value)
  taus = sorted({c.truncation for c in configs})
  print()
  print(markdown(rows, ['variant', 'processes', 'wall s']
                 + [f'steps/s tau={tau}' for tau in taus] + ['x end to end']
                 + [f'x tau={tau}' for tau in taus]))
  print()
  print(f'{(datetime.datetime.now() - started).total_seconds():.0f} s in all; load average '
        f'{" ".join(f"{v:.2f}" for v in os.getloadavg())} at the end. steps/s: run-steps per '
        'second of training steps alone; x: against the fastest PyTorch variant of each '
        'column (above 1: faster).')
  for note in notes:
    print(f'- {note}')


if __name__ == '__main__':
  app.run(main)
