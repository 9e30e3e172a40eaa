"""German phrases agreeing with a glossary term (seq2seq/decoding/german.py): the
article, a preposition's contraction and the adjectives' endings follow the term's
gender in the case the sentence gives the model's noun; an unknown term, or words that
are no noun phrase, keep the model's words."""

import pytest

from seq2seq.decoding.german import German, Lexicon

from helpers import german_rows


@pytest.fixture(scope="module")
def german():
  return German(Lexicon(german_rows()))


def agree(german, text, word, target):
  """Every way `german` writes `target` for the word `word` of `text`, as whole texts."""
  start = text.index(word)
  return [text[:w.start] + w.text + text[w.end:]
          for w in german.rewrites(text, start, start + len(word), target)]


@pytest.mark.parametrize("text, word, target, expected", [
    # a contraction opens or closes: im (in dem) -> in der; in den -> ins
    ("Ein Mann geht im Park.", "Park", "Grünanlage", "Ein Mann geht in der Grünanlage."),
    ("Ein Mann geht in der Grünanlage.", "Grünanlage", "Park", "Ein Mann geht im Park."),
    ("Ein Mann geht in den Park.", "Park", "Gelände", "Ein Mann geht ins Gelände."),
    ("Im Park spielt ein Hund.", "Park", "Grünanlage", "In der Grünanlage spielt ein Hund."),
    # the determiner and the adjectives between it and the noun
    ("Hunde laufen durch den Park.", "Park", "Grünanlage", "Hunde laufen durch die Grünanlage."),
    ("Sie geht an einem geparkten Auto vorbei.", "Auto", "Karre",
     "Sie geht an einer geparkten Karre vorbei."),
    ("Ein Hund springt über ein Fahrrad.", "Fahrrad", "Drahtesel",  # a compound: Esel's
     "Ein Hund springt über einen Drahtesel."),
    ("Ein Mann mit großem Hut.", "Hut", "Mütze", "Ein Mann mit großer Mütze."),
    ("Die Frau im gestreiften Hemd sitzt.", "Hemd", "Mütze",  # after a contraction: weak
     "Die Frau in der gestreiften Mütze sitzt."),
    ("Er geht mit seinem kleinen, alten Hund.", "Hund", "Töle",
     "Er geht mit seiner kleinen, alten Töle."),
    # the same gender: the model's words
    ("Ein Hund läuft auf der Straße.", "Straße", "Grünanlage",
     "Ein Hund läuft auf der Grünanlage."),
    # plural: no gender to follow
    ("Zwei Männer gehen durch die Parks.", "Parks", "Grünanlagen",
     "Zwei Männer gehen durch die Grünanlagen."),
])
def test_the_phrase_takes_the_term_s_gender_in_the_model_s_case(german, text, word, target,
                                                                 expected):
  assert agree(german, text, word, target) == [expected]


def test_a_phrase_of_several_possible_cases_gives_each_reading_for_the_model_to_choose(german):
  # "die Straße": nominative or accusative; for a masculine term they differ
  assert set(agree(german, "Er sieht die Straße.", "Straße", "Weg")) == {
      "Er sieht der Weg.", "Er sieht den Weg."}
  # opening the sentence, before its verb: the subject
  assert agree(german, "Die Straße ist nass.", "Straße", "Weg") == ["Der Weg ist nass."]
  # "ein paar": a few, no article
  assert agree(german, "Er läuft über ein paar Straßen.", "Straßen", "Wege") == [
      "Er läuft über ein paar Wege."]
  # a preposition that takes the dative only settles it
  assert agree(german, "Er spielt mit der Tasche.", "Tasche", "Beutel") == [
      "Er spielt mit dem Beutel."]


@pytest.mark.parametrize("word", ["eine", "blaue", "eine blaue"])
def test_attention_on_the_article_or_an_adjective_still_replaces_the_noun(german, word):
  got = agree(german, "Sie trägt eine blaue Tasche.", word, "Beutel")
  assert "Sie trägt einen blauen Beutel." in got
  assert all("Tasche" not in x and x.count("Beutel") == 1 for x in got)


def test_an_unknown_term_or_a_word_outside_a_noun_phrase_keeps_the_model_s_words(german):
  assert agree(german, "Ein Hund läuft im Park.", "Park", "Zorblax") == [
      "Ein Hund läuft im Zorblax."]  # a product name the lexicon does not know
  assert agree(german, "Ein Hund läuft im Park.", "Park", "Müller") == [
      "Ein Hund läuft im Müller."]  # a family name has no gender here
  assert agree(german, "Ein Hund läuft im Park.", "Park", "grün") == [
      "Ein Hund läuft im grün."]  # no noun
  # a verb before a bare noun keeps its ending
  assert agree(german, "Kinder spielen Hund.", "Hund", "Töle") == ["Kinder spielen Töle."]
  # attention on a verb: the word itself is replaced, as without agreement
  assert agree(german, "Der Hund läuft schnell.", "läuft", "Töle") == [
      "Der Hund Töle schnell."]


def test_an_indefinite_article_has_no_plural_and_capitals_stay_where_they_were(german):
  assert agree(german, "Ein Hund bellt.", "Hund", "Hunde") == ["Hunde bellt."]
  assert agree(german, "Im Auto sitzt ein Hund.", "Auto", "Karre") == [
      "In der Karre sitzt ein Hund."]


def test_the_installed_lexicon_knows_the_genders_of_everyday_nouns():
  pytest.importorskip("german_nouns", reason="the lexicon german-nouns is not installed "
                      "(make install installs it)")
  lexicon = Lexicon.installed()
  genders = {w: {s for s, _ in lexicon.analyses(w)} - {"p"}
             for w in ("Grünanlage", "Park", "Karre", "Auto", "Drahtesel", "Fahrrad")}
  assert genders == {"Grünanlage": {"f"}, "Park": {"m"}, "Karre": {"f"}, "Auto": {"n"},
                     "Drahtesel": {"m"}, "Fahrrad": {"n"}}
  assert not lexicon.analyses("Zorblax")
