"""The training methods of Pascanu, Mikolov & Bengio (2013) as config fields.

  MSGD      SGD without momentum: clipping 'none', omega_weight 0
  MSGD-C    clipping 'pascanu' (global norm at clip_threshold, the reference
            fallback for a non-finite or > 1e10 norm: update 0.02 W_hh, 0 elsewhere)
  MSGD-CR   as MSGD-C, plus omega_weight (alpha) times the gradient of Omega
            (``regularizers.omega_penalty``: eq. 10), added before clipping

The experiments that compare them (``temporal_order``, ``ptb_chars``) take
their fields (``FIELDS``: optimizer, clipping, method, omega_weight) and the
rule that ties them together (``check_method``). Not an experiment.

References:
  Pascanu, Mikolov & Bengio (2013), "On the difficulty of training recurrent
  neural networks", sections 3.2-3.3 and 5; github.com/pascanur/trainingRNNs
  (RNN.py).
"""

from rnnjax.train import experiment

__all__ = ['METHODS', 'FIELDS', 'check_method']

# method -> (clipping, whether omega_weight > 0)
METHODS = {'MSGD': ('none', False), 'MSGD-C': ('pascanu', False), 'MSGD-CR': ('pascanu', True)}

FIELDS = {
    'optimizer': experiment.Field(
        'sgd', experiment.Check("'sgd' (MSGD without momentum, as the paper)",
                                lambda value: value == 'sgd'), 'sgd only (MSGD)'),
    'clipping': experiment.Field(
        'pascanu', experiment.Check("'none' or 'pascanu'", lambda value: value in ('none',
                                                                                   'pascanu')),
        'none | pascanu (global norm with the reference fallback)'),
    'method': experiment.Field('MSGD-CR', experiment.one_of(sorted(METHODS)),
                               'label: MSGD | MSGD-C | MSGD-CR (checked against clipping and '
                               'omega_weight)'),
    'omega_weight': experiment.Field(2.0, experiment.number(0),
                                     'alpha of Omega (RNN.py line 467; the paper says 4); 0: none'),
}


def check_method(config) -> None:
  """Checks ``config.method`` against ``config.clipping`` and ``config.omega_weight``
  (``METHODS``).

  Raises:
    ValueError: ``config.method: 'M' expects clipping ... and omega_weight ..., got ...``.
  """
  clipping, regularized = METHODS[config.method]
  if config.clipping != clipping or (config.omega_weight > 0) != regularized:
    raise ValueError(f'config.method: {config.method!r} expects clipping {clipping!r} and '
                     f'omega_weight {"> 0" if regularized else "0"}, got clipping '
                     f'{config.clipping!r} and omega_weight {config.omega_weight!r}')
