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
"""

from experiments import bpe_lm


def get_config():
  # steps: windows in word mode, batches in bpe mode
  return bpe_lm.EXPERIMENT.config(steps=6000, optimizer='adam', learning_rate=2e-3,
                                  clipping='global_norm', clip_threshold=0.25, log_every=200,
                                  checkpoint_every=1000)
