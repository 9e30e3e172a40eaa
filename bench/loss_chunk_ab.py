"""Training step with the chunked output layer + loss against the full logits, in one process.

  python bench/loss_chunk_ab.py [PRESET ROWS LENGTH]      # default: compact 128 16

Builds jitted training steps on the same random batch with `train.loss_chunk` 0 (all
`[tokens, vocab]` logits at once, the package before the chunked loss), 256 and 512
(the default), then times them alternately, 10 rounds of 3 steps each. Prints each
variant's median and minimum milliseconds per step and every round.
"""

import sys

from common import alternate, peak_rss_mib, summary, training_steps


def main():
  preset, rows, length = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3])) if len(
      sys.argv) > 1 else ("compact", 128, 16)
  variants = {f"loss_chunk={chunk}": training_steps(preset, rows, length, loss_chunk=chunk)
              for chunk in (0, 256, 512)}
  for name, s in alternate(variants).items():
    print(f"{preset} {rows}x{length} {name}, per step: {summary([x / 3 for x in s])}")
  print(f"peak RSS of the process (all variants): {peak_rss_mib()} MiB")


if __name__ == "__main__":
  main()
