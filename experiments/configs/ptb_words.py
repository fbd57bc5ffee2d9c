"""The word-level Elman language model on Penn Treebank, trained to convergence: 3 seeds.

  python -m launch.sweep --config=experiments/configs/ptb_words.py --workdir=results/ptb_words

PTB's 10,000 words with <eos>, truncated BPTT over 32 streams x 35 words (830 windows an
epoch), an Elman layer of 256 tanh units on 256-wide embeddings, dropout 0.3, Adam at 2e-3 with
global-norm clipping at 0.25 (bpe_lm.py's word run, which stopped after 4 epochs). The
validation set is scored after every epoch and the learning rate follows it as Mikolov's RNNLM
toolkit does: from the first epoch that improves validation perplexity by less than 0.3% the
rate is halved every epoch, and the next such epoch ends the run; at most ``EPOCHS`` epochs.
The target: Mikolov's RNN LM, 124.7 test perplexity. Budget: about 2.5 CPU hours.
"""

from experiments import bpe_lm
from experiments.configs import bpe_lm as language_models

EPOCHS = 12
SEEDS = 3


def get_config():
  epoch = language_models.EPOCH
  return bpe_lm.EXPERIMENT.config(
      corpus='ptb', tokens='word', steps=EPOCHS * epoch, optimizer='adam', learning_rate=2e-3,
      clipping='global_norm', clip_threshold=0.25, validate_every=epoch, plateau_decay=0.5,
      plateau_threshold=0.003, log_every=200, checkpoint_every=epoch)


def get_sweep():
  """3 seeds."""
  return [{'seed': seed} for seed in range(SEEDS)]
