"""Time from a built trainer to its first update, and its first validation, by how the
programs are compiled ahead.

  SEQ2SEQ_XLA_CACHE= python bench/compile_ahead.py --strategy sequential
  SEQ2SEQ_XLA_CACHE= python bench/compile_ahead.py --strategy pipelined
  SEQ2SEQ_XLA_CACHE= python bench/compile_ahead.py --strategy pipelined-updates

- `sequential`: the update of each batch shape is lowered, one after
  another, then all are compiled on `--workers` threads; the first validation compiles
  its loss and greedy-search programs as it meets them.
- `pipelined` (what the trainer does, `Steps.compile_ahead(..., also=
  Trainer.lower_validation())`): each program goes to the compiling threads as soon as
  it is lowered, the validation's among them, before the first update.
- `pipelined-updates`: the same for the update's programs only (the validation's
  compiled when met): what compiling the validation's ahead adds before the first update.

Each strategy then runs one update and two validations (loss and greedy BLEU on the
whole validation set, as `Trainer.validate`); the second validation's time is the
validation's own work, so the first's excess over it is compilation. Run each strategy
in its own process, the disk cache off (SEQ2SEQ_XLA_CACHE=), on an otherwise idle
machine, one after the other.
"""

import argparse
import concurrent.futures
import importlib.util
import os
import tempfile
import time
from pathlib import Path

from seq2seq import input_pipeline, train_lib
from seq2seq.config import Config
from seq2seq.runtime import enable_compilation_cache, quiet_libraries

from common import ROOT, machine, report


def load_config(path: str) -> Config:
  spec = importlib.util.spec_from_file_location("bench_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return Config.from_dict(module.get_config())


def validate(trainer: train_lib.Trainer) -> float:
  """Seconds for the validation's loss and greedy translations (no checkpoint, no plot)."""
  t = time.perf_counter()
  params = trainer.state.params
  train_lib.evaluate_loss(trainer.steps, params, trainer.val_corpus, trainer.eval_lengths)
  trainer.translate_validation(params)
  return time.perf_counter() - t


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--config", default=str(ROOT / "configs" / "multi30k.py"))
  p.add_argument("--strategy", choices=("sequential", "pipelined", "pipelined-updates"), required=True)
  p.add_argument("--workers", type=int, default=os.cpu_count(),
                 help="compiling threads (default: one per core)")
  args = p.parse_args()
  quiet_libraries()
  enable_compilation_cache()
  cfg = load_config(args.config)
  with tempfile.TemporaryDirectory() as workdir:
    trainer = train_lib.Trainer(cfg, Path(workdir))
    steps = trainer.steps
    batches = input_pipeline.TrainBatches(trainer.train_corpus, cfg.data, steps.num_devices)
    templates = batches.templates()
    t0 = time.perf_counter()
    if args.strategy.startswith("pipelined"):
      also = trainer.lower_validation() if args.strategy == "pipelined" else ()
      steps.compile_ahead(trainer.state, templates, workers=args.workers, also=also)
    else:
      lowered = list(steps.lower_updates(trainer.state, templates))
      with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(lambda low: low.compile(), lowered))
    compile_s = time.perf_counter() - t0
    t = time.perf_counter()
    first = batches.make_batch(batches.epoch_batches(0)[0])
    trainer.state, m = steps.update(trainer.state, [first])
    float(m["loss"])
    update_s = time.perf_counter() - t
    first_validation_s = validate(trainer)
    second_validation_s = validate(trainer)
  report({"benchmark": "compile_ahead", "strategy": args.strategy, "workers": args.workers,
          "update_shapes": len(templates), "compile_ahead_s": round(compile_s, 1),
          "first_update_s": round(update_s, 1),
          "first_validation_s": round(first_validation_s, 1),
          "second_validation_s": round(second_validation_s, 1),
          "compile_ahead_plus_first_validation_s": round(compile_s + first_validation_s, 1),
          **machine()})


if __name__ == "__main__":
  main()
