"""What a translation engine takes and gives back, shared by the JAX `Translator` and the
CTranslate2 engine: one `SearchSettings` value, hypotheses and forced scores, the source
limit and the sources encoded."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import unicodedata
from typing import Sequence

import numpy as np

from seq2seq.config import DecodeConfig
from seq2seq.data.corpus import encode_texts
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding import mbr
from seq2seq.decoding.decode import Sampling
from seq2seq.decoding.glossary import Glossary
from seq2seq.vocab import truncate_keeping_eos

log = logging.getLogger("seq2seq.translate")


@dataclasses.dataclass
class Hypothesis:
  text: str
  score: float
  ids: list[int]


@dataclasses.dataclass(frozen=True)
class PairScore:
  """Forced-decoding score of a target given its source."""

  logprob: float  # sum of the log-probabilities of the target's pieces and its EOS
  tokens: int  # pieces scored: the target's pieces + EOS

  @property
  def per_token(self) -> float:
    """Length normalisation: logprob / tokens (the mean log-probability per piece)."""
    return self.logprob / self.tokens


def _whole(value, name: str, least: int) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
    raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")
  return int(value)


@dataclasses.dataclass(frozen=True)
class SearchSettings:
  """How one call searches, checked once when made: from an HTTP request, the command
  line or the Python API to the search, as one value. Equal settings decode together
  (the server batches by them). The run's `DecodeConfig` gives the defaults
  (`of`) and what no call changes (output limits, when beam search stops, MBR)."""

  beam_size: int = 1  # 1 = greedy search
  alpha: float = 0.6  # length penalty exponent of beam search
  nbest: int = 0  # 0: one translation per text; N: the N best hypotheses
  batch_size: int = 64  # sentences per decoding batch
  sampling: Sampling | None = None  # draw from the model instead of searching
  glossary: Glossary | None = None  # terms the translation must use (term_placement)

  def __post_init__(self):
    _whole(self.beam_size, "beam size", 1)
    _whole(self.batch_size, "batch size", 1)
    _whole(self.nbest, "nbest", 0)
    if (isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float))
        or not math.isfinite(self.alpha) or self.alpha < 0):
      raise ValueError(f"alpha must be a number of at least 0, got {self.alpha!r}")
    object.__setattr__(self, "alpha", float(self.alpha))
    if self.sampling is not None and not isinstance(self.sampling, Sampling):
      raise ValueError(f"sampling must be a Sampling, got {type(self.sampling).__name__}")
    if self.nbest > self.beam_size and self.sampling is None:
      raise ValueError(f"nbest={self.nbest} needs a beam of at least {self.nbest} "
                       f"hypotheses (beam size {self.beam_size}); raise the beam size or "
                       "lower nbest")
    if self.glossary is not None:
      if self.sampling is not None:
        raise ValueError("a glossary goes with beam search: it does not combine with "
                         "sampling")
      if isinstance(self.glossary, (str, os.PathLike)):
        object.__setattr__(self, "glossary", Glossary.read(self.glossary))
      else:
        object.__setattr__(self, "glossary", Glossary.of(self.glossary))

  @classmethod
  def of(cls, decode: DecodeConfig, **changes) -> "SearchSettings":
    """The run's search settings (`decode`) with `changes` (SearchSettings fields; None
    keeps the run's)."""
    return cls(decode.beam_size, decode.alpha, batch_size=decode.batch_size).changed(**changes)

  def changed(self, **changes) -> "SearchSettings":
    """These settings with `changes` (None keeps a setting), checked again; an unknown
    name is a TypeError listing the known ones."""
    known = [f.name for f in dataclasses.fields(self)]
    unknown = sorted(set(changes) - set(known))
    if unknown:
      raise TypeError(f"unknown search setting(s) {', '.join(unknown)}; known: "
                      f"{', '.join(known)}")
    return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

  def hypotheses(self, decode: DecodeConfig) -> int:
    """How many hypotheses per text the search returns: N for `nbest=N`; all W of the
    beam for an MBR choice (`decode.mbr`); else 1."""
    if self.nbest:
      return self.nbest
    return self.beam_size if decode.mbr and self.sampling is None else 1


def check_prefixes(texts: list, prefixes) -> None:
  """Refuses prefixes that do not pair with the texts one to one."""
  if prefixes is not None and len(prefixes) != len(texts):
    raise ValueError(f"{len(texts)} texts but {len(prefixes)} prefixes")
  if prefixes is not None and not all(isinstance(p, str) for p in prefixes):
    raise ValueError("prefixes must be strings (\"\" for none)")


def pick(hyps: list[list[Hypothesis]], settings: SearchSettings, decode: DecodeConfig
         ) -> list:
  """translate()'s answer: N hypotheses per text with `nbest=N`, else one text: the MBR
  choice among the text's hypotheses with decode.mbr, the best one without."""
  if settings.nbest:
    return [h[:settings.nbest] for h in hyps]
  if decode.mbr:
    return [h[mbr.choose([x.text for x in h], [x.score for x in h], decode.mbr,
                         decode.mbr_weights)].text for h in hyps]
  return [h[0].text for h in hyps]


def source_limit(model_max_len: int, c: DecodeConfig) -> int:
  """The most pieces (EOS included) a source may have: what the model takes, and no more
  than leaves room for its translation under the output limit `a * length + b`."""
  if c.max_len_a <= 0:
    return model_max_len
  return max(2, min(model_max_len, int((model_max_len - c.max_len_b) / c.max_len_a)))


def encode_sources(tokenizer: Tokenizer, texts: Sequence[str], limit: int,
                   line_numbers: Sequence[int] | None = None, target: bool = False
                   ) -> list[np.ndarray]:
  """Source ids with EOS; lines longer than the model's maximum are truncated, with a
  warning that names the line (1-based, `line_numbers[i]` for `texts[i]` if given).
  translate() never hands it such a line (`sentences.Plan` cuts them to fit); forced
  decoding (`score`) does. `target`: texts of the target side (`Tokenizer.encode_target`)."""
  ids = encode_texts(tokenizer, texts, target)
  for i, x in enumerate(ids):
    if len(x) > limit:
      number = line_numbers[i] if line_numbers is not None else i + 1
      log.warning("line %d: %d pieces exceed the model's maximum of %d; translating "
                  "only the first %d", number, len(x), limit, limit - 1)
      ids[i] = np.asarray(truncate_keeping_eos(x, limit) if target or tokenizer.source_eos
                          else x[:limit], np.int32)
  return ids


def has_text(text: str) -> bool:
  """Whether a text has something to translate: a character that is neither white space
  nor a control character (a line of NUL bytes translates to "", as an empty one)."""
  return any(not ch.isspace() and unicodedata.category(ch) != "Cc" for ch in text)
