"""Decoding speed on test_2016_flickr with a trained run, greedy and beam.

  python bench/decode_speed.py --workdir RUN_DIR [--beam 5] [--batch-size 64] \
      [--min-rows N[,N...]] [--workers N] [--length-buckets 16,32,64,128] \
      [--beam-stops exact,current] [--compare-ctranslate2] [--programs N]

Model load and compilation (a first pass over the same data) are timed separately;
the reported sentences/s and output tokens/s are the median of `--passes` more,
steady-state passes (each pass's figure is printed too), taken in alternation across
all searches and engines, so that the machine's drift during the run (these figures
move by a third between runs on a shared VM) hits every engine alike; each pass starts
2 s after the one before, once the other engine's threads have stopped polling. All passes must
give identical translations, and so must batch size 1 on a sample.

With --compare-ctranslate2 the same checkpoint is exported (seq2seq-export) as float32
and int8 and decoded by CTranslate2 in the same run, same batches, one thread per core;
each engine's BLEU against the references and the share of lines identical to the JAX
output are printed, and the ratio JAX / CTranslate2 float32 of sentences/s. CTranslate2
ranks beams with its own length penalty (length ** alpha, `--ct2-alpha`), JAX with
GNMT's (the run's alpha): their beam outputs differ for that reason alone (alpha 0 is
the same in both). CTranslate2 also ends a sentence by its own rule: as soon as its best
candidate ends. `--beam-stops exact,current` times JAX beam search with each of its rules
(decode.beam_search's `stop`; "beamN" is the exact one, "beamN_current" the other) and
gives each a ratio to CTranslate2's beam. `--min-rows 0,8` times each search with each
`decode.min_rows` (whole batches against batches that shrink as sentences finish; their
figures are named with `_min_rowsN`), each compiled from the cache as it stands, all timed
in alternation.
"""

import argparse
import functools
import gc
import statistics
import tempfile
import time
from pathlib import Path

import sacrebleu

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.engines import load_engine
from seq2seq.decoding.translator import Translator
from seq2seq.rundir import ctranslate2_model
from seq2seq.runtime import enable_compilation_cache

from common import MULTI30K, alternate, machine, peak_rss_mib, report


def first_pass(translator, lines, beam, batch_size, alpha=None) -> dict:
  """The compiling first pass: its seconds, outputs, and a function that runs one more
  pass and checks that it gives the same translations."""
  def run():
    return translator.translate(lines, beam_size=beam, alpha=alpha, batch_size=batch_size,
                                nbest=1)
  t = time.perf_counter()
  out = run()
  seconds = time.perf_counter() - t
  texts = [h[0].text for h in out]

  def again():
    assert [h[0].text for h in run()] == texts, "a later pass changed a translation"
  return {"seconds": seconds, "out": out, "again": again,
          "alpha": translator.settings(alpha=alpha).alpha}


def figures(first: dict, times: list, lines, references) -> dict:
  out = first["out"]
  steady_s = statistics.median(times)
  tokens = sum(len(h[0].ids) + 1 for h in out)  # EOS included
  return {"sentences_per_s": round(len(lines) / steady_s, 1),
          "output_tokens_per_s": round(tokens / steady_s),
          "seconds": round(steady_s, 2),
          "sentences_per_s_each_pass": [round(len(lines) / t, 1) for t in times],
          "compile_and_first_pass_s": round(first["seconds"], 1),
          "alpha": first["alpha"],
          "bleu": round(sacrebleu.corpus_bleu([h[0].text for h in out], [references]).score, 2)}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="best")
  p.add_argument("--src", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  p.add_argument("--ref", default=str(MULTI30K / "test_2016_flickr.de.gz"))
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--batch-size", type=int, default=64)
  p.add_argument("--min-rows", default=None,
                 help="decode.min_rows: batches shrink down to this many rows as sentences "
                 "finish (0: never; default: the run's setting); several, comma-separated, "
                 "time each search with each")
  p.add_argument("--workers", type=int, default=None,
                 help="batches decoded at once on threads (default: the run's setting)")
  p.add_argument("--programs", type=int, default=0,
                 help="decode.programs: compiled searches kept in memory (default 0: all, "
                 "so that no timed pass loads a dropped one again)")
  p.add_argument("--length-buckets", default=None,
                 help="decode.length_buckets, comma-separated: the padded source lengths "
                 "of batches, one compiled search each (default: the run's setting)")
  p.add_argument("--beam-stops", default=None,
                 help="comma-separated decode.beam_stop rules to time beam search with "
                 "(default: the run's setting)")
  p.add_argument("--compare-ctranslate2", action="store_true",
                 help="also export the checkpoint and decode with CTranslate2 float32 and int8")
  p.add_argument("--passes", type=int, default=5,
                 help="steady-state passes of each search, in alternation (default 5)")
  p.add_argument("--ct2-alpha", type=float, default=1.3,
                 help="CTranslate2's length penalty (length ** alpha) for beam search; 1.3 "
                 "was best on Multi30k val for the recipe's model (bench/README.md)")
  args = p.parse_args()
  enable_compilation_cache()
  t = time.perf_counter()
  buckets = (tuple(int(b) for b in args.length_buckets.split(","))
             if args.length_buckets else None)
  overrides = {k: v for k, v in (("workers", args.workers), ("length_buckets", buckets),
                                 ("programs", args.programs)) if v is not None}
  min_rows = [int(n) for n in args.min_rows.split(",")] if args.min_rows else [None]

  def loader(rows: int | None):
    """Translator.load of the run with these min_rows (None: the run's setting)."""
    return functools.partial(Translator.load, args.workdir, args.checkpoint, **overrides,
                             **({} if rows is None else {"min_rows": rows}))
  translator = loader(min_rows[0])()
  load_s = time.perf_counter() - t
  stops = args.beam_stops.split(",") if args.beam_stops else [translator.decode_cfg.beam_stop]
  lines, references = read_lines(args.src), read_lines(args.ref)
  result = {"benchmark": "decode_speed", "sentences": len(lines), "load_s": round(load_s, 1),
            "batch_size": args.batch_size, "checkpoint": args.checkpoint,
            "min_rows": translator.decode_cfg.min_rows if len(min_rows) == 1 else min_rows,
            "workers": translator.decode_cfg.workers,
            "length_buckets": list(translator.buckets.boundaries)}
  # (result name, beam size, the translator of its stop rule and min_rows)
  searches = []
  for rows in min_rows:
    load = loader(rows)
    suffix = "" if len(min_rows) == 1 else f"_min_rows{rows}"
    searches.append(("greedy" + suffix, 1, load()))
    searches += [(f"beam{args.beam}" + ("" if stop == "exact" else f"_{stop}") + suffix,
                  args.beam, load(beam_stop=stop)) for stop in stops]
  firsts = {}
  for name, beam, search in searches:
    firsts[name] = first_pass(search, lines, beam, args.batch_size)
    one = search.translate(lines[:50], beam_size=beam, batch_size=1)
    result[f"{name}_batch_1_identical_on_50"] = one == [h[0].text
                                                        for h in firsts[name]["out"][:50]]
  result["jax_peak_rss_mib"] = peak_rss_mib()  # before CTranslate2 is loaded
  built = sum(search.search_programs for _, _, search in searches)
  # The steady passes of JAX and CTranslate2 float32 alternate; int8 is timed after them,
  # on its own: with two CTranslate2 models loaded at once, their threads slowed each
  # other 4-5x on 2 cores.
  engines = ("float32", "int8") if args.compare_ctranslate2 else (None,)
  with tempfile.TemporaryDirectory() as tmp:
    for q in engines:
      timed = dict(firsts) if q in (None, "float32") else {}
      if q is not None:
        path = ctranslate2_model.export_ctranslate2(args.workdir, Path(tmp) / q, args.checkpoint, q)
        ct2 = load_engine(path, "ctranslate2")
        for name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
          alpha = 0.0 if beam == 1 else args.ct2_alpha
          timed[f"ctranslate2_{q}_{name}"] = first_pass(ct2, lines, beam, args.batch_size, alpha)
        del ct2  # the passes' closures hold it until `timed` goes
      seconds = alternate({name: first["again"] for name, first in timed.items()},
                          args.passes, settle=2.0 if q else 0.0)
      for name, first in timed.items():
        result[name] = figures(first, seconds[name], lines, references)
        firsts[name] = {"out": first["out"]}
      del timed, first
      gc.collect()
  if args.compare_ctranslate2:
    for q in ("float32", "int8"):
      for ct2_name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
        # the share of lines equal to each JAX search of the same beam size
        out = firsts[f"ctranslate2_{q}_{ct2_name}"]["out"]
        result[f"ctranslate2_{q}_{ct2_name}"]["identical_to_jax"] = {
            name: sum(a[0].ids == b[0].ids for a, b in zip(out, firsts[name]["out"]))
            / len(lines) for name, jax_beam, _ in searches if jax_beam == beam}
    for name, beam, _ in searches:
      ct2_name = "greedy" if beam == 1 else f"beam{args.beam}"
      result[f"ratio_jax_to_ctranslate2_float32_{name}"] = round(
          result[name]["sentences_per_s"]
          / result[f"ctranslate2_float32_{ct2_name}"]["sentences_per_s"], 2)
  # searches built (loaded again once dropped, --programs) during the timed passes: 0, or
  # those passes timed loading too
  result["jax_programs_built_while_timed"] = (
      sum(search.search_programs for _, _, search in searches) - built)
  # the operands JAX decoded with (the machine's decoding probe, seq2seq.numerics.resolve)
  result["jax_matmul_dtype"] = translator.model.numerics.operand_dtype
  report(dict(result, **machine()))


if __name__ == "__main__":
  main()
