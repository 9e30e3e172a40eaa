"""`load_engine`: the engine of a run directory (JAX) or of an export (CTranslate2), as
the contract (`engine.Engine`) that the server, documents and the command line use."""

from __future__ import annotations

import os
from typing import Sequence

from seq2seq.decoding import loading
from seq2seq.decoding.ct2_engine import CTranslate2Translator
from seq2seq.decoding.engine import Engine
from seq2seq.decoding.translator import Translator
from seq2seq.rundir import ctranslate2_model


def load_engine(path: str | os.PathLike | Sequence[str | os.PathLike], engine: str = "jax",
                checkpoint_name: str = "best", **decode_overrides) -> Engine:
  """The run directory at `path` (several: an ensemble) with the JAX engine, or with
  `engine="ctranslate2"` the directory written by `seq2seq-export` (or a run directory,
  whose checkpoint is exported once into RUN/exports, `export_of_run`).
  `decode_overrides`: DecodeConfig fields over the saved ones (the defaults of a call)."""
  one = [path] if isinstance(path, (str, os.PathLike)) else list(path)
  if engine == "ctranslate2" and len(one) == 1 and ctranslate2_model.is_run(one[0]):
    return CTranslate2Translator.load(ctranslate2_model.export_of_run(one[0], checkpoint_name),
                                      **decode_overrides)
  workdirs = loading.workdir_list(path, engine, checkpoint_name)
  if engine == "ctranslate2":
    return CTranslate2Translator.load(workdirs[0], **decode_overrides)
  return Translator.load(workdirs, checkpoint_name, **decode_overrides)
