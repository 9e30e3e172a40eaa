"""Several models behind one seq2seq-serve: mixed traffic over six directions against the
same traffic sent to a server of one model, and the memory each model costs.

  python bench/serve_mixed.py --workdir RUN [--checkpoint averaged] [--clients 64] \
      [--seconds 30] [--beam 1] [--batch-size 64]

The six directions are six models made from RUN, each a folder whose config.json names
another direction (en→de, de→en, en→fr, fr→en, en→cs, cs→en) and whose checkpoints are
RUN's (linked): six models of one size, so that the comparison is of serving, not of
models; each is given the test sentences of RUN's source language, whatever its label
(throughput does not depend on the words). The mixed server holds the six
(`--workdir` six times); the reference server holds the first only. Each is started on
127.0.0.1, given the time to compile, and sent every test sentence alone first (the
reference answers, per direction); then `--clients` clients (one asyncio loop, raw
HTTP/1.1 on kept-alive connections, LibreTranslate's `q`/`source`/`target`) each send one
sentence per request, back to back, for `--seconds`, the mixed clients each to a
direction of their own in turn. Reports sentences/s, p50/p99, answers that differ from
the same text alone, and each server's resident memory once ready and after the load (the
difference over five models: the memory per model). The last line is the JSON of all figures.
"""

import argparse
import asyncio
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from seq2seq.data.textfiles import read_lines
from seq2seq.runtime import enable_compilation_cache

from common import MULTI30K, add_results_flag, machine, report
from serve_load import client, start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from serve_helpers import post  # noqa: E402

DIRECTIONS = (("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en"), ("en", "cs"), ("cs", "en"))


def relabelled(run: Path, folder: Path) -> list[Path]:
  """A model folder per direction: RUN's files linked, its config.json naming the
  direction."""
  out = []
  config = json.loads((run / "config.json").read_text())
  for src, tgt in DIRECTIONS:
    model = folder / f"{src}-{tgt}"
    model.mkdir()
    for entry in run.iterdir():
      if entry.name not in ("config.json", "cache"):
        (model / entry.name).symlink_to(entry.resolve())
    config["data"]["src_lang"], config["data"]["tgt_lang"] = src, tgt
    (model / "config.json").write_text(json.dumps(config, indent=2))
    out.append(model)
  return out


def rss_mib(pid: int) -> float:
  """A process's resident memory (MiB), with its children's (none here)."""
  for line in Path(f"/proc/{pid}/status").read_text().splitlines():
    if line.startswith("VmRSS:"):
      return round(int(line.split()[1]) / 1024, 1)
  return float("nan")


def load(url, lines, directions, clients, seconds):
  expected = {(t, s, g): post(url, {"q": t, "source": s, "target": g})[1]["translatedText"]
              for s, g in directions for t in lines}
  host, port = url.removeprefix("http://").split(":")
  out = {"latencies": [], "wrong": [], "refused": 0, "expected": expected}

  async def all_clients():
    stop_at = time.perf_counter() + seconds
    await asyncio.gather(*(client(host, int(port), iter(itertools.cycle(
        [(t, *directions[k % len(directions)]) for t in lines[k::clients] or lines])),
        stop_at, out, lambda x: {"q": x[0], "source": x[1], "target": x[2]}, "translatedText")
        for k in range(clients)))

  started = time.perf_counter()
  asyncio.run(all_clients())
  elapsed = time.perf_counter() - started
  lat = sorted(out["latencies"])
  return {"directions": len(directions), "clients": clients, "requests": len(lat),
          "sentences_per_s": round(len(lat) / elapsed, 1),
          "p50_ms": round(1000 * statistics.median(lat), 1),
          "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1),
          "refused_429": out["refused"], "mismatches": len(out["wrong"])}


def serve(models, args):
  command = [sys.executable, "-m", "seq2seq.cli.serve",
             *(x for m in models for x in ("--workdir", str(m))),
             "--checkpoint", args.checkpoint, "--beam", str(args.beam),
             "--max-batch", str(args.batch_size), "--decoders", "2", "--max-queue", "4096"]
  rows = [1 << k for k in range(args.batch_size.bit_length())]
  return start_server(command, lambda h: h.get("batch_rows") in ([], rows))


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--clients", type=int, default=64)
  p.add_argument("--seconds", type=float, default=30.0)
  p.add_argument("--beam", type=int, default=1)
  p.add_argument("--batch-size", type=int, default=64)
  add_results_flag(p)
  args = p.parse_args()
  enable_compilation_cache()
  run = Path(args.workdir).resolve()
  src = json.loads((run / "config.json").read_text())["data"]["src_lang"]
  lines = read_lines(MULTI30K / f"test_2016_flickr.{src}.gz")[:500]
  folder = Path(tempfile.mkdtemp(prefix="serve-mixed-"))
  try:
    models = relabelled(run, folder)
    result = {}
    for name, served, directions in (("one_model", models[:1], DIRECTIONS[:1]),
                                     ("six_models", models, DIRECTIONS)):
      proc, url = serve(served, args)
      try:
        ready = rss_mib(proc.pid)
        result[name] = load(url, lines, directions, args.clients, args.seconds)
        result[name].update(rss_mib_ready=ready, rss_mib=rss_mib(proc.pid))
      finally:
        proc.terminate()
        proc.wait(60)
      print(name, result[name], flush=True)
  finally:
    shutil.rmtree(folder, ignore_errors=True)
  result["mixed_over_one"] = round(result["six_models"]["sentences_per_s"]
                                   / result["one_model"]["sentences_per_s"], 3)
  result["rss_mib_per_model_ready"] = round((result["six_models"]["rss_mib_ready"]
                                             - result["one_model"]["rss_mib_ready"]) / 5, 1)
  result["rss_mib_per_model"] = round((result["six_models"]["rss_mib"]
                                       - result["one_model"]["rss_mib"]) / 5, 1)
  report(args.results, {"benchmark": "serve_mixed", "beam": args.beam, "clients": args.clients,
          "seconds": args.seconds, "batch_size": args.batch_size, "sentences": len(lines),
          **result, **machine()})


if __name__ == "__main__":
  main()
