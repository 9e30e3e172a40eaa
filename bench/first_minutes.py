"""How close a run's first minutes come to its steady speed, from its metrics.jsonl.

  python bench/first_minutes.py --workdir RUN [--minutes 5] [--after-step 600]

Start the run from an empty compilation cache (SEQ2SEQ_XLA_CACHE=EMPTY_DIR python train.py
...) and let it train for several minutes past `--minutes`. The training records (one every
`train.log_every` updates) give the updates and target tokens done by each `elapsed`
second (counted from the trainer's start, after the data is prepared); the updates done
by the end of the first `--minutes` are interpolated between the records around it. The
steady rate is the median over the windows between records after `--after-step` (all
programs compiled by then) that hold no validation. Prints the share of the steady rate
that the first minutes reached, in updates and in target tokens.
"""

import argparse
import json
import statistics
from pathlib import Path

from common import cpu, report


def done_by(records: list[dict], seconds: float, field: str) -> float:
  """`field` (a running total) at `seconds`, interpolated between the records around it."""
  before = {"elapsed": 0.0, field: 0.0}
  for r in records:
    if r["elapsed"] >= seconds:
      span = r["elapsed"] - before["elapsed"]
      return before[field] + (r[field] - before[field]) * (seconds - before["elapsed"]) / span
    before = r
  raise SystemExit(f"the run's records end at {before['elapsed']:.0f} s, before the "
                   f"{seconds:.0f} s asked for: train it longer")


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--workdir", required=True)
  ap.add_argument("--minutes", type=float, default=5.0)
  ap.add_argument("--after-step", type=int, default=600,
                  help="windows after this update make the steady rate (default 600)")
  args = ap.parse_args()
  path = Path(args.workdir) / "metrics.jsonl"
  records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  train = [r for r in records if r["kind"] == "train"]
  validated = {r["step"] for r in records if r["kind"] == "val"}
  tokens, previous = 0.0, {"step": 0, "elapsed": 0.0}
  windows = []
  for r in train:  # running totals of target tokens, from each window's rate
    tokens += r["tgt_tokens_per_s"] * (r["elapsed"] - previous["elapsed"])
    r["tokens"] = tokens
    if previous["step"] >= args.after_step and not any(
        previous["step"] < s <= r["step"] for s in validated):
      span = r["elapsed"] - previous["elapsed"]
      windows.append(((r["step"] - previous["step"]) / span,
                      (r["tokens"] - previous["tokens"]) / span))
    previous = r
  if len(windows) < 3:
    raise SystemExit(f"{len(windows)} steady windows after update {args.after_step}: "
                     "train the run longer or lower --after-step")
  seconds = args.minutes * 60
  updates, first_tokens = done_by(train, seconds, "step"), done_by(train, seconds, "tokens")
  rate = statistics.median(w[0] for w in windows)
  token_rate = statistics.median(w[1] for w in windows)
  share, token_share = updates / (rate * seconds), first_tokens / (token_rate * seconds)
  print(f"first {args.minutes:g} minutes: {updates:.0f} updates, {first_tokens:,.0f} target "
        f"tokens; steady {rate:.3f} updates/s, {token_rate:,.0f} target tokens/s "
        f"({len(windows)} windows after update {args.after_step})")
  print(f"share of the steady rate: {share:.1%} of updates, {token_share:.1%} of target tokens")
  report({"benchmark": "first_minutes", "workdir": str(args.workdir), "cpu": cpu(),
          "minutes": args.minutes, "updates": round(updates, 1),
          "target_tokens": round(first_tokens), "steady_updates_per_s": round(rate, 3),
          "steady_target_tokens_per_s": round(token_rate),
          "steady_windows": len(windows),
          "share_of_updates": round(share, 3), "share_of_tokens": round(token_share, 3)})


if __name__ == "__main__":
  main()
