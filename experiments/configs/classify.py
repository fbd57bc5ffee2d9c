"""Text classifier: embedding -> Elman / GRU / LSTM -> last state -> linear.

One run (AG News, GRU, the state at each text's true last word):

  RNNJAX_DATA_DIR=../shared/data python -m launch.run \
      --config=experiments/configs/classify.py --workdir=results/classify/ag_news_gru \
      [--config.cell=elman --config.last_state=padded_end --config.dataset=sst2 ...]

The sweep (``get_sweep``: AG News and SST-2, Elman and GRU, true last state
and padded end; eight runs, each 40 to 95 s on 2 CPU cores), its table in
``results/classify/results.md``:

  RNNJAX_DATA_DIR=../shared/data python -m launch.sweep \
      --config=experiments/configs/classify.py --workdir=results/classify

AG News is the 7,600-row test.csv split stratified into 6,000 train and
1,600 test rows (400 per class; chance 25%); SST-2 trains on train.tsv's
67,349 phrases and tests on dev.tsv's 872 sentences (majority class 50.9%).
Measured with these defaults (test accuracy, true last state / padded end):
AG News GRU 85.9% / 86.2%, Elman 71.8% / 27.0%; SST-2 GRU 82.3% / 82.1%,
Elman 79.6% / 49.1%.
"""

import ml_collections


def get_config():
  config = ml_collections.ConfigDict()
  config.experiment = 'classify'  # the module experiments.classify
  config.seed = 0  # init, dropout and the batch order
  config.dataset = 'ag_news'  # ag_news | sst2
  config.data_dir = ''  # empty: $RNNJAX_DATA_DIR, else ./data
  config.test_size = 1600  # AG News rows held out, stratified (sst2: dev.tsv is the test set)
  config.split_seed = 0  # of the AG News split

  config.min_count = 2  # fewest occurrences in the training part for a word to get an id
  config.max_vocabulary = 20000  # most ids, pad (0) and unknown (1) included
  config.max_length = 64  # words; longer texts are cut, every text is padded to this length

  config.cell = 'gru'  # elman | gru | lstm
  config.bidirectional = False
  config.layers = 1
  config.last_state = 'true'  # true: the state at each text's last word | padded_end
  config.embedding_size = 128
  config.hidden_size = 128
  config.dropout_rate = 0.3  # on word embeddings, between layers and on the features

  config.batch_size = 64
  config.steps = 1500  # one batch each: 16 epochs of AG News' 6,000, 1.4 of SST-2
  config.optimizer = 'adam'  # sgd | adagrad | adam | adamw
  config.learning_rate = 2e-3
  config.clipping = 'global_norm'  # none | global_norm | elementwise | pascanu
  config.clip_threshold = 1.0
  config.on_divergence = 'stop'  # stop | skip (a NaN/Inf loss's update)
  config.layout = 'auto'  # auto | data | runs: over several devices, split the batch or the runs
  config.log_every = 100
  config.checkpoint_every = 500  # steps between checkpoints (0: only at the end)
  return config


def get_sweep():
  """Dataset x cell x last state: 8 runs, each a dict of config overrides."""
  return [{'dataset': dataset, 'cell': cell, 'last_state': last_state}
          for dataset in ('ag_news', 'sst2') for cell in ('elman', 'gru')
          for last_state in ('true', 'padded_end')]
