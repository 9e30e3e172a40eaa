"""A training run's data, of one pair or of several directions: the one entry point.

    tok, train, val, references = training_data.prepare(cfg, workdir)
    pairs = training_data.training_pairs(cfg, workdir)     # cleaned, held-out pairs left out

A run of one pair reads it with `corpus` (its tokenizer, cleaning, encoding and cache); a
run of several directions (`data.directions`) with `multilingual`, which reads each
direction as a run of that pair alone would and adds the language tokens. The trainer,
the automatic recipe and the tools call these two, never the cases.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from seq2seq.config import Config
from seq2seq.data import corpus, multilingual
from seq2seq.data.corpus import EncodedCorpus
from seq2seq.data.tokenizer import Tokenizer

if TYPE_CHECKING:
  import datasets


def prepare(cfg: Config, workdir: Path) -> tuple[Tokenizer, EncodedCorpus, EncodedCorpus, list[str]]:
  """The run's tokenizer (trained or reused), encoded training and validation corpora,
  and validation references."""
  return (multilingual.prepare if cfg.data.multilingual else corpus.prepare)(cfg, workdir)


def training_pairs(cfg: Config, workdir: Path | None = None) -> "datasets.Dataset":
  """The run's cleaned training pairs (of every direction, one after the other), the
  held-out validation pairs left out."""
  return (multilingual.training_pairs if cfg.data.multilingual
          else corpus.training_pairs)(cfg, workdir)
