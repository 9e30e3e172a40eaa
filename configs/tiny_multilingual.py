"""Smoke-test recipe of several directions: the tiny model on the bundled sample's English,
German and French (data/sample), four directions in one model.

  python train.py --config tiny_multilingual --workdir runs/tiny-ml
  python translate.py --workdir runs/tiny-ml --tgt-lang fr <<< "A dog is running in the park."

Used by the tests; trains in a few minutes on 2 CPU cores.
"""

from seq2seq import recipes


def get_config():
  cfg = recipes.load_config_module("tiny")[0].get_config()
  cfg.data.directions = "en-de,de-en,en-fr,fr-en"
  cfg.model.vocab_size = 448  # three languages' words, 256 byte pieces, 3 language tokens
  cfg.train.max_steps = 600
  cfg.train.eval_every = 300
  cfg.train.checkpoint_every = 300
  return cfg
