"""The recipe's update with each batch in parts (`train.batch_parts`) against the whole
batch, on real Multi30k batches, in one process.

  python bench/batch_parts_ab.py [--parts 1,2] [--batches 40] [--rounds 8]

Builds the Multi30k recipe's model and training settings (configs/multi30k.py: rotary
positions, bfloat16 matmul operands, dropout 0.2, label smoothing 0.2, the loss 512
tokens at a time, 2,048-token batches) once per `--parts` value, compiles every batch
shape for each (timed, without the disk cache), then runs the same `--batches`
length-bucketed batches of epoch 0 through each variant in turn, `--rounds` times.
Prints each variant's compile seconds and its median and maximum target tokens/s over
the rounds, and every round.
"""

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import jax
import numpy as np

from seq2seq import input_pipeline, tokenizer
from seq2seq.config import Config
from seq2seq.model import Model
from seq2seq.train_lib import Steps
from seq2seq.vocab import PAD_ID

from common import MULTI30K, alternate, machine, report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "configs"))
import multi30k  # noqa: E402 (the recipe's config module)


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--parts", default="1,2")
  p.add_argument("--batches", type=int, default=40)
  p.add_argument("--rounds", type=int, default=8)
  p.add_argument("--data", default=str(MULTI30K))
  args = p.parse_args()
  recipe = Config.from_dict(multi30k.get_config(args.data))
  data_cfg = recipe.data
  ds = input_pipeline.load_split(data_cfg, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), recipe.model.vocab_size)
  corpus = input_pipeline.encode_dataset(tok, ds)

  variants, compile_s, tokens = {}, {}, 0
  for parts in map(int, args.parts.split(",")):
    cfg = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, batch_parts=parts))
    steps = Steps(cfg, Model(cfg.model))
    batches = input_pipeline.TrainBatches(corpus, data_cfg, steps.num_devices)
    host = [batches.make_batch(i) for i in batches.epoch_batches(0)[:args.batches]]
    tokens = sum(int((b.tgt != PAD_ID).sum()) for b in host)
    box = {"state": steps.init_state()}
    compile_s[parts] = steps.compile_ahead(box["state"], batches.templates())

    def run(steps=steps, box=box, host=host):
      for b in host:
        box["state"], m = steps.update(box["state"], [b])
      jax.block_until_ready(m)

    run()  # warm up
    variants[parts] = run

  seconds = alternate(variants, args.rounds)
  result = {"benchmark": "batch_parts_ab", "batches": args.batches, "tgt_tokens": tokens}
  for parts, s in seconds.items():
    rate = [tokens / x for x in s]
    print(f"batch_parts={parts}: compile {compile_s[parts]:.1f} s; target tokens/s median "
          f"{statistics.median(rate):.0f}, max {max(rate):.0f}, rounds {[round(r) for r in rate]}")
    result[f"parts{parts}"] = {"compile_s": round(compile_s[parts], 1),
                               "median_tgt_tokens_per_s": round(statistics.median(rate)),
                               "rounds": [round(r) for r in rate]}
  if len(seconds) == 2:
    (a, sa), (b, sb) = seconds.items()
    wins = sum(x < y for x, y in zip(sb, sa))
    print(f"batch_parts={b} faster than {a} in {wins} of {len(sa)} rounds; median ratio "
          f"{statistics.median(np.array(sa) / np.array(sb)):.3f}")
  report({**result, **machine()})


if __name__ == "__main__":
  main()
