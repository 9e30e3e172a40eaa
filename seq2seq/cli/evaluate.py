"""`evaluate.py` / `seq2seq-evaluate`: translate a corpus and score it (`seq2seq.scoring`)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Sequence

from seq2seq.cli import parsing
from seq2seq.data import data_source, textfiles
from seq2seq.data.textfiles import one_line
from seq2seq.decoding.engine import Engine
from seq2seq.decoding.engine_io import SearchSettings
from seq2seq.decoding.glossary import term_use
from seq2seq.rundir import checkpoint, ctranslate2_model, model_card
from seq2seq.runtime import Progress
from seq2seq.scoring import ScoreError, score, write_sentence_level

log = logging.getLogger(__name__)


def translate_all(engine: Engine, sources: Sequence[str], c: SearchSettings,
                  split_sentences: bool = False) -> list[str]:
  """The translations of `sources` with the settings `c` (each a sentence, or cut into
  sentences with `split_sentences`: a test set of paragraphs), one batch first and then 16
  batches at a time, with progress (a bar on a terminal, else log lines): from an empty
  compilation cache the first part is done, and shown, once one search is compiled, not
  one per length bucket of the whole set."""
  from seq2seq.cli.translate import chunks
  out: list[str] = []
  with Progress("translating", total=len(sources), unit="sentences") as progress:
    for chunk in chunks(iter(sources), c.batch_size, 16 * c.batch_size):
      out += [one_line(h) for h in engine.translate(chunk, c,
                                                    split_sentences=split_sentences)]
      progress.update(len(chunk))
  return out


def print_result(result: dict) -> None:
  print(result.pop("bleu_text"), file=sys.stderr)
  print(f"BLEU {result['bleu']:.2f}  {result['bleu_signature']}")
  print(f"chrF {result['chrf']:.2f}  {result['chrf_signature']}")
  if "bleu_lc_tok" in result:
    print(f"BLEU (lowercased, Moses-tokenized) {result['bleu_lc_tok']:.2f}")
  print(json.dumps(result))


def main(argv=None) -> None:
  import argparse

  from seq2seq.runtime import setup_cli_logging

  parser = argparse.ArgumentParser(
      description="Translate a test set with a trained run and score it with sacreBLEU. "
      "Search settings default to those saved in the run's config.json.",
      formatter_class=parsing.HelpFormatter)
  parsing.add_model_flags(parser, several=True, required=False)
  parser.add_argument("--src", help="source file (plain or .gz), with --ref")
  parser.add_argument("--ref", help="reference file (plain or .gz), with --src")
  parser.add_argument("--split", help="a split of the run's configured data source, e.g. "
                      "test_2016_flickr (instead of --src/--ref)")
  parsing.add_direction_flags(parser)
  parser.add_argument("--pivot", metavar="LANG", help="translate through LANG with the "
                      "same model (source -> LANG -> target), e.g. a zero-shot pair of a "
                      "model of several directions through English")
  parsing.add_search_flags(parser)
  parsing.add_glossary_flag(parser)
  parser.add_argument("--output", help="hypothesis file (default: "
                      "hyps/RUN/NAME.beamN.txt in the current folder, RUN the run's folder "
                      "name, NAME the split or source file); the run directory is only "
                      "read, but for the score appended to its model card")
  parser.add_argument("--hyp", help="score this existing translation file against --ref, "
                      "without a model (no --workdir)")
  parser.add_argument("--sentence-level", metavar="FILE.tsv",
                      help="also write per-sentence BLEU and chrF (with source, hypothesis, "
                      "reference) to this TSV")
  parser.add_argument("--lowercase-tokenized", action="store_true",
                      help="also report BLEU on lowercased Moses-tokenized text")
  parser.add_argument("--split-sentences", action="store_true",
                      help="cut each source line into sentences and translate them one by "
                      "one (a test set of paragraphs or documents); without it a line is "
                      "one sentence, as in Multi30k and WMT test sets")
  parser.add_argument("--lang", default="de", help="target language for --lowercase-tokenized "
                      "with --hyp (otherwise the run's)")
  args = parser.parse_args(argv)
  if args.hyp:
    if not args.ref or args.workdir or args.model or args.split or args.src:
      parser.error("--hyp FILE takes --ref FILE and no --workdir, --model, --split or --src")
    try:
      hypotheses = textfiles.read_lines(args.hyp)
      references = textfiles.read_lines(args.ref)
      result = score(hypotheses, references, args.lowercase_tokenized, args.lang)
    except ScoreError as e:
      sys.exit(f"error: {args.hyp} and {args.ref}: {e}")
    except textfiles.DataError as e:
      sys.exit(f"error: {e}")
    if args.sentence_level:
      write_sentence_level(Path(args.sentence_level), None, hypotheses, references)
    print_result(dict(result, hypotheses=args.hyp))
    return
  if not args.workdir and not args.model:
    parser.error("--workdir or --model is required (or --hyp FILE --ref FILE to score a file)")
  if bool(args.split) == bool(args.src or args.ref) or (args.src and not args.ref) or (
      args.ref and not args.src):
    parser.error("give either --split NAME or both --src FILE and --ref FILE")
  parsing.check_search_flags(parser, args)
  if args.pivot and args.glossary:
    parser.error("--pivot and --glossary do not go together: a glossary's targets are in "
                 "the last language, which the first translation does not write")
  glossary = parsing.read_glossary(parser, args)
  setup_cli_logging()
  parsing.resolve_model(parser, args)
  try:
    cfg = ctranslate2_model.model_config(args.workdir[0], args.engine)
    engine, c = parsing.load_engine(args, glossary=glossary)
    src_lang, tgt_lang = engine.languages
    hops = [engine] if not args.pivot else [engine.for_direction(src_lang, args.pivot),
                                            engine.for_direction(args.pivot, tgt_lang)]
    if args.split:  # the direction's pairs (SPLIT.SRC and SPLIT.TGT)
      ds = data_source.load_split(cfg.data.for_direction(src_lang, tgt_lang), args.split,
                                  args.workdir[0])
      sources, references, name = list(ds["src"]), list(ds["tgt"]), args.split
    else:
      sources = textfiles.read_lines(args.src)
      references = textfiles.read_lines(args.ref)
      name = Path(args.src).name.removesuffix(".gz")
      if len(sources) != len(references):
        raise ScoreError(f"{args.src} has {len(sources)} lines but {args.ref} has "
                         f"{len(references)}")
  except (textfiles.DataError, checkpoint.CheckpointError, ScoreError, ValueError) as e:
    sys.exit(f"error: {e}")
  beam, search = c.beam_size, engine.describe()["search"]
  try:
    hypotheses = sources
    for hop in hops:
      hypotheses = translate_all(hop, hypotheses, c, args.split_sentences)
  except ValueError as e:  # a line too long to cut (TooLongError)
    sys.exit(f"error: {args.split or args.src}: {e}")
  ensemble = ".ensemble" if len(args.workdir) > 1 else ""
  mbr_name = f".mbr-{search['mbr']}-{search['mbr_weights']}" if search["mbr"] else ""
  mbr_name += ".glossary" if glossary is not None else ""
  stem = name  # a model of several directions: which one, in the file's name
  if engine.directions != (tuple(engine.languages),) or args.pivot:
    stem += f".{src_lang}-{tgt_lang}" + (f".via-{args.pivot}" if args.pivot else "")
  # Readers leave the run directory as they found it: the hypotheses go to a folder here.
  out = (Path(args.output) if args.output else
         Path("hyps") / Path(args.workdir[0]).resolve().name /
         f"{stem}.beam{beam}{mbr_name}{ensemble}.txt")
  try:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
  except OSError as e:
    log.warning("could not write the hypotheses to %s (%s); the score follows", out,
                e.strerror)
  result = score(hypotheses, references, args.lowercase_tokenized, tgt_lang)
  if args.sentence_level:
    write_sentence_level(Path(args.sentence_level), sources, hypotheses, references)
  result = dict(result, hypotheses=str(out), checkpoint=args.checkpoint, beam=beam,
                alpha=c.alpha, engine=args.engine)
  if search["mbr"]:
    result.update(mbr=search["mbr"], mbr_weights=search["mbr_weights"])
  if engine.directions != (tuple(engine.languages),) or args.pivot:
    result.update(direction=f"{src_lang}-{tgt_lang}",
                  zero_shot=not args.pivot and engine.zero_shot,
                  **({"pivot": args.pivot} if args.pivot else {}))
  if args.engine == "jax":
    result["beam_stop"] = search["beam_stop"]
  if glossary is not None:
    used, terms = term_use(glossary, sources, hypotheses)
    result.update(glossary=args.glossary, glossary_terms=terms,
                  glossary_term_use=round(used / terms, 4) if terms else None)
  print_result(result)
  # An ensemble's score belongs to no one run's card; an export is not a run directory;
  # a Hub model's card is the one published.
  # A score with a glossary is the glossary's as much as the model's: not on the card.
  if len(args.workdir) == 1 and args.engine == "jax" and not args.from_hub and not glossary:
    try:  # appended, and the card rewritten under its lock (model_card.card_lock)
      model_card.record_evaluation(args.workdir[0], dict(result, data=name))
      model_card.write(args.workdir[0])
    except OSError as e:  # a read-only run: the score is printed above all the same
      log.warning("the score was not recorded in %s's model card (%s)", args.workdir[0],
                  e.strerror)


if __name__ == "__main__":
  main()
