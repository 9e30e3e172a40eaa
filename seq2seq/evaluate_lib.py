"""Translate a corpus and score it with sacreBLEU (BLEU and chrF, with signatures).

BLEU is sacreBLEU's default (13a tokenization of detokenized text, cased), so it equals
the `sacrebleu` command line tool on the same files. `lowercase_tokenized_bleu` also
gives BLEU on lowercased Moses-tokenized text, the way many Multi30k papers report it.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Sequence

import sacrebleu

from seq2seq import checkpoint, cli, data_source, export, model_card, textfiles
from seq2seq.translator import one_line

log = logging.getLogger(__name__)


class ScoreError(ValueError):
  """Hypotheses and references cannot be compared."""


def score(hypotheses: Sequence[str], references: Sequence[str],
          lowercase_tokenized: bool = False, lang: str = "de") -> dict:
  """sacreBLEU BLEU and chrF (and optionally lowercased tokenized BLEU) of aligned lines."""
  if len(hypotheses) != len(references):
    raise ScoreError(f"{len(hypotheses)} hypotheses but {len(references)} references: "
                     "they must be aligned line by line")
  bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
  b = bleu.corpus_score(list(hypotheses), [list(references)])
  c = chrf.corpus_score(list(hypotheses), [list(references)])
  result = {"bleu": b.score, "bleu_signature": str(bleu.get_signature()),
            "bleu_text": str(b), "chrf": c.score, "chrf_signature": str(chrf.get_signature()),
            "sentences": len(hypotheses)}
  if lowercase_tokenized:
    result["bleu_lc_tok"] = lowercase_tokenized_bleu(hypotheses, references, lang)
  return result


def lowercase_tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str],
                             lang: str = "de") -> float:
  """BLEU on lowercased, Moses-tokenized text (multi-bleu.perl style)."""
  from sacremoses import MosesTokenizer
  mt = MosesTokenizer(lang=lang)
  prep = lambda s: mt.tokenize(s.lower(), return_str=True, escape=False)
  bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True)
  return bleu.corpus_score([prep(h) for h in hypotheses],
                           [[prep(r) for r in references]]).score


def sentence_scores(hypotheses: Sequence[str], references: Sequence[str]) -> list[dict]:
  """Per-sentence sacreBLEU BLEU (with effective-order smoothing) and chrF, for error analysis."""
  bleu = sacrebleu.metrics.BLEU(effective_order=True)
  chrf = sacrebleu.metrics.CHRF()
  return [{"bleu": bleu.sentence_score(h, [r]).score, "chrf": chrf.sentence_score(h, [r]).score}
          for h, r in zip(hypotheses, references)]


def write_sentence_level(path: Path, sources, hypotheses, references) -> None:
  """A TSV: line, BLEU, chrF, source (or empty), hypothesis, reference."""
  rows = ["line\tbleu\tchrf\tsource\thypothesis\treference"]
  sources = sources if sources is not None else [""] * len(hypotheses)
  for i, (sc, src, h, r) in enumerate(zip(sentence_scores(hypotheses, references), sources,
                                          hypotheses, references), 1):
    rows.append(f"{i}\t{sc['bleu']:.2f}\t{sc['chrf']:.2f}\t{one_line(src)}\t{one_line(h)}\t"
                f"{one_line(r)}")
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def translate_all(translator, sources: Sequence[str], c) -> list[str]:
  """The translations of `sources` with the settings `c`, one batch first and then 16
  batches at a time, each part logged: from an empty compilation cache the first part is
  done once one search is compiled, not one per length bucket of the whole set."""
  from seq2seq.translate_cli import chunks
  out: list[str] = []
  start = time.perf_counter()
  for chunk in chunks(iter(sources), c.batch_size, 16 * c.batch_size):
    out += [one_line(h) for h in translator.translate(chunk, beam_size=c.beam_size,
                                                      alpha=c.alpha, batch_size=c.batch_size)]
    log.info("translated %d of %d sentences (%.1f s)", len(out), len(sources),
             time.perf_counter() - start)
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
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  cli.add_model_flags(parser, several=True, required=False)
  parser.add_argument("--src", help="source file (plain or .gz), with --ref")
  parser.add_argument("--ref", help="reference file (plain or .gz), with --src")
  parser.add_argument("--split", help="a split of the run's configured data source, e.g. "
                      "test_2016_flickr (instead of --src/--ref)")
  cli.add_search_flags(parser)
  parser.add_argument("--output", help="hypothesis file (default: "
                      "RUN_DIR/hyps/NAME.beamN.txt, NAME the split or source file)")
  parser.add_argument("--hyp", help="score this existing translation file against --ref, "
                      "without a model (no --workdir)")
  parser.add_argument("--sentence-level", metavar="FILE.tsv",
                      help="also write per-sentence BLEU and chrF (with source, hypothesis, "
                      "reference) to this TSV")
  parser.add_argument("--lowercase-tokenized", action="store_true",
                      help="also report BLEU on lowercased Moses-tokenized text")
  parser.add_argument("--lang", default="de", help="target language for --lowercase-tokenized "
                      "with --hyp (otherwise the run's)")
  args = parser.parse_args(argv)
  if args.hyp:
    if not args.ref or args.workdir or args.split or args.src:
      parser.error("--hyp FILE takes --ref FILE and no --workdir, --split or --src")
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
  if not args.workdir:
    parser.error("--workdir is required (or --hyp FILE --ref FILE to score a file)")
  if bool(args.split) == bool(args.src or args.ref) or (args.src and not args.ref) or (
      args.ref and not args.src):
    parser.error("give either --split NAME or both --src FILE and --ref FILE")
  cli.check_search_flags(parser, args)
  setup_cli_logging()
  try:
    cfg = (export.load_export(args.workdir[0])[1] if args.engine == "ctranslate2"
           else checkpoint.load_config(args.workdir[0]))
    if args.split:
      ds = data_source.load_split(cfg.data, args.split, args.workdir[0])
      sources, references, name = list(ds["src"]), list(ds["tgt"]), args.split
    else:
      sources = textfiles.read_lines(args.src)
      references = textfiles.read_lines(args.ref)
      name = Path(args.src).name.removesuffix(".gz")
      if len(sources) != len(references):
        raise ScoreError(f"{args.src} has {len(sources)} lines but {args.ref} has "
                         f"{len(references)}")
    translator, c = cli.load_translator(args)
  except (textfiles.DataError, checkpoint.CheckpointError, ScoreError, ValueError) as e:
    sys.exit(f"error: {e}")
  beam = c.beam_size
  hypotheses = translate_all(translator, sources, c)
  ensemble = ".ensemble" if len(args.workdir) > 1 else ""
  mbr_name = f".mbr-{c.mbr}-{c.mbr_weights}" if c.mbr else ""
  out = (Path(args.output) if args.output else
         Path(args.workdir[0]) / "hyps" / f"{name}.beam{beam}{mbr_name}{ensemble}.txt")
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
  result = score(hypotheses, references, args.lowercase_tokenized, cfg.data.tgt_lang)
  if args.sentence_level:
    write_sentence_level(Path(args.sentence_level), sources, hypotheses, references)
  result = dict(result, hypotheses=str(out), checkpoint=args.checkpoint, beam=beam,
                alpha=c.alpha, engine=args.engine)
  if c.mbr:
    result.update(mbr=c.mbr, mbr_weights=c.mbr_weights)
  if args.engine == "jax":
    result["beam_stop"] = c.beam_stop
  print_result(result)
  # An ensemble's score belongs to no one run's card; an export is not a run directory.
  if len(args.workdir) == 1 and args.engine == "jax":
    model_card.record_evaluation(args.workdir[0], dict(result, data=name))
    model_card.write(args.workdir[0])
