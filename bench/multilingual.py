"""One multilingual model against one bilingual model per direction, the same minutes.

  python bench/multilingual.py --arms bilingual --runs-dir runs/ml --cpus 0
  python bench/multilingual.py --arms multilingual --runs-dir runs/ml --cpus 0
  python bench/multilingual.py --arms hour --runs-dir runs/ml --cpus 0

Arms, each trained from an empty XLA cache (SEQ2SEQ_XLA_CACHE="") on Multi30k
(../shared/data/multi30k) and scored on test_2016_flickr with its averaged checkpoint,
beam 5 and its recipe's alpha:
- `bilingual`: the automatic recipe (`--config auto`) for each of the six English-centred
  directions, --bilingual-minutes (10) each;
- `multilingual`: `--config multi30k_multilingual`, the six directions in one model for
  --multilingual-minutes (60), scored on each of them, and on German<->French without
  a pair of its own: zero-shot (`--tgt-lang` straight from the source; with the target
  language's pieces only, the default, and with every piece, `--no-zero-shot-pieces`)
  and pivoted through English with the same model (`evaluate.py --pivot en`);
- `hour`: `--config multi30k`, English->German alone for the multilingual minutes.
`--cpus LIST` pins every command to those cores (taskset): two arms may then run side by
side on a 2-core machine, one core each, and stay comparable (both arms of a comparison
get the same cores). An arm whose run has finished (its training.json) is scored again,
not trained again. Appends one row per arm to --results (kind `multilingual`).
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import MULTI30K, ROOT, cpu

DIRECTIONS = ("en-de", "de-en", "en-fr", "fr-en", "en-cs", "cs-en")
ZERO_SHOT = ("de-fr", "fr-de")


def run(cmd: list[str], log: Path, cpus: str) -> None:
  cmd = ["taskset", "-c", cpus, *cmd] if cpus else cmd
  print("$", " ".join(cmd), flush=True)
  env = dict(os.environ, SEQ2SEQ_XLA_CACHE="")  # no compilation cache, as a first run
  with open(log, "a") as f:
    if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env).returncode:
      sys.exit(f"failed: {' '.join(cmd)} (log: {log})")


def train(config: str, workdir: Path, minutes: float, extra: list[str], cpus: str) -> dict:
  """Trains the arm's run, unless it has finished (its training.json): a rerun scores."""
  if not (workdir / "training.json").is_file():
    run([sys.executable, "train.py", "--config", config, "--workdir", str(workdir),
         f"--config.train.max_minutes={minutes:g}", *extra],
        workdir.parent / f"{workdir.name}.log", cpus)
  return json.loads((workdir / "training.json").read_text())


def score(workdir: Path, direction: str, cpus: str, *flags: str) -> float:
  """test_2016_flickr sacreBLEU of `direction` (beam 5, averaged checkpoint); `flags`
  such as --src-lang/--tgt-lang for a run of several directions."""
  kind = ".pivot" if "--pivot" in flags else ".all-pieces" if "--no-zero-shot-pieces" in \
      flags else ""
  out = workdir / f"test.{direction}{kind}.hyp"
  run([sys.executable, "evaluate.py", "--workdir", str(workdir), "--split",
       "test_2016_flickr", "--checkpoint", "averaged", "--beam", "5", "--output", str(out),
       *flags], workdir.parent / f"{workdir.name}.log", cpus)
  return round(json.loads((workdir / "evaluations.jsonl").read_text().splitlines()[-1])
               ["bleu"], 2)


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--arms", default="bilingual,multilingual,hour")
  p.add_argument("--runs-dir", default="runs/multilingual")
  p.add_argument("--bilingual-minutes", type=float, default=10.0)
  p.add_argument("--multilingual-minutes", type=float, default=60.0)
  p.add_argument("--cpus", default="", help="taskset core list, e.g. 0 (default: all)")
  p.add_argument("--results", default=str(ROOT / "bench" / "results.jsonl"))
  p.add_argument("--directions", default=",".join(DIRECTIONS),
                 help="the directions trained and scored (default: the six)")
  p.add_argument("--zero-shot", default=",".join(ZERO_SHOT),
                 help="pairs without training data scored zero-shot and through English "
                 "('' none)")
  p.add_argument("--override", action="append", default=[], metavar="--config.S.F=V",
                 help="a config override for every run (e.g. a fixed train.max_steps for a "
                 "quick check of the script), repeatable")
  args = p.parse_args()
  directions = args.directions.split(",")
  zero_shot = [d for d in args.zero_shot.split(",") if d]
  runs = Path(args.runs_dir).resolve()
  runs.mkdir(parents=True, exist_ok=True)
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=ROOT).stdout.strip()
  cores = len(args.cpus.split(",")) if args.cpus else os.cpu_count()
  command = (f"python bench/multilingual.py --arms {{arm}} --cpus {args.cpus}" if args.cpus
             else "python bench/multilingual.py --arms {arm}")
  for arm in args.arms.split(","):
    row = {"name": f"multilingual-{arm}-{commit}", "kind": "multilingual", "arm": arm,
           "cpu": cpu(), "cores": cores, "commit": commit, "command": command.format(arm=arm)}
    if arm == "bilingual":
      row.update(minutes=args.bilingual_minutes, directions={})
      for direction in directions:
        src, tgt = direction.split("-")
        workdir = runs / f"bilingual-{direction}"
        done = train("auto", workdir, args.bilingual_minutes, [
            f"--config.data.dir={MULTI30K}", f"--config.data.src_lang={src}",
            f"--config.data.tgt_lang={tgt}", "--config.data.test_split=test_2016_flickr",
            *args.override], args.cpus)
        row["directions"][direction] = {"updates": done.get("step"),
                                        "bleu": score(workdir, direction, args.cpus)}
        print(direction, row["directions"][direction], flush=True)
    elif arm == "multilingual":
      workdir = runs / "multilingual"
      done = train("multi30k_multilingual", workdir, args.multilingual_minutes,
                   [f"--config.data.directions={args.directions}", *args.override], args.cpus)
      def langs(d):
        return ("--src-lang", d.split("-")[0], "--tgt-lang", d.split("-")[1])
      row.update(minutes=args.multilingual_minutes, updates=done.get("step"), directions={
          d: {"bleu": score(workdir, d, args.cpus, *langs(d))} for d in directions})
      row["zero_shot"] = {
          d: {"bleu": score(workdir, d, args.cpus, *langs(d)),
              "bleu_all_pieces": score(workdir, d, args.cpus, *langs(d),
                                       "--no-zero-shot-pieces"),
              "pivot_bleu": score(workdir, d, args.cpus, *langs(d), "--pivot", "en")}
          for d in zero_shot}
    elif arm == "hour":
      workdir = runs / "hour-en-de"
      done = train("multi30k", workdir, args.multilingual_minutes, args.override, args.cpus)
      row.update(minutes=args.multilingual_minutes, updates=done.get("step"),
                 directions={"en-de": {"bleu": score(workdir, "en-de", args.cpus)}})
    else:
      sys.exit(f"unknown arm {arm!r}: bilingual, multilingual or hour")
    with open(args.results, "a") as f:
      print(json.dumps(row), flush=True)
      f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
  main()
