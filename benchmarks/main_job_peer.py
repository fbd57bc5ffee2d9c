"""The main job against its PyTorch peer: the char-LM sweep, end to end.

  python -m benchmarks.main_job_peer [--steps=150] [--runs=20] [--modes=...]

The main job is the sweep of ``experiments/configs/char_lm.py`` ``get_sweep()``:
20 runs of a character-level Elman LM on Tiny Shakespeare (H = 128, E = 32,
V = 65, B = 32, tau in {16, 64}, spectral radius in {0.5, 0.9, 1.0, 1.1, 1.5},
clipping none or global norm 1, SGD at lr 1), here cut to ``--steps`` steps
per run (1500 in the real sweep) so that the benchmark takes minutes.

Variants, each timed end to end as a user meets it (wall clock):

  PyTorch peer     the sweep written as a PyTorch user writes it
                   (``train_torch_sweep``): nn.Embedding -> nn.RNN(tanh) ->
                   nn.Linear, SGD(lr=1), clip_grad_norm_(1) for the clipped
                   runs, the state detached between windows (truncated BPTT)
                   and reset at window 0, 2 threads, runs one after another
                   (nn.RNN's default two biases: the same work; their sum moves
                   twice as fast as rnnjax's one b under SGD);
                   the loss read (``.item()``) at rnnjax's logged steps (1, every
                   100, the last) and a run stopped there if it is not finite.
                   Its data in numpy (``peer_windows``: the same windows as
                   rnnjax's task, without importing JAX). In this process
                   (torch imported and its lazy imports done): reading the
                   corpus, building the models, training; no compilation. Timed
                   twice (first and last) to bracket the machine's drift; the
                   reference of every ratio is their mean.
  PyTorch script   the same peer in a fresh Python process
                   (``python -c ...peer_script``): also the interpreter's start
                   and torch's imports, the counterpart of launch.sweep.
  rnnjax in-process  ``trainer.train`` on each group (runs that differ only
                   in spectral radius and clipping are one vmapped group per
                   tau, as ``launch.sweep`` plans them), ``folders=None``:
                   the task (corpus, windows), compilation of the step and of
                   the diagnostics, the steps, the metrics and diagnostics
                   (spectral radius, gradient-norm profile) at logged steps.
                   No evaluation, sampling or files. Cold (the first call in
                   this process, JAX's persistent cache off), and again on the
                   same task objects (their executables cached in memory; the
                   trainer caches per task loss function, so a task built anew
                   compiles again). A third line subtracts the cold call's
                   compile time from it.
  launch.sweep     ``python -m launch.sweep`` in a subprocess on a fresh
                   temporary folder: process starts (the launcher and one
                   worker ``launch.run`` per core), imports, the data, compilation,
                   training, metrics and TensorBoard files, checkpoints,
                   evaluation on the validation text and two samples per run,
                   summaries, tables and plots. Cold: ``RNNJAX_COMPILATION_CACHE=''``
                   (no persistent cache); cache fill: the cache on, in a fresh
                   temporary folder (cold, and writing it); warm: the same
                   command again on a fresh workdir, the cache filled (by the
                   cache-fill variant, or else by an untimed sweep before it).

Tokens per second count runs x steps x B x tau (the sum over runs) whatever
the variant spends them on. The ratio is wall time rnnjax / PyTorch peer
(its in-process mean; below 1: rnnjax is faster). Below the table, where
each variant spent its time: the trainer's phases (``Timer``; for
launch.sweep from its runs' ``timing.json``, summed over groups).
"""

import copy
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODES = ('torch', 'torch_script', 'inprocess', 'inprocess_compiled', 'sweep_cold',
         'sweep_cache_fill', 'sweep_warm')

_STEPS = flags.DEFINE_integer('steps', 150, 'Training steps per run (the main job: 1500).')
_RUNS = flags.DEFINE_integer('runs', 20, 'The first N runs of get_sweep() (all: 20).')
_THREADS = flags.DEFINE_integer('torch_threads', 2, 'torch.set_num_threads.')
_MODES = flags.DEFINE_list('modes', list(MODES), f'Variants to time, of {MODES}.')


def sweep_overrides(steps: int, runs: int = 20) -> list[dict]:
  """The first ``runs`` runs of the main job's sweep, at ``steps`` steps each."""
  from experiments.configs import char_lm as char_lm_config
  return [dict(o, steps=steps) for o in char_lm_config.get_sweep()[:runs]]


def run_configs(overrides: list[dict]) -> list:
  """The full config of every run, as ``launch.sweep.run_configs`` makes them (without
  importing JAX, so that the PyTorch script does not)."""
  from experiments.configs import char_lm as char_lm_config
  base = char_lm_config.get_config()
  configs = []
  for run_overrides in overrides:
    config = copy.deepcopy(base)
    config.lock()
    config.update_from_flattened_dict(run_overrides)
    configs.append(config)
  return configs


def tokens(configs) -> int:
  return sum(c.steps * c.batch_size * c.truncation for c in configs)


def logged(step: int, steps: int, log_every: int) -> bool:
  """rnnjax's logged steps: 1, every ``log_every``, the last."""
  return step == 1 or step % log_every == 0 or step == steps


# --- The PyTorch peer -------------------------------------------------------------------

def peer_windows(config):
  """The corpus cut as a PyTorch user cuts it, in numpy: ``(inputs, targets)``
  ``<int64>[W, B, tau]`` and V; the same windows as ``text.stream_windows`` of the
  first 90% of the ids (B streams, state carried from window to window)."""
  from rnnjax.data import corpora  # reads and verifies the file; no JAX
  corpus = corpora.read_text(config.corpus, config.data_dir or None)
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


def torch_model(vocab_size: int, embedding_size: int, hidden_size: int, radius: float):
  """The char LM as a PyTorch user writes it; W_hh Gaussian, rescaled to spectral radius
  ``radius`` (rnnjax's 'gaussian' init); everything else PyTorch's default init."""
  import torch
  from torch import nn

  class CharRNN(nn.Module):

    def __init__(self):
      super().__init__()
      self.embedding = nn.Embedding(vocab_size, embedding_size)
      self.rnn = nn.RNN(embedding_size, hidden_size, batch_first=True, nonlinearity='tanh')
      self.head = nn.Linear(hidden_size, vocab_size)

    def forward(self, ids, h):  # ids <int64>[B, T], h [1, B, H]
      states, h = self.rnn(self.embedding(ids), h)
      return self.head(states), h

  model = CharRNN()
  with torch.no_grad():
    w = torch.randn(hidden_size, hidden_size)
    model.rnn.weight_hh_l0.copy_(w * (radius / torch.linalg.eigvals(w).abs().max()))
  return model


def torch_window_loss(model, inputs, targets, h):
  """One window's mean cross-entropy (nats) and the final state: inputs, targets
  ``<int64>[B, tau]``, h ``[1, B, H]``."""
  import torch.nn.functional as F
  logits, h = model(inputs, h)
  return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), h


def train_torch_run(config, inputs, targets, vocab_size: int, model=None) -> dict:
  """One run of the peer: truncated BPTT over ``[W, B, tau]`` windows (int64 tensors),
  from ``model`` (default: ``torch_model`` seeded with ``config.seed``).

  Returns:
    ``{'losses': [(step, loss)], 'status': 'finished' | 'diverged', 'steps_done', 'model'}``.
  """
  import torch
  if model is None:
    torch.manual_seed(config.seed)
    model = torch_model(vocab_size, config.embedding_size, config.hidden_size,
                        config.spectral_radius)
  optimizer = torch.optim.SGD(model.parameters(), lr=config.learning_rate)
  clip = config.clipping == 'global_norm'
  windows, batch_size = inputs.shape[0], inputs.shape[1]
  h = torch.zeros(1, batch_size, config.hidden_size)
  losses, status = [], 'finished'
  for step in range(1, config.steps + 1):
    window = (step - 1) % windows
    if window == 0:
      h = torch.zeros(1, batch_size, config.hidden_size)
    loss, h = torch_window_loss(model, inputs[window], targets[window], h.detach())
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
  return {'losses': losses, 'status': status, 'steps_done': step, 'model': model}


def train_torch_sweep(configs, threads: int = 2) -> tuple[float, list[dict]]:
  """The peer's sweep, runs one after another; returns ``(seconds, records)``."""
  import torch
  torch.set_num_threads(threads)
  started = time.perf_counter()
  data, records = {}, []
  for config in configs:
    if config.truncation not in data:
      inputs, targets, vocab_size = peer_windows(config)
      data[config.truncation] = (torch.from_numpy(inputs), torch.from_numpy(targets),
                                 vocab_size)
    record = train_torch_run(config, *data[config.truncation])
    del record['model']
    records.append(record)
  return time.perf_counter() - started, records


def peer_script(overrides: list[dict], threads: int) -> None:
  """The body of the PyTorch script (``run_torch_script``): prints its records as JSON."""
  import torch  # pylint: disable=unused-import
  seconds, records = train_torch_sweep(run_configs(overrides), threads)
  print(json.dumps({'seconds': seconds, 'records': records}))


def run_torch_script(overrides: list[dict], threads: int) -> tuple[float, dict]:
  """The peer in a fresh Python process; returns ``(wall seconds, its output)``."""
  code = ('import json, sys; from benchmarks import main_job_peer; '
          f'main_job_peer.peer_script(json.loads(sys.argv[1]), {threads})')
  started = time.perf_counter()
  result = subprocess.run([sys.executable, '-c', code, json.dumps(overrides)], cwd=ROOT,
                          capture_output=True, text=True)
  seconds = time.perf_counter() - started
  if result.returncode != 0:
    raise RuntimeError(f'the PyTorch script failed ({result.returncode}):\n'
                       f'{(result.stdout + result.stderr)[-3000:]}')
  return seconds, json.loads(result.stdout.strip().splitlines()[-1])


# --- rnnjax in-process ------------------------------------------------------------------

def groups_of(configs) -> list[list[int]]:
  """Run indices grouped by program (one vmapped job each), as ``launch.sweep.plan_jobs``
  groups them for one process."""
  from experiments import char_lm
  from rnnjax.train import trainer
  groups = {}
  for i, config in enumerate(configs):
    groups.setdefault(trainer.group_key(config, char_lm.VMAPPABLE), []).append(i)
  return list(groups.values())


def train_rnnjax_in_process(configs, tasks=None) -> tuple[float, dict, list[dict]]:
  """Each group through ``char_lm.task`` and ``trainer.train(task, group)`` (no folders).

  Args:
    configs: the runs.
    tasks: a dict, group index -> task: tasks found there are reused (their
      compiled steps are cached in this process: the trainer caches per task
      loss function), the others built (and timed) and put there.

  Returns:
    ``(seconds, timer seconds summed over groups (and 'task'), records in run order)``.
  """
  from experiments import char_lm
  from rnnjax.train import trainer
  tasks = {} if tasks is None else tasks
  started = time.perf_counter()
  phases, records = {}, [None] * len(configs)
  for number, group in enumerate(groups_of(configs)):
    begun = time.perf_counter()
    if number not in tasks:
      tasks[number] = char_lm.task(configs[group[0]])
    phases['task'] = phases.get('task', 0.0) + time.perf_counter() - begun
    _, group_records, timer = trainer.train(tasks[number], [configs[i] for i in group])
    for name, seconds in timer.seconds.items():
      phases[name] = phases.get(name, 0.0) + seconds
    for i, record in zip(group, group_records):
      records[i] = record
  return time.perf_counter() - started, phases, records


# --- rnnjax through launch.sweep --------------------------------------------------------

CONFIG_FILE = """\"\"\"The main job's sweep, {runs} run(s) at {steps} steps each (benchmarks.main_job_peer).\"\"\"
from experiments.configs import char_lm as _main

get_config = _main.get_config


def get_sweep():
  return {overrides!r}
"""


def write_config(folder: pathlib.Path, overrides: list[dict]) -> pathlib.Path:
  path = folder / 'char_lm_peer_config.py'
  path.write_text(CONFIG_FILE.format(steps=overrides[0]['steps'], runs=len(overrides),
                                     overrides=overrides))
  return path


def sweep_phases(workdir: pathlib.Path) -> dict:
  """Seconds per phase from the runs' timing.json, each group's shared phases once and
  the per-run report (evaluation and samples) summed; 'groups': their number."""
  phases, seen = {}, set()
  for path in sorted(workdir.glob('*/timing.json')):
    timing = json.loads(path.read_text())
    seconds = dict(timing['seconds'])
    report = seconds.pop('report', 0.0)
    seconds.pop('total', None)
    shared = tuple(sorted(seconds.items()))
    phases['report'] = phases.get('report', 0.0) + report
    if shared not in seen:  # the runs of a group share the trainer's timer
      seen.add(shared)
      for name, value in seconds.items():
        phases[name] = phases.get(name, 0.0) + value
  phases['groups'] = len(seen)
  return phases


def run_launch_sweep(overrides: list[dict], cache: str) -> tuple[float, dict, list[dict]]:
  """``python -m launch.sweep`` on a fresh temporary workdir, ``RNNJAX_COMPILATION_CACHE=cache``
  ('': off).

  Returns:
    ``(seconds, phases (``sweep_phases``), summaries in run order)``.

  Raises:
    RuntimeError: with the output's tail, when the sweep fails.
  """
  from launch import sweep
  keys = sweep.swept_keys(overrides)
  with tempfile.TemporaryDirectory(prefix='main_job_peer_') as tmp:
    tmp = pathlib.Path(tmp)
    config_file = write_config(tmp, overrides)
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
    phases = sweep_phases(workdir)
    summaries = [json.loads((workdir / sweep.run_name(o, keys) / 'summary.json').read_text())
                 for o in overrides]
  return seconds, phases, summaries


# --- The table --------------------------------------------------------------------------

def markdown(rows, columns) -> str:
  def cell(v):
    if isinstance(v, float):
      return f'{v:.3g}' if abs(v) < 1e4 else f'{v:,.0f}'
    return str(v)
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell(r.get(c, '')) for c in columns) + ' |' for r in rows]
  return '\n'.join(lines)


def phase_line(phases: dict) -> str:
  return ', '.join(f'{k} {v:.1f}' if isinstance(v, float) else f'{k} {v}'
                   for k, v in phases.items())


def rnnjax_losses(records) -> str:
  values = [r['final_train_loss'] for r in records]
  return (f'mean final train loss {np.nanmean(values):.3f} nats (the mean since the last '
          f'logged step), diverged {sum(r["status"] == "diverged" for r in records)}')


def torch_losses(records) -> str:
  values = [r['losses'][-1][1] for r in records]
  return (f'mean final loss {np.nanmean(values):.3f} nats (of the last step), diverged '
          f'{sum(r["status"] == "diverged" for r in records)}')


LABELS = {  # mode -> (variant, compilation, what the time includes)
    'torch_script': ('PyTorch peer, fresh process', 'none',
                     'python start, torch import, data, init, steps, loss at logged steps'),
    'inprocess': ('rnnjax trainer.train in-process, cold', 'yes (no persistent cache)',
                  'task (data), init, compile, steps, metrics + diagnostics at logged steps'),
    'inprocess_compiled': ('rnnjax trainer.train in-process, same tasks again',
                           'no (executables cached in memory)',
                           'init, steps, metrics + diagnostics at logged steps'),
    'sweep_cold': ('rnnjax launch.sweep, cold', "yes (RNNJAX_COMPILATION_CACHE='')",
                   'processes, imports, data, init, compile, steps, metrics, TensorBoard, '
                   'checkpoints, eval + samples, tables, plots'),
    'sweep_cache_fill': ('rnnjax launch.sweep, cache filling', 'yes (and writes the cache)',
                         'as cold'),
    'sweep_warm': ('rnnjax launch.sweep, warm', 'cache hits (second run)', 'as cold'),
}


def benchmark(overrides: list[dict], modes, threads: int = 2) -> tuple[list[dict], list[str]]:
  """Times the variants in ``modes`` on the runs ``overrides``, interleaved: PyTorch
  in-process first and last, the others between.

  Returns:
    ``(rows, notes)``: a table row per variant and lines of where the time went.
  """
  import torch
  torch.set_num_threads(threads)
  torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)  # torch's lazy imports
  configs = run_configs(overrides)
  count = tokens(configs)
  results, notes, torch_seconds, tasks = {}, [], [], {}
  if 'torch' in modes:
    seconds, records = train_torch_sweep(configs, threads)
    torch_seconds.append(seconds)
    notes.append(f'PyTorch peer, first: {seconds:.1f} s; {torch_losses(records)}')
  if 'inprocess' in modes:
    seconds, phases, records = train_rnnjax_in_process(configs, tasks)
    results['inprocess'] = (seconds, phases)
    notes.append(f'rnnjax in-process, cold: {seconds:.1f} s; trainer phases: '
                 f'{phase_line(phases)}; {rnnjax_losses(records)}')
  if 'torch_script' in modes:
    seconds, output = run_torch_script(overrides, threads)
    results['torch_script'] = (seconds, {})
    notes.append(f'PyTorch peer, fresh process: {seconds:.1f} s, of which '
                 f'{output["seconds"]:.1f} s in the sweep (the rest: python start and '
                 f'imports); {torch_losses(output["records"])}')
  cache_folder = None
  try:
    for mode in ('sweep_cold', 'sweep_cache_fill', 'sweep_warm'):
      if mode not in modes:
        continue
      if mode != 'sweep_cold' and cache_folder is None:
        cache_folder = tempfile.mkdtemp(prefix='main_job_peer_xla_')
        if mode == 'sweep_warm':  # no cache-filling sweep before it: fill the cache, untimed
          run_launch_sweep(overrides, cache_folder)
      seconds, phases, summaries = run_launch_sweep(overrides,
                                                    cache_folder if mode != 'sweep_cold' else '')
      results[mode] = (seconds, phases)
      inside = {k: v for k, v in phases.items() if k != 'groups'}
      notes.append(f'launch.sweep {mode[6:].replace("_", " ")}: {seconds:.1f} s; its '
                   f'{phases["groups"]} job(s) report {sum(inside.values()):.1f} s of '
                   f'process time, summed over jobs that run side by side, one per core: '
                   f'{phase_line(inside)} (report = eval + samples, all runs); beside them '
                   f'process starts, imports, tables, plots; {rnnjax_losses(summaries)}')
  finally:
    if cache_folder is not None:
      import shutil
      shutil.rmtree(cache_folder, ignore_errors=True)
  if 'inprocess_compiled' in modes:
    seconds, phases, _ = train_rnnjax_in_process(configs, tasks)
    results['inprocess_compiled'] = (seconds, phases)
    notes.append(f'rnnjax in-process, same tasks again: {seconds:.1f} s; trainer phases: '
                 f'{phase_line(phases)}')
  if 'torch' in modes:
    seconds, _ = train_torch_sweep(configs, threads)
    torch_seconds.append(seconds)
    notes.append(f'PyTorch peer, last: {seconds:.1f} s')

  reference = float(np.mean(torch_seconds)) if torch_seconds else math.nan
  rows = []
  if torch_seconds:
    rows.append({'variant': 'PyTorch peer, in-process (mean of first and last)',
                 'compilation': 'none', 'includes': 'data, init, steps, loss at logged steps',
                 'wall s': reference, 'tokens/s': count / reference, 'rnnjax / PyTorch': '1'})
  for mode, (label, compiled, includes) in LABELS.items():
    if mode in results:
      seconds = results[mode][0]
      rows.append({'variant': label, 'compilation': compiled, 'includes': includes,
                   'wall s': seconds, 'tokens/s': count / seconds,
                   'rnnjax / PyTorch': seconds / reference})
  if 'inprocess' in results:  # the same measurement less its compile time
    seconds, phases = results['inprocess']
    seconds -= phases.get('compile', 0.0)
    rows.append({'variant': 'rnnjax in-process, cold, less its compile time',
                 'compilation': 'subtracted', 'includes': 'as in-process cold',
                 'wall s': seconds, 'tokens/s': count / seconds,
                 'rnnjax / PyTorch': seconds / reference})
  if 'torch_script' in results:
    rows[[r['variant'] for r in rows].index(LABELS['torch_script'][0])]['rnnjax / PyTorch'] = (
        '(PyTorch)')
  return rows, notes


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  unknown = set(_MODES.value) - set(MODES)
  if unknown:
    raise SystemExit(f'error: --modes: unknown {sorted(unknown)}; expected some of {MODES}')
  import jax
  import torch
  torch.set_num_threads(_THREADS.value)
  overrides = sweep_overrides(_STEPS.value, _RUNS.value)
  configs = run_configs(overrides)
  groups = groups_of(configs)
  print(f'jax {jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__} '
        f'({torch.get_num_threads()} threads), {len(os.sched_getaffinity(0))} cores; JAX '
        f'persistent compilation cache in this process: '
        f'{jax.config.jax_compilation_cache_dir or "off"}')
  print(f'{len(configs)} runs x {_STEPS.value} steps (the main job: 20 x 1500), '
        f'{tokens(configs):,} tokens; rnnjax trains them as {len(groups)} vmapped group(s) '
        f'of {[len(g) for g in groups]} runs', flush=True)
  rows, notes = benchmark(overrides, _MODES.value, _THREADS.value)
  print()
  print(markdown(rows, ['variant', 'compilation', 'wall s', 'tokens/s', 'rnnjax / PyTorch',
                        'includes']))
  print()
  print('Where the time went (seconds):')
  for note in notes:
    print(f'- {note}')


if __name__ == '__main__':
  app.run(main)
