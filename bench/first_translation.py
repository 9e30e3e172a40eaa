"""Time to the first translated line, end to end, with the XLA compilation cache cold and warm.

  python bench/first_translation.py --workdir RUN_DIR [--beam 5] [--lines 1000] [--repeats 3]

Runs `python translate.py --workdir RUN --beam 5 < FILE` as a user would (a new process
each time, interpreter start and imports included) on the first --lines lines of
--input (default: Multi30k's test_2016_flickr English side, repeated to --lines): once
as on a new machine (cold: an empty persistent compilation cache, and the operand dtype
for decoding not yet timed), then --repeats times with the caches it left (warm). For
each it prints the wall-clock seconds until the first output line and until the last.
Both caches live in a temporary directory, so the user's own are neither used nor
changed. Run it on an otherwise idle machine.
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import MULTI30K, ROOT, add_results_flag, cpu, report


def timed_run(workdir: str, beam: int, source: Path, cache: str) -> tuple[float, float, int]:
  """(seconds to the first output line, seconds to the last, lines written), with the
  caches in folder `cache`."""
  env = dict(os.environ, SEQ2SEQ_XLA_CACHE=str(Path(cache) / "xla"),
             XDG_CACHE_HOME=str(Path(cache) / "xdg"))  # operand_dtype.json
  start = time.perf_counter()
  with open(source, "rb") as stdin:
    proc = subprocess.Popen([sys.executable, str(ROOT / "translate.py"), "--workdir", workdir,
                             "--beam", str(beam)], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)
    first, count = None, 0
    for _ in proc.stdout:
      count += 1
      if first is None:
        first = time.perf_counter() - start
    if proc.wait():
      sys.exit(f"translate.py failed with exit status {proc.returncode}")
  return first or float("nan"), time.perf_counter() - start, count


def input_file(path: str | None, lines: int, folder: str) -> Path:
  """--lines lines of `path` (or test_2016_flickr's English side), repeated as needed."""
  opener = gzip.open if str(path or "").endswith(".gz") or path is None else open
  with opener(path or MULTI30K / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
    text = f.read().splitlines()
  out = Path(folder) / "input.txt"
  out.write_text("".join(text[i % len(text)] + "\n" for i in range(lines)), "utf-8")
  return out


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--lines", type=int, default=1000)
  p.add_argument("--input", default=None, help="text file (default: test_2016_flickr.en)")
  p.add_argument("--repeats", type=int, default=3)
  add_results_flag(p)
  args = p.parse_args()
  with tempfile.TemporaryDirectory() as cache:
    source = input_file(args.input, args.lines, cache)
    cold = timed_run(args.workdir, args.beam, source, cache)
    warm = [timed_run(args.workdir, args.beam, source, cache) for _ in range(args.repeats)]
  import_s = time.perf_counter()
  subprocess.run([sys.executable, "-c", "import seq2seq.decoding.translator"], check=True)
  import_s = time.perf_counter() - import_s
  median = lambda xs: sorted(xs)[len(xs) // 2]
  report(args.results, {"benchmark": "first_translation", "cpu": cpu(), "beam": args.beam,
          "lines": cold[2], "cold_first_line_s": round(cold[0], 2),
          "cold_all_lines_s": round(cold[1], 2),
          "warm_first_line_s": median([round(w[0], 2) for w in warm]),
          "warm_all_lines_s": median([round(w[1], 2) for w in warm]),
          "python_and_imports_s": round(import_s, 2), "cpus": os.cpu_count()})


if __name__ == "__main__":
  main()
