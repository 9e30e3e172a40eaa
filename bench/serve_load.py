"""Load test of seq2seq-serve on the loopback, against batch decoding of the same model,
engine and search in the same run.

  python bench/serve_load.py --workdir RUN_DIR [--engine jax|ctranslate2] [--beam 1] \
      [--clients 1,8,64] [--seconds 30] [--checkpoint best] [--decoders N] \
      [--ct2-threads throughput|latency|INTERxINTRA]

First, in this process, the engine's own speeds on test_2016_flickr: batch decoding
(batches of --batch-size, sorted by length as bench/decode_speed.py: the median of three
passes after a first that compiles), batches as the server forms them under load (the
sentences shuffled, --batch-size / --decoders a batch, --decoders batches at once: the
most padded batches give a server whose texts come in any order), the time of one
short sentence alone (the median of 30), and that of each of the first ALONE_SAMPLE test
sentences alone: one client sends the test sentences in turn, so its p50 is set against
their median alone (`alone_ratio`; against the short sentence, as earlier rows were, it
compared typical sentences with the shortest). Then
the engine is freed, the server started on 127.0.0.1 with the same model and search (and,
for JAX, given the time to compile its batches of every row count), and for each client
count that many clients (coroutines of one asyncio loop, as light on the shared cores as
a load generator can be) each send one test sentence per request, back to back on a
kept-alive connection, for --seconds. Reports sentences/s (and its share of batch
decoding), p50/p95/p99 latency, 429s, the texts per decoded batch and the server's mean
time per batch (from its /metrics), and checks every answer against the server's own answer to that sentence alone
(the JSON lists the first 5 that differ for each client count). Last, the request path
alone: the same app around an engine that answers at once, under the largest client count
for up to 10 s, with its CPU and the load generator's per request (what the HTTP layer,
the batcher and the clients cost the shared cores). The last line is the JSON of all
figures.
"""

import argparse
import asyncio
import functools
import gc
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.engines import load_engine
from seq2seq.runtime import enable_compilation_cache

from common import MULTI30K, ROOT, add_results_flag, alternate, machine, report, slug
from decode_speed import figures, first_pass

sys.path.insert(0, str(ROOT / "tests"))
from serve_helpers import free_port, get, post  # noqa: E402

ALONE_SAMPLE = 100  # test sentences timed alone, for one client's p50 to be set against


def unsorted_batches(translator, lines, args) -> Callable[[], None]:
  """Decodes `lines` as a server with 64 clients does: in arrival (here shuffled) order,
  --batch-size / --decoders texts a batch, --decoders batches at once, each padded to its
  own longest text: what padded batches can do without sorting a whole file by length."""
  order = lines[:]
  random.Random(0).shuffle(order)
  size = max(args.batch_size // args.decoders, 1)
  chunks = [order[i:i + size] for i in range(0, len(order), size)]
  one = lambda texts: translator.translate(texts, beam_size=args.beam,
                                           batch_size=args.batch_size)

  def run():
    with ThreadPoolExecutor(args.decoders) as pool:
      list(pool.map(one, chunks))
  return run


def engine_speeds(args, lines, references) -> dict:
  translator = load_engine(args.workdir, args.engine, args.checkpoint,
                           **({"ct2_threads": args.ct2_threads} if args.ct2_threads else {}))
  # the server's batches at once: as given, else the engine's own (as seq2seq-serve's)
  args.decoders = args.decoders or translator.limits.parallel_batches
  first = first_pass(translator, lines, args.beam, args.batch_size)  # compiles
  unsorted = unsorted_batches(translator, lines, args)
  unsorted()  # compiles the row counts these batches take
  seconds = alternate({"batch": first["again"], "unsorted": unsorted}, rounds=3)
  batch = figures(first, seconds["batch"], lines, references)
  short = min(lines[:200], key=len)
  translator.translate([short], beam_size=args.beam)  # compiled
  one = functools.partial(translator.translate, [short], beam_size=args.beam)
  alone = alternate({"alone": one}, rounds=30)["alone"]
  # What one client sends: the test sentences in turn, each alone (the first pass compiles
  # the lengths they take).
  sample = lines[:ALONE_SAMPLE]
  each = {f"line {i}": functools.partial(translator.translate, [t], beam_size=args.beam)
          for i, t in enumerate(sample)}
  for run in each.values():
    run()
  each_alone = [s[0] for s in alternate(each, rounds=1).values()]
  del one, each
  threads = translator.describe().get("threads")
  del translator
  gc.collect()
  return {"batch_sentences_per_s": batch["sentences_per_s"],
          "threads": (f"inter_threads {threads['inter_threads']} x intra_threads "
                      f"{threads['intra_threads']}") if threads else None,
          "unsorted_batch_sentences_per_s": round(
              len(lines) / statistics.median(seconds["unsorted"]), 1),
          "one_short_sentence_ms": round(1000 * statistics.median(alone), 2),
          "short_sentence": short,
          "one_sentence_p50_ms": round(1000 * statistics.median(each_alone), 2)}


def start_server(command: list[str], ready, seconds: float = 900
                 ) -> tuple[subprocess.Popen, str]:
  """Starts `command` (a server, given `--port PORT` after it) and waits until its
  /health answers 200 with a body that `ready` accepts."""
  port = free_port()
  proc = subprocess.Popen([*command, "--port", str(port)], cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  url = f"http://127.0.0.1:{port}"
  deadline = time.time() + seconds
  while time.time() < deadline:
    try:
      status, health = get(url + "/health")
      if status == 200 and ready(health):
        return proc, url
    except OSError:
      pass
    if proc.poll() is not None:
      break
    time.sleep(0.5)
  proc.kill()
  sys.exit(f"server did not start: {' '.join(command)}")


def start_seq2seq_serve(args) -> tuple[subprocess.Popen, str]:
  """seq2seq-serve with the run's model and search, once ready and (JAX) every batch row
  count compiled: the steady state is what is measured."""
  model = ["--model" if args.engine == "ctranslate2" else "--workdir", args.workdir]
  rows = [1 << k for k in range(args.batch_size.bit_length())]
  return start_server([sys.executable, "-m", "seq2seq.cli.serve", *model, "--engine",
                       args.engine, "--checkpoint", args.checkpoint, "--beam",
                       str(args.beam), "--max-batch", str(args.batch_size),
                       "--decoders", str(args.decoders), "--max-queue", "4096",
                       *(["--ct2-threads", args.ct2_threads] if args.ct2_threads else [])],
                      lambda health: health.get("batch_rows") in ([], rows))


async def client(host: str, port: int, texts, stop_at: float, out: dict,
                 body_of=lambda text: {"text": text}, field: str = "translation") -> None:
  """Sends one text per request (`body_of(item)` the JSON of each item of `texts`, the
  answer's `field` checked against `out["expected"][item]`), back to back on one
  kept-alive connection, until `stop_at`: raw HTTP/1.1 on asyncio streams, so that the
  load generator, which shares the server's cores, spends as little of them as it can."""
  reader, writer = await asyncio.open_connection(host, port)
  try:
    while time.perf_counter() < stop_at:
      text = next(texts)
      body = json.dumps(body_of(text)).encode()
      t = time.perf_counter()
      writer.write(b"POST /translate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json"
                   b"\r\nContent-Length: %d\r\n\r\n%s" % (host.encode(), len(body), body))
      head = await reader.readuntil(b"\r\n\r\n")
      status = int(head.split(b" ", 2)[1])
      length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:"))
      answer = json.loads(await reader.readexactly(length))
      if status == 429:
        out["refused"] += 1
        continue
      out["latencies"].append(time.perf_counter() - t)
      if status != 200 or out["expected"][text] != answer[field]:
        out["wrong"].append((status, text, answer.get(field)))
  finally:
    writer.close()


class InstantEngine:
  """An engine that answers at once ("<" + the text's first word): the server around it is
  all that costs."""

  directions = (("en", "de"),)

  def __init__(self):
    from seq2seq.decoding.engine import EngineLimits
    from seq2seq.decoding.engine_io import SearchSettings
    self.defaults, self.limits = SearchSettings(), EngineLimits(128, 126)

  def describe(self):
    return {"engine": "instant"}

  def check(self, texts, prefixes=None):
    pass

  def translate(self, texts, settings=None, **_):
    return ["<" + t.split()[0] for t in texts]


def serve_instant(port: int) -> None:
  """Runs seq2seq-serve's app around `InstantEngine` (this file run with --serve-instant
  --port PORT)."""
  import logging

  import uvicorn

  from seq2seq.serving.http_server import create_app
  logging.getLogger("seq2seq.serve.access").disabled = True  # as serve_load's server: DEVNULL
  uvicorn.run(create_app(InstantEngine()), host="127.0.0.1", port=port, log_level="warning")


def cpu_seconds(pid: int) -> float:
  """User + system CPU seconds of process `pid` so far (Linux's /proc)."""
  fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request_path(lines, clients: int, seconds: float) -> dict:
  """The request path alone: the server's app around an engine that answers at once,
  under `clients` clients; its CPU and the load generator's per request."""
  proc, url = start_server([sys.executable, __file__, "--serve-instant"], lambda _: True, 120)
  try:
    server0, me0 = cpu_seconds(proc.pid), time.process_time()
    row = load(url, lines, clients, seconds,
               dict(zip(lines, InstantEngine().translate(lines))))
    server1, me1 = cpu_seconds(proc.pid), time.process_time()
  finally:
    proc.terminate()
    proc.wait(60)
  return {"clients": clients, "requests_per_s": row["sentences_per_s"],
          "server_cpu_ms_per_request": round(1000 * (server1 - server0) / row["requests"], 3),
          "load_generator_cpu_ms_per_request": round(1000 * (me1 - me0) / row["requests"], 3),
          "mismatches": row["mismatches"]}


def batch_totals(url) -> tuple[float, float, float]:
  """(texts, batches, seconds decoding them) the server has done so far, from its /metrics
  histograms."""
  import urllib.request
  with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
    text = r.read().decode()
  value = lambda name: sum(float(line.split()[-1]) for line in text.splitlines()
                           if line.startswith((name + " ", name + "{")))  # all models
  return (value("seq2seq_batch_texts_sum"), value("seq2seq_batch_texts_count"),
          value("seq2seq_batch_seconds_sum"))


def load(url, lines, clients, seconds, expected) -> dict:
  host, port = url.removeprefix("http://").split(":")
  texts_before, batches_before, decoding_before = batch_totals(url)
  out = {"latencies": [], "wrong": [], "refused": 0, "expected": expected}
  texts = itertools.cycle(lines)

  async def all_clients():
    stop_at = time.perf_counter() + seconds
    await asyncio.gather(*(client(host, int(port), texts, stop_at, out)
                           for _ in range(clients)))

  t0 = time.perf_counter()
  asyncio.run(all_clients())
  wall = time.perf_counter() - t0
  texts_after, batches_after, decoding_after = batch_totals(url)
  ms = np.array(out["latencies"]) * 1000
  pct = lambda q: round(float(np.percentile(ms, q)), 1)
  return {"clients": clients, "requests": len(ms), "seconds": round(wall, 1),
          "sentences_per_s": round(len(ms) / wall, 1), "p50_ms": pct(50),
          "p95_ms": pct(95), "p99_ms": pct(99), "refused_429": out["refused"],
          "texts_per_batch": round((texts_after - texts_before)
                                   / max(batches_after - batches_before, 1), 1),
          "server_batch_ms": round(1000 * (decoding_after - decoding_before)
                                   / max(batches_after - batches_before, 1), 1),
          "mismatches": len(out["wrong"]),
          "mismatched": [{"status": status, "text": text, "answer": answer,
                          "alone": expected.get(text)} for status, text, answer in out["wrong"][:5]]}


def main():
  if sys.argv[1:2] == ["--serve-instant"]:
    return serve_instant(int(sys.argv[3]))
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True, help="a run directory, or with --engine "
                 "ctranslate2 an export")
  p.add_argument("--engine", default="jax", choices=("jax", "ctranslate2"))
  p.add_argument("--checkpoint", default="best")
  p.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  p.add_argument("--clients", default="1,8,64")
  p.add_argument("--seconds", type=float, default=30.0, help="per client count")
  p.add_argument("--beam", type=int, default=1)
  p.add_argument("--batch-size", type=int, default=64)
  p.add_argument("--decoders", type=int, default=None, help="the server's --decoders "
                 "(default: the engine's own, as seq2seq-serve's)")
  p.add_argument("--ct2-threads", default=None, help="--engine ctranslate2: the engine's and "
                 "the server's --ct2-threads (default: the export's, throughput)")
  add_results_flag(p)
  args = p.parse_args()
  enable_compilation_cache()
  lines = read_lines(args.src)
  engine = engine_speeds(args, lines, read_lines(args.src.replace(".en", ".de")))
  print(f"engine alone: {engine['batch_sentences_per_s']:.1f} sentences/s in batches of "
        f"{args.batch_size} sorted by length, {engine['unsorted_batch_sentences_per_s']:.1f} "
        f"in batches as the server forms them ({args.batch_size // args.decoders} shuffled "
        f"texts, {args.decoders} at once); one short sentence "
        f"{engine['one_short_sentence_ms']:.1f} ms", flush=True)
  proc, url = start_seq2seq_serve(args)
  try:
    # Each sentence alone first: the reference answers (and every length compiled).
    expected = {t: post(url, {"text": t})[1]["translation"] for t in lines}
    rows = [load(url, lines, int(c), args.seconds, expected) for c in args.clients.split(",")]
  finally:
    proc.terminate()
    proc.wait(60)
  for r in rows:
    r["share_of_batch"] = round(r["sentences_per_s"] / engine["batch_sentences_per_s"], 3)
    r["share_of_unsorted"] = round(r["sentences_per_s"]
                                   / engine["unsorted_batch_sentences_per_s"], 3)
    print(f"{r['clients']:>3} clients: {r['sentences_per_s']:7.1f} sentences/s "
          f"({100 * r['share_of_batch']:.0f} % of batch decoding, "
          f"{100 * r['share_of_unsorted']:.0f} % of its unsorted batches), p50 {r['p50_ms']:.0f} ms, "
          f"p95 {r['p95_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, {r['texts_per_batch']} texts "
          f"per batch ({r['requests']} requests, "
          f"{r['refused_429']} refused, {r['mismatches']} mismatches)")
  one = next((r for r in rows if r["clients"] == 1), None)
  if one:
    one["alone_ratio"] = round(one["p50_ms"] / engine["one_sentence_p50_ms"], 2)
    print(f"1 client: p50 {one['p50_ms']:.1f} ms, the server's batches "
          f"{one['server_batch_ms']:.1f} ms; the engine alone on the same sentences (the first "
          f"{ALONE_SAMPLE}, each alone) p50 {engine['one_sentence_p50_ms']:.1f} ms: "
          f"{one['alone_ratio']:.2f}x (against the shortest sentence alone, "
          f"{engine['one_short_sentence_ms']:.1f} ms: "
          f"{one['p50_ms'] / engine['one_short_sentence_ms']:.2f}x)")
  path = request_path(lines, max(int(c) for c in args.clients.split(",")),
                      min(args.seconds, 10.0))
  print(f"the request path alone (an engine that answers at once), {path['clients']} "
        f"clients: {path['requests_per_s']:.0f} requests/s; server CPU "
        f"{path['server_cpu_ms_per_request']:.3f} ms and load generator CPU "
        f"{path['load_generator_cpu_ms_per_request']:.3f} ms per request")
  result = {"benchmark": "serve_load", "workdir": args.workdir, "engine": args.engine,
            "beam": args.beam, "batch_size": args.batch_size, "decoders": args.decoders,
            **engine, "rows": rows, "request_path": path, "machine": machine()}
  report(args.results, result, serve_rows(result))


def serve_rows(result: dict) -> list[dict]:
  """Rows of kind "serve" (bench/report.py): one per client count."""
  engine = "JAX" if result["engine"] == "jax" else f"CTranslate2 ({result['threads']})"
  search = "greedy" if result["beam"] == 1 else f"beam {result['beam']}"
  path = result["request_path"]
  return [{"name": f"serve-{slug(result['machine']['cpu'])}-{result['engine']}-"
                   f"{search.replace(' ', '')}-{r['clients']}",
           "kind": "serve", "engine": engine, "search": search,
           **{k: r.get(k) for k in ("clients", "sentences_per_s", "share_of_batch",
                                    "share_of_unsorted", "p50_ms", "p95_ms", "p99_ms",
                                    "alone_ratio", "requests", "refused_429", "mismatches",
                                    "texts_per_batch", "server_batch_ms")},
           **{k: result[k] for k in ("batch_sentences_per_s", "unsorted_batch_sentences_per_s",
                                     "one_short_sentence_ms", "one_sentence_p50_ms",
                                     "decoders")},
           "note": f"batches of up to {result['batch_size']}, {result['decoders']} decoders; "
                   f"the request path alone: {path['requests_per_s']} requests/s at "
                   f"{path['clients']} clients"}
          for r in result["rows"]]

if __name__ == "__main__":
  main()
