"""The first click against the second: seq2seq-serve started as a new user starts it (an
empty compilation cache), then each web client's first request and its second, timed.

  python bench/first_click.py --workdir RUN [--checkpoint averaged] [--cores 0] \
      [--code DIR]

The clients are the page at / (beam 5, 3 alternatives: its form's defaults) and
LibreTranslate's web UI (`alternatives: 3`), each sending one caption of Multi30k's test
set and then another of the same length bucket. The server runs pinned to `--cores`
(taskset; "" for all), the requests come from here. `--code DIR`: run the server of
another checkout (its seq2seq package first on PYTHONPATH), to compare two versions on
one machine. Prints the seconds to ready, each request's milliseconds, and the JSON.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from common import add_results_flag, machine, report
from serve_load import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from serve_helpers import get, post  # noqa: E402

FIRST = "A man in a blue shirt is standing on a ladder cleaning windows."
SECOND = "Two young girls are playing with a red ball in the green park."


def clients(source: str, target: str):
  return (("the page", lambda text: {"texts": [text], "beam_size": 5, "nbest": 3}),
          ("LibreTranslate's web UI", lambda text: {"q": text, "source": source,
                                                    "target": target, "alternatives": 3}))


def first_clicks(args) -> dict:
  import json
  import subprocess
  with tempfile.TemporaryDirectory() as cache:
    env = dict(os.environ, SEQ2SEQ_XLA_CACHE=str(Path(cache) / "xla"),
               XDG_CACHE_HOME=str(Path(cache) / "xdg"))
    if args.code:
      env["PYTHONPATH"] = str(Path(args.code).resolve())
    port = free_port()
    command = (["taskset", "-c", args.cores] if args.cores else []) + [
        sys.executable, "-m", "seq2seq.cli.serve", "--workdir", args.workdir,
        "--checkpoint", args.checkpoint, "--port", str(port)]
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=args.code or None,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
      while True:
        try:
          status, health = get(url + "/health")
          if status == 200:
            break
        except OSError:
          pass
        if proc.poll() is not None:
          sys.exit(f"the server stopped: {' '.join(command)}")
        time.sleep(0.2)
      ready_s = time.perf_counter() - started
      languages = health["languages"]
      rows = []
      for who, body_of in clients(languages["source"], languages["target"]):
        row = {"client": who}
        for name, text in (("first_ms", FIRST), ("second_ms", SECOND)):
          t = time.perf_counter()
          status, answer = post(url, body_of(text))
          row[name] = round(1000 * (time.perf_counter() - t), 1)
          assert status == 200, answer
        rows.append(row)
        print(f"{who}: first {row['first_ms']:.0f} ms, second {row['second_ms']:.0f} ms",
              flush=True)
    finally:
      proc.terminate()
      proc.wait(60)
  print(f"ready after {ready_s:.1f} s; warm: {json.dumps(health.get('warm'))}")
  return {"ready_s": round(ready_s, 1), "clients": rows, "warm": health.get("warm")}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="best")
  p.add_argument("--cores", default="0", help="taskset's cores for the server; '' for all")
  p.add_argument("--code", default=None, help="a checkout whose server to run")
  add_results_flag(p)
  args = p.parse_args()
  result = first_clicks(args)
  report(args.results, {"benchmark": "first_click", "workdir": args.workdir,
                        "checkpoint": args.checkpoint, "cores": args.cores,
                        "code": args.code, **result, "machine": machine()})


if __name__ == "__main__":
  main()
