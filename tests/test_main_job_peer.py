"""benchmarks/main_job_peer.py: its PyTorch peer computes what rnnjax computes, and it runs.

The peer must be the same job: the same windows of the corpus, the same loss
on the same weights (and the same gradients, clipped update and SGD step),
or the timings compare different work.
"""

import json
import os

import jax
import numpy as np
import pytest
import torch

from benchmarks import main_job_peer
from experiments import char_lm
from rnnjax import convert
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import experiment
from rnnjax.train import optimizers

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture
def data_env(shared_data_dir, monkeypatch):
  monkeypatch.setenv('RNNJAX_DATA_DIR', str(shared_data_dir))  # for subprocesses too
  return shared_data_dir


def configs_at(steps, truncation=16, count=2, **fields):
  """The first ``count`` runs of the main job's sweep with this truncation (overrides and
  configs)."""
  overrides = [dict(o, **fields) for o in main_job_peer.sweep_overrides(steps)
               if o['truncation'] == truncation][:count]
  return overrides, main_job_peer.run_configs(overrides)


def rnnjax_params(model):
  """The rnnjax LanguageModel params holding the weights of the peer's torch model."""
  state = model.state_dict()
  return {
      'embedding': {'embedding': state['embedding.weight'].numpy().copy()},
      'recurrence': {'cell': convert.elman_from_torch(
          {k[len('rnn.'):]: v for k, v in state.items() if k.startswith('rnn.')})},
      'head': {'kernel': state['head.weight'].numpy().T.copy(),
               'bias': state['head.bias'].numpy().copy()},
  }


def test_run_configs_are_the_sweeps_and_shares_balance():
  overrides = main_job_peer.sweep_overrides(7)
  assert len(overrides) == 20 and {o['steps'] for o in overrides} == {7}
  configs = main_job_peer.run_configs(overrides)
  assert {(c.truncation, c.spectral_radius, c.clipping) for c in configs} == {
      (tau, rho, clipping) for tau in (16, 64) for rho in (0.5, 0.9, 1.0, 1.1, 1.5)
      for clipping in ('none', 'global_norm')}
  assert all(c.steps == 7 and c.hidden_size == 128 and c.learning_rate == 1.0 for c in configs)
  keys = [experiment.group_key(char_lm.EXPERIMENT, c) for c in configs]
  assert sorted(keys.count(k) for k in set(keys)) == [10, 10]  # one vmapped group per tau
  assert main_job_peer.tokens(configs) == 7 * 32 * (16 + 64) * 10
  # The peer gets its configs as JSON; they come back as the same configs.
  for config in configs:
    assert experiment.from_dict(char_lm.EXPERIMENT, json.loads(json.dumps(
        experiment.as_dict(config)))) == config
  # Two cores: each trains 5 runs of each tau, tau 16 first; every run once.
  shares = main_job_peer.shares(configs, 2)
  assert sorted(i for share in shares for i in share) == list(range(20))
  for share in shares:
    assert [configs[i].truncation for i in share] == [16] * 5 + [64] * 5
  assert sorted(main_job_peer.shares(configs[:3], 8)) == [[0], [1], [2]]  # a run a worker


@pytest.mark.parametrize('truncation', [16, 64])
def test_peer_windows_are_the_tasks(data_env, truncation):
  _, (config, _) = configs_at(1, truncation)
  corpus = corpora.read_text('tinyshakespeare')
  inputs, targets, vocab_size = main_job_peer.peer_windows(config, corpus)
  vocabulary = text.char_vocabulary(corpus)
  train_ids, _ = text.split_train_validation(text.encode(corpus, vocabulary), 0.1)
  expected_inputs, expected_targets = text.stream_windows(train_ids, 32, truncation)
  assert vocab_size == len(vocabulary) == 65
  assert inputs.dtype == np.int64 and inputs.shape == expected_inputs.shape
  np.testing.assert_array_equal(inputs, expected_inputs)
  np.testing.assert_array_equal(targets, expected_targets)


def test_torch_model_has_the_spectral_radius():
  torch.manual_seed(0)
  model = main_job_peer.torch_model(65, 32, 128, 1.1)
  radius = torch.linalg.eigvals(model.rnn.weight_hh_l0.detach().double()).abs().max().item()
  assert radius == pytest.approx(1.1, rel=1e-5)


def test_peer_loss_gradients_and_clipped_step_are_rnnjax(data_env):
  """Two windows (the state carried, the gradient cut between them): the same loss
  and gradients as rnnjax's task on the same weights; then one clipped SGD step of
  the peer's loop moves the weights as rnnjax's optimizer chain does."""
  _, (config, _) = configs_at(1, 16, spectral_radius=1.1, clipping='global_norm',
                              clip_threshold=0.1)  # at 0.1 the clipping bites
  task = char_lm.task(config)
  torch.manual_seed(0)
  model = main_job_peer.torch_model(65, 32, 128, 1.1)
  params = rnnjax_params(model)
  inputs, targets, _ = main_job_peer.peer_windows(config, corpora.read_text(config.corpus))
  inputs, targets = torch.from_numpy(inputs), torch.from_numpy(targets)

  grad_fn = jax.jit(jax.value_and_grad(task.loss, has_aux=True))
  carry, h = task.carry, torch.zeros(1, 32, 128)
  for step in (1, 2):
    (loss, carry), grads = grad_fn(params, carry, task.batch(step), jax.random.key(0))
    model.zero_grad(set_to_none=True)
    torch_loss, h = main_job_peer.torch_window_loss(model, inputs[step - 1],
                                                    targets[step - 1], h.detach())
    torch_loss.backward()
    np.testing.assert_allclose(loss, torch_loss.item(), rtol=RTOL)
    np.testing.assert_allclose(carry, h[0].detach().numpy(), rtol=RTOL, atol=ATOL)
    torch_grads = {
        'embedding': {'embedding': model.embedding.weight.grad.numpy()},
        'recurrence': {'cell': {'W_xh': model.rnn.weight_ih_l0.grad.numpy().T,
                                'W_hh': model.rnn.weight_hh_l0.grad.numpy().T,
                                'b': model.rnn.bias_ih_l0.grad.numpy()}},
        'head': {'kernel': model.head.weight.grad.numpy().T,
                 'bias': model.head.bias.grad.numpy()}}
    np.testing.assert_allclose(model.rnn.bias_hh_l0.grad.numpy(),
                               torch_grads['recurrence']['cell']['b'], rtol=1e-5, atol=1e-8)
    jax.tree_util.tree_map(
        lambda ours, theirs: np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6),
        grads, torch_grads)

  # One step of the peer's loop (window 0: the state starts at zero) against rnnjax's chain.
  (_, _), grads = grad_fn(params, task.carry, task.batch(1), jax.random.key(0))
  chain = optimizers.make_optimizer('sgd', 1.0, 'global_norm', 0.1)
  updates, state = chain.update(grads, chain.init(params), params)
  assert bool(optimizers.measurements(state)['clipped'])
  expected = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
  config.steps = 1
  # nn.RNN's two biases get the same gradient, so torch's global norm counts it twice and
  # SGD moves b = bias_ih + bias_hh twice as far: frozen bias_hh makes the step rnnjax's.
  model.rnn.bias_hh_l0.requires_grad_(False)
  record = main_job_peer.train_torch_run(config, inputs, targets, 65, model=model)
  assert record['status'] == 'finished' and record['losses'][0][0] == 1
  jax.tree_util.tree_map(
      lambda ours, theirs: np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6),
      expected, rnnjax_params(record['model']))


def test_expert_trains_the_runs_of_the_default_peer(data_env):
  """The expert layout (a pinned single-threaded process per core, each its share)
  trains every run as the same code on one thread in this process, bit for bit, and
  to the losses the one-process, two-thread peer reaches up to float32 rounding (two
  threads sum some products in another order; SGD at lr 1 amplifies it: 3.5e-6 at
  step 5), with neither JAX nor rnnjax in its processes."""
  _, configs = configs_at(5, 16, count=4, log_every=2)
  default = main_job_peer.run_peer(configs, 1, 2)
  expert = main_job_peer.run_peer(configs, 2, 1)
  assert len(default['workers']) == 1 and default['workers'][0]['threads'] == 2
  assert [w['threads'] for w in expert['workers']] == [1, 1]
  cores = sorted(os.sched_getaffinity(0))
  assert [w['cores'] for w in expert['workers']] == [[cores[n % len(cores)]] for n in (0, 1)]
  for ours, theirs in zip(default['records'], expert['records']):
    assert [step for step, _ in ours['losses']] == [1, 2, 4, 5]
    assert ours['status'] == theirs['status'] == 'finished'
    assert ours['steps_done'] == theirs['steps_done'] == 5
    np.testing.assert_allclose([v for _, v in theirs['losses']], [v for _, v in ours['losses']],
                               rtol=2e-5)
  losses = [r['losses'][-1][1] for r in default['records']]
  assert losses[0] != losses[2]  # spectral radius 0.5 and 0.9: each run is its own
  # And as the same code in this process (one thread): the same losses.
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  try:
    inputs, targets, vocab_size = main_job_peer.peer_windows(
        configs[0], corpora.read_text(configs[0].corpus))
    record = main_job_peer.train_torch_run(configs[0], torch.from_numpy(inputs),
                                           torch.from_numpy(targets), vocab_size)
  finally:
    torch.set_num_threads(threads)
  assert record['losses'] == [tuple(line) for line in expert['records'][0]['losses']]


def test_tiny_benchmark_runs(data_env):
  """Two runs at 2 steps through the two PyTorch variants, and the table."""
  overrides, _ = configs_at(2)
  rows, notes = main_job_peer.benchmark(overrides, ['torch', 'torch_expert'], threads=2)
  assert [row['mode'] for row in rows] == ['torch', 'torch_expert']
  assert rows[1]['processes'] == '2 pinned x 1 thread'
  for row in rows:
    assert row['wall s'] > 0 and row['steps/s tau=16'] > 0
  fastest = min(rows, key=lambda row: row['wall s'])
  assert fastest['x end to end'] == 1.0
  for row in rows:
    assert row['x end to end'] == pytest.approx(fastest['wall s'] / row['wall s'])
  assert max(row['x tau=16'] for row in rows) == 1.0
  assert sum(note.startswith('torch_expert: ') for note in notes) == 2  # first and last
  assert sum('diverged 0' in note for note in notes) == 3
  table = main_job_peer.markdown(rows, ['variant', 'wall s', 'x end to end'])
  assert table.count('\n') == len(rows) + 1


@pytest.mark.slow
def test_tiny_benchmark_through_launch_sweep(data_env):
  """launch.sweep of two runs (one per tau) at 2 steps, in a subprocess, cold: it trains,
  reports, and its training-step rates come from its timing.json."""
  overrides = [o for o in main_job_peer.sweep_overrides(2)
               if o['spectral_radius'] == 0.5 and o['clipping'] == 'none']
  out = main_job_peer.run_launch_sweep(overrides, cache='')
  assert out['seconds'] > 0 and out['jobs'] == 2 and out['phases']['compile'] > 0
  assert sorted(out['rates']) == [16, 64] and all(r > 0 for r in out['rates'].values())
  for summary in out['summaries']:
    assert summary['status'] == 'finished' and summary['steps_done'] == 2
    assert 'validation_loss' in summary


@pytest.mark.slow
def test_compiled_peer_trains_as_the_eager_one(data_env):
  """torch.compile of the window loss changes no loss beyond float32 rounding."""
  _, configs = configs_at(3, 16, count=2, log_every=1)
  eager = main_job_peer.run_peer(configs, 2, 1)
  compiled = main_job_peer.run_peer(configs, 2, 1, compiled=True)
  for ours, theirs in zip(eager['records'], compiled['records']):
    np.testing.assert_allclose([v for _, v in theirs['losses']], [v for _, v in ours['losses']],
                               rtol=1e-5)
