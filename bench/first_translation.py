"""Time to the first translation, end to end, with the XLA compilation cache cold and warm.

  python bench/first_translation.py --workdir RUN_DIR [--beam 5] [--repeats 3]

Runs `echo "A dog runs." | python translate.py --workdir RUN --beam 5` as a user would
(a new process each time, interpreter start and imports included): once with an empty
persistent compilation cache (cold), then `--repeats` times with the cache it left
(warm), and prints the wall-clock seconds of each. The cache lives in a temporary
directory, so the user's own cache is neither used nor changed.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

from common import ROOT, report


def timed_run(workdir: str, beam: int, cache: str) -> tuple[float, str]:
  env = dict(os.environ, SEQ2SEQ_XLA_CACHE=cache)
  t = time.perf_counter()
  proc = subprocess.run([sys.executable, str(ROOT / "translate.py"), "--workdir", workdir,
                         "--beam", str(beam)], input=b"A dog runs.\n", capture_output=True,
                        env=env, check=True)
  return time.perf_counter() - t, proc.stdout.decode().strip()


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--repeats", type=int, default=3)
  args = p.parse_args()
  with tempfile.TemporaryDirectory() as cache:
    cold, text = timed_run(args.workdir, args.beam, cache)
    warm = [timed_run(args.workdir, args.beam, cache)[0] for _ in range(args.repeats)]
  import_s = time.perf_counter()
  subprocess.run([sys.executable, "-c", "import seq2seq.translator"], check=True)
  import_s = time.perf_counter() - import_s
  report({"benchmark": "first_translation", "beam": args.beam, "translation": text,
          "cold_s": round(cold, 2), "warm_s": [round(w, 2) for w in warm],
          "warm_median_s": round(sorted(warm)[len(warm) // 2], 2),
          "python_and_imports_s": round(import_s, 2), "cpus": os.cpu_count()})


if __name__ == "__main__":
  main()
