"""Decoding speed on test_2016_flickr with a trained run, greedy and beam.

  python bench/decode_speed.py --workdir RUN_DIR [--beam 5] [--batch-size 64]

Model load and compilation (a first pass over the same data) are timed separately;
the reported sentences/s and output tokens/s are of a second, steady-state pass. The
two passes must give identical translations, and so must batch size 1 on a sample.
"""

import argparse
import time

from seq2seq.input_pipeline import read_lines
from seq2seq.runtime import enable_compilation_cache
from seq2seq.translator import Translator

from common import MULTI30K, machine, report


def timed_pass(translator, lines, beam, batch_size):
  t = time.perf_counter()
  out = translator.translate(lines, beam_size=beam, batch_size=batch_size, nbest=1)
  return time.perf_counter() - t, out


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="best")
  p.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--batch-size", type=int, default=64)
  args = p.parse_args()
  enable_compilation_cache()
  t = time.perf_counter()
  translator = Translator.load(args.workdir, args.checkpoint)
  load_s = time.perf_counter() - t
  lines = read_lines(args.src)
  result = {"benchmark": "decode_speed", "sentences": len(lines), "load_s": round(load_s, 1),
            "batch_size": args.batch_size}
  for name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
    first_s, first = timed_pass(translator, lines, beam, args.batch_size)
    steady_s, out = timed_pass(translator, lines, beam, args.batch_size)
    assert [h[0].text for h in first] == [h[0].text for h in out]
    one = translator.translate(lines[:50], beam_size=beam, batch_size=1)
    tokens = sum(len(h[0].ids) + 1 for h in out)  # EOS included
    result[name] = {"sentences_per_s": round(len(lines) / steady_s, 1),
                    "output_tokens_per_s": round(tokens / steady_s),
                    "seconds": round(steady_s, 2),
                    "compile_and_first_pass_s": round(first_s, 1),
                    "batch_1_identical_on_50": one == [h[0].text for h in out[:50]]}
  report(dict(result, **machine()))


if __name__ == "__main__":
  main()
