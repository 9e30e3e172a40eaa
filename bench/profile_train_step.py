"""Where a training step's time goes: a `jax.profiler` trace summed per XLA op kind.

  python bench/profile_train_step.py [--preset small] [--rows 64] [--length 28] [--dropout 0.1]

Times the jitted train step on random ids (no padding), traces 5 steps, and sums each
op's duration over all threads (an op split across both cores counts twice). Prints the
op kinds that take the most time, and as a last JSON line the step's wall time, the
summed op time, and the matmul (YNNPACK/dot) share. A summed op time close to the wall
time means one core is idle on average.
"""

import argparse
import collections
import dataclasses
import glob
import re
import tempfile
import time

import jax
import numpy as np

from seq2seq.config import PRESETS, Config, DataConfig, TrainConfig
from seq2seq.input_pipeline import Batch
from seq2seq.model import Model
from seq2seq.train_lib import Steps

from common import machine, report

STEPS = 5


def op_times(trace_dir: str) -> collections.Counter:
  """Milliseconds per step of each op kind (name without its `.N` suffix), all threads."""
  data = jax.profiler.ProfileData.from_file(
      glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0])
  totals: collections.Counter = collections.Counter()
  for plane in data.planes:
    for line in plane.lines:
      if line.name == "python":
        continue
      for event in line.events:
        if "ThunkExecutor" in event.name or "Await" in event.name:
          continue  # wrappers around the ops, and waiting
        totals[re.sub(r"\.\d+$", "", event.name)] += event.duration_ns / 1e6 / STEPS
  return totals


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--preset", default="small")
  p.add_argument("--rows", type=int, default=64)
  p.add_argument("--length", type=int, default=28)
  p.add_argument("--dropout", type=float, default=0.1)
  args = p.parse_args()
  model_cfg = dataclasses.replace(PRESETS[args.preset], dropout=args.dropout)
  steps = Steps(Config(model=model_cfg, data=DataConfig(), train=TrainConfig()), Model(model_cfg))
  state = steps.init_state()
  rng = np.random.default_rng(0)
  ids = lambda: rng.integers(4, model_cfg.vocab_size, (args.rows, args.length)).astype(np.int32)
  batch = steps.put_batch(Batch(ids(), ids()))
  for _ in range(3):  # compile and warm up
    state, m = steps.train_step(state, batch)
  jax.block_until_ready(m)
  t = time.perf_counter()
  for _ in range(STEPS):
    state, m = steps.train_step(state, batch)
  jax.block_until_ready(m)
  wall_ms = (time.perf_counter() - t) / STEPS * 1000
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir)
    for _ in range(STEPS):
      state, m = steps.train_step(state, batch)
    jax.block_until_ready(m)
    jax.profiler.stop_trace()
    totals = op_times(trace_dir)
  for name, ms in totals.most_common(15):
    print(f"{ms:8.1f} ms/step  {name}")
  summed = sum(totals.values())
  matmul = sum(ms for name, ms in totals.items() if name.startswith(("ynn", "xnn", "dot")))
  report({"benchmark": "profile_train_step", "preset": args.preset, "rows": args.rows,
          "length": args.length, "dropout": args.dropout, "step_wall_ms": round(wall_ms),
          "summed_op_ms": round(summed), "matmul_op_ms": round(matmul),
          "other_op_ms": round(summed - matmul),
          "tgt_tokens_per_s": round(args.rows * args.length / wall_ms * 1000), **machine()})


if __name__ == "__main__":
  main()
