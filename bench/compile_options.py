"""XLA compiler options against compile time and step time of the recipe's update.

  SEQ2SEQ_XLA_CACHE= python bench/compile_options.py

Builds the recipe's trainer (configs/multi30k.py by default), lowers its update for
`--shapes` of its batch shapes (spread from the shortest bucket to the longest), and
compiles each under every variant below, one at a time on one thread, timing each
compilation. Then runs the update of the middle shape on a real batch with each
variant's executable in alternation (`--rounds` rounds of `--steps` updates), so that
the machine's drift hits all alike. Variants:
- `default`: XLA's own settings.
- `llvm-O1`: `xla_backend_optimization_level=1` (LLVM's -O1 for the generated kernels).
- `no-expensive-passes`: `xla_llvm_disable_expensive_passes`.
- `most-off`: both, with level 0 (what `jax_disable_most_optimizations` sets; the HLO
  passes, fusion among them, run as before: only the element-wise kernels' machine code
  is less optimised, the matmuls are library calls).
Run with the disk cache off (SEQ2SEQ_XLA_CACHE=) on an otherwise idle machine.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import jax

from seq2seq import cli, input_pipeline
from seq2seq.runtime import enable_compilation_cache, quiet_libraries

from common import ROOT, alternate, machine, report, summary

VARIANTS = {
    "default": {},
    "llvm-O1": {"xla_backend_optimization_level": 1},
    "no-expensive-passes": {"xla_llvm_disable_expensive_passes": True},
    "most-off": {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True},
}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--config", default=str(ROOT / "configs" / "multi30k.py"))
  p.add_argument("--shapes", type=int, default=3, help="batch shapes compiled per variant")
  p.add_argument("--variants", default=",".join(VARIANTS))
  p.add_argument("--rounds", type=int, default=8)
  p.add_argument("--steps", type=int, default=3, help="updates per round")
  args = p.parse_args()
  quiet_libraries()
  enable_compilation_cache()
  cfg = cli.training_config(args.config, [])
  names = args.variants.split(",")
  with tempfile.TemporaryDirectory() as workdir:
    from seq2seq.trainer import Trainer
    trainer = Trainer(cfg, Path(workdir))
    steps = trainer.steps
    batches = input_pipeline.TrainBatches(trainer.train_corpus, cfg.data, steps.num_devices)
    templates = batches.templates()
    picks = sorted({round(i * (len(templates) - 1) / max(args.shapes - 1, 1))
                    for i in range(args.shapes)})
    lowered = {i: steps.train_step.lower(trainer.state, steps.put_batch(templates[i]))
               for i in picks}
    middle = picks[len(picks) // 2]
    compile_s, executables = {}, {}
    for name in names:
      compile_s[name] = {}
      for i in picks:
        t = time.perf_counter()
        compiled = lowered[i].compile(VARIANTS[name])
        compile_s[name][str(templates[i].src.shape)] = round(time.perf_counter() - t, 1)
        if i == middle:
          executables[name] = compiled
      print(name, "compile s", compile_s[name], flush=True)
    shape = templates[middle].src.shape
    batch = next(b for b in (batches.make_batch(o) for o in batches.epoch_batches(0))
                 if b.src.shape == shape)
    batch = steps.put_batch(batch)
    box = {"state": trainer.state}

    def runner(compiled):
      def run():
        for _ in range(args.steps):
          box["state"], m = compiled(box["state"], batch)
        jax.block_until_ready(m)
      return run

    for compiled in executables.values():
      runner(compiled)()  # warm up
    seconds = alternate({n: runner(c) for n, c in executables.items()}, args.rounds)
    for name, s in seconds.items():
      print(name, "per round of", args.steps, "updates:", summary(s), flush=True)
  report({"benchmark": "compile_options", "shapes": [str(templates[i].src.shape) for i in picks],
          "timed_shape": str(shape), "compile_s": compile_s,
          "compile_s_total": {n: round(sum(c.values()), 1) for n, c in compile_s.items()},
          "ms_per_update_median": {n: round(statistics.median(s) / args.steps * 1000, 1)
                                   for n, s in seconds.items()},
          **machine()})


if __name__ == "__main__":
  main()
