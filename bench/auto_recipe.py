"""The automatic recipe against the hand-tuned one, same minutes, one sitting each.

  python bench/auto_recipe.py --case en-de --minutes 10 --runs-dir runs/auto
  python bench/auto_recipe.py --case de-en --minutes 10 --runs-dir runs/auto
  python bench/auto_recipe.py --case subset10k --minutes 10 --runs-dir runs/auto

Each case trains two runs one after the other on Multi30k (../shared/data/multi30k):
`configs/multi30k.py` (the hand recipe, tuned for English->German) and `--config auto`,
both with `train.max_minutes` set to --minutes. `de-en` swaps the direction for both;
`subset10k` trains both on 10,000 training pairs drawn with seed 0 (written to
RUNS_DIR/subset10k-data, with Multi30k's val and test beside them). Each run's averaged
checkpoint is scored on val with beam 5 and its recipe's alpha. Both arms compile from an
empty XLA cache (SEQ2SEQ_XLA_CACHE=""), as a first run does: a warm cache would favour
the arm whose programs an earlier run compiled (the hand recipe's, here: ~95 s of its 10
minutes). Appends one row per run to --results (kind `auto`), and for the automatic arm
one of its plan against the run (kind `auto_plan`), and prints them.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

from seq2seq.training import auto_recipe

from common import MULTI30K, ROOT, cpu

CASES = {"en-de": ("en", "de"), "de-en": ("de", "en"), "subset10k": ("en", "de")}


def subset(folder: Path, pairs: int, seed: int = 0) -> Path:
  """`pairs` training pairs of Multi30k drawn with `seed`, val and test linked beside."""
  import numpy as np
  folder.mkdir(parents=True, exist_ok=True)
  lines = {lang: gzip.open(MULTI30K / f"train.{lang}.gz", "rt", encoding="utf-8").read()
           .split("\n")[:-1] for lang in ("en", "de")}
  rows = np.sort(np.random.default_rng(seed).choice(len(lines["en"]), pairs, replace=False))
  for lang, text in lines.items():
    (folder / f"train.{lang}").write_text("".join(text[i] + "\n" for i in rows), "utf-8")
    for split in ("val", "test_2016_flickr"):
      link = folder / f"{split}.{lang}.gz"
      if not link.exists():
        link.symlink_to(MULTI30K / f"{split}.{lang}.gz")
  return folder


def run(cmd: list[str], log: Path) -> None:
  print("$", " ".join(cmd), flush=True)
  env = dict(os.environ, SEQ2SEQ_XLA_CACHE="")  # no compilation cache: see above
  with open(log, "a") as f:
    if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env).returncode:
      sys.exit(f"failed: {' '.join(cmd)} (log: {log})")


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--case", choices=sorted(CASES), required=True)
  p.add_argument("--minutes", type=float, default=10.0)
  p.add_argument("--runs-dir", default="runs/auto")
  p.add_argument("--arms", default="hand,auto")
  p.add_argument("--results", default=str(ROOT / "bench" / "results.jsonl"))
  p.add_argument("--override", action="append", default=[], metavar="--config.S.F=V",
                 help="a config override for both runs (e.g. a fixed train.max_steps for a "
                 "quick check of the script), repeatable")
  args = p.parse_args()
  src, tgt = CASES[args.case]
  runs = Path(args.runs_dir)
  runs.mkdir(parents=True, exist_ok=True)
  data = subset(runs / "subset10k-data", 10_000) if args.case == "subset10k" else MULTI30K
  common = [f"--config.data.dir={data}", f"--config.data.src_lang={src}",
            f"--config.data.tgt_lang={tgt}", f"--config.train.max_minutes={args.minutes:g}",
            "--config.data.test_split=test_2016_flickr", *args.override]
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=ROOT).stdout.strip()
  for arm in args.arms.split(","):
    workdir = runs / f"{args.case}-{arm}-{args.minutes:g}min"
    config = "multi30k" if arm == "hand" else "auto"
    train = [sys.executable, "train.py", "--config", config, "--workdir", str(workdir), *common]
    run(train, runs / f"{workdir.name}.log")
    run([sys.executable, "evaluate.py", "--workdir", str(workdir), "--split", "val",
         "--checkpoint", "averaged", "--output", str(workdir / "val.hyp")],
        runs / f"{workdir.name}.log")
    evaluation = json.loads((workdir / "evaluations.jsonl").read_text().splitlines()[-1])
    training = json.loads((workdir / "training.json").read_text())
    cfg = json.loads((workdir / "config.json").read_text())
    plan = workdir / "recipe.json"
    row = {"name": workdir.name, "kind": "auto", "case": args.case, "arm": arm,
           "cpu": cpu(), "minutes": args.minutes, "updates": training.get("step"),
           "val_bleu": round(evaluation["bleu"], 2), "beam": evaluation["beam"],
           "alpha": evaluation["alpha"],
           "settings": {k: cfg[s][k] for s, k in (
               ("model", "d_model"), ("model", "vocab_size"), ("model", "dropout"),
               ("train", "label_smoothing"), ("train", "warmup_steps"),
               ("train", "dropout_ramp_steps"), ("train", "checkpoint_every"),
               ("train", "eval_every"), ("data", "max_tokens"), ("data", "pack_length"))},
           "plan": json.loads(plan.read_text())["measurements"] if plan.exists() else None,
           "commit": commit,
           "command": f"python bench/auto_recipe.py --case {args.case} --minutes "
                      f"{args.minutes:g}"}
    rows = [row]
    if plan.exists():  # the plan against the run
      saved, steps = json.loads(plan.read_text()), [
          r for r in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines())
          if r["kind"] == "train"]
      m = saved["measurements"]
      rows.append({
          "name": f"{workdir.name}-plan", "kind": "auto_plan", "case": args.case,
          "cpu": row["cpu"], "minutes": args.minutes, "update_s": m["update_seconds"],
          "compile_s": m["compile_seconds"], "buckets": m["buckets"],
          "factors": f"{auto_recipe.update_factor(m.get('pack_length', 0))}, "
                     f"{auto_recipe.COMPILE_SHARE}",
          "pack_length": m.get("pack_length", 0),
          "planned": saved["planned_updates"], "made": row["updates"],
          # from the second logged update on: past most of the compiling (None: a run too
          # short to have logged three)
          "s_per_update": (steps[-1]["elapsed"] - steps[1]["elapsed"])
                          / (steps[-1]["step"] - steps[1]["step"]) if len(steps) > 2 else None,
          "val_bleu": row["val_bleu"], "commit": commit, "command": row["command"]})
    with open(args.results, "a") as f:
      for r in rows:
        print(json.dumps(r), flush=True)
        f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
  main()
