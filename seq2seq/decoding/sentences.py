"""Texts as the model takes them: cut into sentences, each within the model's length, and
their translations joined back with the text's own spacing and line breaks.

A model trained on single sentences translates a paragraph better sentence by sentence
(LibreTranslate and Argos split too). `Segmented.of` cuts a text with `sentencex`, the
Wikimedia splitter (maintained, rule-based per language, ~240 languages; on the joined
test_2016_flickr paragraphs it finds nearly all sentences exactly, and pysbd, as exact,
is far slower and unmaintained: docs/translating.md), then cuts a sentence the model cannot take whole
at clause punctuation, else at white space. `Plan` does it for every text of a call, so
that the sentences of all texts are searched in one batched pass, and joins the
hypotheses back per text.

    plan = Plan.of(texts, "en", count_pieces, limit)
    hyps = engine.hypotheses(plan.sentences, ...)   # one list of hypotheses per sentence
    per_text = plan.join(hyps)
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from typing import Callable, Sequence

import sentencex

from seq2seq.decoding.engine_io import Hypothesis

# Where a sentence too long for the model is cut first: after clause punctuation and the
# white space that follows it (ASCII and CJK), else before any run of white space.
_CLAUSE_END = re.compile(r"(?<=[,;:\u2013\u2014\u3001\uff0c\uff1b\uff1a])\s+")
_SPACE = re.compile(r"\s+")


class TooLongError(ValueError):
  """A text has a part that no cut brings within the model's maximum length."""


def _edges(part: str) -> tuple[str, str, str]:
  """(leading white space, the rest stripped, trailing white space) of `part`."""
  core = part.strip()
  if not core:
    return part, "", ""
  start = part.index(core)
  return part[:start], core, part[start + len(core):]


def split_sentences(text: str, language: str) -> list[str]:
  """The sentences of `text` in `language` (an ISO 639 code), each with the white space
  that follows it, so that their concatenation is `text`. Line breaks always end a
  sentence."""
  out = []
  for line in text.splitlines(keepends=True):
    parts = list(sentencex.segment(language, line)) if line.strip() else [line]
    if "".join(parts) != line:  # the splitter dropped or changed characters: keep the line
      parts = [line]
    out += [p for p in parts if p]
  return out


# Words that begin a sentence, as written there, in languages that capitalise a sentence's
# first word and names only: where one follows a lower-case word inside a long sentence,
# that sentence is a run-on of several (captions, chat or a transcript joined without
# punctuation), and it is cut there (`split_run_ons`). English: determiners, numerals and
# pronouns, and the first words of Multi30k's training captions (3 times or more, and
# written lower-case inside sentences more often than capitalised: not names).
STARTERS = {"en": frozenset((
    "A About Adults An As At Baby Band Baseball Basketball Bearded Beautiful Bicyclist "
    "Bicyclists Big Bike Black Blond Blue Boy Boys Brown Brown-haired Brunette Cars Child "
    "Children City Colorful Construction Couple Cowboy Crowd Dancers Dark Dark-haired "
    "Dirt Dog Dogs During Eight Elderly Family Father Female Few Five Football Four "
    "Friends Gentleman Girl Girls Gray Group Guy Guys Happy Hard He High Hikers Hockey "
    "Ice In Individuals It Kid Kids Lady Large Little Local Lone Looking Looks Lots Male "
    "Man Many Marathon Members Men Middle-aged Military Most Mother Musicians Native Nine "
    "Old Older On One Orange People Person Picture Pitcher Players Police Race Red Rodeo "
    "Runners School Seven Several She Shirtless Singer Sitting Six Skateboarder Skier "
    "Small Smiling Snowboarder Soccer Soldiers Some Someone Spectators Sports Street "
    "Student Students Surfer Teenage Teenagers Ten Tennis The There These They This Those "
    "Three Toddler Two Various View We Wet While White With Woman Women Worker Workers "
    "Yellow Young Younger").split())}
RUN_ON_WORDS = 16  # words of the shortest sentence that may be a run-on of several
_WORD = re.compile(r"\S+")


def split_run_ons(sentence: str, language: str | None) -> list[str]:
  """`sentence` (a sentence and the white space after it) cut before each sentence start
  (`STARTERS[language]`) that follows a word ending in a lower-case letter, where the
  sentence has at least `RUN_ON_WORDS` words and each part at least three; parts keep
  the white space that follows them. Languages without starters: `[sentence]`."""
  starters = STARTERS.get(language or "")
  words = list(_WORD.finditer(sentence))
  if not starters or len(words) < RUN_ON_WORDS:
    return [sentence]
  cuts, last = [], 0
  for k in range(3, len(words) - 2):
    before = words[k - 1].group()
    if (words[k].group() in starters and before[-1].isalpha() and before[-1].islower()
        and k - last >= 3):
      cuts.append(words[k].start())
      last = k
  bounds = [0, *cuts, len(sentence)]
  return [sentence[a:b] for a, b in zip(bounds, bounds[1:])]


def with_full_stop(sentence: str) -> str:
  """`sentence` ending in a full stop where it ends in no punctuation that closes a
  sentence: caption-style lines (Multi30k's) joined into running text."""
  return sentence if not sentence or sentence[-1] in ".!?\"')" else sentence + "."


def _cut(sentence: str, fits: Callable[[str], bool], pattern: re.Pattern) -> list[str]:
  """`sentence` cut after matches of `pattern` into as few consecutive parts as fit, each
  with its trailing white space; a part between two matches that does not fit stays
  whole."""
  pieces, start = [], 0
  for m in pattern.finditer(sentence):
    if m.start() > start:
      pieces.append(sentence[start:m.end()])
      start = m.end()
  pieces.append(sentence[start:])
  parts, current = [], ""
  for piece in pieces:
    if current and not fits(current + piece):
      parts.append(current)
      current = ""
    current += piece
  return parts + [current]


def _fitting_parts(sentence: str, fits: Callable[[str], bool]) -> list[str] | None:
  """`sentence` whole if it fits, else cut at clause punctuation and, where a clause is
  still too long, at white space; None where a part without white space does not fit."""
  if fits(sentence):
    return [sentence]
  parts = []
  for clause in _cut(sentence, fits, _CLAUSE_END):
    parts += [clause] if fits(clause) else _cut(clause, fits, _SPACE)
  return parts if all(fits(p) for p in parts) else None


def surely_fits(text: str, limit: int) -> bool:
  """Whether `text` has at most `limit` pieces with EOS, without tokenizing it: a piece
  holds one UTF-8 byte at least of the NFKC-normalised text (SentencePiece's
  normalisation, which can lengthen a character), plus the leading word marker."""
  return len(unicodedata.normalize("NFKC", text).encode("utf-8")) + 2 <= limit


def check_cuttable(texts: Sequence[str], count_pieces: Callable[[list[str]], list[int]],
                   limit: int) -> None:
  """Raises `TooLongError` naming the first text that `Plan.of` could not cut to fit:
  one with a run without white space of more than `limit` pieces. Counts pieces only of
  runs that could be that long (a piece holds one UTF-8 byte at least): cheap enough to
  check a request before it joins a shared batch."""
  for i, text in enumerate(texts):
    long_words = [w for w in _SPACE.split(text) if not surely_fits(w, limit)]
    for word, pieces in zip(long_words, count_pieces(long_words) if long_words else []):
      if pieces > limit:
        raise TooLongError(f"text {i + 1}: {word[:40]!r}... has no white space to cut at and "
                           f"is {pieces} pieces, more than the model's maximum of {limit}")


@dataclasses.dataclass(frozen=True)
class Segmented:
  """A text as `spaces[0] + units[0] + spaces[1] + ... + units[-1] + spaces[-1]`: the
  units to translate (sentences, or parts of a long one) and the white space around them.
  A text with nothing to translate is one space and no unit."""

  units: tuple[str, ...]
  spaces: tuple[str, ...]

  @classmethod
  def of(cls, text: str, language: str | None, fits: Callable[[str], bool],
         what: str = "the text") -> "Segmented":
    """`text` cut into sentences (none with `language=None`: the text is one unit), a
    long run-on sentence at the sentence starts inside it (`split_run_ons`), and any
    part that does not `fit` cut at clause punctuation, else at white space.

    Raises:
      TooLongError: a run of text without white space does not fit; names `what`.
    """
    units, spaces = [], [""]
    found = split_sentences(text, language) if language else [text]
    for sentence in [part for s in found for part in split_run_ons(s, language)]:
      lead, core, trail = _edges(sentence)
      spaces[-1] += lead
      if not core:
        spaces[-1] += trail
        continue
      parts = _fitting_parts(core, fits)
      if parts is None:
        longest = max(_SPACE.split(core), key=len)
        raise TooLongError(f"{what}: {longest[:40]!r}... has no white space to cut at and is "
                           "longer than the model's maximum input")
      for part in parts:
        p_lead, p_core, p_trail = _edges(part)
        spaces[-1] += p_lead
        units.append(p_core)
        spaces.append(p_trail)
      spaces[-1] += trail
    return cls(tuple(units), tuple(spaces))

  def join(self, translations: Sequence[str]) -> str:
    """The text with each unit replaced by its translation."""
    out = [self.spaces[0]]
    for unit, space in zip(translations, self.spaces[1:], strict=True):
      out += [unit, space]
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class Plan:
  """The texts of one translate() call, cut (`Segmented`), and the way back."""

  texts: tuple[Segmented, ...]

  @classmethod
  def of(cls, texts: Sequence[str], language: str | None,
         count_pieces: Callable[[list[str]], list[int]], limit: int,
         first_index: int = 0) -> "Plan":
    """Each text cut into sentences in `language` (None: not cut into sentences), and
    every part within `limit` pieces (`count_pieces` counts a list of strings' pieces).
    A text is cut only where the model cannot take it whole, so a one-sentence text of
    sentence-per-line data is searched as it is."""
    def fits(part: str) -> bool:  # tokenized only where it could be too long
      return surely_fits(part, limit) or count_pieces([part])[0] <= limit
    plan = []
    for i, text in enumerate(texts):
      if language is None and fits(text):
        plan.append(Segmented((text,), ("", "")))  # as given (its spacing included)
      else:
        plan.append(Segmented.of(text, language, fits, f"text {first_index + i + 1}"))
    return cls(tuple(plan))

  @property
  def sentences(self) -> list[str]:
    """Every unit of every text, in order."""
    return [u for t in self.texts for u in t.units]

  def owners(self) -> list[tuple[int, int]]:
    """(text, unit within it) of each of `sentences`."""
    return [(i, j) for i, t in enumerate(self.texts) for j in range(len(t.units))]

  def prefixes(self, prefixes: Sequence[str] | None) -> list[str] | None:
    """Each unit's forced prefix: its text's for the first unit, "" for the others."""
    if prefixes is None:
      return None
    return [prefixes[i] if j == 0 else "" for i, j in self.owners()]

  def join(self, hyps: Sequence[Sequence[Hypothesis]]) -> list[list[Hypothesis]]:
    """Each text's hypotheses from its units': the k-th joins every unit's k-th (or its
    last, where a unit has fewer), scores added, ids concatenated; best first."""
    out, k = [], 0
    for text in self.texts:
      mine, k = list(hyps[k:k + len(text.units)]), k + len(text.units)
      if not mine:  # nothing to translate: "", as for an empty line
        out.append([Hypothesis("", 0.0, [])])
        continue
      if len(mine) == 1 and text.spaces == ("", ""):
        out.append(list(mine[0]))
        continue
      joined = []
      for n in range(max(len(h) for h in mine)):
        picks = [h[min(n, len(h) - 1)] for h in mine]
        joined.append(Hypothesis(text.join([h.text for h in picks]),
                                 float(sum(h.score for h in picks)),
                                 [i for h in picks for i in h.ids]))
      out.append(joined)
    return out
