"""Trainer tasks of the language-model experiments, for ``rnnjax.models.LanguageModel``: a
stream cut into truncated-BPTT windows, and padded sequences with a masked loss. Not an
experiment.

Each returns a ``trainer.Task``: its loss (mean NLL in nats per predicted
token), the batch of every step, and the probe of the gradient-norm profile
(the loss at each sequence's last position, as a function of the states of
the Elman layer).
"""

import jax.numpy as jnp
import numpy as np

from rnnjax import cells
from rnnjax import diagnostics
from rnnjax import evaluation
from rnnjax.data import batching
from rnnjax.train import trainer

__all__ = ['batch_indices', 'init_language_model', 'streamed_validation', 'truncated_bptt',
           'padded_sequences']


def batch_indices(num_examples: int, batch_size: int, seed: int, step: int) -> np.ndarray:
  """The examples of a step's batch: each epoch a fresh permutation cut into whole batches.

  A function of the step alone (the data position of a resumed run is its
  step): epoch e is ``numpy.random.default_rng((seed, e)).permutation(N)``,
  and its last partial batch is dropped, so every batch has B examples.

  Args:
    num_examples: N >= batch_size.
    batch_size: B >= 1.
    seed: of the shuffling.
    step: the training step, >= 1.

  Returns:
    ``<int64>[B]`` indices into the N examples.

  Raises:
    ValueError: for B outside [1, N].
  """
  if not isinstance(batch_size, int) or not 1 <= batch_size <= num_examples:
    raise ValueError(f'batch_size: expected an int in [1, {num_examples}] (the number of '
                     f'examples), got {batch_size!r}')
  epoch, position = divmod(step - 1, num_examples // batch_size)
  order = np.random.default_rng((seed, epoch)).permutation(num_examples)
  return order[position * batch_size:(position + 1) * batch_size]


def init_language_model(model, key):
  """Params of a ``models.LanguageModel`` (their shapes do not depend on B or T), made
  on a batch of no steps, so that no recurrence runs (nothing to compile per run)."""
  return model.init(key, jnp.zeros((1, 0), jnp.int32), model.initial_state(1))['params']


def streamed_validation(model, ids: np.ndarray, streams: int):
  """``validate(config, params) -> nats per token`` of ``ids`` (one held-out stream) cut into
  ``streams`` parallel streams, each scored from a zero state (``evaluation.evaluate_streaming``):
  the cheap score of a training run's validation checks (the report scores the whole stream).

  Raises:
    ValueError: for a stream shorter than 2 tokens a part.
  """
  length = len(ids) // streams
  if length < 2:
    raise ValueError(f'streams: expected at most {len(ids) // 2} for {len(ids)} held-out '
                     f'tokens, got {streams}')
  parts = np.asarray(ids[:streams * length]).reshape(streams, length)
  return lambda config, params: evaluation.evaluate_streaming(model, params, parts)


def _recurrent_weight(params):
  return params['recurrence']['cell']['W_hh']


def _probe(model, params, initial_state, inputs, loss_of_logits, lengths=None):
  variables = {'params': params}
  return diagnostics.Probe(
      cells.elman(model.activation), params['recurrence']['cell'],
      model.apply(variables, inputs, method=model.embed), initial_state,
      lambda states: loss_of_logits(model.apply(variables, states, method=model.logits)),
      lengths)


def truncated_bptt(model, inputs, targets, init, report) -> trainer.Task:
  """Truncated BPTT over a stream cut by ``text.stream_windows``.

  Step t reads window (t - 1) mod W of all B streams; the state passes from
  window to window as a value (the gradient stops at the boundary: tau steps
  of BPTT) and is reset to zero at window 0, the start of every pass.

  Args:
    model: a ``models.LanguageModel``.
    inputs, targets: ``<int32>[W, B, tau]``.
    init: ``init(config, key) -> params`` of one run.
    report: ``report(config, params) -> dict`` (see ``trainer.Task``).

  Returns:
    the ``trainer.Task``; its probe's loss is the window's cross-entropy at its
    last position, L_T.
  """
  count, batch_size, _ = inputs.shape

  def carried(carry, batch):
    return jnp.where(batch['reset'], jnp.zeros_like(carry), carry)

  def loss(params, carry, batch, key):
    logits, carry = model.apply({'params': params}, batch['inputs'], carried(carry, batch),
                                deterministic=False, rngs={'dropout': key})
    return evaluation.cross_entropy(logits, batch['targets']), carry

  def batch(step):
    window = (step - 1) % count
    return {'inputs': inputs[window], 'targets': targets[window], 'reset': np.bool_(window == 0),
            'step': np.int32(step)}

  def probe(params, carry, batch):
    return _probe(model, params, carried(carry, batch), batch['inputs'],
                  lambda logits: evaluation.cross_entropy(logits[:, -1:],
                                                          batch['targets'][:, -1:]))

  return trainer.Task(init=init, loss=loss, batch=batch,
                      carry=model.initial_state(batch_size), probe=probe,
                      recurrent_weight=_recurrent_weight, report=report)


def padded_sequences(model, sequences, batch_size: int, max_length: int, pad_id: int, seed: int,
                     init, report) -> trainer.Task:
  """Independent sequences, padded per batch, the padding masked out of the loss.

  Batches follow ``batch_indices`` (each epoch a fresh permutation), each
  padded with ``pad_id`` to a multiple of 16 and cut to ``max_length + 1``
  ids; inputs are ids[:, :-1], targets ids[:, 1:], every sequence from a
  zero state; the loss is the token-weighted mean NLL over non-pad targets
  (``evaluation.masked_nll``: padding changes neither the loss nor its
  gradient).

  Args:
    model: a ``models.LanguageModel``.
    sequences: list of ``<int32>[n_i]`` id arrays (n_i >= 2).
    batch_size: B, at most len(sequences).
    max_length: the most inputs per training sequence.
    pad_id: the padding id (excluded from the loss).
    seed: of the batch order.
    init, report: as ``truncated_bptt``.

  Returns:
    the ``trainer.Task``; its probe's loss is the cross-entropy at each
    sequence's last real position.
  """
  batch_indices(len(sequences), batch_size, seed, 1)  # checks the batch size

  def loss(params, carry, batch, key):
    ids = batch['ids']
    logits, _ = model.apply({'params': params}, ids[:, :-1], model.initial_state(ids.shape[0]),
                            deterministic=False, rngs={'dropout': key})
    total, count = evaluation.masked_nll(logits, ids[:, 1:], ids[:, 1:] != pad_id)
    return total / jnp.maximum(count, 1.0), carry

  def batch(step):
    chosen = batch_indices(len(sequences), batch_size, seed, step)
    ids, lengths = batching.pad_sequences([sequences[i] for i in chosen], pad_id, multiple=16,
                                          max_length=max_length + 1)
    return {'ids': ids, 'lengths': lengths}

  def probe(params, carry, batch):
    ids, lengths = batch['ids'], jnp.maximum(batch['lengths'] - 1, 1)  # predicted positions
    last = jnp.take_along_axis(ids[:, 1:], (lengths - 1)[:, None], axis=1)

    def last_position_loss(logits):
      at_last = jnp.take_along_axis(logits, (lengths - 1)[:, None, None], axis=1)
      return evaluation.cross_entropy(at_last, last)

    return _probe(model, params, model.initial_state(ids.shape[0]), ids[:, :-1],
                  last_position_loss, lengths)

  return trainer.Task(init=init, loss=loss, batch=batch, probe=probe,
                      recurrent_weight=_recurrent_weight, report=report)
