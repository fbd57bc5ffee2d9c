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

The sweep (``get_sweep``) trains PTB and WikiText-2 pieces at a fixed rate, 6,000 and 3,000
batches, 3 seeds each (the word model to convergence is ptb_words.py). Budget: about 1.6 CPU
hours (18 and 14 minutes a run).

  python -m launch.sweep --config=experiments/configs/bpe_lm.py --workdir=results/bpe_lm
"""

EPOCH = 830  # word windows: 929,589 tokens / (32 streams x 35)
SEEDS = 3

from experiments import bpe_lm


def get_config():
  # steps: windows in word mode, batches in bpe mode
  return bpe_lm.EXPERIMENT.config(steps=6000, optimizer='adam', learning_rate=2e-3,
                                  clipping='global_norm', clip_threshold=0.25, log_every=200,
                                  checkpoint_every=1000)


def get_sweep():
  """PTB pieces, WikiText-2 pieces x 3 seeds: 6 runs."""
  return [{'corpus': corpus, 'tokens': 'bpe', 'steps': steps, 'seed': seed}
          for corpus, steps in (('ptb', 6000), ('wikitext-2', 3000)) for seed in range(SEEDS)]
