"""Writes data/sample: a small synthetic English-German corpus for the demo and tests.

The sentences are generated from hand-written templates (image-caption style, like
Multi30k) with correct German gender, case and verb agreement. Nothing is copied
from any data set. Run `python data/make_sample.py` to regenerate; the output is
deterministic.
"""

import random
from pathlib import Path

# (English, German, gender) for singular subjects; plural subjects separately.
NOUNS = [("man", "Mann", "m"), ("woman", "Frau", "f"), ("child", "Kind", "n"),
         ("boy", "Junge", "m"), ("girl", "Mädchen", "n"), ("dog", "Hund", "m"),
         ("worker", "Arbeiter", "m"), ("cyclist", "Radfahrer", "m")]
PLURALS = [("men", "Männer"), ("women", "Frauen"), ("children", "Kinder"),
           ("dogs", "Hunde"), ("workers", "Arbeiter")]
ADJECTIVES = [("young", "jung"), ("old", "alt"), ("small", "klein"), ("tall", "groß"),
              ("happy", "fröhlich")]
NUMBERS = [("Two", "Zwei"), ("Three", "Drei"), ("Some", "Einige")]
# English progressive (singular, plural) and German (3rd sg, 3rd pl).
INTRANSITIVE = [("running", "läuft", "laufen"), ("sitting", "sitzt", "sitzen"),
                ("standing", "steht", "stehen"), ("playing", "spielt", "spielen"),
                ("waiting", "wartet", "warten"), ("sleeping", "schläft", "schlafen")]
TRANSITIVE = [("holding", "hält", "halten"), ("carrying", "trägt", "tragen"),
              ("watching", "beobachtet", "beobachten"), ("throwing", "wirft", "werfen")]
# Objects in the accusative with the indefinite article.
OBJECTS = [("a ball", "einen Ball"), ("a book", "ein Buch"), ("a bag", "eine Tasche"),
           ("a red ball", "einen roten Ball"), ("a blue bag", "eine blaue Tasche"),
           ("a large box", "eine große Kiste"), ("a small dog", "einen kleinen Hund")]
PLACES = [("in the park", "im Park"), ("on the street", "auf der Straße"),
          ("at the beach", "am Strand"), ("in front of a house", "vor einem Haus"),
          ("in the snow", "im Schnee"), ("on a bench", "auf einer Bank"),
          ("near the water", "in der Nähe des Wassers")]
MIN_GERMAN_WORDS = 8
ADJ_ENDING = {"m": "er", "f": "e", "n": "es"}
ARTICLE = {"m": "Ein", "f": "Eine", "n": "Ein"}


def subject(rng):
  if rng.random() < 0.3:
    (en_num, de_num), (en, de) = rng.choice(NUMBERS), rng.choice(PLURALS)
    return f"{en_num} {en}", f"{de_num} {de}", True
  en, de, g = rng.choice(NOUNS)
  if rng.random() < 0.5:
    adj_en, adj_de = rng.choice(ADJECTIVES)
    article = "An" if adj_en[0] in "aeiou" else "A"
    return f"{article} {adj_en} {en}", f"{ARTICLE[g]} {adj_de}{ADJ_ENDING[g]} {de}", False
  return f"A {en}", f"{ARTICLE[g]} {de}", False


def sentence(rng):
  subj_en, subj_de, plural = subject(rng)
  be = "are" if plural else "is"
  if rng.random() < 0.5:
    en_v, sg, pl = rng.choice(INTRANSITIVE)
    obj_en = obj_de = ""
  else:
    en_v, sg, pl = rng.choice(TRANSITIVE)
    obj_en, obj_de = rng.choice(OBJECTS)
    obj_en, obj_de = " " + obj_en, " " + obj_de
  place_en, place_de = rng.choice(PLACES)
  verb_de = pl if plural else sg
  return (f"{subj_en} {be} {en_v}{obj_en} {place_en}.",
          f"{subj_de} {verb_de}{obj_de} {place_de}.")


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
    for i, lang in enumerate(("en", "de")):
      text = "\n".join(p[i] for p in split_pairs) + "\n"
      (out / f"{split}.{lang}").write_text(text, encoding="utf-8")


if __name__ == "__main__":
  main()
