"""What a translation engine takes and gives back, shared by the JAX `Translator` and the
CTranslate2 engine: search settings, sampling settings, hypotheses and forced scores.
Imports only the config, the tokenizer and the MBR choice (text only)."""

from __future__ import annotations

import dataclasses
import logging
import unicodedata
from typing import Sequence

import numpy as np

from seq2seq.config import BEAM_STOPS, DecodeConfig
from seq2seq.data.corpus import encode_texts
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding import mbr
from seq2seq.decoding.decode import Sampling  # noqa: F401 (part of this module's API)
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


def resolve_settings(c: DecodeConfig, beam_size: int | None = None, alpha: float | None = None,
                     batch_size: int | None = None) -> DecodeConfig:
  """The saved decoding settings with the given ones in their place (None keeps the
  saved one); the one place where defaults are resolved and checked."""
  c = dataclasses.replace(c, beam_size=c.beam_size if beam_size is None else beam_size,
                          alpha=c.alpha if alpha is None else float(alpha),
                          batch_size=batch_size or c.batch_size)
  if c.beam_size < 1:
    raise ValueError(f"beam size must be at least 1 (1 = greedy), got {c.beam_size}")
  if c.batch_size < 1:
    raise ValueError(f"batch size must be at least 1, got {c.batch_size}")
  if c.workers < 1:
    raise ValueError(f"decoding workers must be at least 1, got {c.workers}")
  if c.beam_stop not in BEAM_STOPS:
    raise ValueError(f"decode.beam_stop must be one of {', '.join(BEAM_STOPS)}, got "
                     f"{c.beam_stop!r}")
  if c.min_rows < 0:
    raise ValueError(f"decode.min_rows must be at least 0 (0: batches never shrink), got "
                     f"{c.min_rows}")
  if c.mbr:
    mbr.check_settings(c.mbr, c.mbr_weights)
  return c


def check_request(texts: list, prefixes, c: DecodeConfig, nbest: int, sampling) -> None:
  """Refuses a translate() call whose prefixes or n-best do not fit its texts and beam."""
  if prefixes is not None and len(prefixes) != len(texts):
    raise ValueError(f"{len(texts)} texts but {len(prefixes)} prefixes")
  if nbest < 0 or (nbest > c.beam_size and sampling is None):
    raise ValueError(f"nbest={nbest} needs a beam of at least {nbest} hypotheses "
                     f"(beam size {c.beam_size}); raise the beam size or lower nbest")


def hypotheses_needed(c: DecodeConfig, nbest: int, sampling) -> int:
  """How many hypotheses per text the search returns: N for `nbest=N`; all W of the beam
  for an MBR choice (decode.mbr); else 1."""
  if nbest:
    return nbest
  return c.beam_size if c.mbr and sampling is None else 1


def pick(hyps: list[list[Hypothesis]], nbest: int, c: DecodeConfig) -> list:
  """translate()'s answer: N hypotheses per text with `nbest=N`, else one text: the MBR
  choice among the text's hypotheses with decode.mbr, the best one without."""
  if nbest:
    return [h[:nbest] for h in hyps]
  if c.mbr:
    return [h[mbr.choose([x.text for x in h], [x.score for x in h], c.mbr, c.mbr_weights)].text
            for h in hyps]
  return [h[0].text for h in hyps]


def source_limit(model_max_len: int, c: DecodeConfig) -> int:
  """The most pieces (EOS included) a source may have: what the model takes, and no more
  than leaves room for its translation under the output limit `a * length + b`."""
  if c.max_len_a <= 0:
    return model_max_len
  return max(2, min(model_max_len, int((model_max_len - c.max_len_b) / c.max_len_a)))


def encode_sources(tokenizer: Tokenizer, texts: Sequence[str], limit: int,
                   line_numbers: Sequence[int] | None = None) -> list[np.ndarray]:
  """Source ids with EOS; lines longer than the model's maximum are truncated, with a
  warning that names the line (1-based, `line_numbers[i]` for `texts[i]` if given).
  translate() never hands it such a line (`sentences.Plan` cuts them to fit); forced
  decoding (`score`) does."""
  ids = encode_texts(tokenizer, texts)
  for i, x in enumerate(ids):
    if len(x) > limit:
      number = line_numbers[i] if line_numbers is not None else i + 1
      log.warning("line %d: %d pieces exceed the model's maximum of %d; translating "
                  "only the first %d", number, len(x), limit, limit - 1)
      ids[i] = np.asarray(truncate_keeping_eos(x, limit), np.int32)
  return ids


def has_text(text: str) -> bool:
  """Whether a text has something to translate: a character that is neither white space
  nor a control character (a line of NUL bytes translates to "", as an empty one)."""
  return any(not ch.isspace() and unicodedata.category(ch) != "Cc" for ch in text)
