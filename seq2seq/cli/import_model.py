"""`seq2seq-import`: a model trained elsewhere as a run directory (`seq2seq.rundir.importing`).

    seq2seq-import SOURCE --workdir RUN

SOURCE: an OPUS-MT release in Marian's format (folder or zip), a Hugging Face Marian
folder or Hub name (Helsinki-NLP/opus-mt-en-de), a CTranslate2 model directory, or an
Argos package (.argosmodel or its folder).
"""

from __future__ import annotations

import argparse
import sys

from seq2seq.cli import parsing
from seq2seq.rundir import checkpoint
from seq2seq.rundir.hub import HubError
from seq2seq.rundir.importing import import_model
from seq2seq.rundir.model_formats import FormatError


def main(argv=None) -> None:
  from seq2seq.runtime import setup_cli_logging

  parser = argparse.ArgumentParser(
      description="Import a translation model trained elsewhere (OPUS-MT / Marian, Hugging "
      "Face Marian, CTranslate2, Argos) as a run directory: translate, evaluate, serve, "
      "fine-tune (train.init_from) and export it as any run.",
      formatter_class=parsing.HelpFormatter)
  parser.add_argument("source", help="an OPUS-MT release (folder or .zip with the Marian "
                      ".npz), a Hugging Face Marian folder or Hub name (ORG/NAME, read "
                      "through the Hub's cache), a CTranslate2 model directory, or an Argos "
                      "package (.argosmodel or its folder)")
  parser.add_argument("--workdir", required=True, help="the run directory to write")
  parser.add_argument("--src-lang", help="source language, where the model's files do not "
                      "say it")
  parser.add_argument("--tgt-lang", help="target language, where the model's files do not "
                      "say it (a model with >>xx<< target tokens: the default one)")
  parser.add_argument("--spm-model", help="a CTranslate2 model: its SentencePiece model, "
                      "where none is beside model.bin")
  parser.add_argument("--force", action="store_true", help="replace a non-empty --workdir")
  args = parser.parse_args(argv)
  setup_cli_logging()
  try:
    path = import_model(args.source, args.workdir, args.src_lang, args.tgt_lang,
                        args.spm_model, args.force)
  except (FormatError, checkpoint.CheckpointError, HubError) as e:
    sys.exit(f"error: {e}")
  print(path)


if __name__ == "__main__":
  main()
