"""Glossaries on three terminology sets built from Multi30k: does each term come out, in
place of the model's own word for its source term, and at what cost in speed.

  python bench/glossary.py --workdir RUN [--checkpoint averaged] [--beam 5] [--passes 3] \
      [--most 300] [--out runs/terminology]

A dictionary is read off Multi30k's training set by word alignment, after Dinu et al.
(2019): for each English word seen at least `--min-count` times, its German words ranked
by the Dice coefficient of co-occurrence (at least `--min-dice`). test_2016_flickr is
translated without a glossary (beam `--beam`), and three sets are drawn from it:

1. **misses**: the dictionary's best entries that hold over the test set (every test
   sentence holding the English word has the German word in its reference), on the test
   sentences whose reference holds a term and whose plain translation does not;
2. **not chosen**: English words of the dictionary whose two best German translations
   (each of Dice at least `--min-dice-second`) are nouns and not one word's forms; the
   glossary forces the second;
3. **out of vocabulary**: made-up product names for common words (`bike` ->
   `Velociraptor-X9`), which no training sentence holds.

Sets 2 and 3 take the test sentences to which one or two of their terms apply, once
each, whose plain translation says, for each, one of the source word's other
dictionary translations (the model's word) and not the term.

Each set is one glossary file, as a user's is. For each set: term use (the share of the
terms that apply whose target the output holds as a whole word); **in place**: of the
terms whose source word's translation the plain output says exactly once (the model's
word: the best-ranked of the source word's dictionary translations, content words only,
that the output says; found by the dictionary, not by the model's attention), the share
whose output puts the term in its place (the plain and the glossary output aligned word by word with
difflib: the model's word falls in a replaced stretch that holds the term); **appended**:
outputs that have more sentence ends than the plain output, or end with a term after
the plain output's final punctuation; sacreBLEU and chrF against the references; and
sentences per second with and without the glossary, passes in alternation (median of
`--passes`, after a compiling one). `--out` writes each set's glossary and sentences so
that `evaluate.py --src --ref --glossary` reproduces its scores.
"""

import argparse
import collections
import difflib
import re
import statistics
from pathlib import Path

import sacrebleu

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.glossary import Glossary, term_use
from seq2seq.decoding.translator import Translator

from common import MULTI30K, add_results_flag, alternate, machine, report

WORD = re.compile(r"\w+(?:[-']\w+)*")
SENTENCE_END = re.compile(r"[.!?]")
MADE_UP = {"bike": "Velociraptor-X9", "dog": "Zorblax", "car": "Quantrix-7", "ball": "Flumbo",
           "shirt": "Tricotex", "street": "Boulevardia", "water": "Aquavex", "hat": "Kopfwirbel",
           "girl": "Mädchenbot", "boy": "Knabotron", "woman": "Damaris-5", "man": "Herrlon"}


def words(text: str) -> list[str]:
  return WORD.findall(text)


def translations(src: list[str], tgt: list[str], min_count: int, min_dice: float
                 ) -> dict[str, list[str]]:
  """English word (lower case) -> its German words, best Dice coefficient first, each
  in its most frequent spelling inside a sentence (a noun capitalised, "zwei" not)."""
  src_count, tgt_count, both = collections.Counter(), collections.Counter(), collections.Counter()
  spelling: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  for s, t in zip(src, tgt):
    s_words = {w.lower() for w in words(s) if len(w) > 2 and w.isalpha()}
    t_words = set()
    for k, w in enumerate(words(t)):
      if len(w) > 2 and w.replace("-", "").isalpha():  # "T-Shirt" too
        t_words.add(w.lower())
        spelling[w.lower()][w] += 1 if k else 1e-6  # the first word is capitalised anyway
    src_count.update(s_words)
    tgt_count.update(t_words)
    both.update((a, b) for a in s_words for b in t_words)
  ranked: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)
  for (a, b), n in both.items():
    if src_count[a] >= min_count:
      dice = 2 * n / (src_count[a] + tgt_count[b])
      if dice >= min_dice:
        ranked[a].append((dice, b))
  return {a: [spelling[b].most_common(1)[0][0] for _, b in sorted(found, reverse=True)]
          for a, found in ranked.items()}


def inflected(a: str, b: str) -> bool:
  """Whether two German words are one word's forms: one is the other with an ending of
  up to three letters."""
  a, b = sorted((a.lower(), b.lower()), key=len)
  return len(a) >= 3 and b.startswith(a) and len(b) - len(a) <= 3


def has_word(text: str, word: str) -> bool:
  return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None


def model_word(plain: str, known: list[str]) -> int | None:
  """The index of the plain output's word for the source word: of the source word's
  dictionary translations (`known`, best Dice coefficient first), the best one whose form
  the output says; None if it says none, or the best one twice."""
  output = words(plain)
  for x in known:
    found = [k for k, w in enumerate(output) if inflected(w, x)]
    if found:
      return found[0] if len(found) == 1 else None
  return None


def in_place(plain: str, output: str, at: int, targets: tuple[str, ...]) -> bool:
  """Whether `output` says a target where `plain` says its word `at`: aligned word by
  word, that word falls in a replaced stretch of the output that starts a target."""
  before, after = [w.lower() for w in words(plain)], words(output)
  starts = {words(t)[0].lower() for t in targets}
  matcher = difflib.SequenceMatcher(None, before, [w.lower() for w in after], autojunk=False)
  for tag, i1, i2, j1, j2 in matcher.get_opcodes():
    if i1 <= at < i2:
      return tag == "replace" and any(after[j].lower() in starts for j in range(j1, j2))
  return False


def appended(plain: str, output: str, targets: list[tuple[str, ...]]) -> bool:
  """More sentence ends than the plain output, or a term after its final punctuation."""
  if len(SENTENCE_END.findall(output)) > len(SENTENCE_END.findall(plain)):
    return True
  ends = [m.end() for m in SENTENCE_END.finditer(output)]
  tail = output[ends[-1]:] if ends and plain.rstrip()[-1:] in ".!?" else ""
  return any(has_word(tail, t) for options in targets for t in options)


def misses(dictionary, src, ref, plain):
  """Set 1: (glossary, sentence indices)."""
  holds = {}
  for word, german in ((w, g[0]) for w, g in dictionary.items()):
    found = [i for i, s in enumerate(src) if has_word(s.lower(), word)]
    if found and all(has_word(ref[i], german) for i in found):
      holds[word] = german
  glossary = Glossary.of(holds)
  chosen = [i for i, s in enumerate(src)
            if any(not has_word(plain[i], t.targets[0]) for t in glossary.applying(s))]
  return glossary, chosen


def not_chosen(dictionary, strict, content, src, plain):
  """Set 2: (glossary, sentence indices); `content`: the dictionary's content words."""
  forced = {word: german[1] for word, german in dictionary.items()
            if word in strict and len(german) >= 2 and not inflected(german[0], german[1])
            and german[0][:1].isupper() and german[1][:1].isupper()}  # two nouns
  glossary = Glossary.of(forced)
  return glossary, judged(glossary, content, src, plain)


def judged(glossary, dictionary, src, plain):
  """The sentences to which one or two terms apply, once each, whose plain translation
  says the model's word for each (a dictionary translation, said once) and not the
  term."""
  chosen = []
  for i, s in enumerate(src):
    terms = glossary.applying(s)
    if not 1 <= len(terms) <= 2 or any(len(list(t.pattern.finditer(s))) != 1 for t in terms):
      continue
    if all(model_word(plain[i], [g for g in dictionary[t.source]
                                 if not any(inflected(g, x) for x in t.targets)]) is not None
           and not any(inflected(w, x) for w in words(plain[i]) for x in t.targets)
           for t in terms):
      chosen.append(i)
  return chosen


def out_of_vocabulary(dictionary, src, plain, train_tgt):
  """Set 3: (glossary, sentence indices)."""
  train_words = {w.lower() for line in train_tgt for w in words(line)}
  assert not any(w.lower() in train_words for t in MADE_UP.values() for w in words(t))
  glossary = Glossary.of({w: t for w, t in MADE_UP.items() if w in dictionary})
  return glossary, judged(glossary, dictionary, src, plain)


def content_words(dictionary, train_tgt, common=100):
  """The dictionary without the `common` most frequent German words of the training
  set that are not nouns (articles, prepositions, "trägt": written in lower case at
  least once): what the model's word for a term is looked for among."""
  counts = collections.Counter(w for line in train_tgt for w in words(line))
  lower = {w for w in counts if w.islower()}
  folded = collections.Counter()
  for w, n in counts.items():
    folded[w.lower()] += n
  frequent = {w for w, _ in folded.most_common(common) if w in lower}
  return {e: [g for g in german if g.lower() not in frequent]
          for e, german in dictionary.items()}


def measure(name, translator, glossary, dictionary, src, ref, chosen, beam, passes, out):
  src = [src[i] for i in chosen]
  ref = [ref[i] for i in chosen]
  if out:
    folder = Path(out) / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "glossary.tsv").write_text("".join(f"{t.source}\t{'|'.join(t.targets)}\n"
                                                 for t in glossary.terms), encoding="utf-8")
    (folder / "test.en").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (folder / "test.de").write_text("".join(s + "\n" for s in ref), encoding="utf-8")
  found = {}

  def plain():
    found["plain"] = translator.translate(src, beam_size=beam)

  def with_glossary():
    found["glossary"] = translator.translate(src, beam_size=beam, glossary=glossary)

  for run in (plain, with_glossary):  # compiles
    run()
  seconds = alternate({"plain": plain, "glossary": with_glossary}, rounds=passes)
  judged = placed = tacked = 0
  for s, p, g in zip(src, found["plain"], found["glossary"]):
    terms = glossary.applying(s)
    tacked += appended(p, g, [t.targets for t in terms])
    for term in terms:
      known = [x for x in dictionary.get(term.source.lower(), [])
               if not any(inflected(x, t) for t in term.targets)]
      at = model_word(p, known)
      if at is not None:
        judged += 1
        placed += in_place(p, g, at, term.targets)
  row = {"set": name, "sentences": len(src), "terms": len(glossary.terms)}
  for key in ("plain", "glossary"):
    used, total = term_use(glossary, src, found[key])
    row[f"{key}_term_use"] = round(used / total, 4)
    row["terms_applied"] = total
    row[f"{key}_bleu"] = round(sacrebleu.corpus_bleu(found[key], [ref]).score, 2)
    row[f"{key}_chrf"] = round(sacrebleu.corpus_chrf(found[key], [ref]).score, 2)
    row[f"{key}_sentences_per_s"] = round(len(src) / statistics.median(seconds[key]), 1)
    row[f"{key}_seconds"] = [round(x, 2) for x in seconds[key]]
  row.update(judged=judged, in_place=round(placed / judged, 4) if judged else None,
             appended=tacked,
             speed_ratio=round(row["glossary_sentences_per_s"] / row["plain_sentences_per_s"], 2))
  return row


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--passes", type=int, default=3)
  p.add_argument("--most", type=int, default=300, help="sentences per set, at most")
  p.add_argument("--min-count", type=int, default=20)
  p.add_argument("--min-dice", type=float, default=0.3)
  p.add_argument("--min-dice-second", type=float, default=0.1)
  p.add_argument("--out", default=None, help="write each set's glossary.tsv, test.en, test.de")
  add_results_flag(p)
  args = p.parse_args()
  train_src = read_lines(MULTI30K / "train.en.gz")
  train_tgt = read_lines(MULTI30K / "train.de.gz")
  loose = translations(train_src, train_tgt, args.min_count, args.min_dice_second)
  content = content_words(loose, train_tgt)
  strict = translations(train_src, train_tgt, args.min_count, args.min_dice)
  src = read_lines(MULTI30K / "test_2016_flickr.en.gz")
  ref = read_lines(MULTI30K / "test_2016_flickr.de.gz")
  translator = Translator.load(args.workdir, args.checkpoint)
  plain_all = translator.translate(src, beam_size=args.beam)
  sets = {"misses": misses(strict, src, ref, plain_all),
          "not chosen": not_chosen(loose, strict, content, src, plain_all),
          "out of vocabulary": out_of_vocabulary(content, src, plain_all, train_tgt)}
  rows = [measure(name, translator, glossary, content, src, ref, chosen[:args.most],
                  args.beam, args.passes, args.out)
          for name, (glossary, chosen) in sets.items()]
  report(args.results, {"benchmark": "glossary_sets", "beam": args.beam, "checkpoint": args.checkpoint,
          "dictionary": len(strict), "sets": rows, **machine()})


if __name__ == "__main__":
  main()
