"""Glossary terms of another gender than the model's word: does the phrase around each
term agree with it (seq2seq/decoding/german.py), against the alternatives, and at what
cost in speed.

  python bench/glossary_agreement.py --workdir RUN [--checkpoint averaged] [--beam 5] \
      [--passes 3] [--most 300] [--out runs/agreement]

The set: `TERMS`, common nouns of Multi30k's training set, each with the model's usual
German word and a German noun of another gender that may stand for it, both genders
checked by hand and asserted against the lexicon at the start; the test_2016_flickr
sentences that say one of the English words once (and no other), whose plain
translation (beam `--beam`) says the model's word once, in the singular (the forms in
`TERMS`). The glossary is the set's terms, one file as a user writes it.

**Agreement** is judged by the grammar tables of this file, not by the mechanism's: the
model's word's phrase in the plain translation (the determiner or contraction just
before it, the inflected adjectives between, the preposition before the determiner)
gives its case: the cases its determiner takes for the model's word's gender, narrowed
by the preposition's, nominative alone where the phrase opens the sentence. The phrase
the tables give for the term's gender in one of those cases (determiner of the same
kind, adjectives with their endings, `im`/`zum`/`ins`... where German contracts) must
end with the term in the output. Judged: the phrases with a determiner or contraction.

Four ways, each on the same sentences: `plain` (no glossary); `placed` (the terms
placed, the words around them the model's: no agreement piece); `lexicon` (the
package's: genders from german-nouns); `model` (the alternative: no lexicon, the
model's scores choose the term's gender among all three, as they choose among
readings). For each: term use, in place, agreement, appended, BLEU and chrF against the
references, sentences per second against plain search's (each way timed in alternation
with plain search, median of `--passes`, after a compiling pass of every way; the
alternative last: its many variants' forced passes have shapes of their own, which push
the others' compiled programs out of the few a translator keeps, `decode.programs`). It also translates `EXAMPLE` (docs/translating.md's) in each way.
"""

import argparse
import re
import statistics
from pathlib import Path

import sacrebleu

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding import agreement
from seq2seq.decoding.german import German, Lexicon
from seq2seq.decoding.glossary import Glossary, term_use
from seq2seq.decoding.translator import Translator

from common import MULTI30K, add_results_flag, alternate, machine, report
from glossary import appended, in_place, words

# English word: (the model's word, its gender, its singular forms; the term, its gender)
TERMS = {
    "park": ("Park", "m", "Park Parks", "Grünanlage", "f"),
    "car": ("Auto", "n", "Auto Autos", "Karre", "f"),
    "bike": ("Fahrrad", "n", "Fahrrad Fahrrads Fahrrades", "Drahtesel", "m"),
    "bicycle": ("Fahrrad", "n", "Fahrrad Fahrrads Fahrrades", "Drahtesel", "m"),
    "dog": ("Hund", "m", "Hund Hundes Hunde", "Töle", "f"),
    "street": ("Straße", "f", "Straße", "Weg", "m"),
    "road": ("Straße", "f", "Straße", "Weg", "m"),
    "ball": ("Ball", "m", "Ball Balls Balles", "Kugel", "f"),
    "hat": ("Hut", "m", "Hut Huts Hutes", "Mütze", "f"),
    "stage": ("Bühne", "f", "Bühne", "Podium", "n"),
    "beach": ("Strand", "m", "Strand Strands Strandes", "Küste", "f"),
    "field": ("Feld", "n", "Feld Felds Feldes", "Wiese", "f"),
    "grass": ("Gras", "n", "Gras Grases", "Rasen", "m"),
    "jacket": ("Jacke", "f", "Jacke", "Mantel", "m"),
    "bag": ("Tasche", "f", "Tasche", "Beutel", "m"),
    "boat": ("Boot", "n", "Boot Boots Bootes", "Kahn", "m"),
    "city": ("Stadt", "f", "Stadt", "Ort", "m"),
    "building": ("Gebäude", "n", "Gebäude Gebäudes", "Bau", "m"),
    "camera": ("Kamera", "f", "Kamera", "Fotoapparat", "m"),
    "store": ("Geschäft", "n", "Geschäft Geschäfts Geschäftes", "Boutique", "f"),
    "horse": ("Pferd", "n", "Pferd Pferds Pferdes", "Gaul", "m"),
    "table": ("Tisch", "m", "Tisch Tischs Tisches", "Tafel", "f"),
    "child": ("Kind", "n", "Kind Kinds Kindes", "Knirps", "m"),
    "woman": ("Frau", "f", "Frau", "Weib", "n"),
    "man": ("Mann", "m", "Mann Manns Mannes", "Mannsbild", "n"),
    "dress": ("Kleid", "n", "Kleid Kleids Kleides", "Robe", "f"),
    "sidewalk": ("Bürgersteig", "m", "Bürgersteig Bürgersteigs Bürgersteiges", "Trottoir", "n"),
    "ground": ("Boden", "m", "Boden Bodens", "Erde", "f"),
    "coat": ("Mantel", "m", "Mantel Mantels", "Jacke", "f"),
    "team": ("Mannschaft", "f", "Mannschaft", "Team", "n"),
    "game": ("Spiel", "n", "Spiel Spiels Spieles", "Partie", "f"),
    "baby": ("Baby", "n", "Baby Babys", "Säugling", "m"),
    "mountain": ("Berg", "m", "Berg Bergs Berges", "Anhöhe", "f"),
    "rock": ("Felsen", "m", "Felsen Felsens", "Klippe", "f"),
    "picture": ("Bild", "n", "Bild Bilds Bildes", "Aufnahme", "f"),
    "sign": ("Schild", "n", "Schild Schilds Schildes", "Tafel", "f"),
    "restaurant": ("Restaurant", "n", "Restaurant Restaurants", "Gaststätte", "f"),
    "drink": ("Getränk", "n", "Getränk Getränks Getränkes", "Trank", "m"),
}
EXAMPLE = (["A man walks his dog in the park.", "Two dogs run through the park near a street.",
            "A woman rides her bike past a parked car.", "The man and the woman sit in the car.",
            "A dog jumps over a bike on the street.", "A man in a shirt stands on the street."],
           {"man": "Herr", "woman": "Dame", "dog": "Köter", "park": "Grünanlage",
            "car": "Karre", "bike": "Drahtesel", "street": "Fahrbahn", "shirt": "Oberteil"})

# --- the judge's grammar tables (nominative, accusative, dative, genitive) --------------
CASES = ("nom", "acc", "dat", "gen")
DEFINITE = {"m": "der den dem des", "f": "die die der der", "n": "das das dem des"}
INDEFINITE = {"m": "ein einen einem eines", "f": "eine eine einer einer", "n": "ein ein einem eines"}
DIESER = {"m": "dieser diesen diesem dieses", "f": "diese diese dieser dieser",
          "n": "dieses dieses diesem dieses"}
ADJECTIVE = {  # the ending after each kind of determiner
    "def": {"m": "e en en en", "f": "e e en en", "n": "e e en en"},
    "ein": {"m": "er en en en", "f": "e e en en", "n": "es es en en"}}
POSSESSIVE = ("kein", "mein", "dein", "sein", "ihr", "unser")
CONTRACTION = {"im": ("in", "dem"), "am": ("an", "dem"), "zum": ("zu", "dem"),
               "zur": ("zu", "der"), "vom": ("von", "dem"), "beim": ("bei", "dem"),
               "ins": ("in", "das"), "ans": ("an", "das")}
PREPOSITION = {**dict.fromkeys("mit nach aus zu von bei seit gegenüber".split(), {"dat"}),
               **dict.fromkeys("durch für gegen ohne um".split(), {"acc"}),
               **dict.fromkeys("in an auf über unter vor hinter neben zwischen".split(),
                               {"acc", "dat"})}


def determiner(gender: str, case: str, like: str) -> str:
  """The determiner of `like`'s kind for `gender` and `case`."""
  c, like = CASES.index(case), like.lower()
  for table in (DEFINITE, DIESER):
    if any(like in forms.split() for forms in table.values()):
      return table[gender].split()[c]
  stem = next(s for s in POSSESSIVE + ("ein",) if like.startswith(s))
  return stem + INDEFINITE[gender].split()[c][3:]


def kind(word: str) -> str | None:
  """"def" (der, dieser), "ein" (ein, kein, mein...) or None: no determiner."""
  w = word.lower()
  if any(w in f.split() for t in (DEFINITE, DIESER) for f in t.values()):
    return "def"
  if any(w.startswith(s) and w[len(s):] in ("", "e", "en", "em", "er", "es")
         for s in POSSESSIVE + ("ein",)):
    return "ein"
  return None


def expected(plain: list[str], at: int, gender: str, term: str, term_gender: str
             ) -> list[str] | None:
  """The phrases (lower case) the grammar gives for `term` in the place of `plain[at]`,
  the model's word of gender `gender`; None where the phrase has no determiner."""
  k = at - 1
  while k >= 0 and plain[k].islower() and kind(plain[k]) is None and (
      plain[k] not in CONTRACTION and re.search("(e|en|em|er|es)$", plain[k])):
    k -= 1
  if k < 0:
    return None
  adjectives, word = plain[k + 1:at], plain[k].lower()
  if word in CONTRACTION:
    preposition, article = CONTRACTION[word]
    how = "def"
  elif kind(word):
    how, article = kind(word), word
    preposition = plain[k - 1].lower() if k and plain[k - 1].lower() in PREPOSITION else None
  else:
    return None
  cases = [c for c in CASES if determiner(gender, c, article) == article]
  if preposition:
    cases = [c for c in cases if c in PREPOSITION[preposition]] or cases
  if k == 0 and "nom" in cases:
    cases = ["nom"]
  joined = {pair: c for c, pair in CONTRACTION.items()}
  out = []
  for case in cases:
    new = determiner(term_gender, case, article)
    if word in CONTRACTION or (preposition and how == "def"):
      head = [joined[preposition, new]] if (preposition, new) in joined else [preposition, new]
    else:
      head = [new]
    ending = ADJECTIVE[how][term_gender].split()[CASES.index(case)]
    inflected = [re.sub("(en|em|er|es|e)$", "", a) + ending for a in adjectives]
    out.append(" ".join(head + inflected + [term]).lower())
  return out


def agrees(output: str, phrases: list[str]) -> bool:
  text = " ".join(words(output)).lower()
  return any(re.search(rf"(?<!\w){re.escape(p)}(?!\w)", text) for p in phrases)


class ModelChooses(German):
  """The alternative: no lexicon; every gender is a reading, the model's scores choose."""

  def term_analyses(self, target: str) -> frozenset:
    return frozenset((s, c) for s in "mfn" for c in CASES)


WAYS = {"placed": None, "lexicon": "seq2seq.decoding.german:German",
        "model": "__main__:ModelChooses"}


def the_set(src: list[str], plain: list[str]) -> tuple[list[int], list[str]]:
  """The sentences (indices) and, for each, its English word."""
  chosen, which = [], []
  for i, s in enumerate(src):
    found = [w for w in TERMS if re.search(rf"(?<!\w){w}(?!\w)", s, re.IGNORECASE)]
    if len(found) != 1 or len(re.findall(rf"(?<!\w){found[0]}(?!\w)", s, re.IGNORECASE)) != 1:
      continue
    model_word, _, forms, term, _ = TERMS[found[0]]
    said = [w for w in words(plain[i]) if w in forms.split()]
    others = [w for w in words(plain[i]) if w != model_word and w.startswith(model_word)]
    if len(said) == 1 and not others and term not in words(plain[i]):
      chosen.append(i)
      which.append(found[0])
  return chosen, which


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--passes", type=int, default=3)
  p.add_argument("--most", type=int, default=300, help="sentences, at most")
  p.add_argument("--out", default=None, help="write glossary.tsv, test.en, test.de")
  p.add_argument("--model", default=None, help="the model as the results table names it "
                 "(default: the run directory's name)")
  add_results_flag(p)
  args = p.parse_args()
  lexicon = Lexicon.installed()
  for english, (word, gender, _, term, term_gender) in TERMS.items():
    for noun, g in ((word, gender), (term, term_gender)):
      assert g in {s for s, _ in lexicon.analyses(noun)}, f"{english}: {noun} is not {g}"
  src = read_lines(MULTI30K / "test_2016_flickr.en.gz")
  ref = read_lines(MULTI30K / "test_2016_flickr.de.gz")
  translator = Translator.load(args.workdir, args.checkpoint)
  plain_all = translator.translate(src, beam_size=args.beam)
  chosen, which = the_set(src, plain_all)
  chosen, which = chosen[:args.most], which[:args.most]
  src, ref = [src[i] for i in chosen], [ref[i] for i in chosen]
  glossary = Glossary.of({w: TERMS[w][3] for w in dict.fromkeys(which)})
  if args.out:
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "glossary.tsv").write_text("".join(f"{t.source}\t{t.targets[0]}\n"
                                                 for t in glossary.terms), encoding="utf-8")
    (folder / "test.en").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (folder / "test.de").write_text("".join(s + "\n" for s in ref), encoding="utf-8")
  found, examples = {}, {}

  def way(name):
    def run():
      if name == "plain":
        found[name] = translator.translate(src, beam_size=args.beam)
        return
      agreement.LANGUAGES.pop("de", None)
      if WAYS[name]:
        agreement.LANGUAGES["de"] = WAYS[name]
      found[name] = translator.translate(src, beam_size=args.beam, glossary=glossary)
      examples[name] = lambda: translator.translate(EXAMPLE[0], beam_size=args.beam,
                                                    glossary=EXAMPLE[1])
    return run

  runs = {name: way(name) for name in ("plain", *WAYS)}
  for run in runs.values():  # compiles, reads the lexicon
    run()
  seconds, plain_seconds = {}, {}
  for name in WAYS:  # each in alternation with plain search, the alternative last
    runs[name]()  # its programs compiled again if another way's pushed them out
    timed = alternate({"plain": runs["plain"], name: runs[name]}, rounds=args.passes)
    seconds[name], plain_seconds[name] = timed[name], timed["plain"]
  for name in WAYS:  # (untimed)
    way(name)()
    examples[name] = examples[name]()
  agreement.LANGUAGES["de"] = WAYS["lexicon"]
  examples["plain"] = translator.translate(EXAMPLE[0], beam_size=args.beam)
  every_plain = [x for name in WAYS for x in plain_seconds[name]]
  rows = []
  for name in WAYS:
    judged = agreeing = placed = tacked = 0
    for w, p, g in zip(which, found["plain"], found[name]):
      word, gender, forms, term, term_gender = TERMS[w]
      plain_words = words(p)
      at = next(k for k, x in enumerate(plain_words) if x in forms.split())
      placed += in_place(p, g, at, (term,))
      tacked += appended(p, g, [(term,)])
      phrases = expected(plain_words, at, gender, term, term_gender)
      if phrases is not None:
        judged += 1
        agreeing += agrees(g, phrases)
    used, total = term_use(glossary, src, found[name])
    rate = len(src) / statistics.median(seconds[name])
    plain_rate = len(src) / statistics.median(plain_seconds[name])
    rows.append({"way": name, "term_use": round(used / total, 4) if total else None,
                 "in_place": round(placed / len(src), 4) if src else None, "judged": judged,
                 "agreement": round(agreeing / judged, 4) if judged else None,
                 "appended": tacked,
                 "bleu": round(sacrebleu.corpus_bleu(found[name], [ref]).score, 2),
                 "chrf": round(sacrebleu.corpus_chrf(found[name], [ref]).score, 2),
                 "sentences_per_s": round(rate, 1), "speed_ratio": round(rate / plain_rate, 2),
                 "seconds": [round(x, 2) for x in seconds[name]],
                 "plain_seconds": [round(x, 2) for x in plain_seconds[name]]})
  report(args.results, {
      "benchmark": "glossary_agreement", "model": args.model or Path(args.workdir).name,
      "beam": args.beam, "checkpoint": args.checkpoint,
      "sentences": len(src), "terms": len(glossary.terms),
      "plain": {"bleu": round(sacrebleu.corpus_bleu(found["plain"], [ref]).score, 2),
                "chrf": round(sacrebleu.corpus_chrf(found["plain"], [ref]).score, 2),
                "sentences_per_s": round(len(src) / statistics.median(every_plain), 1),
                "seconds": [round(x, 2) for x in every_plain]},
      "ways": rows,
      "example": {"glossary": EXAMPLE[1], "sources": EXAMPLE[0],
                  **{name: examples[name] for name in ("plain", *WAYS)}},
      **machine()})


if __name__ == "__main__":
  main()
