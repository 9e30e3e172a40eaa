"""`seq2seq-export`: a trained run as a CTranslate2 model (`seq2seq.rundir.ctranslate2_model`)
or an Argos Translate package (`seq2seq.rundir.argos_package`).

    seq2seq-export --workdir RUN --format ctranslate2 --output DIR [--quantization int8]
"""

from __future__ import annotations

import argparse
import sys

from seq2seq.cli import parsing
from seq2seq.rundir import checkpoint
from seq2seq.rundir.argos_package import export_argos
from seq2seq.rundir.ctranslate2_model import QUANTIZATIONS, ExportError, export_ctranslate2


def main(argv=None) -> None:
  from seq2seq.runtime import setup_cli_logging

  parser = argparse.ArgumentParser(
      description="Export a trained run for another inference engine: a CTranslate2 model, "
      "or an Argos Translate package.",
      formatter_class=parsing.HelpFormatter)
  parsing.add_model_flags(parser, engine=False)
  parser.add_argument("--format", default="ctranslate2", choices=("ctranslate2", "argos"),
                      help="ctranslate2: a CTranslate2 model directory; argos: an Argos "
                      "Translate package (.argosmodel) for Argos Translate and LibreTranslate")
  parser.add_argument("--output", required=True, help="directory to write the model to "
                      "(--format argos: the package file, NAME.argosmodel)")
  parser.add_argument("--quantization", default=None, choices=QUANTIZATIONS,
                      help="weight type of the exported model (int8 for CPUs, float16 for "
                      "GPUs); default: float32, for argos int8 (as Argos packages ship)")
  parser.add_argument("--force", action="store_true", help="replace a non-empty --output")
  parser.add_argument("--src-lang", help="a model of several directions: export this "
                      "direction only (with --tgt-lang; an Argos package needs one)")
  parser.add_argument("--tgt-lang", help="see --src-lang")
  args = parser.parse_args(argv)
  if bool(args.src_lang) != bool(args.tgt_lang):
    parser.error("--src-lang and --tgt-lang go together: they name one direction")
  direction = (args.src_lang, args.tgt_lang) if args.src_lang else None
  setup_cli_logging()
  parsing.resolve_model(parser, args)
  try:
    if args.format == "argos":
      path = export_argos(args.workdir, args.output, args.checkpoint,
                          args.quantization or "int8", args.force, direction)
    else:
      path = export_ctranslate2(args.workdir, args.output, args.checkpoint,
                                args.quantization or "float32", args.force, direction)
  except (ExportError, checkpoint.CheckpointError) as e:
    sys.exit(f"error: {e}")
  print(path)


if __name__ == "__main__":
  main()
