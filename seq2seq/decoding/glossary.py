"""Glossaries: source terms and the target terms a translation must use for them.

A glossary file is UTF-8 text, one term per line, `source term<TAB>target term`; the
target may list alternatives with `|` (`dog<TAB>Hund|Hunde|Hundes`: any one of them
will do, e.g. the inflected forms). Blank lines and lines starting with `#` are skipped.

A term applies to a sentence when its source term occurs in it as whole words (not
inside a longer word), in any case (`Dog`, `dog` and `DOG` all match `dog`); where two
terms overlap, the longer source term applies. Each term that applies puts one of its
target alternatives, written as the glossary writes it, in the place of the model's own
word for its source term (`term_placement.py`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from seq2seq.data.tokenizer import Tokenizer


class GlossaryError(ValueError):
  """A glossary that cannot be read, naming the file and line."""


@dataclasses.dataclass(frozen=True)
class Term:
  source: str
  targets: tuple[str, ...]  # alternatives, any one of which satisfies the term

  @property
  def pattern(self) -> re.Pattern:
    return _pattern(self.source)


@dataclasses.dataclass(frozen=True)
class Glossary:
  terms: tuple[Term, ...]

  @classmethod
  def read(cls, path: str | os.PathLike) -> "Glossary":
    """The glossary of a TSV file (module docstring); errors name the file and line."""
    path = Path(path)
    try:
      text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
      raise GlossaryError(f"{path}: no such glossary file") from None
    except UnicodeDecodeError as e:
      raise GlossaryError(f"{path}: not UTF-8 text (byte {e.start})") from None
    terms = []
    for number, line in enumerate(text.splitlines(), 1):
      if not line.strip() or line.lstrip().startswith("#"):
        continue
      try:
        terms.append(parse_line(line))
      except GlossaryError as e:
        raise GlossaryError(f"{path}, line {number}: {e}") from None
    return cls.of(terms)

  @classmethod
  def of(cls, terms: "Glossary | Mapping[str, str] | Iterable[Term | tuple[str, str]]"
         ) -> "Glossary":
    """A glossary from another, a {source: target} mapping (a target may hold `|`
    alternatives) or (source, target) pairs."""
    if isinstance(terms, Glossary):
      return terms
    items = terms.items() if isinstance(terms, Mapping) else terms
    out = []
    for item in items:
      if isinstance(item, Term):
        out.append(item)
        continue
      source, target = item
      if not isinstance(source, str) or not isinstance(target, str):
        raise GlossaryError(f"a term is a source and a target string, got {item!r}")
      out.append(parse_line(f"{source}\t{target}"))
    return cls(tuple(out))

  def merged(self, other: "Glossary | None") -> "Glossary":
    """These terms and `other`'s; a term of `other` replaces one of the same source term
    (in any case)."""
    if other is None:
      return self
    theirs = {t.source.casefold() for t in other.terms}
    return Glossary(tuple(t for t in self.terms if t.source.casefold() not in theirs)
                    + other.terms)

  def applying(self, sentence: str) -> list[Term]:
    """The terms that apply to `sentence`, in the order of their first occurrence."""
    found, folded = [], sentence.casefold()
    for term in self.terms:
      if " " not in term.source and term.source.casefold() not in folded:
        continue  # a quick test first: the pattern only where the word may be
      for m in term.pattern.finditer(sentence):
        found.append((m.start(), m.end(), term))
    found.sort(key=lambda x: (x[0], -(x[1] - x[0])))
    kept, end, seen = [], -1, set()
    for start, stop, term in found:
      if start >= end and term not in seen:  # overlapped by a longer, earlier match: out
        kept.append(term)
        seen.add(term)
      end = max(end, stop)
    return kept


def parse_line(line: str) -> Term:
  if "\t" not in line:
    raise GlossaryError("expected 'source term<TAB>target term', found no tab")
  source, target = (part.strip() for part in line.split("\t", 1))
  targets = tuple(t.strip() for t in target.split("|") if t.strip())
  if not source:
    raise GlossaryError("the source term is empty")
  if not targets:
    raise GlossaryError(f"the target of {source!r} is empty")
  return Term(source, targets)


@functools.lru_cache(maxsize=4096)
def _pattern(source: str) -> re.Pattern:
  words = r"\s+".join(re.escape(w) for w in source.split())
  return re.compile(rf"(?<!\w){words}(?!\w)", re.IGNORECASE)


def load_glossary(glossary, sampling=None, prefixes=None) -> Glossary | None:
  """A translate() call's `glossary` argument as a Glossary (None: none), refused with
  the settings it does not combine with."""
  if glossary is None:
    return None
  if sampling is not None or prefixes is not None:
    raise ValueError("a glossary goes with beam search: it does not combine with "
                     "sampling or prefixes")
  if isinstance(glossary, (str, os.PathLike)):
    return Glossary.read(glossary)
  return Glossary.of(glossary)


def term_use(glossary: Glossary, sources: Sequence[str], translations: Sequence[str]
             ) -> tuple[int, int]:
  """(terms whose target, one of its alternatives, occurs in the translation as whole
  words, in its case; terms that apply to the sources), over the pairs."""
  used = total = 0
  for source, translation in zip(sources, translations):
    for term in glossary.applying(source):
      total += 1
      used += any(re.search(rf"(?<!\w){re.escape(t)}(?!\w)", translation)
                  for t in term.targets)
  return used, total


def check_terms(tokenizer: Tokenizer, glossary: Glossary, texts: Sequence[str],
                max_len: int, line_numbers: Sequence[int]) -> None:
  """Refuses a term's target that the model's output could not hold, naming the first
  text it applies to (`line_numbers[i]`, 0-based, of `texts[i]`) and the term."""
  targets = [target for term in glossary.terms for target in term.targets]
  pieces = dict(zip(targets, tokenizer.encode_target(targets)))
  for term in glossary.terms:
    for target in term.targets:
      if 0 < len(pieces[target]) < max_len - 1:
        continue
      for text, number in zip(texts, line_numbers):
        if term in glossary.applying(text):
          raise ValueError(f"line {number + 1}: the glossary's target {target!r} for "
                           f"{term.source!r} has {len(pieces[target])} pieces; the model's "
                           f"outputs are at most {max_len - 1}")
