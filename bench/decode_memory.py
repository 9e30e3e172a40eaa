"""Where decoding's resident memory goes: the process's resident and peak memory after
each stage of translating test_2016_flickr with a trained run.

  python bench/decode_memory.py --workdir RUN_DIR [--checkpoint averaged] [--beams 1,5] [--workers N]

Stages: Python with JAX and the package imported; the run loaded (parameters,
tokenizer); then, per beam size, the first pass (its searches built and compiled, or
loaded from the caches) and a second pass. "rss" is the resident memory after the stage,
"peak" the most resident so far: a pass's peak over the resident memory after it is what
its batches held while they were searched (`decode.workers` batches at once). Figures
depend on glibc's allocator as much as on JAX: run once more with, e.g.,
MALLOC_ARENA_MAX=2 to see how much is memory freed but kept by malloc (`translate()`
gives it back after each call of several batches, `runtime.give_back_freed_memory`).

Then the accounting: what a batch's search needs (XLA's temporary buffers for the
largest program, `memory_analysis()`, times the batches searched at once), what the run
needs loaded, and what the compiled programs hold (the rest of the resident memory after
the passes: XLA:CPU keeps each program's HLO and buffer analysis; `decode.programs` bounds
how many are kept, `--programs` here).
"""

import argparse
import resource
import time

from common import MULTI30K, add_results_flag, machine, report


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
  p.add_argument("--programs", type=int, default=None,
                 help="compiled searches kept (default: the run's decode.programs; 0: all)")
  add_results_flag(p)
  args = p.parse_args()
  stages = [{"stage": "python", "rss_mib": resident_mib(), "peak_mib": peak_mib()}]
  import jax

  from seq2seq.data.textfiles import read_lines
  from seq2seq.decoding.translator import Translator
  from seq2seq.runtime import enable_compilation_cache
  enable_compilation_cache()
  stages.append({"stage": "imports", "rss_mib": resident_mib(), "peak_mib": peak_mib()})
  overrides = {k: v for k, v in (("workers", args.workers), ("programs", args.programs))
               if v is not None}
  translator = Translator.load(args.workdir, args.checkpoint, **overrides)
  params = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(translator.params))
  stages.append({"stage": "run loaded", "rss_mib": resident_mib(), "peak_mib": peak_mib()})
  lines = read_lines(args.src)
  beams = [int(b) for b in args.beams.split(",")]
  for beam in beams:
    for which in ("first", "second"):
      t = time.perf_counter()
      translator.translate(lines, beam_size=beam, batch_size=args.batch_size)
      stages.append({"stage": f"beam {beam}, {which} pass", "seconds": round(time.perf_counter() - t, 1),
                     "rss_mib": resident_mib(), "peak_mib": peak_mib(),
                     "programs": translator.search_programs, "kept": programs_kept(translator)})
  for s in stages:
    print(f"{s['stage']:24} rss {s['rss_mib']:8.1f} MiB   peak {s['peak_mib']:8.1f} MiB")
  accounts = account(translator, lines, beams, args.batch_size, stages)
  for a in accounts:
    print(f"beam {a['beam']}: a batch's buffers {a['batch_buffers_mib']:.1f} MiB (x{a['workers']} "
          f"at once); the run loaded {a['run_loaded_mib']:.1f} MiB; so a pass needs "
          f"{a['needed_mib']:.1f} MiB; its peak {a['peak_mib']:.1f} MiB "
          f"({a['peak_over_needed']:.2f}x); programs kept {a['programs_kept']}, holding "
          f"about {a['programs_mib']:.1f} MiB")
  report(args.results, {"benchmark": "decode_memory", "sentences": len(lines), "batch_size": args.batch_size,
          "parameters_mib": round(params / 2**20, 1), "workers": translator.decode_cfg.workers,
          "programs_limit": translator.decode_cfg.programs,
          "matmul_dtype": translator.model.numerics.operand_dtype, "stages": stages,
          "accounts": accounts, **machine()})


def programs_kept(translator) -> int:
  """The compiled searches the translator's model keeps now (decode.programs bounds them)."""
  return sum(e.program is not None for e in translator._search.entries.values())


def account(translator, lines, beams, batch_size, stages) -> list[dict]:
  """Per beam size: the largest temporary buffers one batch's search takes (XLA's own
  figure for each program the pass ran, compiled again from the cache), the memory a pass
  needs (the run loaded plus `workers` such batches), against the pass's peak; and what
  the programs kept hold, the rest of the resident memory after the pass."""
  loaded = next(s for s in stages if s["stage"] == "run loaded")["rss_mib"]
  workers = translator.decode_cfg.workers
  ids = translator.encode(lines)
  out = []
  for beam in beams:
    temps = [lowered.compile().memory_analysis().temp_size_in_bytes
             for lowered in translator.lower_searches(ids, beam_size=beam, batch_size=batch_size)]
    second = next(s for s in stages if s["stage"] == f"beam {beam}, second pass")
    batch = max(temps) / 2**20
    needed = loaded + workers * batch
    out.append({"beam": beam, "batch_buffers_mib": round(batch, 1), "workers": workers,
                "run_loaded_mib": loaded, "needed_mib": round(needed, 1),
                "peak_mib": second["peak_mib"], "peak_over_needed": round(second["peak_mib"] / needed, 2),
                "programs_kept": second["kept"], "programs_mib": round(second["rss_mib"] - loaded, 1)})
  return out


if __name__ == "__main__":
  main()
