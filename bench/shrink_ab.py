"""Shrinking decoding batches (decode.min_rows) against whole ones, in one process.

  python bench/shrink_ab.py --workdir RUN_DIR [--checkpoint averaged] [--beam 5] \
      [--min-rows 0,8] [--batch-size 64] [--rounds 2]

Encodes test_2016_flickr once, translates it with each `min_rows` in turn (the first
pass of each compiles), checks that every variant gives the first one's best ids, then
times the variants alternately, `--rounds` passes each, and prints sentences/s per pass.
"""

import argparse
import dataclasses
import time

import numpy as np

from seq2seq.runtime import enable_compilation_cache
from seq2seq.textfiles import read_lines
from seq2seq.translator import Translator

from common import MULTI30K


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--min-rows", default="0,8", help="comma-separated values to compare")
  p.add_argument("--batch-size", type=int, default=64)
  p.add_argument("--rounds", type=int, default=2)
  args = p.parse_args()
  enable_compilation_cache()
  translator = Translator.load(args.workdir, args.checkpoint)
  ids = translator.encode(read_lines(args.src))
  variants = [int(v) for v in args.min_rows.split(",")]

  def run(min_rows):
    translator.decode_cfg = dataclasses.replace(translator.decode_cfg, min_rows=min_rows)
    t = time.perf_counter()
    out = translator.translate_ids(ids, beam_size=args.beam, batch_size=args.batch_size)
    return time.perf_counter() - t, out

  outputs = {}
  for v in variants:
    seconds, outputs[v] = run(v)
    print(f"min_rows={v}: compile + first pass {seconds:.1f} s", flush=True)
  first = outputs[variants[0]]
  for v in variants[1:]:
    same = sum(np.array_equal(a[0][0], b[0][0]) for a, b in zip(first, outputs[v]))
    diff = max(abs(a[0][1] - b[0][1]) for a, b in zip(first, outputs[v]))
    print(f"min_rows={v}: {same}/{len(first)} best ids identical to min_rows={variants[0]}'s, "
          f"largest score difference {diff:.1e}", flush=True)
  for r in range(args.rounds):
    for v in variants:
      seconds, _ = run(v)
      print(f"round {r} beam {args.beam} batch {args.batch_size} min_rows={v}: "
            f"{len(ids) / seconds:.1f} sentences/s", flush=True)


if __name__ == "__main__":
  main()
