"""A soak of seq2seq-serve on the loopback: requests arriving at a multiple of its
measured capacity for a long time, open loop.

  python bench/soak.py --workdir RUN_DIR [--checkpoint averaged] [--minutes 30] \
      [--overload 2] [--capacity-seconds 20] [--max-queue 256] [--decoders 2]

First the server's capacity: 64 clients sending test_2016_flickr sentences back to back
for --capacity-seconds (bench/serve_load.py's clients), in requests/s. Then requests
arrive at --overload times that rate (exponential gaps, each on a connection of its own,
whatever the server answers), for --minutes. Reports the answers by status, whether every
429 carried Retry-After, the p50/p99 latency of the requests answered 200, the server's
resident memory at the start, its peak and at the end (sampled every 5 s), and the
arrival rate reached. The server runs with --max-queue (default 256), so that an overload
meets the queue's limit rather than the request timeout alone, and --max-connections
8 times that (connections past the limit would get uvicorn's 503 before the queue's 429). The last line is the JSON
of all figures; tests/serving/test_soak.py runs a short version.
"""

import argparse
import asyncio
import itertools
import json
import random
import sys
import time

import psutil

from seq2seq.data.textfiles import read_lines

from common import MULTI30K, ROOT, add_results_flag, machine, report
from serve_load import client, start_server


async def one_request(host: str, port: int, text: str, out: dict) -> None:
  """One request on a connection of its own; its status, latency and Retry-After kept."""
  started = time.perf_counter()
  try:
    reader, writer = await asyncio.open_connection(host, port)
  except OSError:
    out["statuses"]["refused connection"] = out["statuses"].get("refused connection", 0) + 1
    return
  try:
    body = json.dumps({"text": text}).encode()
    writer.write(b"POST /translate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
                 % (host.encode(), len(body), body))
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    out["statuses"][status] = out["statuses"].get(status, 0) + 1
    if status == 200:
      out["latencies"].append(time.perf_counter() - started)
    elif status == 429 and b"retry-after:" not in head.lower():
      out["429_without_retry_after"] += 1
  except (OSError, asyncio.IncompleteReadError):
    out["statuses"]["connection error"] = out["statuses"].get("connection error", 0) + 1
  finally:
    writer.close()


async def capacity(host: str, port: int, lines: list[str], seconds: float) -> float:
  """Requests/s that 64 back-to-back clients get answered (200 or otherwise)."""
  out = {"latencies": [], "refused": 0, "wrong": [], "expected": {t: None for t in lines}}
  texts = itertools.cycle(lines)
  stop_at = time.perf_counter() + seconds
  await asyncio.gather(*(client(host, port, texts, stop_at, out) for _ in range(64)))
  return (len(out["latencies"]) + out["refused"]) / seconds


async def overload(host: str, port: int, lines: list[str], rate: float, seconds: float,
                   pid: int) -> dict:
  out = {"statuses": {}, "latencies": [], "429_without_retry_after": 0}
  process = psutil.Process(pid)
  memory = [process.memory_info().rss]
  rng = random.Random(0)
  texts = itertools.cycle(lines)
  started = time.perf_counter()
  next_sample, pending, sent = started + 5, set(), 0
  while (now := time.perf_counter()) < started + seconds:
    task = asyncio.ensure_future(one_request(host, port, next(texts), out))
    pending.add(task)
    task.add_done_callback(pending.discard)
    sent += 1
    if now >= next_sample:
      memory.append(process.memory_info().rss)
      next_sample += 5
    await asyncio.sleep(rng.expovariate(rate))
  await asyncio.gather(*pending)
  memory.append(process.memory_info().rss)
  latencies = sorted(out["latencies"])
  pick = lambda q: round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 1)  # noqa: E731
  mib = lambda b: round(b / 2**20, 1)  # noqa: E731
  return {"sent": sent, "arrival_rate": round(sent / seconds, 1),
          "statuses": {str(k): v for k, v in sorted(out["statuses"].items(), key=str)},
          "server_errors": sum(v for k, v in out["statuses"].items()
                               if isinstance(k, int) and k >= 500),
          "429_without_retry_after": out["429_without_retry_after"],
          "p50_ms": pick(0.5) if latencies else None, "p99_ms": pick(0.99) if latencies else None,
          "rss_mib_start": mib(memory[0]), "rss_mib_peak": mib(max(memory)),
          "rss_mib_end": mib(memory[-1])}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="best")
  p.add_argument("--minutes", type=float, default=30.0)
  p.add_argument("--overload", type=float, default=2.0, help="arrivals per answer/s measured")
  p.add_argument("--capacity-seconds", type=float, default=20.0)
  p.add_argument("--max-queue", type=int, default=256)
  p.add_argument("--decoders", type=int, default=2)
  p.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  add_results_flag(p)
  args = p.parse_args()
  lines = [line for line in read_lines(args.src) if line.strip()]
  rows = [1 << k for k in range(64 .bit_length())]  # every batch row count compiled first
  proc, url = start_server([sys.executable, "-m", "seq2seq.cli.serve", "--workdir",
                            args.workdir, "--checkpoint", args.checkpoint, "--decoders",
                            str(args.decoders), "--max-queue", str(args.max_queue),
                            "--max-connections", str(8 * args.max_queue)],
                           lambda health: health.get("batch_rows") == rows)
  host, port = url.removeprefix("http://").split(":")
  try:
    rate = asyncio.run(capacity(host, int(port), lines, args.capacity_seconds))
    result = asyncio.run(overload(host, int(port), lines, args.overload * rate,
                                  60 * args.minutes, proc.pid))
  finally:
    proc.terminate()
    proc.wait(timeout=120)
  report(args.results, {"benchmark": "soak", "minutes": args.minutes, "overload": args.overload,
          "capacity_requests_per_s": round(rate, 1), "max_queue": args.max_queue,
          "checkpoint": args.checkpoint, **result, **machine(),
          "command": " ".join(["python bench/soak.py", *sys.argv[1:]]).replace(
              str(ROOT) + "/", "")})


if __name__ == "__main__":
  main()
