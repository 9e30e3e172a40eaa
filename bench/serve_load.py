"""Load test of seq2seq-serve on the loopback: sentences/s and latency at 1, 8, 64 clients.

  python bench/serve_load.py --workdir RUN_DIR [--clients 1,8,64] [--seconds 30] [--beam 1]

Starts the server on 127.0.0.1 (a free port) with the run, warms it up, then for each
client count runs that many threads, each sending one test_2016_flickr sentence per
request, back to back, for --seconds (and at most --max-requests requests). Reports
sentences/s and p50/p95 request latency per client count, and checks that every answer
equals the translation of its sentence by a single-sentence request.
"""

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

from seq2seq.corpus import read_lines

from common import MULTI30K, ROOT, machine, report


def post(url: str, body: dict) -> dict:
  request = urllib.request.Request(url + "/translate", data=json.dumps(body).encode(),
                                   headers={"Content-Type": "application/json"})
  with urllib.request.urlopen(request, timeout=600) as r:
    return json.loads(r.read())


def start_server(workdir: str, checkpoint: str, port: int) -> subprocess.Popen:
  proc = subprocess.Popen([sys.executable, "-m", "seq2seq.serve", "--workdir", workdir,
                           "--checkpoint", checkpoint, "--port", str(port)], cwd=ROOT)
  deadline = time.time() + 600
  while time.time() < deadline:
    try:
      urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
      return proc
    except OSError:
      if proc.poll() is not None:
        break
      time.sleep(1)
  proc.kill()
  sys.exit("server did not start")


def load(url, lines, clients, seconds, max_requests, beam, expected):
  latencies, wrong, lock = [], [], threading.Lock()
  counter = iter(range(max_requests))
  stop_at = time.perf_counter() + seconds

  def client():
    while time.perf_counter() < stop_at:
      with lock:
        i = next(counter, None)
      if i is None:
        return
      text = lines[i % len(lines)]
      t = time.perf_counter()
      out = post(url, {"text": text, "beam_size": beam})["translation"]
      with lock:
        latencies.append(time.perf_counter() - t)
        if expected.get(text, out) != out:
          wrong.append(text)

  t0 = time.perf_counter()
  threads = [threading.Thread(target=client) for _ in range(clients)]
  for th in threads:
    th.start()
  for th in threads:
    th.join()
  wall = time.perf_counter() - t0
  ms = np.array(latencies) * 1000
  return {"clients": clients, "requests": len(latencies), "seconds": round(wall, 1),
          "sentences_per_s": round(len(latencies) / wall, 1),
          "p50_ms": round(float(np.percentile(ms, 50)), 1),
          "p95_ms": round(float(np.percentile(ms, 95)), 1), "mismatches": len(wrong)}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="best")
  p.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  p.add_argument("--clients", default="1,8,64")
  p.add_argument("--seconds", type=float, default=30.0, help="per client count")
  p.add_argument("--max-requests", type=int, default=5000, help="per client count")
  p.add_argument("--beam", type=int, default=1)
  args = p.parse_args()
  lines = read_lines(args.src)
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  url = f"http://127.0.0.1:{port}"
  server = start_server(args.workdir, args.checkpoint, port)
  try:
    # Reference answers one sentence at a time (this also compiles every length bucket).
    sample = lines[:200]
    expected = {t: post(url, {"text": t, "beam_size": args.beam})["translation"] for t in sample}
    rows = [load(url, sample, int(c), args.seconds, args.max_requests, args.beam, expected)
            for c in args.clients.split(",")]
  finally:
    server.terminate()
    server.wait(30)
  for r in rows:
    print(f"{r['clients']:>3} clients: {r['sentences_per_s']:7.1f} sentences/s, p50 "
          f"{r['p50_ms']:.0f} ms, p95 {r['p95_ms']:.0f} ms ({r['requests']} requests, "
          f"{r['mismatches']} mismatches)")
  report({"benchmark": "serve_load", "workdir": args.workdir, "beam": args.beam,
          "rows": rows, "machine": machine()})


if __name__ == "__main__":
  main()
