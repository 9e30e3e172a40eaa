"""Agreement around a glossary term: the words of its phrase written for the term.

A term that replaces the model's noun may be of another gender than it ("im Park" with
`park -> Grünanlage`): the words around it (articles, contractions, adjective endings)
then agree with the model's noun, not with the term. A language's piece rewrites them
(`rewrites(text, start, end, target, takeable)`: the ways to write the target in place
of `text[start:end]` with its phrase agreeing, each a `Rewrite` of a span that holds the
replaced words); where the phrase can be read several ways, each way is a rewrite, and
the model's scores choose (term_placement.py). A language without a piece keeps the
model's words around the term.

    de    german.py
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Callable, Protocol

# A word of a translation: letters and digits, joined by `-` or an apostrophe (the unit
# terms replace and phrases are read in).
WORD = re.compile(r"\w+(?:[-'\u2019]\w+)*")


@dataclasses.dataclass(frozen=True)
class Rewrite:
  """`text` in the place of the characters [start, end) of a translation."""
  start: int
  end: int
  text: str


class Agreement(Protocol):
  def rewrites(self, text: str, start: int, end: int, target: str,
               takeable: Callable[[int, int], bool] | None = None) -> list[Rewrite]:
    """`takeable(start, end)`: whether the piece may replace those characters instead
    of `text[start:end]` (the noun after an article the attention landed on); None: any."""
    ...

  def prepare(self) -> None:
    """Reads what it needs (a lexicon) now, not at its first term (a server's warm-up)."""
    ...


# Each language's piece, by the class that makes it ("module:Class", imported at its first
# use: a piece imports this module for `Rewrite`).
LANGUAGES = {"de": "seq2seq.decoding.german:German"}


def for_language(code: str | None) -> Agreement | None:
  """The piece for a target language (an ISO 639-1 code, as a run's `tgt_lang`; a
  region or script after it is ignored: `de-CH`), or None. The pieces share what they
  read (a lexicon, once per process)."""
  where = LANGUAGES.get((code or "").split("-")[0].split("_")[0].lower())
  if where is None:
    return None
  module, name = where.split(":")
  return getattr(importlib.import_module(module), name)()
