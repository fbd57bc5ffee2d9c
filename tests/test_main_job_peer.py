"""benchmarks/main_job_peer.py: its PyTorch peer computes what rnnjax computes, and it runs.

The peer must be the same job: the same windows of the corpus, the same loss
on the same weights (and the same gradients, clipped update and SGD step),
or the timings compare different work.
"""

import jax
import numpy as np
import pytest
import torch

from benchmarks import main_job_peer
from experiments import char_lm
from rnnjax import convert
from rnnjax.data import corpora
from rnnjax.data import text
from rnnjax.train import optimizers

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture
def data_env(shared_data_dir, monkeypatch):
  monkeypatch.setenv('RNNJAX_DATA_DIR', str(shared_data_dir))  # for subprocesses too
  return shared_data_dir


def configs_at(steps, truncation=16, count=2, **fields):
  """The first ``count`` runs of the main job's sweep with this truncation."""
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


def test_run_configs_are_launch_sweeps():
  from experiments.configs import char_lm as char_lm_config
  from launch import sweep
  overrides = main_job_peer.sweep_overrides(7)
  assert len(overrides) == 20 and {o['steps'] for o in overrides} == {7}
  ours = main_job_peer.run_configs(overrides)
  theirs = sweep.run_configs(char_lm_config.get_config(), overrides)
  assert [c.to_dict() for c in ours] == [c.to_dict() for c in theirs]
  groups = main_job_peer.groups_of(ours)
  assert sorted(map(len, groups)) == [10, 10]  # one vmapped group per tau
  assert main_job_peer.tokens(ours) == 7 * 32 * (16 + 64) * 10


@pytest.mark.parametrize('truncation', [16, 64])
def test_peer_windows_are_the_tasks(data_env, truncation):
  _, (config, _) = configs_at(1, truncation)
  inputs, targets, vocab_size = main_job_peer.peer_windows(config)
  corpus = corpora.read_text('tinyshakespeare')
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
  inputs, targets, _ = main_job_peer.peer_windows(config)
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


def test_tiny_benchmark_runs(data_env):
  """Two runs of one group at 2 steps: the PyTorch peer (in this process and in a
  fresh one) and rnnjax's trainer in this process, and the table."""
  overrides, configs = configs_at(2)
  rows, notes = main_job_peer.benchmark(
      overrides, ['torch', 'torch_script', 'inprocess', 'inprocess_compiled'], threads=2)
  variants = [row['variant'] for row in rows]
  assert variants == ['PyTorch peer, in-process (mean of first and last)',
                      'PyTorch peer, fresh process',
                      'rnnjax trainer.train in-process, cold',
                      'rnnjax trainer.train in-process, same tasks again',
                      'rnnjax in-process, cold, less its compile time']
  for row in rows:
    assert row['wall s'] > 0
    assert row['tokens/s'] == pytest.approx(2 * 2 * 32 * 16 / row['wall s'])
  ratios = [row['rnnjax / PyTorch'] for row in rows[2:]]
  assert all(isinstance(r, float) and r > 0 for r in ratios)
  assert any('diverged 0' in note for note in notes)
  table = main_job_peer.markdown(rows, ['variant', 'wall s', 'tokens/s', 'rnnjax / PyTorch'])
  assert table.count('\n') == len(rows) + 1


@pytest.mark.slow
def test_tiny_benchmark_through_launch_sweep(data_env):
  """launch.sweep of one run at 2 steps, in a subprocess, cold: it trains and reports."""
  overrides, _ = configs_at(2, count=1)
  seconds, phases, summaries = main_job_peer.run_launch_sweep(overrides, cache='')
  assert seconds > 0 and phases['groups'] == 1 and phases['compile'] > 0
  assert summaries[0]['status'] == 'finished' and summaries[0]['steps_done'] == 2
  assert 'validation_loss' in summaries[0]
