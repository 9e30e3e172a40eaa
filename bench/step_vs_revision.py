"""The recipe's training step at a git revision against the working tree, in one process.

  python bench/step_vs_revision.py REV [ROWS LENGTH] [--preset compact]   # default 128 16
  python bench/step_vs_revision.py REV 43 48 --matmul-dtype float32   # as on AVX2-only CPUs

Extracts `seq2seq/` at REV (`git archive`) into a temporary folder as the package
`seq2seq_at_rev`, builds the jitted training step of both packages on the same random
batch with the Multi30k recipe's model and training settings (rotary positions, bfloat16
matmul operands unless `--matmul-dtype float32`, dropout 0.2, label smoothing 0.2, the
loss 512 tokens at a time), then times them alternately, --rounds (10) rounds of 3 steps each, so
that the machine's drift hits both alike. Prints each one's median and minimum
milliseconds per step, every round, and the ratio of the medians.
"""

import argparse
import io
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from common import add_results_flag, alternate, machine, report, summary, training_steps

ROOT = Path(__file__).resolve().parents[1]
RENAMED = "seq2seq_at_rev"


def extract(rev: str, into: Path) -> None:
  """`seq2seq/` at `rev` as the package `RENAMED` under `into`, its imports renamed."""
  archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "seq2seq"], check=True,
                           capture_output=True).stdout
  with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
    tar.extractall(into, filter="data")
  (into / "seq2seq").rename(into / RENAMED)
  for f in (into / RENAMED).rglob("*.py"):
    f.write_text(re.sub(r"\b(from|import) seq2seq\b", rf"\1 {RENAMED}", f.read_text()))


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("rev")
  p.add_argument("rows", nargs="?", type=int, default=128)
  p.add_argument("length", nargs="?", type=int, default=16)
  p.add_argument("--preset", default="compact")
  p.add_argument("--matmul-dtype", default="bfloat16", choices=("bfloat16", "float32"),
                 help="the operand dtype (float32: what `auto` trains with on AVX2-only CPUs)")
  p.add_argument("--rounds", type=int, default=10, help="alternations of 3 steps each")
  add_results_flag(p)
  args = p.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    extract(args.rev, Path(tmp))
    sys.path.insert(0, tmp)
    model = {"positional": "rotary", "matmul_dtype": args.matmul_dtype, "dropout": 0.2}
    build = lambda package: training_steps(args.preset, args.rows, args.length, model=model,
                                           package=package, loss_chunk=512,
                                           label_smoothing=0.2)
    variants = {args.rev: build(RENAMED), "working tree": build("seq2seq")}
    seconds = alternate(variants, args.rounds)
  for name, s in seconds.items():
    print(f"{args.preset} {args.rows}x{args.length} {args.matmul_dtype} {name}, per step: "
          f"{summary([x / 3 for x in s])}")
  before, now = (statistics.median(s) for s in seconds.values())
  print(f"{args.rev} / working tree: {before / now:.3f}")
  report(args.results, {"benchmark": "step_vs_revision", "rev": args.rev, "preset": args.preset,
                        "rows": args.rows, "length": args.length,
                        "matmul_dtype": args.matmul_dtype,
                        "ms_per_step": {name: round(1000 * statistics.median(s) / 3, 2)
                                        for name, s in seconds.items()},
                        "rev_over_working_tree": round(before / now, 3), **machine()})


if __name__ == "__main__":
  main()
