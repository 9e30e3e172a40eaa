"""Writes data/sample: a small synthetic English-German-French corpus for the demo and
tests (French for the multilingual preset, configs/tiny_multilingual.py).

The sentences are generated from hand-written templates (image-caption style, like
Multi30k) with correct German gender, case and verb agreement, and French gender,
adjective place and verb agreement. Nothing is copied from any data set. Run `python data/make_sample.py` to regenerate; the output is
deterministic.
"""

import random
from pathlib import Path

# (English, German, German gender, French, French gender) for singular subjects; plural
# subjects (English, German, French, French gender) separately.
NOUNS = [("man", "Mann", "m", "homme", "m"), ("woman", "Frau", "f", "femme", "f"),
         ("child", "Kind", "n", "enfant", "m"), ("boy", "Junge", "m", "garçon", "m"),
         ("girl", "Mädchen", "n", "fille", "f"), ("dog", "Hund", "m", "chien", "m"),
         ("worker", "Arbeiter", "m", "ouvrier", "m"),
         ("cyclist", "Radfahrer", "m", "cycliste", "m")]
PLURALS = [("men", "Männer", "hommes", "m"), ("women", "Frauen", "femmes", "f"),
           ("children", "Kinder", "enfants", "m"), ("dogs", "Hunde", "chiens", "m"),
           ("workers", "Arbeiter", "ouvriers", "m")]
# (English, German stem, French masculine, French feminine, French before the noun?)
ADJECTIVES = [("young", "jung", "jeune", "jeune", True), ("old", "alt", "vieux", "vieille", True),
              ("small", "klein", "petit", "petite", True),
              ("tall", "groß", "grand", "grande", True),
              ("happy", "fröhlich", "heureux", "heureuse", False)]
NUMBERS = [("Two", "Zwei", "Deux"), ("Three", "Drei", "Trois"), ("Some", "Einige", "Quelques")]
# English progressive; German 3rd sg, 3rd pl; French 3rd sg, 3rd pl ({e}: the
# participle's feminine ending, plural included).
INTRANSITIVE = [("running", "läuft", "laufen", "court", "courent"),
                ("sitting", "sitzt", "sitzen", "est assis{e}", "sont assis{e}"),
                ("standing", "steht", "stehen", "est debout", "sont debout"),
                ("playing", "spielt", "spielen", "joue", "jouent"),
                ("waiting", "wartet", "warten", "attend", "attendent"),
                ("sleeping", "schläft", "schlafen", "dort", "dorment")]
TRANSITIVE = [("holding", "hält", "halten", "tient", "tiennent"),
              ("carrying", "trägt", "tragen", "porte", "portent"),
              ("watching", "beobachtet", "beobachten", "regarde", "regardent"),
              ("throwing", "wirft", "werfen", "lance", "lancent")]
# Objects in the accusative with the indefinite article.
OBJECTS = [("a ball", "einen Ball", "un ballon"), ("a book", "ein Buch", "un livre"),
           ("a bag", "eine Tasche", "un sac"),
           ("a red ball", "einen roten Ball", "un ballon rouge"),
           ("a blue bag", "eine blaue Tasche", "un sac bleu"),
           ("a large box", "eine große Kiste", "une grande boîte"),
           ("a small dog", "einen kleinen Hund", "un petit chien")]
PLACES = [("in the park", "im Park", "dans le parc"),
          ("on the street", "auf der Straße", "dans la rue"),
          ("at the beach", "am Strand", "à la plage"),
          ("in front of a house", "vor einem Haus", "devant une maison"),
          ("in the snow", "im Schnee", "dans la neige"),
          ("on a bench", "auf einer Bank", "sur un banc"),
          ("near the water", "in der Nähe des Wassers", "près de l'eau")]
MIN_GERMAN_WORDS = 8
ADJ_ENDING = {"m": "er", "f": "e", "n": "es"}
ARTICLE = {"m": "Ein", "f": "Eine", "n": "Ein"}


def french_adjective(masculine: str, feminine: str, gender: str, noun: str) -> str:
  if gender == "f":
    return feminine
  return "vieil" if masculine == "vieux" and noun[0] in "aeiouh" else masculine


def subject(rng):
  """(English, German, French, plural, French gender) of a subject."""
  if rng.random() < 0.3:
    (en_num, de_num, fr_num), (en, de, fr, fg) = rng.choice(NUMBERS), rng.choice(PLURALS)
    return f"{en_num} {en}", f"{de_num} {de}", f"{fr_num} {fr}", True, fg
  en, de, g, fr, fg = rng.choice(NOUNS)
  article_fr = "Une" if fg == "f" else "Un"
  if rng.random() < 0.5:
    adj_en, adj_de, masc, fem, before = rng.choice(ADJECTIVES)
    article = "An" if adj_en[0] in "aeiou" else "A"
    adj_fr = french_adjective(masc, fem, fg, fr)
    noun_fr = f"{adj_fr} {fr}" if before else f"{fr} {adj_fr}"
    return (f"{article} {adj_en} {en}", f"{ARTICLE[g]} {adj_de}{ADJ_ENDING[g]} {de}",
            f"{article_fr} {noun_fr}", False, fg)
  return f"A {en}", f"{ARTICLE[g]} {de}", f"{article_fr} {fr}", False, fg


def sentence(rng):
  """(English, German, French) of one caption."""
  subj_en, subj_de, subj_fr, plural, gender = subject(rng)
  be = "are" if plural else "is"
  if rng.random() < 0.5:
    en_v, sg, pl, fr_sg, fr_pl = rng.choice(INTRANSITIVE)
    obj_en = obj_de = obj_fr = ""
  else:
    en_v, sg, pl, fr_sg, fr_pl = rng.choice(TRANSITIVE)
    obj_en, obj_de, obj_fr = rng.choice(OBJECTS)
    obj_en, obj_de, obj_fr = " " + obj_en, " " + obj_de, " " + obj_fr
  place_en, place_de, place_fr = rng.choice(PLACES)
  verb_de = pl if plural else sg
  ending = ("es" if plural else "e") if gender == "f" else ""  # "assis": plural too
  verb_fr = (fr_pl if plural else fr_sg).replace("{e}", ending)
  return (f"{subj_en} {be} {en_v}{obj_en} {place_en}.",
          f"{subj_de} {verb_de}{obj_de} {place_de}.",
          f"{subj_fr} {verb_fr}{obj_fr} {place_fr}.")


def main():
  rng = random.Random(1234)
  out = Path(__file__).parent / "sample"
  out.mkdir(exist_ok=True)
  seen, pairs = set(), []
  while len(pairs) < 700:
    pair = sentence(rng)
    # Short captions ("Drei Hunde spielen im Schnee.") occur verbatim in real caption
    # corpora such as Multi30k; eight German words or more keep the sample our own.
    if len(pair[1].split()) >= MIN_GERMAN_WORDS and pair[0] not in seen:
      seen.add(pair[0])
      pairs.append(pair)
  splits = {"train": pairs[:500], "val": pairs[500:600], "test": pairs[600:]}
  for split, split_pairs in splits.items():
    for i, lang in enumerate(("en", "de", "fr")):
      text = "\n".join(p[i] for p in split_pairs) + "\n"
      (out / f"{split}.{lang}").write_text(text, encoding="utf-8")


if __name__ == "__main__":
  main()
