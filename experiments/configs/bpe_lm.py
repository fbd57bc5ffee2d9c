"""Word-level and BPE language models on Penn Treebank and WikiText-2.

The default is the word-level Elman LM on PTB (10,000 words with <eos>,
truncated BPTT over the concatenated text, as Mikolov's RNN LM: 124.7 test
perplexity; 5-gram Kneser-Ney 141.2):

  python -m launch.run --config=experiments/configs/bpe_lm.py --workdir=results/ptb_word

BPE (sentencepiece trained on the training split; sentences padded in
batches, padding excluded from the loss):

  python -m launch.run --config=experiments/configs/bpe_lm.py \
      --config.tokens=bpe --workdir=results/ptb_bpe
  python -m launch.run --config=experiments/configs/bpe_lm.py \
      --config.tokens=bpe --config.corpus=wikitext-2 --workdir=results/wikitext2_bpe

The sweep (``get_sweep``) trains the three: PTB words for 4 epochs (830 windows of 32
streams x 35 words an epoch) at Adam 2e-3, the rate a quarter at the end of each epoch from
the second on (the setting that gets below 5-gram Kneser-Ney's 141.2); PTB and WikiText-2
pieces at a fixed rate, 6,000 and 3,000 batches. Budget: about 46 CPU minutes (13 for the
words; 27 minutes on 2 cores with two runs at a time).

  python -m launch.sweep --config=experiments/configs/bpe_lm.py --workdir=results/bpe_lm
"""

EPOCH = 830  # word windows: 929,589 tokens / (32 streams x 35)

from experiments import bpe_lm


def get_config():
  # steps: windows in word mode, batches in bpe mode
  return bpe_lm.EXPERIMENT.config(steps=6000, optimizer='adam', learning_rate=2e-3,
                                  clipping='global_norm', clip_threshold=0.25, log_every=200,
                                  checkpoint_every=1000)


def get_sweep():
  """PTB words (4 epochs, decaying rate), PTB pieces, WikiText-2 pieces: 3 runs."""
  return [{'corpus': 'ptb', 'tokens': 'word', 'steps': 4 * EPOCH, 'learning_rate_decay': 0.25,
           'decay_every': EPOCH, 'decay_begin': EPOCH},
          {'corpus': 'ptb', 'tokens': 'bpe', 'steps': 6000, 'learning_rate_decay': 1.0,
           'decay_every': 0, 'decay_begin': 0},
          {'corpus': 'wikitext-2', 'tokens': 'bpe', 'steps': 3000, 'learning_rate_decay': 1.0,
           'decay_every': 0, 'decay_begin': 0}]
