"""Can an Elman network learn a long-range task? One run: one task, T, init, clipping, seed.

Each step draws a fresh batch from the run's key (runs with the same seed
see the same data); the report tests the trained network on fresh sequences
from another key: its test error (MSE for the adding problem, the error rate
for temporal order and copy) and whether it is below the success threshold.
The sweep groups the runs of one T and activation into one vmapped program;
its table gives the success rate over seeds per (T, init, clipping), and the
heatmap the success rate with T across and the init down.
"""

import math

import jax
import jax.numpy as jnp
import optax

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import fused
from rnnjax.data import synthetic
from rnnjax.train import experiment
from rnnjax.train import trainer

TASKS = ('adding', 'temporal_order', 'copy')
PROBE_SEQUENCES = 64  # fixed sequences (key 0) on which every run's profile is measured


def check(config) -> None:
  """The length against the task: one the task's generator accepts (adding: T >= 2).

  Raises:
    ValueError: ``config.length: <the generator's message>``.
  """
  try:
    functions(config)[0](jax.random.key(0), 1)
  except ValueError as error:
    raise ValueError(f'config.length: {error}') from None


def functions(config):
  """``(draw, outputs, loss_and_error, every_step)`` of the configured task.

  ``draw(key, batch) -> (inputs, targets)``; ``loss_and_error(predictions,
  targets) -> (training loss, test error)``; predictions are ``[B, outputs]``
  from the last state, or ``[B, T', outputs]`` from every state for the copy
  task (``every_step``).
  """
  length = config.length
  if config.task == 'adding':
    def loss_and_error(predictions, targets):
      mse = jnp.mean((predictions - targets) ** 2)
      return mse, mse
    return (lambda key, b: synthetic.adding(key, b, length)), 1, loss_and_error, False
  if config.task == 'temporal_order':
    def loss_and_error(logits, targets):
      loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
      return loss, jnp.mean(jnp.argmax(logits, -1) != targets)
    return ((lambda key, b: synthetic.temporal_order(key, b, length)),
            synthetic.TEMPORAL_ORDER_CLASSES, loss_and_error, False)
  memory = config.copy_memory

  def copy_loss_and_error(logits, targets):
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    return loss, jnp.mean(jnp.argmax(logits[:, -memory:], -1) != targets[:, -memory:])
  return ((lambda key, b: synthetic.copy(key, b, length, memory)), synthetic.COPY_SYMBOLS,
          copy_loss_and_error, True)


def task(config) -> trainer.Task:
  """The task's generator, the network (fused Elman layer, linear readout) and its loss."""
  draw, outputs, loss_and_error, every_step = functions(config)
  activation, hidden = config.activation, config.hidden_size
  input_size = draw(jax.random.key(0), 1)[0].shape[-1]
  probe_inputs, probe_targets = draw(jax.random.key(0), PROBE_SEQUENCES)

  def readout(params, states):
    return (states if every_step else states[:, -1]) @ params['W_out'] + params['b_out']

  def forward(params, inputs, targets):
    states, _ = fused.elman_layer(params['cell'], inputs, jnp.zeros((inputs.shape[0], hidden)),
                                  activation=activation)
    return loss_and_error(readout(params, states), targets)

  def init(run_config, key):
    key_cell, key_out = jax.random.split(key)
    return {'cell': cells.init_elman(key_cell, input_size, hidden, run_config.recurrent_init,
                                     radius=run_config.spectral_radius,
                                     input_scale=run_config.input_scale or None),
            'W_out': jax.random.normal(key_out, (hidden, outputs)) / math.sqrt(hidden),
            'b_out': jnp.zeros((outputs,))}

  def loss(params, carry, batch, key):
    del batch
    return forward(params, *draw(key, config.batch_size))[0], carry

  def probe(params, carry, batch):
    """The loss of the last step's prediction, as a function of the states."""
    del carry, batch

    def last_step_loss(states):
      if every_step:
        logits = states[:, -1] @ params['W_out'] + params['b_out']
        return optax.softmax_cross_entropy_with_integer_labels(logits, probe_targets[:, -1]).mean()
      return loss_and_error(readout(params, states), probe_targets)[0]

    return diagnostics.Probe(cells.elman(activation), params['cell'], probe_inputs,
                             jnp.zeros((PROBE_SEQUENCES, hidden)), last_step_loss)

  test = jax.jit(lambda params, key: forward(params, *draw(key, config.test_size))[1])

  def report(run_config, params) -> dict:
    error = float(test(params, jax.random.fold_in(jax.random.key(run_config.seed), 3)))
    return {'test_error': error,
            'success': bool(math.isfinite(error) and error < run_config.success_threshold)}

  return trainer.Task(init=init, loss=loss, batch=lambda step: {}, probe=probe,
                      recurrent_weight=lambda params: params['cell']['W_hh'], report=report,
                      solved=lambda run_config, params: report(run_config, params)['success'],
                      solved_every=config.solved_every)


def _positive(value) -> bool:
  return isinstance(value, (int, float)) and value > 0


Field = experiment.Field
EXPERIMENT = experiment.Experiment(
    name=__name__, task=task, check=check,
    fields={
        'seed': experiment.TRAINER_FIELDS['seed']._replace(
            help='init, and every training and test batch'),
        'task': Field('adding', experiment.one_of(TASKS), 'adding | temporal_order | copy'),
        'length': Field(50, experiment.integer(1), 'T'),
        'copy_memory': Field(10, experiment.integer(1), 'symbols to remember (copy task)'),
        'hidden_size': Field(64, experiment.integer(1)),
        'activation': Field('tanh', experiment.one_of(sorted(cells.ACTIVATIONS)),
                            'tanh | relu (the IRNN)'),
        'recurrent_init': Field('gaussian', experiment.one_of(cells.RECURRENT_INITS)),
        'spectral_radius': Field(1.0, experiment.number(0),
                                 'of W_hh at init (the gain for identity)'),
        'batch_size': Field(32, experiment.integer(1)),
        'test_size': Field(1000, experiment.integer(1)),
        'success_threshold': Field(0.01, experiment.Check('a value > 0', _positive),
                                   'test error: MSE (adding), error rate (others)'),
        'input_scale': Field(0.0, experiment.number(0), 'W_xh ~ N(0, input_scale^2) (0: '
                             '1/sqrt(d))'),
        'solved_every': Field(0, experiment.integer(0), 'steps between success checks on the '
                              'test sequences; a run that succeeded stops (0: never checked)'),
    },
    report=('test_error', 'success', 'solved_step', 'train_loss_nats', 'clipped_fraction'),
    vmappable=('seed', 'recurrent_init', 'spectral_radius'),
    plots=(('heatmap', 'success', 'length', ('clipping', 'clip_threshold')),))
