"""A run directory's own files: its resolved config (config.json) and its tokenizer,
read and written, and the error that names one missing or damaged."""

from __future__ import annotations

import json
import os
from pathlib import Path

from seq2seq.config import Config
from seq2seq.data.tokenizer import MODEL_FILE, Tokenizer
from seq2seq.runtime import write_atomic

CONFIG_FILE = "config.json"


class CheckpointError(ValueError):
  """A run directory or checkpoint is missing, damaged, does not match the model, or
  could not be written."""

def save_config(workdir: str | os.PathLike, cfg: Config) -> None:
  write_atomic(Path(workdir) / CONFIG_FILE, json.dumps(cfg.to_dict(), indent=2) + "\n")

def load_config(workdir: str | os.PathLike) -> Config:
  path = Path(workdir) / CONFIG_FILE
  if not path.exists():
    raise CheckpointError(f"{path} not found: {workdir} is not a run directory written by "
                          "train.py")
  return Config.from_dict(json.loads(path.read_text()))

def load_tokenizer(workdir: str | os.PathLike) -> Tokenizer:
  path = Path(workdir) / MODEL_FILE
  if not path.exists():
    raise CheckpointError(f"{path} not found: the run directory has no tokenizer")
  return Tokenizer.load(path)
