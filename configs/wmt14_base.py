"""Transformer base (Vaswani et al., 2017) on WMT14 en->de from the Hugging Face Hub.

For users with accelerators; its full run is not made on the 2-core CPU machine (it
would take months), but tests/test_recipes.py trains it (model shrunk) on a local slice
saved in the Hub's layout, so its fields and splits are proved.
The Hub's `wmt14` `de-en` config stores pairs as {"translation": {"de": ..., "en": ...}}.
"""

from seq2seq.config import default_config


def get_config():
  cfg = default_config("base")
  cfg.data.dir = ""
  cfg.data.hub = "wmt14"
  cfg.data.hub_config = "de-en"
  cfg.data.src_field = "translation.en"
  cfg.data.tgt_field = "translation.de"
  cfg.data.val_split = "validation"
  cfg.data.test_split = "test"
  cfg.model.vocab_size = 32000
  cfg.data.spm_max_sentences = 10_000_000
  cfg.data.max_tokens = 25_000  # the global batch (all devices), as Vaswani et al.
  cfg.model.dropout = 0.1
  cfg.train.learning_rate = 7e-4
  cfg.train.warmup_steps = 4000
  cfg.train.max_steps = 100_000
  cfg.train.eval_every = 5000
  cfg.train.eval_max_sentences = 1000
  cfg.train.checkpoint_every = 5000
  cfg.train.keep_checkpoints = 5
  cfg.train.average_last = 5  # the mean of the last 5 kept checkpoints
  cfg.decode.beam_size = 4
  cfg.decode.alpha = 0.6
  return cfg
