"""Smoke-test recipe: the tiny model on the bundled sample corpus (data/sample).

Trains in about a minute on 2 CPU cores; used by `make demo` and the tests, and by
`seq2seq-train --config tiny` from an installed wheel (which ships the sample).
"""

from seq2seq import recipes
from seq2seq.config import default_config


def get_config():
  cfg = default_config("tiny")
  cfg.data.dir = str(recipes.sample_dir())
  cfg.data.test_split = "test"
  cfg.model.vocab_size = 400  # the sample has ~150 word types
  cfg.model.dropout = 0.1
  cfg.data.max_tokens = 1024
  # Sample sentences are short: two padded shapes keep compilation (~10 s each) short.
  cfg.data.bucket_boundaries = (24, 48)
  cfg.data.max_train_len = 48
  cfg.train.learning_rate = 3e-3
  cfg.train.warmup_steps = 100
  cfg.train.max_steps = 400
  cfg.train.log_every = 50
  cfg.train.eval_every = 200
  cfg.train.checkpoint_every = 200
  cfg.decode.batch_size = 32
  return cfg
