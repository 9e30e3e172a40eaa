"""Glossaries: source terms and the target terms a translation must use for them.

A glossary file is UTF-8 text, one term per line, `source term<TAB>target term`; the
target may list alternatives with `|` (`dog<TAB>Hund|Hunde|Hundes`: any one of them
will do, e.g. the inflected forms). Blank lines and lines starting with `#` are skipped.

A term applies to a sentence when its source term occurs in it as whole words (not
inside a longer word), in any case (`Dog`, `dog` and `DOG` all match `dog`); where two
terms overlap, the longer source term applies. Each term that applies becomes one
constraint of the constrained beam search (`constraints.py`): the translation contains
one of its target alternatives, written as the glossary writes it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID


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
    found = []
    for term in self.terms:
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
    raise ValueError("a glossary constrains beam search: it does not combine with "
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


def constraint_pieces(tokenizer: Tokenizer, terms: Sequence[Term], max_len: int,
                      text_index: int) -> list[list[np.ndarray]]:
  """The pieces of each term's target alternatives (no EOS), the constraints of a
  sentence; a target that leaves the sentence no room is refused, naming the text
  (`text_index`, 0-based) and the term."""
  out = []
  for term in terms:
    alternatives = [np.asarray(x, np.int32) for x in tokenizer.encode(term.targets)]
    for target, pieces in zip(term.targets, alternatives):
      if not 0 < len(pieces) < max_len - 1:
        raise ValueError(f"line {text_index + 1}: the glossary's target {target!r} for "
                         f"{term.source!r} has {len(pieces)} pieces; the model's outputs "
                         f"are at most {max_len - 1}")
    out.append(alternatives)
  return out


def word_starts(tokenizer: Tokenizer) -> np.ndarray:
  """`[V]` bool: the pieces that begin a word (the word marker, punctuation, the special
  ids): where a glossary term may end (`constraints.advance`)."""
  special = {PAD_ID, UNK_ID, BOS_ID, EOS_ID}
  return np.asarray([i in special or p.startswith("\u2581")
                     or not any(ch.isalnum() for ch in p) and not p.startswith("<0x")
                     for i, p in enumerate(tokenizer.pieces(range(tokenizer.vocab_size)))])
