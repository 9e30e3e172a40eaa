"""Where decoding's resident memory goes: the process's resident and peak memory after
each stage of translating test_2016_flickr with a trained run.

  python bench/decode_memory.py --workdir RUN_DIR [--checkpoint averaged] [--beams 1,5] [--workers N]

Stages: Python with JAX and the package imported; the run loaded (parameters,
tokenizer); then, per beam size, the first pass (its searches built and compiled, or
loaded from the caches) and a second pass. "rss" is the resident memory after the stage,
"peak" the most resident so far: a pass's peak over the resident memory after it is what
its batches held while they were searched (`decode.workers` batches at once). Figures
depend on glibc's allocator as much as on JAX: run once more with, e.g.,
MALLOC_ARENA_MAX=2 to see how much is memory freed but kept by malloc.
"""

import argparse
import resource
import time

from common import MULTI30K, machine, report


def resident_mib() -> float:
  with open("/proc/self/status") as f:
    kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
  return round(kib / 1024, 1)


def peak_mib() -> float:
  return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="best")
  p.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  p.add_argument("--beams", default="1,5", help="beam sizes, in order")
  p.add_argument("--batch-size", type=int, default=64)
  p.add_argument("--workers", type=int, default=None,
                 help="batches searched at once (default: the run's decode.workers)")
  args = p.parse_args()
  stages = [{"stage": "python", "rss_mib": resident_mib(), "peak_mib": peak_mib()}]
  import jax

  from seq2seq.data.textfiles import read_lines
  from seq2seq.decoding.translator import Translator
  from seq2seq.runtime import enable_compilation_cache
  enable_compilation_cache()
  stages.append({"stage": "imports", "rss_mib": resident_mib(), "peak_mib": peak_mib()})
  overrides = {} if args.workers is None else {"workers": args.workers}
  translator = Translator.load(args.workdir, args.checkpoint, **overrides)
  params = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(translator.params))
  stages.append({"stage": "run loaded", "rss_mib": resident_mib(), "peak_mib": peak_mib()})
  lines = read_lines(args.src)
  for beam in (int(b) for b in args.beams.split(",")):
    for which in ("first", "second"):
      t = time.perf_counter()
      translator.translate(lines, beam_size=beam, batch_size=args.batch_size)
      stages.append({"stage": f"beam {beam}, {which} pass", "seconds": round(time.perf_counter() - t, 1),
                     "rss_mib": resident_mib(), "peak_mib": peak_mib(),
                     "programs": translator.search_programs})
  for s in stages:
    print(f"{s['stage']:24} rss {s['rss_mib']:8.1f} MiB   peak {s['peak_mib']:8.1f} MiB")
  report({"benchmark": "decode_memory", "sentences": len(lines), "batch_size": args.batch_size,
          "parameters_mib": round(params / 2**20, 1), "workers": translator.decode_cfg.workers,
          "matmul_dtype": translator.model.numerics.operand_dtype, "stages": stages, **machine()})


if __name__ == "__main__":
  main()
