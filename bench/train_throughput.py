"""Training throughput on real Multi30k batches, after compilation.

  python bench/train_throughput.py [--preset small] [--seconds 60] [--max-tokens 4096]
      [--positional rotary] [--d-ff 1024] [--compile-workers N]

Prints real target tokens/s, source+target tokens/s, useful model GFLOP/s (counted from
the architecture over non-pad tokens), the jitted float32 matmul ceiling measured in the
same run (after training, so both see the same machine) and the fraction of it, the
padding fraction, compile time (measured separately: every bucket shape is compiled
first, `--compile-workers` at a time, as the trainer does) and the process's peak resident
memory.
"""

import argparse
import dataclasses
import os
import time

import jax
import numpy as np
from matmul_ceiling import measure as matmul_gflops

from seq2seq.config import PRESETS, Config, DataConfig, TrainConfig
from seq2seq.data import corpus, data_source, input_pipeline, tokenizer
from seq2seq.model import flops
from seq2seq.model.transformer import Model
from seq2seq.runtime import enable_compilation_cache
from seq2seq.training.compiling import compile_ahead
from seq2seq.training.train_step import DataParallelSteps as Steps
from seq2seq.vocab import PAD_ID

from common import MULTI30K, add_results_flag, machine, peak_rss_mib, report


def pair_lengths(b):
  """Source and target lengths of every pair in the batch (packed rows hold several)."""
  if b.src_segments is None:
    return (b.src != PAD_ID).sum(1), (b.tgt != PAD_ID).sum(1)
  # One bin per (row, segment): ids run 1..row length, padding (0) is left out.
  count = lambda seg: np.bincount((seg + np.arange(len(seg))[:, None] * seg.shape[1])[seg > 0])
  s, t = count(b.src_segments), count(b.tgt_segments)
  return s[s > 0], t[t > 0]


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--preset", default="small")
  p.add_argument("--seconds", type=float, default=60)
  p.add_argument("--max-tokens", type=int, default=4096)
  p.add_argument("--pack-length", type=int, default=0,
                 help="pack pairs into rows of this many pieces (0: length buckets)")
  p.add_argument("--data", default=str(MULTI30K))
  p.add_argument("--ceiling", type=float, default=None,
                 help="matmul GFLOP/s of this machine (default: measured in this run, "
                 "bench/matmul_ceiling.py's float32 figure)")
  p.add_argument("--dtype", default="float32")
  p.add_argument("--matmul-dtype", default="float32",
                 help="model.matmul_dtype: the dtype of every matmul's operands")
  p.add_argument("--positional", default=None,
                 help="model.positional instead of the preset's (sinusoidal, learned, rotary)")
  p.add_argument("--d-ff", type=int, default=None, help="model.d_ff instead of the preset's")
  p.add_argument("--vocab-size", type=int, default=None,
                 help="model.vocab_size instead of the preset's (a small corpus needs fewer)")
  p.add_argument("--compile-workers", type=int, default=os.cpu_count(),
                 help="shapes compiled at a time before the timed loop (default: one per "
                 "core); set SEQ2SEQ_XLA_CACHE= to time compilation without the disk cache")
  add_results_flag(p)
  args = p.parse_args()
  enable_compilation_cache()

  model_cfg = dataclasses.replace(PRESETS[args.preset], dtype=args.dtype,
                                  matmul_dtype=args.matmul_dtype)
  if args.positional:
    model_cfg = dataclasses.replace(model_cfg, positional=args.positional)
  model_cfg = dataclasses.replace(model_cfg, d_ff=args.d_ff or model_cfg.d_ff,
                                  vocab_size=args.vocab_size or model_cfg.vocab_size)
  data_cfg = DataConfig(dir=args.data,
                        max_tokens=args.max_tokens, pack_length=args.pack_length)
  cfg = Config(model=model_cfg, data=data_cfg, train=TrainConfig(warmup_steps=4000))
  ds = data_source.load_split(data_cfg, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), model_cfg.vocab_size)
  encoded = corpus.encode_dataset(tok, ds)
  steps = Steps(cfg, Model(model_cfg))
  batches = input_pipeline.TrainBatches(encoded, data_cfg, steps.num_devices)
  order = batches.epoch_batches(0)
  host_batches = [batches.make_batch(i) for i in order]
  state = steps.init_state()

  # Compile every shape first, as the trainer does, so the timed loop measures
  # steady-state training.
  templates = batches.templates()
  compile_s = compile_ahead(steps.lower_updates(state, templates), workers=args.compile_workers)

  stream = input_pipeline.prefetch(iter(host_batches * 100))
  tgt_tokens = src_tokens = padded = 0
  useful = 0.0
  n = 0
  t0 = time.time()
  while time.time() - t0 < args.seconds:
    b = next(stream)
    state, m = steps.update(state, [b])  # the trainer's call: what compile_ahead compiled
    s_len, t_len = pair_lengths(b)
    src_tokens += int(s_len.sum())
    tgt_tokens += int(t_len.sum())
    padded += b.src.size + b.tgt.size
    useful += sum(flops.train_flops(model_cfg, int(s), int(t)) for s, t in zip(s_len, t_len))
    n += 1
  jax.block_until_ready(m)
  dt = time.time() - t0
  gflops = useful / dt / 1e9
  ceiling = args.ceiling or matmul_gflops(2048, jax.numpy.float32, 20)
  report(args.results, {
      "benchmark": "train_throughput", "preset": args.preset, "dtype": args.dtype,
      "matmul_dtype": args.matmul_dtype,
      "max_tokens": args.max_tokens, "pack_length": args.pack_length, "steps": n, "seconds": round(dt, 1),
      "tgt_tokens_per_s": round(tgt_tokens / dt), "src_tgt_tokens_per_s": round((src_tokens + tgt_tokens) / dt),
      "real_tgt_tokens_per_step": round(tgt_tokens / n), "ms_per_step": round(1000 * dt / n, 1),
      "useful_gflops": round(gflops, 1), "matmul_ceiling_gflops": round(ceiling, 1),
      "ceiling_measured_in_this_run": args.ceiling is None,
      "fraction_of_ceiling": round(gflops / ceiling, 3), "peak_rss_mib": peak_rss_mib(),
      "padding_fraction": round(1 - (src_tokens + tgt_tokens) / padded, 3),
      "compiled_shapes": len(templates), "compile_workers": args.compile_workers,
      "compile_s": round(compile_s, 1), **machine()})


if __name__ == "__main__":
  main()
