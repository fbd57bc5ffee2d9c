"""The classic long-range synthetic tasks, as batches drawn from a key.

Each generator is a pure function ``task(key, batch_size, length) ->
(inputs, targets)`` usable under ``jit`` and ``vmap`` (sizes static), and
each task states the loss of its trivial baseline, the model that ignores
what it must remember.

References:
  Hochreiter & Schmidhuber (1997), "Long short-term memory", experiments 4
  (adding) and 6a (temporal order).
  Le, Jaitly & Hinton (2015), "A simple way to initialize recurrent networks
  of rectified linear units", section 4.1 (adding).
  Pascanu, Mikolov & Bengio (2013), section 5.1 (temporal order, adding,
  noiseless memorization).
  Arjovsky, Shah & Bengio (2016), "Unitary evolution RNNs", the copy task.
  Zaremba & Sutskever (2014), "Learning to execute" (digit-string tasks
  for sequence to sequence); Sutskever, Vinyals & Le (2014), reversal.
"""

import math
from typing import Any

import jax
import jax.numpy as jnp

from rnnjax import checks
from rnnjax import recurrence

__all__ = [
    'ADDING_BASELINE_MSE', 'COPY_ALPHABET', 'COPY_SYMBOLS', 'REVERSAL_BOS', 'REVERSAL_EOS',
    'REVERSAL_FIRST_DIGIT', 'REVERSAL_PAD', 'REVERSAL_VOCAB_SIZE', 'TEMPORAL_ORDER_BASELINE_LOSS',
    'TEMPORAL_ORDER_CLASSES', 'TEMPORAL_ORDER_SYMBOLS', 'adding', 'copy', 'copy_baseline_loss',
    'reverse_digits', 'temporal_order', 'temporal_order_pascanu', 'temporal_order_pascanu_range',
]

# Always predicting 1 (the mean of a sum of two U(0, 1)) has MSE Var = 2/12.
ADDING_BASELINE_MSE = 1.0 / 6.0
TEMPORAL_ORDER_CLASSES = 4  # XX, XY, YX, YY
TEMPORAL_ORDER_SYMBOLS = 6  # a, b, c, d (distractors), X, Y
TEMPORAL_ORDER_BASELINE_LOSS = math.log(TEMPORAL_ORDER_CLASSES)  # uniform guess, nats
COPY_ALPHABET = 8  # data symbols 1..8; 0 is blank, 9 the delimiter
COPY_SYMBOLS = COPY_ALPHABET + 2
# Digit reversal: ids 0, 1, 2 are PAD, BOS and EOS, the special ids of rnnjax.seq2seq (a model
# module, which the data does not import); digit k is id 3 + k.
REVERSAL_PAD, REVERSAL_BOS, REVERSAL_EOS = 0, 1, 2
REVERSAL_FIRST_DIGIT = 3
REVERSAL_VOCAB_SIZE = REVERSAL_FIRST_DIGIT + 10


def _check(batch_size: Any, length: Any, minimum: int) -> None:
  checks.integer('batch_size', batch_size, 1)
  checks.integer('length', length, minimum, what='an int T')


def adding(key: jax.Array, batch_size: int, length: int) -> tuple[jax.Array, jax.Array]:
  """The adding problem: add the two marked numbers of a sequence.

  Channel 0 holds U(0, 1) numbers, channel 1 marks two positions with 1, one
  in each half of the sequence (Le et al. 2015); the target is the sum of
  the two marked numbers, read from the last state.

  Args:
    key: a ``jax.random`` key.
    batch_size: B >= 1.
    length: T, steps per sequence.

  Returns:
    ``(inputs <float32>[B, T, 2], targets <float32>[B, 1])``. The trivial
    baseline (predict 1) has MSE 1/6 = 0.167 (``ADDING_BASELINE_MSE``).

  Raises:
    ValueError: for B < 1 or T < 2.
  """
  _check(batch_size, length, 2)
  key_values, key_first, key_second = jax.random.split(key, 3)
  values = jax.random.uniform(key_values, (batch_size, length))
  half = length // 2
  first = jax.random.randint(key_first, (batch_size,), 0, half)
  second = jax.random.randint(key_second, (batch_size,), half, length)
  steps = jnp.arange(length)[None, :]
  markers = ((steps == first[:, None]) | (steps == second[:, None])).astype(jnp.float32)
  targets = jnp.sum(values * markers, axis=1, keepdims=True)
  return jnp.stack([values, markers], axis=-1), targets


def temporal_order(key: jax.Array, batch_size: int, length: int) -> tuple[jax.Array, jax.Array]:
  """The temporal-order problem: which of X, Y came first, and which second.

  A sequence of distractors a-d holds two relevant symbols, each X or Y, at
  a random step in [0.1 T, 0.2 T) and one in [0.5 T, 0.6 T); the class of the
  sequence is XX, XY, YX or YY (0 to 3), read from the last state.

  Args:
    key: a ``jax.random`` key.
    batch_size: B >= 1.
    length: T, steps per sequence.

  Returns:
    ``(inputs <float32>[B, T, 6] one-hot, targets <int32>[B])``. The trivial
    baseline (uniform guess) has cross-entropy ln 4 = 1.386 nats and
    accuracy 25%.

  Raises:
    ValueError: for B < 1 or T < 10.
  """
  _check(batch_size, length, 10)
  key_noise, key_first, key_second, key_class = jax.random.split(key, 4)
  symbols = jax.random.randint(key_noise, (batch_size, length), 0, 4)
  first = jax.random.randint(key_first, (batch_size,), length // 10,
                             max(length // 5, length // 10 + 1))
  second = jax.random.randint(key_second, (batch_size,), length // 2,
                              max(3 * length // 5, length // 2 + 1))
  classes = jax.random.randint(key_class, (batch_size,), 0, TEMPORAL_ORDER_CLASSES)
  steps = jnp.arange(length)[None, :]
  symbols = jnp.where(steps == first[:, None], 4 + classes[:, None] // 2, symbols)
  symbols = jnp.where(steps == second[:, None], 4 + classes[:, None] % 2, symbols)
  return jax.nn.one_hot(symbols, TEMPORAL_ORDER_SYMBOLS), classes.astype(jnp.int32)


def copy(key: jax.Array, batch_size: int, length: int, memory: int = 10
         ) -> tuple[jax.Array, jax.Array]:
  """The copy (memory) task: reproduce ``memory`` symbols after a delay of T steps.

  Inputs: ``memory`` symbols from 1..8, then T - 1 blanks (0), the delimiter
  (9), then ``memory`` blanks. Targets: blanks until the delimiter has been
  read, then the ``memory`` symbols. Total length T + 2 memory.

  Args:
    key: a ``jax.random`` key.
    batch_size: B >= 1.
    length: T, the delay in steps.
    memory: M >= 1 symbols to remember.

  Returns:
    ``(inputs <float32>[B, T + 2M, 10] one-hot, targets <int32>[B, T + 2M])``.
    The trivial baseline (blanks, then a uniform guess over the 8 symbols)
    has cross-entropy M ln 8 / (T + 2M) nats per step (``copy_baseline_loss``).

  Raises:
    ValueError: for B < 1, T < 1 or memory < 1.
  """
  _check(batch_size, length, 1)
  memory = checks.integer('memory', memory, 1)
  data = jax.random.randint(key, (batch_size, memory), 1, COPY_ALPHABET + 1)
  blanks = lambda n: jnp.zeros((batch_size, n), jnp.int32)
  inputs = jnp.concatenate([data, blanks(length - 1), jnp.full((batch_size, 1), COPY_SYMBOLS - 1),
                            blanks(memory)], axis=1)
  targets = jnp.concatenate([blanks(length + memory), data], axis=1)
  return jax.nn.one_hot(inputs, COPY_SYMBOLS), targets.astype(jnp.int32)


def copy_baseline_loss(length: int, memory: int = 10) -> float:
  """Cross-entropy per step, in nats, of the memoryless copy-task baseline.

  Args:
    length: T, the delay in steps.
    memory: M, the symbols to remember.

  Returns:
    M ln 8 / (T + 2M) nats per step: blanks are certain, each of the M
    symbols a uniform guess over the 8 of the alphabet.
  """
  return memory * math.log(COPY_ALPHABET) / (length + 2 * memory)


def reverse_digits(key: jax.Array, batch_size: int, max_digits: int, min_digits: int = 1
                   ) -> tuple[jax.Array, jax.Array]:
  """Digit reversal for sequence to sequence: read a digit string, write it backwards.

  Each source holds L digits, L uniform in [min_digits, max_digits], each
  uniform in 0-9 (id ``REVERSAL_FIRST_DIGIT`` + digit), then PAD; its
  target is the same digits in reverse order, then EOS, then PAD. Ids are
  those of ``rnnjax.seq2seq``: PAD = 0, BOS = 1 (never in the data; the
  decoder's first input), EOS = 2 (``REVERSAL_PAD``, ``REVERSAL_BOS``,
  ``REVERSAL_EOS``), and the digits 3 to 12 (``REVERSAL_VOCAB_SIZE`` = 13).
  Exact match by chance, a uniform guess of the digits given L, is 10^-L.

  Args:
    key: a ``jax.random`` key.
    batch_size: B >= 1.
    max_digits: the longest source, >= min_digits.
    min_digits: the shortest source, >= 1.

  Returns:
    ``(sources <int32>[B, max_digits], targets <int32>[B, max_digits + 1])``.

  Raises:
    ValueError: for B < 1, min_digits < 1 or max_digits < min_digits.
  """
  batch_size = checks.integer('batch_size', batch_size, 1)
  max_digits = checks.integer('max_digits', max_digits, 1)
  min_digits = checks.integer('min_digits', min_digits, 1, max_digits)  # <= max_digits
  key_lengths, key_digits = jax.random.split(key)
  lengths = jax.random.randint(key_lengths, (batch_size,), min_digits, max_digits + 1)
  digits = jax.random.randint(key_digits, (batch_size, max_digits), 0, 10)
  steps = jnp.arange(max_digits + 1)[None, :]
  sources = jnp.where(steps[:, :-1] < lengths[:, None], REVERSAL_FIRST_DIGIT + digits,
                      REVERSAL_PAD)
  targets = jnp.pad(recurrence.reverse_within_lengths(sources, lengths), ((0, 0), (0, 1)),
                    constant_values=REVERSAL_PAD)
  targets = jnp.where(steps == lengths[:, None], REVERSAL_EOS, targets)
  return sources.astype(jnp.int32), targets.astype(jnp.int32)


def _pascanu_order_symbols(key: jax.Array, batch_size: int, steps: int, length: Any
                           ) -> tuple[jax.Array, jax.Array]:
  """Symbol ids ``<int32>[B, steps]`` (-1 from ``length`` on) and classes
  ``<int32>[B]`` of ``temporal_order_pascanu``; ``length`` may be traced."""
  key_first, key_a, key_second, key_b, key_noise = jax.random.split(key, 5)
  tenth, half = length // 10, length // 2  # int(.1 L) and int(.5 L) of tempOrder.py
  first = tenth + jax.random.randint(key_first, (batch_size,), 0, tenth)
  first_symbol = jax.random.randint(key_a, (batch_size,), 0, 2)
  second = half + jax.random.randint(key_second, (batch_size,), 0, tenth)
  second_symbol = jax.random.randint(key_b, (batch_size,), 0, 2)
  symbols = jax.random.randint(key_noise, (batch_size, steps), 2, TEMPORAL_ORDER_SYMBOLS)
  t = jnp.arange(steps)[None, :]
  symbols = jnp.where(t == first[:, None], first_symbol[:, None], symbols)
  symbols = jnp.where(t == second[:, None], second_symbol[:, None], symbols)
  symbols = jnp.where(t < length, symbols, -1)
  return symbols.astype(jnp.int32), (first_symbol + 2 * second_symbol).astype(jnp.int32)


def temporal_order_pascanu(key: jax.Array, batch_size: int, length: int
                           ) -> tuple[jax.Array, jax.Array]:
  """The temporal-order problem exactly as Pascanu et al.'s code draws it.

  Channels of the one-hot input: A = 0 and B = 1 (the two relevant symbols),
  c, d, e, f = 2 to 5 (distractors). With n = L // 10 and m = L // 2 (equal
  to the reference's int(L * .1) and int(L * .5) for every int L), the first
  relevant symbol sits at a uniform step in [n, 2n), the second at one in
  [m, m + n) (for L a multiple of 10: [L/10, 2L/10) and [5L/10, 6L/10));
  each is A or B with probability 1/2, and every other step holds a uniform
  distractor. The class is v0 + 2 v1 with A = 0, B = 1 (the first symbol is
  the low bit): AA = 0, BA = 1, AB = 2, BB = 3, read after the last step.

  Unlike ``temporal_order`` (Hochreiter's layout: distractors 0-3, X = 4,
  Y = 5, class 2 first + second), and unlike the reference's own docstring,
  which puts the first symbol in [1, L/10].

  Args:
    key: a ``jax.random`` key.
    batch_size: B >= 1.
    length: T, steps per sequence.

  Returns:
    ``(inputs <float32>[B, T, 6] one-hot, targets <int32>[B] in [0, 4))``,
    batch-major (the reference is time-major ``[T, B, 6]`` with one-hot
    targets). A uniform guess has cross-entropy ln 4 nats
    (``TEMPORAL_ORDER_BASELINE_LOSS``).

  Raises:
    ValueError: for B < 1 or T < 10 (n >= 1 is needed).

  References:
    Pascanu, Mikolov & Bengio (2013), the temporal order problem of the
    synthetic experiments; github.com/pascanur/trainingRNNs, tempOrder.py
    lines 55-70.
  """
  _check(batch_size, length, 10)
  symbols, classes = _pascanu_order_symbols(key, batch_size, length, length)
  return jax.nn.one_hot(symbols, TEMPORAL_ORDER_SYMBOLS), classes


def temporal_order_pascanu_range(key: jax.Array, batch_size: int, min_length: int,
                                 max_length: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``temporal_order_pascanu`` at a length drawn per batch, as the reference loop.

  One length for the whole batch, L = min_length + U{0, ..., max_length -
  min_length - 1}: max_length itself is never drawn (``rng.randint`` of
  RNN.py line 321, although its comment at line 473 says [min, max]); L =
  min_length when the two are equal. All B sequences share L and are padded
  with zero vectors (no symbol) to a static T = max(min_length, max_length
  - 1) steps, so the function jits with static sizes; read the class from
  the state at step L - 1 (``recurrence.scan`` with ``lengths``: its final
  state).

  Args:
    key: a ``jax.random`` key.
    batch_size: B >= 1 (20 in the reference).
    min_length: >= 10 (50 in the reference).
    max_length: >= min_length (200 in the reference).

  Returns:
    ``(inputs <float32>[B, T, 6], targets <int32>[B], lengths <int32>[B])``,
    lengths all equal to L; inputs are one-hot for t < L and 0 after.

  Raises:
    ValueError: for B < 1, min_length < 10 or max_length < min_length.

  References:
    github.com/pascanur/trainingRNNs, RNN.py lines 318-324 and 351-356
    (validation batches draw their lengths the same way); tempOrder.py
    lines 55-70.
  """
  batch_size = checks.integer('batch_size', batch_size, 1)
  min_length = checks.integer('min_length', min_length, 10)
  max_length = checks.integer('max_length', max_length, min_length)  # >= min_length
  steps = max(min_length, max_length - 1)
  key_length, key_task = jax.random.split(key)
  length = min_length + jax.random.randint(key_length, (), 0, max(max_length - min_length, 1))
  symbols, classes = _pascanu_order_symbols(key_task, batch_size, steps, length)
  lengths = jnp.full((batch_size,), length, jnp.int32)
  return jax.nn.one_hot(symbols, TEMPORAL_ORDER_SYMBOLS), classes, lengths
