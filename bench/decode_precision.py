"""Decoding with float32 against bfloat16 matmul operands: speed and batch independence.

  python bench/decode_precision.py --workdir RUN_DIR [--checkpoint averaged]

Decodes test_2016_flickr with the run's parameters under each operand dtype (products
float32 in both), greedy and beam 5, in batches of 64: a first pass compiles, then the
best of two timed passes gives sentences/s. Then translates its first 150 lines in
batches of 1 and of 8 and counts the lines that differ from the batches of 64. Last, the
probe that chooses the decoding dtype on a machine (`speed_probe.layer_product_seconds`
with use="decoding", as `seq2seq.numerics.resolve` runs it once per machine) is timed
here, to show whether its choice agrees with the decoding speed. Run it on an otherwise
idle machine; the last line is the JSON of all figures.
"""

import argparse
import dataclasses
import time

from seq2seq.data.input_pipeline import LengthBuckets
from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.translator import Translator
from seq2seq.numerics import speed_probe
from seq2seq.rundir import checkpoint
from seq2seq.runtime import enable_compilation_cache

from common import MULTI30K, cpu, report


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="best")
  p.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  p.add_argument("--dtypes", default="float32,bfloat16")
  args = p.parse_args()
  enable_compilation_cache()
  cfg = checkpoint.load_config(args.workdir)
  tok = checkpoint.load_tokenizer(args.workdir)
  params, _ = checkpoint.load_params(args.workdir, args.checkpoint, cfg.model)
  lines = read_lines(args.src)
  rows = []
  for dtype in args.dtypes.split(","):
    t = Translator(dataclasses.replace(cfg.model, matmul_dtype=dtype), params, tok,
                   cfg.decode, LengthBuckets.from_config(cfg.data, cfg.model.max_len))
    for beam in (1, 5):
      out = t.translate(lines, beam_size=beam, batch_size=64)  # compiles
      seconds = []
      for _ in range(2):
        start = time.perf_counter()
        out = t.translate(lines, beam_size=beam, batch_size=64)
        seconds.append(time.perf_counter() - start)
      sample = lines[:150]
      differ = {size: sum(a != b for a, b in zip(t.translate(sample, beam_size=beam,
                                                             batch_size=size), out))
                for size in (1, 8)}
      rows.append({"dtype": dtype, "beam": beam,
                   "sentences_per_s": round(len(lines) / min(seconds), 1),
                   "differ_batch_1": differ[1], "differ_batch_8": differ[8]})
      print(rows[-1], flush=True)
  probe = speed_probe.layer_product_seconds(use="decoding")
  report({"benchmark": "decode_precision", "cpu": cpu(), "workdir": args.workdir,
          "checkpoint": args.checkpoint, "rows": rows,
          "probe_ms": {d: round(s * 1e3, 3) for d, s in probe.items()},
          "probe_chooses": (speed_probe.faster_operand_dtype(probe)[0] if "bfloat16" in probe
                            else "float32")})


if __name__ == "__main__":
  main()
