"""Training step with the chunked output layer + loss against the full logits, in one process.

  python bench/loss_chunk_ab.py [PRESET ROWS LENGTH] [--matmul-dtype bfloat16]
      [--positional rotary] [--chunks 0,256,512,1024]       # default: compact 128 16

Builds jitted training steps on the same random batch with each `train.loss_chunk` of
`--chunks` (0: all `[tokens, vocab]` logits at once; n: n tokens at a time, forward and
again backward), then times them alternately, 10 rounds of 3 steps each. The model is
the Multi30k recipe's by default (rotary positions, bfloat16 matmul operands, dropout
0.2, label smoothing 0.2). Prints each variant's median and minimum milliseconds per
step and every round, and the peak RSS of the process.
"""

import argparse

from common import alternate, peak_rss_mib, summary, training_steps


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("preset", nargs="?", default="compact")
  p.add_argument("rows", nargs="?", type=int, default=128)
  p.add_argument("length", nargs="?", type=int, default=16)
  p.add_argument("--matmul-dtype", default="bfloat16")
  p.add_argument("--positional", default="rotary")
  p.add_argument("--chunks", default="0,256,512,1024")
  args = p.parse_args()
  model = {"positional": args.positional, "matmul_dtype": args.matmul_dtype, "dropout": 0.2}
  variants = {f"loss_chunk={chunk}": training_steps(args.preset, args.rows, args.length,
                                                    model=model, loss_chunk=chunk,
                                                    label_smoothing=0.2)
              for chunk in map(int, args.chunks.split(","))}
  for name, s in alternate(variants).items():
    print(f"{args.preset} {args.rows}x{args.length} {args.matmul_dtype} {name}, per step: "
          f"{summary([x / 3 for x in s])}")
  print(f"peak RSS of the process (all variants): {peak_rss_mib()} MiB")


if __name__ == "__main__":
  main()
