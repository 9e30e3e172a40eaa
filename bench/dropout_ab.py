"""Training step with this package's dropout against threefry dropout, in one process.

  python bench/dropout_ab.py [PRESET ROWS LENGTH]      # default: compact 128 16

Builds two jitted training steps on the same random batch: "before" (Haiku's threefry
`hk.dropout`, no fusion boundary on the residual stream) and "now" (`layers.dropout`'s
hashed masks and `layers.materialize` at every block), then times them alternately, 10
rounds of 3 steps each, so that the machine's drift hits both alike. Prints each
variant's median and minimum milliseconds per step and every round.
"""

import sys

import haiku as hk

from seq2seq import layers
from seq2seq import model as M

from common import alternate, summary, training_steps


def threefry_dropout(x, rate, is_training):
  if not is_training or rate == 0.0:
    return x
  return hk.dropout(hk.next_rng_key(), rate, x)


def main():
  preset, rows, length = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3])) if len(
      sys.argv) > 1 else ("compact", 128, 16)
  variants = {}
  no_boundary = lambda x, token: x
  for name, drop, boundary in [("before (threefry)", threefry_dropout, no_boundary),
                               ("now (hash + boundary)", layers.dropout, layers.materialize)]:
    # the modules' globals are read when the step is traced, inside training_steps
    layers.dropout = M.dropout = drop
    layers.materialize = boundary
    variants[name] = training_steps(preset, rows, length)
  for name, s in alternate(variants).items():
    print(f"{preset} {rows}x{length} {name}, per step: {summary([x / 3 for x in s])}")


if __name__ == "__main__":
  main()
