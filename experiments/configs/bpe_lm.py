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

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.experiment = 'bpe_lm'  # the module experiments.bpe_lm
  config.seed = 0  # init, dropout and (bpe mode) the batch order
  config.corpus = 'ptb'  # ptb | wikitext-2
  config.data_dir = ''  # empty: $RNNJAX_DATA_DIR, else ./data
  config.tokens = 'word'  # word: the corpus's own vocabulary with <eos>; bpe: sentencepiece

  # word: one stream, cut into B parallel streams and windows of tau steps
  config.truncation = 35  # tau, BPTT window in steps (word mode)
  # bpe: one sequence per line, <bos> ... <eos>
  config.vocab_size = 4000  # BPE vocabulary V including the special pieces (bpe mode)
  config.max_length = 128  # training sequences are cut to this many inputs (bpe mode)

  config.embedding_size = 256
  config.hidden_size = 256
  config.activation = 'tanh'
  config.recurrent_init = 'gaussian'  # gaussian | orthogonal | identity | uniform
  config.spectral_radius = 1.0  # of W_hh at init
  config.dropout_rate = 0.3  # on the embeddings and the states fed to the softmax

  config.batch_size = 32
  config.steps = 6000  # training steps (word mode: windows; bpe mode: batches)

  config.optimizer = 'adam'  # sgd | adagrad | adam | adamw
  config.learning_rate = 2e-3
  config.clipping = 'global_norm'  # none | global_norm | elementwise | pascanu
  config.clip_threshold = 0.25
  config.on_divergence = 'stop'  # stop | skip
  config.layout = 'auto'  # auto | data | runs: over several devices, split the batch or the runs

  config.log_every = 200
  config.checkpoint_every = 1000  # steps between checkpoints (0: only at the end)
  config.sample_prompt = 'the company said'
  config.sample_length = 30
  config.sample_temperature = 0.8
  config.sample_top_k = 40  # 0: no top-k; at most V
  return config
