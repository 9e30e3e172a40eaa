"""Where a training step's time goes: a `jax.profiler` trace summed per XLA op kind.

  python bench/profile_train_step.py [--preset small] [--rows 64] [--length 28] [--dropout 0.1]
      [--positional rotary] [--matmul-dtype bfloat16] [--loss-chunk 512]

Times the jitted train step on random ids (no padding), traces 5 steps, and sums each
op's duration over all threads (an op split across both cores counts twice). Prints the
op kinds that take the most time, and as a last JSON line the step's wall time, the
summed op time, and the matmul (YNNPACK/dot) share. A summed op time close to the wall
time means one core is idle on average. It also walks the trace's timeline and prints how
much of a step had two or more ops running at once (both cores busy), one op (one core
idle), or none, and how much of the one-op time was matmuls: the time that keeps the
step from the matmul ceiling.
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
from matmul_ceiling import measure as matmul_gflops

from seq2seq.config import PRESETS, Config, DataConfig, TrainConfig
from seq2seq.data.input_pipeline import Batch
from seq2seq.model import flops
from seq2seq.model.transformer import Model
from seq2seq.training.train_step import DataParallelSteps as Steps

from common import add_results_flag, machine, report

STEPS = 5


def op_events(trace_dir: str) -> list[tuple[str, int, int, int]]:
  """Every XLA op of the trace as (kind, thread, start ns, end ns); the kind is the op's
  name without its `.N` suffix. Wrappers around the ops and waiting are left out."""
  data = jax.profiler.ProfileData.from_file(
      glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0])
  events = []
  for plane in data.planes:
    for thread, line in enumerate(plane.lines):
      if line.name == "python":
        continue
      for event in line.events:
        if "ThunkExecutor" in event.name or "Await" in event.name:
          continue
        start = int(event.start_ns)
        events.append((re.sub(r"\.\d+$", "", event.name), (id(plane), thread), start,
                       start + int(event.duration_ns)))
  return events


def op_times(events) -> collections.Counter:
  """Milliseconds per step of each op kind, summed over all threads."""
  totals: collections.Counter = collections.Counter()
  for kind, _, start, end in events:
    totals[kind] += (end - start) / 1e6 / STEPS
  return totals


def is_matmul(kind: str) -> bool:
  return kind.startswith(("ynn", "xnn", "dot"))


def concurrency(events) -> dict:
  """Milliseconds per step, from the first op to the last, during which 0, 1 or 2+ ops
  ran at once (on any threads), and of the one-op time how much was matmuls."""
  edges = sorted([(start, 1, kind) for kind, _, start, _ in events] +
                 [(end, -1, kind) for kind, _, _, end in events], key=lambda e: (e[0], e[1]))
  running: collections.Counter = collections.Counter()
  spans = {"idle_ms": 0.0, "one_op_ms": 0.0, "one_op_matmul_ms": 0.0, "two_plus_ms": 0.0}
  last = edges[0][0]
  for t, delta, kind in edges:
    span = (t - last) / 1e6 / STEPS
    n = sum(running.values())
    if n == 0:
      spans["idle_ms"] += span
    elif n == 1:
      spans["one_op_ms"] += span
      spans["one_op_matmul_ms"] += span if is_matmul(next(iter(+running))) else 0.0
    else:
      spans["two_plus_ms"] += span
    running[kind] += delta
    last = t
  return {k: round(v, 1) for k, v in spans.items()}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--preset", default="small")
  p.add_argument("--rows", type=int, default=64)
  p.add_argument("--length", type=int, default=28)
  p.add_argument("--dropout", type=float, default=0.1)
  p.add_argument("--positional", default=None, help="sinusoidal or rotary (default: the preset's)")
  p.add_argument("--matmul-dtype", default=None,
                 help="float32 or bfloat16 matmul operands (default: the preset's)")
  p.add_argument("--loss-chunk", type=int, default=0,
                 help="train.loss_chunk: the output layer and loss this many tokens at a time")
  add_results_flag(p)
  args = p.parse_args()
  overrides = {"dropout": args.dropout}
  if args.positional:
    overrides["positional"] = args.positional
  if args.matmul_dtype:
    overrides["matmul_dtype"] = args.matmul_dtype
  model_cfg = dataclasses.replace(PRESETS[args.preset], **overrides)
  steps = Steps(Config(model=model_cfg, data=DataConfig(), train=TrainConfig(loss_chunk=args.loss_chunk)),
                Model(model_cfg))
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
    events = op_events(trace_dir)
  totals = op_times(events)
  spans = concurrency(events)
  for name, ms in totals.most_common(15):
    print(f"{ms:8.1f} ms/step  {name}")
  summed = sum(totals.values())
  matmul = sum(ms for name, ms in totals.items() if is_matmul(name))
  # Useful FLOPs of the step (every token real) at the rate of the step, of its matmuls
  # alone (as if nothing else took time), and of the ceiling measured now.
  gflop = flops.train_flops(model_cfg, args.length, args.length) * args.rows / 1e9
  ceiling = matmul_gflops(2048, jax.numpy.float32, 20)
  rates = {"step_gflops": round(gflop / wall_ms * 1000, 1),
           "matmul_only_gflops": round(gflop / matmul * 1000, 1),
           "matmul_ceiling_gflops": round(ceiling, 1)}
  print(f"{gflop:.1f} GFLOP per step: {rates['step_gflops']} GFLOP/s over the step "
        f"({rates['step_gflops'] / ceiling:.1%} of the {ceiling:.0f} GFLOP/s ceiling), "
        f"{rates['matmul_only_gflops']} GFLOP/s over its matmuls' time alone "
        f"({rates['matmul_only_gflops'] / ceiling:.1%})")
  print(f"per step: {spans['two_plus_ms']} ms with two or more ops running at once, "
        f"{spans['one_op_ms']} ms with one (of it {spans['one_op_matmul_ms']} ms a matmul), "
        f"{spans['idle_ms']} ms with none")
  report(args.results, {"benchmark": "profile_train_step", "preset": args.preset, "rows": args.rows,
          "length": args.length, "dropout": args.dropout, "loss_chunk": args.loss_chunk,
          "positional": model_cfg.positional, "matmul_dtype": model_cfg.matmul_dtype,
          "step_wall_ms": round(wall_ms),
          "summed_op_ms": round(summed), "matmul_op_ms": round(matmul),
          "other_op_ms": round(summed - matmul), **spans, **rates,
          "tgt_tokens_per_s": round(args.rows * args.length / wall_ms * 1000), **machine()})


if __name__ == "__main__":
  main()
