"""Training step with this package's dropout against threefry dropout, in one process.

  python bench/dropout_ab.py [PRESET ROWS LENGTH]      # default: compact 128 16

Builds two jitted training steps on the same random batch: "before" (Haiku's threefry
`hk.dropout`, no fusion boundary on the residual stream) and "now" (`layers.dropout`'s
hashed masks and `layers.materialize` at every block), then times them alternately, 10
rounds of 3 steps each, so that the machine's drift hits both alike. Prints each
variant's median and minimum milliseconds per step and every round.
"""

import statistics
import sys
import time

import haiku as hk
import jax
import numpy as np

from seq2seq import layers
from seq2seq import model as M
from seq2seq.config import PRESETS, Config, DataConfig, TrainConfig
from seq2seq.input_pipeline import Batch
from seq2seq.model import Model
from seq2seq.train_lib import Steps


def threefry_dropout(x, rate, is_training):
  if not is_training or rate == 0.0:
    return x
  return hk.dropout(hk.next_rng_key(), rate, x)


def main():
  preset, rows, length = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3])) if len(
      sys.argv) > 1 else ("compact", 128, 16)
  cfg = PRESETS[preset]
  rng = np.random.default_rng(0)
  ids = lambda: rng.integers(4, cfg.vocab_size, (rows, length)).astype(np.int32)
  host_batch = Batch(ids(), ids())
  variants = {}
  no_boundary = lambda x, token: x
  for name, drop, boundary in [("before (threefry)", threefry_dropout, no_boundary),
                               ("now (hash + boundary)", layers.dropout, layers.materialize)]:
    # the modules' globals are read when the step is traced, at its first call below
    layers.dropout = M.dropout = drop
    layers.materialize = boundary
    steps = Steps(Config(model=cfg, data=DataConfig(), train=TrainConfig()), Model(cfg))
    state, batch = steps.init_state(), steps.put_batch(host_batch)
    for _ in range(3):  # compile and warm up
      state, m = steps.train_step(state, batch)
    jax.block_until_ready(m)
    variants[name] = {"steps": steps, "state": state, "batch": batch, "ms": []}
  for _ in range(10):
    for v in variants.values():
      t = time.perf_counter()
      for _ in range(3):
        v["state"], m = v["steps"].train_step(v["state"], v["batch"])
      jax.block_until_ready(m)
      v["ms"].append((time.perf_counter() - t) / 3 * 1000)
  for name, v in variants.items():
    print(f"{preset} {rows}x{length} {name}: median {statistics.median(v['ms']):.0f} ms/step, "
          f"min {min(v['ms']):.0f}, rounds {[round(x) for x in v['ms']]}")


if __name__ == "__main__":
  main()
