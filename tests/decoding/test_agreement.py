"""The agreement pieces by target language (seq2seq/decoding/agreement.py) and their use
in term placement: a language's rewrites widen a term's replacement to its phrase, the
model's scores choose among several, and a language without a piece keeps today's
placement."""

import pytest
from test_term_placement import place

from seq2seq.decoding import agreement
from seq2seq.decoding.agreement import Rewrite
from seq2seq.decoding.german import German, Lexicon
from seq2seq.decoding.glossary import Glossary
from seq2seq.decoding.term_placement import variants

from helpers import german_rows


def test_german_has_a_piece_and_a_language_without_rules_has_none():
  assert isinstance(agreement.for_language("de"), German)
  assert isinstance(agreement.for_language("de-CH"), German)
  assert agreement.for_language("fr") is None
  assert agreement.for_language(None) is None


class Articles:
  """A piece that writes each term with both articles (two readings)."""

  def rewrites(self, text, start, end, target, takeable=None):
    before = text.rfind(" ", 0, start - 1) + 1  # the word before
    return [Rewrite(before, end, f"der {target}"), Rewrite(before, end, f"die {target}")]


def test_each_reading_of_each_alternative_is_a_variant():
  term = Glossary.of({"park": "Anlage|Anlagen"}).terms[0]
  text = "Er geht in den Park."
  got = variants(text, [[(text.index("Park"), len(text) - 1)]], [term], Articles())
  assert got == ["Er geht in der Anlage.", "Er geht in die Anlage.",
                 "Er geht in der Anlagen.", "Er geht in die Anlagen."]
  assert variants(text, [[(15, 19)]], [term]) == ["Er geht in den Anlage.",
                                                   "Er geht in den Anlagen."]


def test_phrases_that_overlap_in_every_combination_fall_back_to_the_terms_alone():
  glossary = Glossary.of({"red": "rot", "ball": "Kugel"})
  text = "Er wirft den roten Ball."
  spans = [[(13, 18)], [(19, 23)]]

  class Wide:
    def rewrites(self, text, start, end, target, takeable=None):
      return [Rewrite(9, end, "x " + target)]  # every phrase from "den" on

  assert variants(text, spans, list(glossary.terms), Wide()) == ["Er wirft den rot Kugel."]


def test_placed_terms_agree_and_the_model_s_scores_choose_the_reading():
  # Ein Mann geht im Park .  /  A man walks in the park .
  rows = {0: {0: 0.9}, 1: {1: 0.9}, 2: {2: 0.9}, 3: {3: 0.5, 5: 0.4}, 4: {5: 0.9}, 5: {6: 0.9}}
  german = German(Lexicon(german_rows()))
  got = place("A man walks in the park.", "Ein Mann geht im Park.", rows,
              {"park": "Grünanlage"}, agreement=german)
  assert got.text == "Ein Mann geht in der Grünanlage."
  # He sees the street . / Er sieht die Straße .  ("die": nominative or accusative)
  rows = {0: {0: 0.9}, 1: {1: 0.9}, 2: {2: 0.9}, 3: {3: 0.9}, 4: {4: 0.9}}
  for best in ("Er sieht der Weg.", "Er sieht den Weg."):
    got = place("He sees the street.", "Er sieht die Straße.", rows, {"street": "Weg"},
                scores={best: -1.0}, agreement=german)
    assert got.text == best


def test_a_term_takes_the_noun_after_its_article_only_where_that_is_no_other_word_s_translation():
  german = German(Lexicon(german_rows()))
  # A woman carries a blue bag . / Eine Frau trägt eine blaue Tasche .  (attention on the
  # article and the adjective, the noun's on the full stop)
  rows = {0: {0: 0.9}, 1: {1: 0.9}, 2: {2: 0.9}, 3: {5: 0.9}, 4: {5: 0.9}, 5: {6: 0.9}}
  got = place("A woman carries a blue bag.", "Eine Frau trägt eine blaue Tasche.", rows,
              {"bag": "Beutel"}, scores={"Eine Frau trägt einen blauen Beutel.": -1.0},
              agreement=german)
  assert got.text == "Eine Frau trägt einen blauen Beutel."
  # A man holds the boy shoulder . / Ein Mann hält den Jungen .  ("Jungen": the only
  # translation of "boy"; the article attends to "shoulder")
  rows = {0: {0: 0.9}, 1: {1: 0.9}, 2: {2: 0.9}, 3: {5: 0.9}, 4: {4: 0.9}, 5: {6: 0.9}}
  got = place("A man holds the boy shoulder.", "Ein Mann hält den Jungen.", rows,
              {"shoulder": "Schulter"}, agreement=german)
  assert got.text == "Ein Mann hält Schulter Jungen."  # the article's place, as without
  # a term that is no noun stays where its source term's translation was
  rows = {0: {0: 0.9}, 1: {1: 0.9}, 2: {2: 0.9}, 3: {3: 0.9}, 4: {4: 0.9}, 5: {5: 0.9}}
  got = place("A girl skis a snowy mountain.", "Ein Mädchen fährt einen verschneiten Berg.",
              rows, {"snowy": "schneebedeckten"}, agreement=german)
  assert got.text == "Ein Mädchen fährt einen schneebedeckten Berg."


def test_a_piece_reads_its_lexicon_when_prepared_not_at_its_first_term():
  pytest.importorskip("german_nouns", reason="the lexicon german-nouns is not installed "
                      "(make install installs it)")
  piece = agreement.for_language("de")
  assert piece.lexicon is None
  piece.prepare()
  assert piece.lexicon is Lexicon.installed()
  assert piece.lexicon.analyses("Grünanlage")
