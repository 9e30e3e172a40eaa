"""Placing glossary terms (seq2seq/decoding/term_placement.py) by a given attention: a term
replaces the words that translate its source term, wherever they are and as often as it
occurs; a compound's word goes to the term it half translates; a term whose source term
went untranslated is inserted after its neighbour's words; alternatives are chosen by
their scores."""

import re

import numpy as np

from seq2seq.decoding.engine import Alignment
from seq2seq.decoding.engine_io import Hypothesis, PairScore
from seq2seq.decoding.glossary import Glossary
from seq2seq.decoding.term_placement import place_terms

TOKEN = re.compile(r"\w+|[^\w\s]")


def spans(text):
  return [m.span() for m in TOKEN.finditer(text)]


def attention(source, target, rows):
  """An Alignment with one piece per word or mark; `rows[t]`: target token t's attention,
  {source token: weight} (the rest of the row to the source's EOS)."""
  src, tgt = spans(source), spans(target)
  weights = np.zeros((len(tgt) + 1, len(src) + 1))
  for t in range(len(tgt) + 1):
    for s, w in rows.get(t, {}).items():
      weights[t, s] = w
    weights[t, -1] = 1.0 - weights[t, :-1].sum()
  return Alignment(weights, src, tgt, [source[a:b] for a, b in src] + ["</s>"],
                   [target[a:b] for a, b in tgt] + ["</s>"])


def place(source, target, rows, glossary, scores=None, agreement=None):
  """place_terms on one sentence whose translation's attention is `rows`, the words
  around the terms agreeing by `agreement` (a language's piece; None: none)."""
  def align(sources, ids):
    return [attention(source, target, rows)] * len(sources)

  def score(sources, texts):
    return [PairScore((scores or {}).get(text, -10.0), 8) for text in texts]

  found = place_terms(align, score, lambda texts: [[len(t)] for t in texts], [source],
                      [[Hypothesis(target, -1.0, [1, 2, 3])]], Glossary.of(glossary), 1.0,
                      agreement)
  return found[0][0]


def diagonal(pairs):
  return {t: {s: 0.9} for t, s in pairs.items()}


def test_a_term_takes_the_place_of_the_word_aligned_to_its_source_term():
  # A man walks his dog .  /  Ein Mann geht mit seinem Hund .
  rows = diagonal({0: 0, 1: 1, 2: 2, 3: 3, 4: 3, 5: 4, 6: 5})
  got = place("A man walks his dog.", "Ein Mann geht mit seinem Hund.", rows,
              {"dog": "Köter", "man": "Herr"})
  assert got.text == "Ein Herr geht mit seinem Köter."
  assert got.score == -1.0  # no alternatives: no forced pass, the search's score


def test_a_source_term_twice_gets_its_target_twice_and_order_may_change():
  # The dog sees a dog .  /  Einen Hund sieht der Hund .  (the target's order differs)
  rows = diagonal({0: 3, 1: 4, 2: 2, 3: 0, 4: 1, 5: 5})
  got = place("The dog sees a dog.", "Einen Hund sieht der Hund.", rows, {"dog": "Köter"})
  assert got.text == "Einen Köter sieht der Köter."


def test_a_word_translating_two_source_words_goes_to_the_term_it_half_translates():
  # A security guard waits .  /  Ein Wachmann wartet .
  rows = {0: {0: 0.9}, 1: {1: 0.5, 2: 0.4}, 2: {3: 0.9}, 3: {4: 0.9}}
  got = place("A security guard waits.", "Ein Wachmann wartet.", rows, {"guard": "Wache"})
  assert got.text == "Ein Wache wartet."



def test_a_term_no_word_attends_to_takes_a_neighbour_s_word_the_model_scores_best():
  # A security guard waits .  /  Ein Wachmann wartet .  ("Wachmann" attends to "security")
  rows = {0: {0: 0.9}, 1: {1: 0.8, 2: 0.1}, 2: {3: 0.9}, 3: {4: 0.9}}
  for best in ("Ein Wache wartet.", "Ein Wachmann Wache."):  # the word before, or after
    got = place("A security guard waits.", "Ein Wachmann wartet.", rows,
                {"guard": "Wache"}, scores={best: -3.0})
    assert got.text == best


def test_a_neighbour_s_run_of_two_words_gives_its_last_to_the_term():
  # A young child waits .  /  Ein junges Kind wartet .  (both attend to "young")
  rows = {0: {0: 0.9}, 1: {1: 0.9}, 2: {1: 0.5, 2: 0.1}, 3: {3: 0.9}, 4: {4: 0.9}}
  got = place("A young child waits.", "Ein junges Kind wartet.", rows, {"child": "Kiddo"})
  assert got.text == "Ein junges Kiddo wartet."


def test_a_term_whose_source_term_and_its_neighbours_went_untranslated_is_inserted():
  # A man walks his dog .  /  Ein Mann geht .  ("his dog" left out)
  rows = diagonal({0: 0, 1: 1, 2: 2, 3: 5})
  got = place("A man walks his dog.", "Ein Mann geht.", rows, {"dog": "Köter"})
  assert got.text == "Ein Mann geht Köter."
  # nothing before it translated: before the first word of what follows it
  rows = diagonal({0: 2, 1: 3, 2: 4})  # "Dogs run" left out
  got = place("Dogs run on grass.", "Auf Gras.", rows, {"dogs": "Köter"})
  assert got.text == "Köter Auf Gras."


def test_a_lower_case_term_at_the_start_of_the_sentence_begins_with_a_capital():
  rows = diagonal({0: 0, 1: 1, 2: 2})
  assert place("Dogs run.", "Hunde laufen.", rows, {"dogs": "vierbeiner"}).text == (
      "Vierbeiner laufen.")


def test_the_alternative_the_model_scores_best_is_kept_with_its_score():
  rows = diagonal({0: 0, 1: 1, 2: 2, 3: 3, 4: 3, 5: 4, 6: 5})
  best = "Ein Mann geht mit seinem Kötern."
  got = place("A man walks his dog.", "Ein Mann geht mit seinem Hund.", rows,
              {"dog": "Köter|Kötern|Köters"}, scores={best: -2.0})
  assert got.text == best
  assert got.score == -2.0 / ((5 + 8) / 6)  # normalised as beam search normalises
