"""Sweep a training recipe: several short runs in parallel, each scored on validation.

  python bench/sweep_recipe.py --config configs/multi30k.py --spec SPEC --runs-dir runs/sweep
      [--parallel 4] [--average 5,10,20] [--beam 5] [--alpha 1.6] [-- COMMON OVERRIDES...]

SPEC is a text file with one run per line: a name, then config overrides, e.g.

  dropout02   --config.model.dropout=0.2
  vocab4k     --config.model.vocab_size=4000

Overrides after `--` apply to every run (e.g. a fixed `--config.train.max_steps`, so that
runs on a faster machine see the updates an hour buys here). Each run trains with
train.py into RUNS_DIR/NAME, then its last K checkpoints are averaged for each K of
--average and the validation split is decoded with the given beam and alpha. Only the
validation split is read. Prints one line per finished run and a markdown table sorted by
validation BLEU; RUNS_DIR/results.jsonl keeps every row.
"""

import argparse
import json
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, add_results_flag, report


def read_spec(path: Path) -> list[tuple[str, list[str]]]:
  runs = []
  for number, line in enumerate(path.read_text().splitlines(), 1):
    line = line.split("#", 1)[0].strip()
    if not line:
      continue
    name, *overrides = shlex.split(line)
    if not name.replace("_", "").replace("-", "").isalnum():
      sys.exit(f"{path}:{number}: run name {name!r} must be letters, digits, '_' or '-'")
    runs.append((name, overrides))
  names = [n for n, _ in runs]
  if len(set(names)) != len(names):
    sys.exit(f"{path}: run names repeat: {sorted({n for n in names if names.count(n) > 1})}")
  return runs


def score(workdir: str, spans: list[int], beam: int, alpha: float) -> dict:
  """Validation BLEU of the run: greedy during training, and averaged + beam at the end."""
  import sacrebleu

  from seq2seq.data import data_source
  from seq2seq.rundir import averaging, run_files
  bleu = lambda hyps, refs: sacrebleu.corpus_bleu(hyps, [refs]).score
  from seq2seq.decoding.translator import Translator

  rows = [json.loads(x) for x in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
  val = [r for r in rows if r["kind"] == "val"]
  train = [r for r in rows if r["kind"] == "train"]
  cfg = run_files.load_config(workdir)
  ds = data_source.load_split(cfg.data, cfg.data.val_split)
  sources, refs = list(ds["src"]), list(ds["tgt"])
  result = {"steps": train[-1]["step"], "epochs": train[-1]["epoch"],
            "minutes": round(train[-1]["elapsed"] / 60, 1),
            "greedy_curve": {r["step"]: round(r["bleu"], 2) for r in val},
            "best_greedy": round(max(r["bleu"] for r in val), 2),
            "last_val_loss": round(val[-1]["loss"], 4)}
  for k in spans:
    averaging.average(workdir, k, cfg.model)
    hyps = Translator.load(workdir, "averaged").translate(sources, beam_size=beam, alpha=alpha)
    result[f"avg{k}"] = round(bleu(hyps, refs), 2)
  return result


def run_one(name, overrides, args, common) -> dict:
  workdir = Path(args.runs_dir) / name
  log = Path(args.runs_dir) / f"{name}.log"
  t = time.perf_counter()
  with open(log, "a") as f:
    cmd = [sys.executable, str(ROOT / "train.py"), f"--config={args.config}",
           f"--workdir={workdir}", *common, *overrides]
    f.write("$ " + shlex.join(cmd) + "\n")
    f.flush()
    code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if code == 0:
      cmd = [sys.executable, __file__, "--score", str(workdir), "--average", args.average,
             "--beam", str(args.beam), "--alpha", str(args.alpha)]
      out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, cwd=ROOT)
      code = out.returncode
  row = {"name": name, "overrides": " ".join(overrides), "wall_minutes":
         round((time.perf_counter() - t) / 60, 1)}
  if code == 0:
    row.update(json.loads(out.stdout.strip().splitlines()[-1]))
  else:
    row["error"] = f"exit {code}, see {log}"
  print(json.dumps(row), flush=True)
  with open(Path(args.runs_dir) / "results.jsonl", "a") as f:
    f.write(json.dumps(row) + "\n")
  return row


def table(rows: list[dict], spans: list[int]) -> str:
  head = ["run", "overrides", "updates", "epochs", "best greedy"] + [f"avg {k} beam" for k in spans]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  key = f"avg{spans[0]}"
  for r in sorted(rows, key=lambda r: -r.get(key, -1)):
    cells = [r["name"], r["overrides"] or "(base)", r.get("steps", "-"), r.get("epochs", "-"),
             r.get("best_greedy", r.get("error", "-"))] + [r.get(f"avg{k}", "-") for k in spans]
    lines.append("| " + " | ".join(str(c) for c in cells) + " |")
  return "\n".join(lines)


def main():
  argv = sys.argv[1:]
  common = []
  if "--" in argv:
    common, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--config", default=str(ROOT / "configs" / "multi30k.py"))
  p.add_argument("--spec", help="file of runs: NAME OVERRIDES... per line")
  p.add_argument("--runs-dir", default=str(ROOT / "runs" / "sweep"))
  p.add_argument("--parallel", type=int, default=1, help="runs trained at the same time")
  p.add_argument("--average", default="10", help="checkpoint averaging spans to score")
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--alpha", type=float, default=1.6)
  p.add_argument("--score", metavar="RUN_DIR", help=argparse.SUPPRESS)
  add_results_flag(p)
  args = p.parse_args(argv)
  spans = [int(k) for k in args.average.split(",")]
  if args.score:
    print(json.dumps(score(args.score, spans, args.beam, args.alpha)))
    return
  if not args.spec:
    p.error("--spec is required")
  runs = read_spec(Path(args.spec))
  Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
  with ThreadPoolExecutor(args.parallel) as pool:
    rows = list(pool.map(lambda r: run_one(*r, args, common), runs))
  print(table(rows, spans))
  report(args.results, {"benchmark": "sweep_recipe", "config": args.config, "beam": args.beam,
                        "alpha": args.alpha, "runs": rows})
  failed = [r["name"] for r in rows if "error" in r]
  if failed:
    sys.exit(f"failed: {', '.join(failed)} (their logs in {args.runs_dir})")


if __name__ == "__main__":
  main()
