"""What every command line shares: argparse with `--dashed-flags`, one definition of the
flags that load a model and set its search (translate, evaluate, serve), and training's
`--config.SECTION.FIELD=VALUE` overrides, split from the other arguments here and applied
by `seq2seq.recipes.training_config` (which Python callers use too).

argparse, as fairseq, Joey NMT and Sockeye use it: in the standard library, one usage
line and exit status 2 for a bad flag, `--help` generated from the definitions. The
config overrides keep ml_collections' `--config.x.y=v` syntax (the config files are
`ml_collections.ConfigDict`s).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import textwrap

from seq2seq.config import (
  BEAM_STOP_CT2_ERROR,
  BEAM_STOPS,
  CT2_THREADS,
  ENGINES,
  Config,
  DecodeConfig,
  field_help,
)
from seq2seq.decoding import mbr

# ------------------------------------------------------------ loading a model, searching


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
  """argparse's defaults in the help, where they say something: not for a required flag,
  a default of None (the help says what then happens) or a help text that names its
  default already."""

  def _get_help_string(self, action: argparse.Action) -> str:
    text = action.help or ""
    if action.required or action.default is None or "default" in text:
      return text
    return super()._get_help_string(action)


def add_model_flags(parser: argparse.ArgumentParser, several: bool = False,
                    required: bool = True, engine: bool = True, models: bool = False) -> None:
  """--workdir or --model (several times for an ensemble with `several`, for several
  models served side by side with `models`), --revision, --checkpoint, and with `engine`
  --engine; `resolve_model` checks them and downloads a Hub model."""
  action = "append" if several or models else "store"
  ensemble = ("; several times for an ensemble (runs sharing one SentencePiece model: "
              "mean log-probabilities)" if several else
              "; several times for several models, each serving its directions" if models
              else "")
  parser.add_argument("--workdir", action=action,
                      help="run directory written by train.py" + (
                          " (or, with --engine ctranslate2, by seq2seq-export)" if engine
                          else "") + ensemble)
  parser.add_argument("--model", action=action, metavar="PATH|ORG/NAME",
                      help="the same as --workdir, or a model on the Hugging Face Hub "
                      "(downloaded once into its cache; HF_HUB_OFFLINE=1 reads the cache "
                      "only)" + ensemble)
  parser.add_argument("--revision", help="with --model ORG/NAME: the Hub branch, tag or "
                      "commit (default: main)")
  parser.set_defaults(model_required=required)
  parser.add_argument("--checkpoint", default="best",
                      help="best, latest, averaged, ema, or a checkpoint step directory")
  if engine:
    parser.add_argument("--engine", default="jax", choices=ENGINES,
                        help="jax: a run directory; ctranslate2: a directory written by "
                        "seq2seq-export, or a run directory whose --checkpoint is exported "
                        "once into RUN/exports (CTranslate2's length penalty is length ** "
                        "alpha)")
    parser.add_argument("--ct2-threads", default=None, metavar="MODE",
                        help="CTranslate2's threads: throughput (a batch per core at once, "
                        "one thread each), latency (one batch on every core) or INTERxINTRA "
                        "(e.g. 2x1); default: the export's decode.ct2_threads, throughput")


def add_direction_flags(parser: argparse.ArgumentParser) -> None:
  """--src-lang / --tgt-lang: the direction a model of several translates."""
  parser.add_argument("--src-lang", help="the source language (a model of several "
                      "directions: the texts' language, for cutting sentences and for "
                      "--split; default: the trained direction into --tgt-lang)")
  parser.add_argument("--tgt-lang", help="the target language (a model of several "
                      "directions; default: its first direction's). A pair it was not "
                      "trained on is translated zero-shot, and logged as such")
  parser.add_argument("--zero-shot-pieces", action=argparse.BooleanOptionalAction,
                      default=None, help="zero-shot: write only the pieces the target "
                      "language's training text holds (default: the run's "
                      "decode.zero_shot_pieces, on)")


def add_search_flags(parser: argparse.ArgumentParser, batching: bool = True) -> None:
  """The search settings; each defaults to the run's `decode` config. With `batching`,
  --batch-size and --workers too (the server batches by its own --max-batch and
  --decoders)."""
  d = DecodeConfig()
  parser.add_argument("--beam", type=int, default=None,
                      help=f"beam size; 1 = greedy search (run's default, else {d.beam_size})")
  parser.add_argument("--alpha", type=float, default=None,
                      help="GNMT length penalty exponent for beam search; 0 ranks by "
                      f"log-probability (run's default, else {d.alpha})")
  parser.add_argument("--beam-stop", default=None, choices=BEAM_STOPS,
                      help="when beam search ends a sentence: exact (results of a search to "
                      "the length limit), current (live beams bounded at the current "
                      "length) or count (once beam-size hypotheses have ended, as fairseq "
                      "and CTranslate2); the last two are faster, results may differ; "
                      f"run's default, else {d.beam_stop}. JAX engine only")
  mbr.add_arguments(parser)
  if not batching:
    return
  parser.add_argument("--batch-size", type=int, default=None,
                      help=f"sentences decoded together (run's default, else {d.batch_size})")
  parser.add_argument("--workers", type=int, default=None,
                      help=f"batches decoded at once, each on a thread (default {d.workers})")


def resolve_model(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
  """Sets args.workdir from --model (a Hub model: its folder in the Hugging Face cache,
  downloaded if missing) and args.from_hub; usage errors for a missing or doubled model."""
  from seq2seq.rundir import hub

  args.from_hub = False
  if args.model:
    if args.workdir:
      parser.error("give --workdir or --model, not both")
    names = args.model if isinstance(args.model, list) else [args.model]
    try:
      folders = [str(hub.resolve(name, args.revision)) for name in names]
    except hub.HubError as e:
      sys.exit(f"error: {e}")
    args.from_hub = any(hub.is_repo_id(name) for name in names)
    args.workdir = folders if isinstance(args.model, list) else folders[0]
  elif args.revision:
    parser.error("--revision goes with --model ORG/NAME")
  if args.model_required and not args.workdir:
    parser.error("--workdir RUN or --model PATH|ORG/NAME is required")


def add_glossary_flag(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--glossary", default=None, metavar="FILE.tsv",
                      help="terms the translation must use: lines of 'source term<TAB>target "
                      "term' (alternatives with |); in a sentence holding a source term (whole "
                      "words, any case) the target takes the place of the model's own word "
                      "for it (docs/translating.md, Glossaries)")


def read_glossary(parser: argparse.ArgumentParser, args: argparse.Namespace):
  """The --glossary file as a `Glossary` (None without it): a usage error with the
  CTranslate2 engine, an error naming file and line for a bad file."""
  from seq2seq.decoding.glossary import Glossary, GlossaryError
  if args.glossary is None:
    return None
  if getattr(args, "engine", "jax") == "ctranslate2":
    parser.error(GLOSSARY_CT2_ERROR)
  try:
    return Glossary.read(args.glossary)
  except GlossaryError as e:
    sys.exit(f"error: {e}")


GLOSSARY_CT2_ERROR = ("--glossary needs the JAX engine: CTranslate2 gives no attention to "
                      "place terms by")


def check_search_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
  """Usage errors (exit status 2) for search flags out of range."""
  if args.beam is not None and args.beam < 1:
    parser.error(f"--beam must be at least 1 (1 = greedy search), got {args.beam}")
  for flag, value in (("--batch-size", getattr(args, "batch_size", None)),
                      ("--workers", getattr(args, "workers", None))):
    if value is not None and value < 1:
      parser.error(f"{flag} must be at least 1, got {value}")
  if getattr(args, "engine", "jax") == "ctranslate2" and args.beam_stop:
    parser.error(BEAM_STOP_CT2_ERROR)
  threads = getattr(args, "ct2_threads", None)
  if threads is not None and not re.fullmatch(CT2_THREADS, threads):
    parser.error(f"--ct2-threads must be throughput, latency or INTERxINTRA (positive "
                 f"counts, e.g. 2x1), got {threads!r}")


def load_engine(args: argparse.Namespace, sampling=None, glossary=None, nbest: int = 0):
  """The engine the model flags describe, and the one `SearchSettings` of the search
  flags (over the run's own): (engine, settings). A setting out of range is a ValueError
  naming it."""
  from seq2seq.decoding.engines import load_engine as load

  # the flags over the run's settings: the engine's defaults (a server's for every request)
  overrides = {k: v for k, v in (("workers", getattr(args, "workers", None)),
                                 ("beam_stop", args.beam_stop), ("beam_size", args.beam),
                                 ("alpha", args.alpha),
                                 ("batch_size", getattr(args, "batch_size", None)),
                                 ("zero_shot_pieces", getattr(args, "zero_shot_pieces", None)),
                                 ("ct2_threads", getattr(args, "ct2_threads", None)))
               if v is not None}
  engine = load(args.workdir, getattr(args, "engine", "jax"), args.checkpoint, **overrides,
                **mbr.overrides(args))
  if getattr(args, "src_lang", None) or getattr(args, "tgt_lang", None):
    engine = engine.for_direction(args.src_lang, args.tgt_lang)
  return engine, engine.settings(sampling=sampling, glossary=glossary, nbest=nbest or None)


# ------------------------------------------------------------------ training's config


def config_epilog() -> str:
  """Every config field with its default and description, for train.py --help."""
  helps, lines = field_help(), ["config fields (--config.SECTION.FIELD=VALUE; defaults "
                                "before a preset's changes):"]
  for section in dataclasses.fields(Config):
    lines.append(f"  {section.name}:")
    for f in dataclasses.fields(section.default):
      head = f"    {section.name}.{f.name}={f.default!r}"
      if len(head) > 44:  # the description on lines of its own
        lines.append(head)
        head = ""
      lines += textwrap.wrap(helps[section.name][f.name], 100, initial_indent=f"{head:<44} ",
                             subsequent_indent=" " * 45)
  return "\n".join(lines)


def split_overrides(argv: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
  """(the other arguments, the `--config.SECTION.FIELD[=| ]VALUE` overrides in order)."""
  rest, overrides, i = [], [], 0
  while i < len(argv):
    arg = argv[i]
    if arg.startswith("--config."):
      name, eq, value = arg[len("--config."):].partition("=")
      if not eq:
        if i + 1 >= len(argv):
          raise ValueError(f"{arg} needs a value")
        value, i = argv[i + 1], i + 1
      overrides.append((name, value))
    else:
      rest.append(arg)
    i += 1
  return rest, overrides


def usage_error(prog: str, message: str) -> None:
  """One line on stderr and exit status 2, as argparse's own usage errors."""
  print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
  sys.exit(2)
