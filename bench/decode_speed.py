"""Decoding speed on test_2016_flickr with a trained run, greedy and beam.

  python bench/decode_speed.py --workdir RUN_DIR [--beam 5] [--batch-size 64] \
      [--min-rows N[,N...]] [--workers N] [--length-buckets 16,32,64,128] \
      [--beam-stops exact,current] [--compare-ctranslate2] [--programs N] \
      [--ct2-batches examples:16,examples:32,examples:64,tokens:1024] [--results FILE]

Model load and compilation (a first pass over the same data) are timed separately;
the reported sentences/s and output tokens/s are the median of `--passes` more,
steady-state passes (each pass's figure is printed too), taken in alternation across
all searches and engines, so that the machine's drift during the run (these figures
move by a third between runs on a shared VM) hits every engine alike; each pass starts
2 s after the one before, once the other engine's threads have stopped polling. All passes must
give identical translations, and so must batch size 1 on a sample.

With --compare-ctranslate2 the checkpoint is exported (seq2seq-export, float32) and
CTranslate2 is measured at its best on this machine, each configuration in a process of
its own (bench/ctranslate2_baseline.py): its `inter_threads x intra_threads` (every pair
whose product is the cores, and 1x1) and its batching (--ct2-batches) swept for float32
and int8 (the float32 export loaded with compute_type int8, as CTranslate2's users
quantize), with greedy and beam search; the best configuration of each is then timed in
alternation with the JAX searches, text in and text out on both sides (SentencePiece
inside the timer, as JAX's `translate` has it), and so is seq2seq's own CTranslate2
engine at its default threads. Each engine's BLEU against the references, the share of
lines identical to the JAX output, its peak resident memory, and the ratios JAX /
CTranslate2 float32 and JAX / CTranslate2 int8 of sentences/s are printed. CTranslate2
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
import statistics
import tempfile
import time
from pathlib import Path

import sacrebleu

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.ct2_engine import ThreadPlan, usable_cores
from seq2seq.decoding.translator import Translator
from seq2seq.rundir import ctranslate2_model
from seq2seq.runtime import enable_compilation_cache

import ctranslate2_baseline as baseline
from common import MULTI30K, add_results_flag, alternate, machine, peak_rss_mib, report, slug


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


def search_label(name: str) -> str:
  """"beam5_current_min_rows8" -> "beam 5, stop current, min_rows 8"."""
  head, *rest = name.split("_min_rows")
  search, _, stop = head.partition("_")
  words = ["greedy" if search == "greedy" else f"beam {search[4:]}"]
  words += [f"stop {stop}"] if stop else []
  words += [f"min_rows {rest[0]}"] if rest else []
  return ", ".join(words)


def decode_rows(result: dict, args) -> list[dict]:
  """Rows of kind "decode" (bench/report.py) of the figures: one per JAX search and, with
  --compare-ctranslate2, one per CTranslate2 search at its best configuration and one per
  search of seq2seq's CTranslate2 engine."""
  rows = []
  for name, figures_ in result.items():
    if not (isinstance(figures_, dict) and "sentences_per_s" in figures_):
      continue
    if name.startswith("ctranslate2_"):
      q, search = name.split("_")[1:3]
      beam = 1 if search == "greedy" else args.beam
      # every configuration of the sweep this best one was chosen from
      engine, ratio = f"CTranslate2 {q}", {"sweep": [
          {"threads": f"{r['inter_threads']}x{r['intra_threads']}",
           "batching": f"{r['batch_type']}:{r['max_batch_size']}",
           "sentences_per_s": r["sentences_per_s"]}
          for r in result["ctranslate2_sweep"] if r["compute_type"] == q and r["beam"] == beam]}
    elif name.startswith("seq2seq_ctranslate2_engine_"):
      search = name.rsplit("_", 1)[1]
      engine, ratio = "seq2seq CTranslate2 engine float32", {}
    else:
      search, engine = name, f"JAX {result['jax_matmul_dtype']}"
      ratio = {k: result[f"ratio_jax_to_ctranslate2_{q}_{name}"] for k, q in
               (("ratio", "float32"), ("ratio_int8", "int8"))
               if f"ratio_jax_to_ctranslate2_{q}_{name}" in result}
    rows.append({"name": f"decode-{slug(result['cpu'])}-{name}", "kind": "decode",
                 "engine": engine, "search": search_label(search),
                 "sentences_per_s": figures_["sentences_per_s"], "bleu": figures_["bleu"],
                 **ratio, "peak_rss_mib": figures_.get("peak_rss_mib",
                                                       result["jax_peak_rss_mib"]),
                 **({"configuration": figures_["configuration"]}
                    if "configuration" in figures_ else {}),
                 "baseline": "CTranslate2 at its best configuration (swept)"
                 if args.compare_ctranslate2 else None,
                 "note": f"{result['sentences']} sentences, batches of {result['batch_size']}, "
                         f"{result['workers']} JAX workers, passes in alternation, median of "
                         f"{args.passes}: {figures_['sentences_per_s_each_pass']}"})
  return rows


def ctranslate2_figures(first: dict, times: list, lines, references) -> dict:
  """`figures` of a CTranslate2 worker's passes (its outputs are texts)."""
  steady_s = statistics.median(times)
  return {"sentences_per_s": round(len(lines) / steady_s, 1),
          "output_tokens_per_s": round(first["tokens"] / steady_s),
          "seconds": round(steady_s, 2),
          "sentences_per_s_each_pass": [round(len(lines) / t, 1) for t in times],
          "alpha": first["alpha"],
          "bleu": round(sacrebleu.corpus_bleu(first["out"], [references]).score, 2)}


def ctranslate2_workers(args, tmp: str, result: dict) -> dict:
  """The checkpoint exported, CTranslate2's configurations swept (`result["ctranslate2_sweep"]`)
  and the best of each compute type and search started, with seq2seq's CTranslate2 engine
  at its defaults: name -> (worker, its pass's request)."""
  export = ctranslate2_model.export_ctranslate2(args.workdir, Path(tmp) / "float32",
                                                args.checkpoint, "float32")
  plans = (baseline.parse_threads(args.ct2_threads) if args.ct2_threads
           else baseline.thread_plans(usable_cores()))
  beams = sorted({1, args.beam})
  print("CTranslate2's configurations:", flush=True)
  sweep = []
  for q in ("float32", "int8"):
    sweep += baseline.sweep(export, args.src, q, plans, baseline.parse_batches(args.ct2_batches),
                            beams, args.ct2_alpha, args.sweep_passes,
                            max_output=args.max_output)
  result["ctranslate2_sweep"] = sweep
  workers, started = {}, {}
  for q in ("float32", "int8"):
    for beam in beams:
      best = baseline.best(sweep, q, beam)
      key = (q, best["inter_threads"], best["intra_threads"])
      if key not in started:
        started[key] = baseline.Worker(export, args.src, *key, max_output=args.max_output)
      workers[f"ctranslate2_{q}_{'greedy' if beam == 1 else f'beam{args.beam}'}"] = (
          started[key], baseline.search_request(beam, args.ct2_alpha,
                                                (best["batch_type"], best["max_batch_size"]),
                                                args.max_output))
  # seq2seq's own CTranslate2 engine as translate.py and seq2seq-serve run it: its default
  # threads, batches of --batch-size
  ours = ThreadPlan.of(ctranslate2_model.load_export(export)[1].decode.ct2_threads)
  engine = baseline.Worker(export, args.src, "float32", ours.inter, ours.intra, api="engine",
                           max_output=args.max_output)
  for beam in beams:
    workers[f"seq2seq_ctranslate2_engine_{'greedy' if beam == 1 else f'beam{args.beam}'}"] = (
        engine, baseline.search_request(beam, args.ct2_alpha, ("examples", args.batch_size),
                                        args.max_output))
  return workers


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
  p.add_argument("--max-output", type=int, default=0,
                 help="at most N pieces per output on every engine (0: the run's "
                 "max_len_a/b for JAX and seq2seq's engine, 256 for CTranslate2): a model "
                 "that never ends its output (random weights: bench/import_models.py "
                 "opus-shape) then decodes N pieces everywhere")
  baseline.add_sweep_flags(p, prefix="ct2-")
  p.add_argument("--ct2-alpha", type=float, default=1.3,
                 help="CTranslate2's length penalty (length ** alpha) for beam search; 1.3 "
                 "was best on Multi30k val for the recipe's model (bench/README.md)")
  add_results_flag(p)
  args = p.parse_args()
  enable_compilation_cache()
  t = time.perf_counter()
  buckets = (tuple(int(b) for b in args.length_buckets.split(","))
             if args.length_buckets else None)
  overrides = {k: v for k, v in (("workers", args.workers), ("length_buckets", buckets),
                                 ("programs", args.programs)) if v is not None}
  if args.max_output:  # N pieces and the end of sentence
    overrides |= {"max_len_a": 0.0, "max_len_b": args.max_output + 1}
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
  result["jax_peak_rss_mib"] = peak_rss_mib()
  built = sum(search.search_programs for _, _, search in searches)
  timed = dict(firsts)
  with tempfile.TemporaryDirectory() as tmp:
    workers = {}
    if args.compare_ctranslate2:
      workers = ctranslate2_workers(args, tmp, result)
      for name, (worker, request) in workers.items():
        out = worker.run(**request, outputs=True)  # what CTranslate2 loads lazily, too
        timed[name] = {"out": out["outputs"], "alpha": request["alpha"],
                       "tokens": out["tokens"], "again": functools.partial(worker.run, **request)}
    try:
      # every engine's passes in alternation; 2 s before each, for the threads of the one
      # before to stop polling
      seconds = alternate({name: first["again"] for name, first in timed.items()},
                          args.passes, settle=2.0 if workers else 0.0)
      for name, first in timed.items():
        if name in workers:
          request = workers[name][1]
          result[name] = dict(ctranslate2_figures(first, seconds[name], lines, references),
                              peak_rss_mib=workers[name][0].peak_rss_mib,
                              configuration=f"{workers[name][0].threads}, max_batch_size "
                              f"{request['max_batch_size']} {request['batch_type']}")
        else:
          result[name] = figures(first, seconds[name], lines, references)
    finally:
      for worker, _ in workers.values():
        worker.close()
  if args.compare_ctranslate2:
    for name in workers:
      beam = 1 if name.endswith("greedy") else args.beam
      # the share of lines equal to each JAX search of the same beam size
      result[name]["identical_to_jax"] = {
          jax: sum(a == b[0].text for a, b in zip(timed[name]["out"], timed[jax]["out"]))
          / len(lines) for jax, jax_beam, _ in searches if jax_beam == beam}
    for name, beam, _ in searches:
      ct2_name = "greedy" if beam == 1 else f"beam{args.beam}"
      for q in ("float32", "int8"):
        result[f"ratio_jax_to_ctranslate2_{q}_{name}"] = round(
            result[name]["sentences_per_s"]
            / result[f"ctranslate2_{q}_{ct2_name}"]["sentences_per_s"], 2)
  # searches built (loaded again once dropped, --programs) during the timed passes: 0, or
  # those passes timed loading too
  result["jax_programs_built_while_timed"] = (
      sum(search.search_programs for _, _, search in searches) - built)
  # the operands JAX decoded with (the machine's decoding probe, seq2seq.numerics.resolve)
  result["jax_matmul_dtype"] = translator.model.numerics.operand_dtype
  result.update(machine())
  report(args.results, result, decode_rows(result, args))


if __name__ == "__main__":
  main()
