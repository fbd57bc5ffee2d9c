"""Text classifier: embedding -> Elman / GRU / LSTM -> last state -> linear.

One run (AG News, GRU, the state at each text's true last word):

  RNNJAX_DATA_DIR=../shared/data python -m launch.run \
      --config=experiments/configs/classify.py --workdir=results/classify/ag_news_gru \
      [--config.cell=elman --config.last_state=padded_end --config.dataset=sst2 ...]

The sweep (``get_sweep``: AG News and SST-2, Elman and GRU, true last state
and padded end, 3 seeds; 24 runs, each 40 to 95 s on 2 CPU cores), its tables in
``results/classify/results.md`` and ``results_over_seeds.md``:

  RNNJAX_DATA_DIR=../shared/data python -m launch.sweep \
      --config=experiments/configs/classify.py --workdir=results/classify

AG News is the 7,600-row test.csv split stratified into 6,000 train and
1,600 test rows (400 per class; chance 25%); SST-2 trains on train.tsv's
67,349 phrases and tests on dev.tsv's 872 sentences (majority class 50.9%).
Test accuracy with these defaults (true last state / padded end): AG News
GRU 85.9% / 86.2%, Elman 71.8% / 27.0%; SST-2 GRU 82.3% / 82.1%, Elman
79.6% / 49.1%.
"""

from experiments import classify


def get_config():
  # 1500 steps of 64: 16 epochs of AG News' 6,000 texts, 1.4 of SST-2's
  return classify.EXPERIMENT.config(steps=1500, optimizer='adam', learning_rate=2e-3,
                                    clipping='global_norm', checkpoint_every=500)


def get_sweep():
  """Dataset x cell x last state x 3 seeds: 24 runs, each a dict of config overrides."""
  return [{'dataset': dataset, 'cell': cell, 'last_state': last_state, 'seed': seed}
          for dataset in ('ag_news', 'sst2') for cell in ('elman', 'gru')
          for last_state in ('true', 'padded_end') for seed in range(3)]
