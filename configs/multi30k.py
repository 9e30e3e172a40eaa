"""Multi30k English->German in one hour of training on 2 CPU cores.

  python train.py --config multi30k --workdir runs/m30k
  python evaluate.py --workdir runs/m30k --split test_2016_flickr --checkpoint averaged --lowercase-tokenized

Reaches val ~43 and test_2016_flickr ~41.0 sacreBLEU / ~41.2 lowercased-tokenized on
CPUs with AMX or AVX-512 BF16 (the README's results table, per CPU). Why each setting,
and every alternative tried: docs/recipe.md.
"""

from seq2seq import recipes
from seq2seq.config import MULTI30K_BUCKETS, default_config


def get_config(folder: str | None = None):
  """`--config multi30k[:FOLDER]`: Multi30k from FOLDER, else from recipes.multi30k_dir()
  ($SEQ2SEQ_MULTI30K, or ../shared/data/multi30k beside this checkout), else from the
  Hugging Face Hub (bentrevett/multi30k, which needs network access on first use)."""
  cfg = default_config("compact")
  local = recipes.multi30k_dir(folder)
  if local is not None:
    cfg.data.dir = str(local)  # val.{en,de}.gz, test_2016_flickr.{en,de}.gz, ...
  else:
    cfg.data.hub = recipes.MULTI30K_HUB
  # The Hub calls the splits validation and test; the recipe keeps the release's names.
  cfg.data.hub_splits = "val=validation,test_2016_flickr=test"
  cfg.data.test_split = "test_2016_flickr"
  # Several pairs to a row of 48 pieces (segment masks, positions per sentence): one
  # compiled update shape instead of one per length bucket, so the first minutes from an
  # empty cache train near full speed, and each batch mixes sentence lengths (11 of the
  # 28,995 pairs, longer than 48 pieces, are left out). docs/recipe.md has the runs.
  cfg.data.pack_length = 48
  cfg.data.bucket_boundaries = MULTI30K_BUCKETS  # validation's loss batches
  cfg.model.positional = "rotary"  # RoPE in self-attention: more learned per update
  # bfloat16 operands (float32 products) where the CPU multiplies them faster, else float32
  cfg.model.matmul_dtype = "auto"
  cfg.model.dropout = 0.2
  cfg.train.dropout_ramp_steps = 3000  # dropout rises from 0 to 0.2 over these updates
  cfg.train.label_smoothing = 0.2
  cfg.data.sampling_alpha = 0.5  # subword regularization: each epoch segmented anew
  cfg.data.max_tokens = 2048  # padded tokens per side per batch
  cfg.train.loss_chunk = 512  # output layer + loss 512 tokens at a time: the same loss, faster
  cfg.train.learning_rate = 4e-3  # peak of the inverse-square-root schedule
  cfg.train.warmup_steps = 800
  cfg.train.max_steps = 100_000  # never reached: the hour ends the run
  cfg.train.max_minutes = 60.0
  cfg.train.log_every = 50
  cfg.train.eval_every = 400  # greedy val BLEU, for the log and the best checkpoint
  cfg.train.checkpoint_every = 100
  cfg.train.keep_checkpoints = 10
  cfg.train.average_last = 10  # checkpoints/averaged: the mean of the last 10
  cfg.decode.beam_size = 5
  cfg.decode.alpha = 1.3  # length penalty, tuned on val
  return cfg
