"""Glossary terms put where the model put its own words for their source terms.

A sentence that a glossary term applies to is first translated as without the glossary
(the same search, so every other word is the model's). The model's cross-attention as
it wrote that translation (`Engine.align`: mean over the decoder's layers and heads)
then tells, for each occurrence of a source term, which words of the translation it
wrote for it: each target word is aligned to the source word its attention, summed over
both words' pieces, goes to most (`word_alignment`). The term's target takes the place
of the occurrence's aligned words, in the same sentence, at the same position
(`placements`, `head`); an occurrence that appears twice gets its target twice. Where a
term lists alternatives (`Hund|Hunde|Hundes`), the model scores each variant of the
sentence in context (forced decoding) and the best is kept, so that the inflection fits;
the hypothesis's score is then that forced score, length-normalised as the search
normalises its own.

An occurrence that no translated word is aligned to (the model translated it within a
neighbour's compound, "cardboard box" -> "Karton", or wrote it from the words before it,
"junges Kind" for "young child", or left it out) takes a word of the source words just
before or after it (`neighbours`; the model's scores choose between the two), and where
neither was translated, is inserted where the nearest translated source word went
(`insertion`). Nothing is appended after the sentence, and no search runs again:
placing costs one forced pass (the attention) and, for sentences with variants, one
more (their scores).

Where the target language has an agreement piece (`agreement.py`; German's is
`german.py`), a term does not just replace the model's noun: its phrase is written again
for it ("im Park" -> "in der Grünanlage"), and where the phrase reads several ways, each
is a variant the model's scores choose among, as among alternatives.

Words are runs of letters and digits (joined by `-` or an apostrophe); punctuation is
never replaced. A term written in lower case that lands at the start of the sentence
begins with a capital, as the sentence does.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Sequence

import numpy as np

from seq2seq.decoding.agreement import WORD, Agreement, Rewrite
from seq2seq.decoding.engine import Alignment
from seq2seq.decoding.engine_io import Hypothesis, PairScore
from seq2seq.decoding.glossary import Glossary, Term

MOST_VARIANTS = 32  # alternative combinations scored per hypothesis


def word_spans(text: str) -> list[tuple[int, int]]:
  """(start, end) character offsets of the words of `text`."""
  return [m.span() for m in WORD.finditer(text)]


def piece_words(piece_spans: Sequence[tuple[int, int]], words: Sequence[tuple[int, int]],
                text: str) -> np.ndarray:
  """`[pieces]`: the word each piece of `text` overlaps (its first); a piece of spaces
  only (SentencePiece's lone word marker) the word after it; -1 for none (punctuation)."""
  out = np.full(len(piece_spans), -1, np.int64)
  for p, (start, end) in enumerate(piece_spans):
    if not text[start:end].strip():
      start, end = end, end + 1  # the word that starts where it ends
    for w, (ws, we) in enumerate(words):
      if start < we and ws < end:
        out[p] = w
        break
  return out


def word_alignment(found: Alignment, source: str, source_words: Sequence[tuple[int, int]],
                   target: str, target_words: Sequence[tuple[int, int]]) -> np.ndarray:
  """`[target words, source words + 1]`: the attention of each target word's pieces
  to each source word's pieces, summed; the last column is what goes elsewhere
  (punctuation, EOS)."""
  src = piece_words(found.source_spans, source_words, source)
  tgt = piece_words(found.target_spans, target_words, target)
  elsewhere = len(source_words)
  columns = np.append(np.where(src >= 0, src, elsewhere), elsewhere)  # + the EOS column
  weights = found.weights[:len(tgt), :len(columns)]  # the EOS row out
  by_source = np.zeros((len(tgt), elsewhere + 1))
  np.add.at(by_source.T, columns[:weights.shape[1]], weights.T)
  out = np.zeros((len(target_words), elsewhere + 1))
  np.add.at(out, tgt[tgt >= 0], by_source[tgt >= 0])
  return out


@dataclasses.dataclass(frozen=True)
class Occurrence:
  """A source term where it occurs: its term and its source words' indices."""
  term: Term
  words: tuple[int, ...]


def occurrences(glossary: Glossary, source: str, source_words: Sequence[tuple[int, int]]
                ) -> list[Occurrence]:
  """Every occurrence of the terms that apply to `source` (`Glossary.applying`), each
  source word in at most one (the longer term's, as `applying` chooses)."""
  out, taken = [], set()
  for term in glossary.applying(source):
    for m in term.pattern.finditer(source):
      words = tuple(w for w, (s, e) in enumerate(source_words)
                    if s < m.end() and m.start() < e)
      if words and not taken & set(words):
        taken.update(words)
        out.append(Occurrence(term, words))
  return out


def runs(indices: Sequence[int]) -> list[list[int]]:
  """Sorted indices cut into runs of consecutive ones."""
  out: list[list[int]] = []
  for i in sorted(indices):
    if out and i == out[-1][-1] + 1:
      out[-1].append(i)
    else:
      out.append([i])
  return out


def aligned_words(weights: np.ndarray) -> np.ndarray:
  """`[target words]`: the source word each target word attends to most."""
  return (np.argmax(weights[:, :-1], axis=1) if len(weights) and weights.shape[1] > 1
          else np.zeros(len(weights), np.int64))


def placements(occs: Sequence[Occurrence], weights: np.ndarray, aligned: np.ndarray
               ) -> list[tuple[int, int] | None]:
  """For each occurrence, the (first, last) target words its term replaces, or None:
  the words whose attention goes most to one of the occurrence's source words, their
  last run (an article predicted before its noun attends to the noun: "Eine kleine
  Frau" for "a small woman"; the noun comes last); a word claimed by two occurrences
  goes to the later run, and the other takes its next one, if any; else a compound's
  word (below)."""
  if not len(weights):
    return [None] * len(occs)
  candidates = []
  for k, occ in enumerate(occs):
    words = [t for t in range(len(weights)) if aligned[t] in occ.words]
    mass = weights[:, list(occ.words)].sum(axis=1)
    for order, run in enumerate(runs(words)):
      candidates.append((order, float(mass[run].sum()), k, run[0], run[-1]))
  out: list = [None] * len(occs)
  taken: set[int] = set()
  for _, _, k, first, last in sorted(candidates, reverse=True):
    if out[k] is None and not taken & set(range(first, last + 1)):
      out[k] = (first, last)
      taken.update(range(first, last + 1))
  # A word that translates the occurrence with its neighbour (a compound: "security
  # guard" -> "Wachmann") attends most to the neighbour: the occurrence takes the word
  # that attends to it most, if at least half as much as to its own best source word.
  strongest = weights[:, :-1].max(axis=1)
  for k, occ in enumerate(occs):
    if out[k] is None:
      mass = weights[:, list(occ.words)].sum(axis=1)
      free = [t for t in range(len(weights)) if t not in taken and mass[t] >= 0.5 * strongest[t]]
      if free:
        t = max(free, key=lambda t: mass[t])
        out[k] = (t, t)
        taken.add(t)
  return out


def head(spot: tuple[int, int], occ: Occurrence) -> tuple[int, int]:
  """The words a term replaces in a run aligned to its source term: the run's last words,
  as many as the source term has. An article or adjective predicted before its noun
  attends to the noun ("Eine Frau" for "woman"), and the noun comes last."""
  first, last = spot
  return (max(first, last - len(occ.words) + 1), last)


def insertion(occ: Occurrence, aligned: np.ndarray, target_words: Sequence[tuple[int, int]],
              text: str) -> int:
  """Where a term whose source term the translation left out goes (a character offset):
  after the last word translating the nearest source word before it that has one, else
  before the first word translating the nearest one after it, else before the final
  punctuation."""
  before = [t for t in range(len(aligned)) if aligned[t] < min(occ.words)]
  after = [t for t in range(len(aligned))
           if max(occ.words) < aligned[t]]
  if before:
    nearest = max(aligned[t] for t in before)
    return target_words[max(t for t in before if aligned[t] == nearest)][1]
  if after:
    nearest = min(aligned[t] for t in after)
    return target_words[min(t for t in after if aligned[t] == nearest)][0]
  return len(text.rstrip().rstrip(".!?;:"))


def written(target: str, text: str, start: int, end: int) -> str:
  """A term's target as it replaces `text[start:end]`: upper-cased first at the start of
  the text; set off by spaces where it goes between words (an insertion)."""
  target = target[:1].upper() + target[1:] if start == 0 else target
  if start == end:  # an insertion
    target = (" " if start and not text[start - 1].isspace() else "") + target + (
        " " if end < len(text) and text[end].isalnum() else "")
  return target


def neighbours(occ: Occurrence, aligned: np.ndarray, taken: set[int]
               ) -> list[tuple[int, int]]:
  """Where a term goes whose source term no word attends to, from the words that
  translate the source word just before it and the one just after (where one run does,
  and no other term took it). A run of more than one word for one source word holds the
  occurrence's word: a word the model wrote from the words before it may attend to
  their source word ("junges Kind" for "young child"): its last word (the first, of the
  run after), and only that. Else the runs themselves, for the model's scores to choose
  (a compound may translate the occurrence with its neighbour, attending to the
  neighbour only: "cardboard box" -> "Karton")."""
  out = []
  for source_word, edge in ((min(occ.words) - 1, -1), (max(occ.words) + 1, 0)):
    found = runs([t for t in range(len(aligned)) if aligned[t] == source_word])
    if len(found) == 1 and not taken & set(found[0]):
      run = found[0]
      if len(run) > 1:
        return [(run[edge], run[edge])]
      out.append((run[0], run[-1]))
  return out


def variants(text: str, options: Sequence[Sequence[tuple[int, int]]], terms: Sequence[Term],
             agreement: Agreement | None = None,
             takeable: Sequence[Callable[[int, int], bool]] | None = None) -> list[str]:
  """`text` with, for each term, one of its spans (`options`, character offsets; an empty
  span: the term inserted there) replaced by one of its alternatives, its phrase agreeing
  where `agreement` (the target language's piece) can tell how, within what each term's
  `takeable` allows: every combination whose spans do not overlap (at most
  MOST_VARIANTS). Where agreeing phrases overlap in every combination, the terms without
  agreement."""
  def ways(k: int, span: tuple[int, int], target: str) -> list[Rewrite]:
    if agreement is None or span[0] == span[1]:
      return [Rewrite(*span, target)]
    return agreement.rewrites(text, *span, target, takeable[k] if takeable else None)

  choices = [[w for span in spans for t in term.targets for w in ways(k, span, t)]
             for k, (spans, term) in enumerate(zip(options, terms))]
  out = []
  for choice in itertools.product(*choices):
    ordered = sorted(choice, key=lambda w: (w.start, w.end), reverse=True)
    if any(a.start < b.end for a, b in zip(ordered, ordered[1:])):
      continue  # right to left, each rewrite must end before the one after it starts
    new = text
    for w in ordered:
      new = new[:w.start] + written(w.text, new, w.start, w.end) + new[w.end:]
    if new not in out:
      out.append(new)
    if len(out) == MOST_VARIANTS:
      break
  return out if out or agreement is None else variants(text, options, terms)


def only_translations(occ: Occurrence, weights: np.ndarray, aligned: np.ndarray,
                      target_words: Sequence[tuple[int, int]]) -> Callable[[int, int], bool]:
  """Whether a term may take the characters [start, end) beyond the words aligned to it:
  not where they hold the only word aligned to another source word (the model's
  translation of it), unless that word attends more to punctuation and EOS."""
  counts = np.bincount(aligned, minlength=weights.shape[1]) if len(aligned) else []
  others = [target_words[t] for t in range(len(aligned))
            if aligned[t] not in occ.words and counts[aligned[t]] == 1
            and weights[t, aligned[t]] >= weights[t, -1]]
  return lambda start, end: not any(s < end and start < e for s, e in others)


def normalised(score: PairScore, alpha: float) -> float:
  """A forced score as beam search scores a finished hypothesis (GNMT penalty)."""
  return score.logprob / ((5.0 + score.tokens) / 6.0) ** alpha


def place_terms(align: Callable[[Sequence[str], Sequence[Sequence[int]]], list[Alignment]],
                score: Callable[[Sequence[str], Sequence[str]], list[PairScore]],
                encode: Callable[[Sequence[str]], list[list[int]]], sources: Sequence[str],
                hyps: Sequence[list[Hypothesis]], glossary: Glossary, alpha: float,
                agreement: Agreement | None = None) -> list[list[Hypothesis]]:
  """Each source's hypotheses with the glossary's terms in place (module docstring), best
  first. `score` (forced decoding) chooses among a sentence's variants: a term's
  alternatives, and for a term whose source term no word attends to, the place of the
  word before's or the word after's translation (`neighbours`). A sentence with one
  variant keeps the search's score, and no forced pass runs for it. `agreement`: the
  target language's piece (agreement.py) that makes each term's phrase agree with it;
  None: the words around the terms stay the model's."""
  out = [list(h) for h in hyps]
  jobs = []  # (source index, its words, its term occurrences)
  for i, source in enumerate(sources):
    source_words = word_spans(source)
    occs = occurrences(glossary, source, source_words)
    if occs:
      jobs.append((i, source_words, occs))
  pairs = [(i, h) for i, _, _ in jobs for h in range(len(hyps[i]))]
  found = dict(zip(pairs, align([sources[i] for i, _ in pairs],
                                [hyps[i][h].ids for i, h in pairs])))
  edits = []  # (source, hypothesis, variant texts)
  for i, source_words, occs in jobs:
    for h, hyp in enumerate(hyps[i]):
      target_words = word_spans(hyp.text)
      weights = word_alignment(found[i, h], sources[i], source_words, hyp.text, target_words)
      aligned = aligned_words(weights)
      spots = placements(occs, weights, aligned)
      taken = {t for spot in spots if spot for t in range(spot[0], spot[1] + 1)}
      chars = []  # each occurrence's candidate character spans
      for o, spot in zip(occs, spots):
        spans = [head(spot, o)] if spot else neighbours(o, aligned, taken)
        chars.append([(target_words[a][0], target_words[b][1]) for a, b in spans]
                     or [(at := insertion(o, aligned, target_words, hyp.text), at)])
      takeable = [only_translations(o, weights, aligned, target_words) for o in occs
                  ] if agreement is not None else None
      edits.append((i, h, variants(hyp.text, chars, [o.term for o in occs], agreement,
                                   takeable)))
  scored = [x for x in edits if len(x[2]) > 1]
  scores = iter(score([sources[i] for i, _, vs in scored for _ in vs],
                      [v for _, _, vs in scored for v in vs]) if scored else [])
  chosen = []  # (source, hypothesis, score, text)
  for i, h, vs in edits:
    if len(vs) > 1:
      value, text = max(((normalised(next(scores), alpha), v) for v in vs),
                        key=lambda x: x[0])
    else:
      value, text = hyps[i][h].score, vs[0]
    chosen.append((i, h, value, text))
  best: dict[int, dict[int, Hypothesis]] = {}
  for (i, h, value, text), ids in zip(chosen, encode([x[3] for x in chosen])):
    best.setdefault(i, {})[h] = Hypothesis(text, value, list(ids))
  for i, placed in best.items():
    seen, options = set(), []
    for hyp in sorted(placed.values(), key=lambda x: -x.score):
      if hyp.text not in seen:  # two hypotheses may differ only in the replaced words
        seen.add(hyp.text)
        options.append(hyp)
    out[i] = options
  return out
