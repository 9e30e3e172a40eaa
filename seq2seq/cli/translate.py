"""`translate.py` / `seq2seq-translate`: translate lines (stdin to stdout by default),
score given translations, sample, or plot one sentence's attention."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Iterator

from seq2seq.cli import parsing
from seq2seq.data.textfiles import decode_line, one_line, split_lines
from seq2seq.decoding.attention import plot_attention
from seq2seq.decoding.engine_io import Sampling
from seq2seq.documents.formats import FORMATS, NOT_TRANSLATED, for_extension, listed
from seq2seq.rundir import checkpoint

log = logging.getLogger(__name__)


def read_input(stream, strict: bool) -> Iterator[str]:
  """Lines of a byte stream as they arrive; only '\\n' ends a line, so the output count
  always matches. With `strict`, the whole input is read and checked first, so an
  invalid line rejects the input before anything is written."""
  if strict:
    yield from split_lines(stream.read(), "input", strict=True)
    return
  for number, raw in enumerate(stream, start=1):
    yield decode_line(raw.removesuffix(b"\n"), "input", number, strict=False)


def chunks(lines: Iterator[str], first: int, size: int) -> Iterator[list[str]]:
  """The lines in lists of `size`, the first of only `first` lines: its translations come
  out once one batch is searched (from an empty compilation cache, once one search is
  compiled, instead of one per length bucket that `size` lines reach)."""
  chunk: list[str] = []
  for line in lines:
    chunk.append(line)
    if len(chunk) == first:
      yield chunk
      chunk, first = [], size
  if chunk:
    yield chunk


def tab_pairs(lines: Iterator[str], second: str, alternative: str = ""
              ) -> Iterator[tuple[str, str]]:
  """(source, second) pairs of SOURCE<TAB>SECOND lines; a line without one tab is an error."""
  for number, line in enumerate(lines, 1):
    if line.count("\t") != 1:
      raise ValueError(f"line {number}: expected SOURCE<TAB>{second} (one tab), got "
                       f"{line.count(chr(9))} tabs{alternative}")
    source, other = line.split("\t")
    yield source, other


def score_pairs(lines: Iterator[str], references: str | None) -> Iterator[tuple[str, str]]:
  """(source, target) pairs for --score: from TAB-separated lines, or lines + a file."""
  if references is None:
    yield from tab_pairs(lines, "TARGET", "; or give the targets with --references")
    return
  with open(references, "rb") as f:
    targets, number = read_input(f, strict=False), 0
    for number, source in enumerate(lines, 1):
      target = next(targets, None)
      if target is None:
        raise ValueError(f"{references} ends at line {number - 1}, before the input does")
      yield source, target
    if next(targets, None) is not None:
      raise ValueError(f"{references} has more lines than the input ({number})")


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      description="Translate lines (stdin -> stdout by default) with a trained run. "
      "Search settings default to those saved in the run's config.json.",
      formatter_class=parsing.HelpFormatter)
  parsing.add_model_flags(p, several=True)
  parsing.add_direction_flags(p)
  parsing.add_search_flags(p)
  parsing.add_glossary_flag(p)
  p.add_argument("--split-sentences", action=argparse.BooleanOptionalAction, default=True,
                 help="cut each line into sentences in the run's source language and "
                 "translate them one by one, joined with the line's spacing; "
                 "--no-split-sentences: a line is one sentence (sentence-per-line data; a "
                 "line longer than the model takes is still cut)")
  p.add_argument("--nbest", type=int, default=0,
                 help="write N hypotheses per line as 'LINE ||| text ||| score' "
                 "(needs --beam >= N)")
  p.add_argument("--buffer", type=int, default=16,
                 help="batches read ahead and sorted by length before decoding; "
                 "their lines are written as soon as they are translated (the first "
                 "batch's alone, so that output starts after one search)")
  p.add_argument("--input", default="-", help="input file; - = stdin")
  p.add_argument("--output", default="-", help="output file; - = stdout")
  p.add_argument("--format", default=None, choices=("lines", *FORMATS),
                 help="lines: each input line translated to one output line; "
                 f"{', '.join(FORMATS)}: --input is a document, translated whole into "
                 "--output with its structure kept (docs/translating.md). Default: from "
                 "--input's extension ("
                 f"{', '.join(e for f in FORMATS.values() if f.whole_by_default for e in f.extensions)}"
                 "), else lines")
  p.add_argument("--strict", action="store_true",
                 help="reject invalid UTF-8 (whole input checked before any output) "
                 "instead of replacing it with U+FFFD")
  p.add_argument("--interactive", action="store_true",
                 help="translate each line as soon as it is typed")
  p.add_argument("--attention-plot", default=None, metavar="FILE.png",
                 help="translate one sentence and plot its cross-attention")
  p.add_argument("--score", action="store_true",
                 help="forced decoding instead of search: score given translations, "
                 "read as SOURCE<TAB>TARGET lines or from --references; writes "
                 "'LOGPROB<TAB>LOGPROB_PER_TOKEN<TAB>TOKENS' per line (tokens = target "
                 "pieces + EOS; per token = LOGPROB / TOKENS)")
  p.add_argument("--references", default=None, metavar="FILE",
                 help="with --score: the targets, aligned with --input's lines")
  p.add_argument("--prefix", action="store_true",
                 help="read SOURCE<TAB>PREFIX lines: each translation starts with its "
                 "PREFIX (target text) and the search continues from it")
  p.add_argument("--sample", action="store_true",
                 help="draw translations at random from the model instead of searching "
                 "(back-translation, data augmentation); with --nbest N, N samples")
  p.add_argument("--temperature", type=float, default=1.0,
                 help="with --sample: divides the log-probabilities; 0 = greedy")
  p.add_argument("--top-k", type=int, default=0,
                 help="with --sample: only the K most likely pieces (0 = all)")
  p.add_argument("--top-p", type=float, default=1.0,
                 help="with --sample: only the most likely pieces whose probability "
                 "sums to P (nucleus sampling; 1 = all)")
  p.add_argument("--seed", type=int, default=0,
                 help="with --sample: random seed; line N uses its own key, so the output "
                 "does not depend on --batch-size")
  return p


def check_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> Sampling | None:
  """Usage errors for flags that do not go together; the sampling settings, if any."""
  parsing.check_search_flags(p, args)
  sampling = None
  if args.sample:
    if args.temperature < 0 or args.top_k < 0 or not 0 < args.top_p <= 1:
      p.error(f"--sample needs --temperature >= 0, --top-k >= 0 and 0 < --top-p <= 1; "
              f"got {args.temperature}, {args.top_k}, {args.top_p}")
    if args.score or args.attention_plot:
      p.error("--sample does not go with --score or --attention-plot")
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
  elif (args.temperature, args.top_k, args.top_p, args.seed) != (1.0, 0, 1.0, 0):
    p.error("--temperature, --top-k, --top-p and --seed are for --sample")
  if args.references and not args.score:
    p.error("--references is for --score")
  if args.prefix and (args.score or args.interactive or args.attention_plot):
    p.error("--prefix does not go with --score, --interactive or --attention-plot")
  if args.score and (args.nbest or args.interactive or args.attention_plot):
    p.error("--score scores given translations; it takes no --nbest, --interactive "
            "or --attention-plot")
  if args.nbest < 0:
    p.error(f"--nbest must be 0 (off) or more, got {args.nbest}")
  if args.engine == "ctranslate2" and args.attention_plot:
    p.error("--attention-plot needs the JAX engine")
  if args.glossary and (args.sample or args.prefix or args.score or args.attention_plot):
    p.error("--glossary goes with beam search: it does not go with --sample, --prefix, "
            "--score or --attention-plot")
  return sampling


def main(argv=None) -> None:
  from seq2seq.runtime import Progress, setup_cli_logging

  p = parser()
  args = p.parse_args(argv)
  sampling = check_flags(p, args)
  fmt = document_format(p, args)
  glossary = parsing.read_glossary(p, args)
  setup_cli_logging()
  parsing.resolve_model(p, args)
  try:
    engine, c = parsing.load_engine(args, sampling, glossary)
  except (checkpoint.CheckpointError, ValueError) as e:
    sys.exit(f"error: {e}")
  if args.nbest > c.beam_size and sampling is None:
    p.error(f"--nbest {args.nbest} needs a beam of at least {args.nbest} hypotheses, "
            f"but the beam size is {c.beam_size}: add --beam {args.nbest} or more")
  if args.nbest:
    c = c.changed(nbest=args.nbest)
  split = args.split_sentences

  if fmt is not None:
    translate_file(engine, args, fmt, c)
    return
  if args.interactive:
    for line in sys.stdin:
      print(one_line(engine.translate(line.rstrip("\n"), c, split_sentences=split)), flush=True)
    return
  src = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
  lines = read_input(src, args.strict)
  if args.attention_plot:
    lines = list(lines)
    if len(lines) != 1:
      sys.exit(f"error: --attention-plot takes exactly one input line, got {len(lines)}")
    print(one_line(plot_attention(engine, lines[0], args.attention_plot, c.beam_size)))
    log.info("wrote %s", args.attention_plot)
    return
  out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
  progress = Progress("scoring" if args.score else "translating", unit="sentences")
  count = 0
  if args.score:
    lines = score_pairs(lines, args.references)
  elif args.prefix:
    lines = tab_pairs(lines, "PREFIX")
  try:
    for chunk in chunks(lines, c.batch_size, c.batch_size * max(args.buffer, 1)):
      prefixes = None
      if args.prefix:
        prefixes = [b for _, b in chunk]
        chunk = [a for a, _ in chunk]
      if args.score:
        scores = engine.score([a for a, _ in chunk], [b for _, b in chunk], c)
        out.write("".join(f"{x.logprob:.4f}\t{x.per_token:.4f}\t{x.tokens}\n" for x in scores))
      elif args.nbest:
        found = engine.translate(chunk, c, prefixes=prefixes, first_index=count,
                                 split_sentences=split)
        for number, hyps in enumerate(found, count + 1):
          out.write("".join(f"{number - 1} ||| {one_line(h.text)} ||| {h.score:.4f}\n"
                            for h in hyps))
      else:
        out.write("".join(one_line(t) + "\n" for t in engine.translate(
            chunk, c, prefixes=prefixes, first_index=count, split_sentences=split)))
      out.flush()
      count += len(chunk)
      progress.update(len(chunk))
  except ValueError as e:  # DataError: invalid UTF-8 with --strict; --score input; a text
    # too long to cut (TooLongError)
    sys.exit(f"error: {args.input if args.input != '-' else 'stdin'}: {e}")
  progress.close()


def binary(path: str) -> bool:
  """Whether a file is a document container rather than text: a zip (OpenDocument,
  Office, EPUB) or a PDF."""
  try:
    with open(path, "rb") as f:
      head = f.read(8)
  except OSError:
    return False  # reading it later says what is wrong
  return head.startswith((b"PK\x03\x04", b"%PDF"))


def document_format(p: argparse.ArgumentParser, args) -> str | None:
  """The document format asked for (`--format`, else --input's extension), or None for
  line-by-line translation."""
  if args.format == "lines":
    return None
  suffix = "" if args.input == "-" else Path(args.input).suffix.lower()
  by_extension = for_extension(suffix)
  fmt = args.format or (by_extension.name if by_extension and by_extension.whole_by_default
                        else None)
  if fmt is None:
    if args.input != "-" and (suffix in NOT_TRANSLATED or binary(args.input)):
      kind = f"{suffix} document" if suffix in NOT_TRANSLATED else "zip or PDF file"
      advice = NOT_TRANSLATED.get(suffix)
      p.error(f"{args.input}: a {kind} is not a format translated here"
              f"{' (' + advice + ')' if advice else ''}; documents: "
              f"{', '.join(listed())} (or text, a sentence a line)")
    return None
  if args.input == "-":
    p.error(f"--format {fmt} translates a file: give --input FILE")
  clashing = [flag for flag, on in (("--nbest", args.nbest), ("--score", args.score),
                                    ("--prefix", args.prefix), ("--interactive", args.interactive),
                                    ("--attention-plot", args.attention_plot)) if on]
  if clashing:
    p.error(f"a document ({fmt}) is translated whole: {clashing[0]} is for lines")
  if FORMATS[fmt].zipped and args.output == "-":
    p.error(f"a .{fmt} document is written to a file: give --output FILE")
  return fmt


def translate_file(engine, args, fmt: str, settings) -> None:
  """translate.py --input DOCUMENT: the document translated whole into --output."""
  from seq2seq.documents import translate_document
  if settings.sampling is not None:
    sys.exit("error: --sample translates lines, not documents")
  try:
    out = translate_document(engine, args.input, None if args.output == "-" else args.output,
                             fmt, settings, split_sentences=args.split_sentences)
  except ValueError as e:
    sys.exit(f"error: {e}")
  if out is not None:
    sys.stdout.write(out)
  else:
    log.info("wrote %s", args.output)


if __name__ == "__main__":
  main()
