"""A lone sentence's decoding speed under each bfloat16 row padding of `ops.matmul`.

  python bench/lone_sentence.py --workdir RUN [--checkpoint averaged] [--rows 2:1,8:8] \
      [--sentences 200] [--rounds 3]

`--rows LEAST:MULTIPLE,...`: each variant pads a bfloat16 product to at least LEAST rows
and a whole multiple of MULTIPLE (`ops.MATMUL_ROWS`, `ops.MATMUL_ROW_MULTIPLE`; 2:1 pads
a lone row to 2, as before the AMX fix; 8:8 is the current rule). Each variant runs in
its own process (the compiled searches depend on it), in alternation over `--rounds`;
each translates the first `--sentences` test_2016_flickr sentences one at a time, greedy
and beam 5, once to compile and once timed. Prints sentences/s per variant and round,
and whether each variant's translations equal those of a batch of 64. Only meaningful
where decoding runs with bfloat16 operands (the run trained with them, and the probe
choosing them: AMX or AVX-512 BF16).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

from common import MULTI30K, add_results_flag, machine, report


def measure(args) -> dict:
  from seq2seq.data.textfiles import read_lines
  from seq2seq.decoding.translator import Translator
  from seq2seq.numerics import ops
  least, multiple = (int(x) for x in args.measure.split(":"))
  ops.MATMUL_ROWS["bfloat16"], ops.MATMUL_ROW_MULTIPLE["bfloat16"] = least, multiple
  t = Translator.load(args.workdir, args.checkpoint)
  lines = read_lines(MULTI30K / "test_2016_flickr.en.gz")[:args.sentences]
  out = {"operand_dtype": t.model.numerics.operand_dtype}
  for name, beam in (("greedy", 1), ("beam5", 5)):
    together = t.translate(lines, beam_size=beam, batch_size=64, split_sentences=False)
    alone = [t.translate(line, beam_size=beam, batch_size=1, split_sentences=False)
             for line in lines]  # compiles each shape
    start = time.perf_counter()
    for line in lines:
      t.translate(line, beam_size=beam, batch_size=1, split_sentences=False)
    out[name] = {"sentences_per_s": round(len(lines) / (time.perf_counter() - start), 1),
                 "alone_equals_batch_of_64": alone == together}
  return out


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--rows", default="2:1,8:8")
  p.add_argument("--sentences", type=int, default=200)
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # one variant, here
  add_results_flag(p)
  args = p.parse_args()
  if args.measure:
    print(json.dumps(measure(args)))
    return
  runs = {v: [] for v in args.rows.split(",")}
  for _ in range(args.rounds):
    for variant in runs:
      cmd = [sys.executable, __file__, "--workdir", args.workdir, "--checkpoint",
             args.checkpoint, "--sentences", str(args.sentences), "--measure", variant]
      done = subprocess.run(cmd, capture_output=True, text=True, check=True)
      runs[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
  result = {"benchmark": "lone_sentence", "sentences": args.sentences, "rounds": args.rounds,
            "checkpoint": args.checkpoint, **machine()}
  for variant, found in runs.items():
    result[variant] = {"operand_dtype": found[0]["operand_dtype"]}
    for name in ("greedy", "beam5"):
      speeds = [f[name]["sentences_per_s"] for f in found]
      result[variant][name] = {"median_sentences_per_s": statistics.median(speeds),
                               "each_round": speeds,
                               "alone_equals_batch_of_64": all(
                                   f[name]["alone_equals_batch_of_64"] for f in found)}
  report(args.results, result)


if __name__ == "__main__":
  main()
