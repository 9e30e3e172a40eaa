"""Where decoding's time goes: XLA:CPU's operations of a whole pass, traced and summed.

  python bench/profile_decode.py --workdir RUN_DIR [--checkpoint averaged] [--beam 5] \
      [--lines 1000] [--top 25] [--matmul-dtype float32|bfloat16]

Translates the first `--lines` lines of test_2016_flickr once to compile, then once more
under `jax.profiler`, and sums the time of every XLA operation the CPU threads ran
(thread time: with 2 decoding workers, two threads' worth per second). Prints the share of
each kind of operation (the fusion's kind, e.g. `ynn_fusion` for the library kernels that
run matmuls and reductions, `dot` for the batched attention products), then the `--top`
operations with the JAX source operation each came from (from XLA's optimized program,
dumped to a temporary folder). `--matmul-dtype` decodes with those operands instead of the
ones the machine's probe chooses. The last line is the JSON of both lists.
"""

import argparse
import collections
import dataclasses
import glob
import os
import re
import tempfile

DUMP = tempfile.mkdtemp()
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + f" --xla_dump_to={DUMP} --xla_dump_hlo_pass_re=NONE")

import jax  # noqa: E402 (XLA_FLAGS is read when JAX starts)

from seq2seq.data.textfiles import read_lines  # noqa: E402
from seq2seq.decoding.translator import Translator  # noqa: E402

from common import MULTI30K, add_results_flag, machine, report  # noqa: E402

SKIP = ("ThunkExecutor", "while", "Slinky", "end:", "conditional")


def op_sources() -> dict[str, str]:
  """Operation name -> the JAX operation it came from, over every optimized program."""
  sources = {}
  for path in glob.glob(os.path.join(DUMP, "*after_optimizations.txt")):
    with open(path) as f:
      for m in re.finditer(r"%(\S+) = .*?op_name=\"([^\"]*)\"", f.read()):
        sources.setdefault(m.group(1), m.group(2))
  return sources


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--lines", type=int, default=1000)
  p.add_argument("--top", type=int, default=25)
  p.add_argument("--matmul-dtype", choices=("float32", "bfloat16"))
  add_results_flag(p)
  args = p.parse_args()
  translator = Translator.load(args.workdir, args.checkpoint)
  if args.matmul_dtype:
    translator = Translator(dataclasses.replace(translator.model_cfg,
                                                matmul_dtype=args.matmul_dtype),
                            translator.params, translator.tokenizer, translator.decode_cfg,
                            translator.buckets)
  lines = read_lines(MULTI30K / "test_2016_flickr.en.gz")[:args.lines]
  translator.translate(lines, beam_size=args.beam, batch_size=64)  # compiles
  trace = tempfile.mkdtemp()
  jax.profiler.start_trace(trace)
  translator.translate(lines, beam_size=args.beam, batch_size=64)
  jax.profiler.stop_trace()
  data = jax.profiler.ProfileData.from_file(
      glob.glob(os.path.join(trace, "**", "*.xplane.pb"), recursive=True)[-1])
  by_op, calls = collections.Counter(), collections.Counter()
  for plane in data.planes:
    for line in plane.lines:
      if "XLAEigen" not in line.name:  # XLA:CPU's worker threads
        continue
      for event in line.events:
        if not event.name.startswith(SKIP):
          by_op[event.name] += event.duration_ns
          calls[event.name] += 1
  total = sum(by_op.values())
  by_kind = collections.Counter()
  for name, ns in by_op.items():
    by_kind[re.sub(r"\.\d+$", "", name)] += ns
  print(f"{total / 1e9:.2f} s of thread time in XLA operations, beam {args.beam}, "
        f"{len(lines)} lines")
  for kind, ns in by_kind.most_common(12):
    print(f"{100 * ns / total:5.1f} %  {kind}")
  sources = op_sources()
  top = []
  for name, ns in by_op.most_common(args.top):
    source = sources.get(name, "")[-80:]
    top.append({"op": name, "share": round(ns / total, 4), "calls": calls[name],
                "us_per_call": round(ns / calls[name] / 1e3, 1), "source": source})
    print(f"{100 * ns / total:5.1f} %  {calls[name]:6d} x {ns / calls[name] / 1e3:7.1f} us  "
          f"{name:36s} {source}")
  report(args.results, {"benchmark": "profile_decode", "beam": args.beam, "lines": len(lines),
          "matmul_dtype": translator.model_cfg.matmul_dtype,
          "thread_seconds": round(total / 1e9, 2),
          "by_kind": {k: round(ns / total, 4) for k, ns in by_kind.most_common(12)},
          "top": top, **machine()})


if __name__ == "__main__":
  main()
