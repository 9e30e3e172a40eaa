"""CTranslate2 at its best on this machine: a sweep of its threads and batching over an
export, each configuration in a process of its own, text in and text out.

  python bench/ctranslate2_baseline.py --model EXPORT_DIR [--beam 5] [--alpha 1.3] \
      [--batches examples:16,examples:32,examples:64,tokens:1024] [--threads 1x1,1x2,2x1] \
      [--passes 2] [--src FILE]

CTranslate2 is run as its users run it (its Python API, SentencePiece around it): the
export's `spm.model` cuts each line into pieces, `Translator.translate_batch` translates
them all with `max_batch_size` / `batch_type` (CTranslate2 sorts by length, splits into
batches and runs them on its `inter_threads` workers at once), and SentencePiece joins
the pieces again; all three are timed. Each `inter_threads x intra_threads` configuration
(default: every pair whose product is the cores this process may use, and 1x1) is a
worker process that loads the model once and times passes on request; for each search
(greedy, beam) every batching of --batches is timed with --passes passes after one that
loads what CTranslate2 loads lazily. Prints every configuration's sentences/s and the
best of each search; the last line is the JSON of all figures.

bench/decode_speed.py --compare-ctranslate2 uses the same workers: the sweep picks the
best configuration of float32 and int8, and those are timed in alternation with the JAX
engine (in the benchmark's own process).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from seq2seq.data.textfiles import read_lines

from common import MULTI30K, add_results_flag, machine, peak_rss_mib, report

BATCHES = "examples:16,examples:32,examples:64,tokens:1024"


def thread_plans(n: int) -> list[tuple[int, int]]:
  """(inter, intra) pairs whose product is `n` cores, fewest workers first, and (1, 1)."""
  plans = [(i, n // i) for i in range(1, n + 1) if n % i == 0]
  return plans if (1, 1) in plans else [(1, 1), *plans]


def parse_threads(text: str) -> list[tuple[int, int]]:
  from seq2seq.decoding.ct2_engine import ThreadPlan  # imports JAX: not in the workers
  out = []
  for item in text.split(","):
    try:
      plan = ThreadPlan.of(item)
    except ValueError:
      sys.exit(f"error: --threads {item!r}: expected INTERxINTRA, e.g. 2x1")
    out.append((plan.inter, plan.intra))
  return out


def parse_batches(text: str) -> list[tuple[str, int]]:
  out = []
  for item in text.split(","):
    kind, _, size = item.partition(":")
    if kind not in ("examples", "tokens") or not size.isdigit() or int(size) < 1:
      sys.exit(f"error: --batches {item!r}: expected examples:N or tokens:N")
    out.append((kind, int(size)))
  return out


def peak_mib() -> float:
  """This process's peak resident memory (VmHWM: unlike getrusage's, not the parent's
  before exec)."""
  for line in Path("/proc/self/status").read_text().splitlines():
    if line.startswith("VmHWM:"):
      return round(int(line.split()[1]) / 1024, 1)
  return peak_rss_mib()


# ------------------------------------------------------------------ the worker process


def serve(args) -> None:
  """The worker: loads the model, then answers one JSON request per stdin line with one
  timed pass (its seconds, output tokens and, if asked, the translations)."""
  import ctranslate2
  import sentencepiece

  lines = read_lines(args.src)
  if args.api == "engine":  # seq2seq's CTranslate2 engine, as translate.py runs it
    from seq2seq.decoding.engines import load_engine
    limit = dict(max_len_a=0.0, max_len_b=args.max_output) if args.max_output else {}
    engine = load_engine(args.model, "ctranslate2", compute_type=args.compute_type,
                         ct2_threads=f"{args.inter}x{args.intra}", **limit)

    def run(request):
      hyps = engine.translate(lines, beam_size=request["beam"], alpha=request["alpha"],
                              batch_size=request["max_batch_size"], nbest=1)
      return [h[0].text for h in hyps], sum(len(h[0].ids) + 1 for h in hyps)
  else:
    translator = ctranslate2.Translator(args.model, device="cpu",
                                        compute_type=args.compute_type,
                                        inter_threads=args.inter, intra_threads=args.intra)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(Path(args.model) / "spm.model"))

    def run(request):
      results = translator.translate_batch(
          sp.encode(lines, out_type=str), max_batch_size=request["max_batch_size"],
          batch_type=request["batch_type"], beam_size=request["beam"],
          length_penalty=request["alpha"],
          max_decoding_length=request.get("max_decoding_length", 256))
      hyps = [r.hypotheses[0] for r in results]
      return sp.decode(hyps), sum(len(h) + 1 for h in hyps)  # EOS included
  print(json.dumps({"ready": True}), flush=True)
  for line in sys.stdin:
    request = json.loads(line)
    t = time.perf_counter()
    texts, tokens = run(request)
    seconds = time.perf_counter() - t
    print(json.dumps({"seconds": seconds, "tokens": tokens, "peak_rss_mib": peak_mib(),
                      **({"outputs": texts} if request.get("outputs") else {})}), flush=True)


class Worker:
  """A worker process of one configuration: `compute_type`, `inter` x `intra` threads,
  `api` "reference" (CTranslate2's own API) or "engine" (seq2seq's engine)."""

  def __init__(self, model: str, src: str, compute_type: str, inter: int, intra: int,
               api: str = "reference", max_output: int = 0):
    self.compute_type, self.inter, self.intra, self.api = compute_type, inter, intra, api
    self.proc = subprocess.Popen(
        [sys.executable, __file__, "--worker", "--model", str(model), "--src", str(src),
         "--compute-type", compute_type, "--inter", str(inter), "--intra", str(intra),
         "--api", api, "--max-output", str(max_output)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": str(intra)})
    first = self.proc.stdout.readline()
    if not first:
      raise RuntimeError(f"the CTranslate2 worker {self.name} did not start")

  @property
  def threads(self) -> str:
    return f"inter_threads {self.inter} x intra_threads {self.intra}"

  @property
  def name(self) -> str:
    return (f"{'CTranslate2' if self.api == 'reference' else 'seq2seq CTranslate2 engine'} "
            f"{self.compute_type} {self.inter}x{self.intra}")

  def run(self, **request) -> dict:
    self.proc.stdin.write(json.dumps(request) + "\n")
    self.proc.stdin.flush()
    answer = self.proc.stdout.readline()
    if not answer:
      raise RuntimeError(f"the CTranslate2 worker {self.name} stopped")
    reply = json.loads(answer)
    self.peak_rss_mib = reply["peak_rss_mib"]  # the worker process's, so far
    return reply

  def close(self) -> None:
    self.proc.stdin.close()
    self.proc.wait(60)


def search_request(beam: int, alpha: float, batching: tuple[str, int], max_output: int = 0
                   ) -> dict:
  """A pass of greedy (beam 1, no length penalty) or beam search with this batching;
  `max_output`: at most this many pieces per output (0: CTranslate2's default, 256)."""
  return {"beam": beam, "alpha": 0.0 if beam == 1 else alpha, "batch_type": batching[0],
          "max_batch_size": batching[1], "max_decoding_length": max_output or 256}


def sweep(model, src, compute_type: str, plans, batchings, beams, alpha: float,
          passes: int, settle: float = 1.0, max_output: int = 0) -> list[dict]:
  """Every (threads, batching, search) of `compute_type` timed: one worker at a time, each
  setting's first pass untimed. Returns one row per setting: its configuration and the
  median sentences/s of `passes`."""
  n = len(read_lines(src))
  rows = []
  for inter, intra in plans:
    worker = Worker(model, src, compute_type, inter, intra)
    try:
      for beam in beams:
        for batching in batchings:
          request = search_request(beam, alpha, batching, max_output)
          worker.run(**request)  # loads what CTranslate2 loads lazily
          seconds = []
          for _ in range(passes):
            time.sleep(settle)
            seconds.append(worker.run(**request)["seconds"])
          rows.append({"compute_type": compute_type, "inter_threads": inter,
                       "intra_threads": intra, "batch_type": batching[0],
                       "max_batch_size": batching[1], "beam": beam,
                       "sentences_per_s": round(n / statistics.median(seconds), 1)})
          print(f"  {compute_type} {inter}x{intra} {batching[0]}:{batching[1]} beam {beam}: "
                f"{rows[-1]['sentences_per_s']:.1f} sentences/s", flush=True)
    finally:
      worker.close()
  return rows


def best(rows: list[dict], compute_type: str, beam: int) -> dict:
  return max((r for r in rows if r["compute_type"] == compute_type and r["beam"] == beam),
             key=lambda r: r["sentences_per_s"])


def add_sweep_flags(p: argparse.ArgumentParser, prefix: str = "") -> None:
  """--threads, --batches (each after `prefix`) and --sweep-passes."""
  p.add_argument(f"--{prefix}threads", default=None, help="CTranslate2's INTERxINTRA "
                 "configurations to sweep, comma-separated (default: every pair whose "
                 "product is the cores, and 1x1)")
  p.add_argument(f"--{prefix}batches", default=BATCHES, help="CTranslate2's batchings to "
                 "sweep: examples:N (max_batch_size N sentences) or tokens:N (N pieces), "
                 "comma-separated")
  p.add_argument("--sweep-passes", type=int, default=2,
                 help="timed passes of each configuration in the sweep (default 2)")


def main():
  if "--worker" in sys.argv:
    p = argparse.ArgumentParser()
    for flag in ("--model", "--src", "--compute-type", "--api"):
      p.add_argument(flag, required=True)
    p.add_argument("--inter", type=int, required=True)
    p.add_argument("--intra", type=int, required=True)
    p.add_argument("--max-output", type=int, default=0)
    p.add_argument("--worker", action="store_true")
    return serve(p.parse_args())
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--model", required=True, help="a directory written by seq2seq-export")
  p.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--alpha", type=float, default=1.3, help="CTranslate2's length penalty "
                 "(length ** alpha) for beam search")
  p.add_argument("--compute-types", default="float32,int8")
  add_sweep_flags(p)
  add_results_flag(p)
  args = p.parse_args()
  if not (Path(args.model) / "model.bin").is_file():
    sys.exit(f"error: --model {args.model}: no model.bin (a directory written by "
             "seq2seq-export)")
  src = args.src
  from seq2seq.decoding.ct2_engine import usable_cores  # imports JAX: not in the workers
  plans = parse_threads(args.threads) if args.threads else thread_plans(usable_cores())
  rows = []
  for q in args.compute_types.split(","):
    rows += sweep(args.model, src, q, plans, parse_batches(args.batches),
                  sorted({1, args.beam}), args.alpha, args.sweep_passes)
  bests = {f"{q}_{'greedy' if b == 1 else f'beam{b}'}": best(rows, q, b)
           for q in args.compute_types.split(",") for b in sorted({1, args.beam})}
  for name, row in bests.items():
    print(f"best {name}: {row['inter_threads']}x{row['intra_threads']} "
          f"{row['batch_type']}:{row['max_batch_size']}, {row['sentences_per_s']:.1f} "
          "sentences/s")
  report(args.results, {"benchmark": "ctranslate2_baseline", "model": args.model, "sweep": rows,
          "best": bests, **machine()})


if __name__ == "__main__":
  main()
