"""Glossaries on a terminology test built from Multi30k: term use, BLEU and speed of
constrained beam search against plain beam search.

  python bench/glossary.py --workdir RUN [--checkpoint averaged] [--beam 5] [--passes 3] \
      [--out runs/terminology]

The test, after Dinu et al. (2019): a bilingual dictionary is read off Multi30k's
training set by word alignment (for each English word seen at least `--min-count` times,
the German word with the highest Dice coefficient of co-occurrence, if at least
`--min-dice`); a dictionary entry becomes a glossary term where, over test_2016_flickr,
every sentence holding the English word has the German word in its reference (so the
glossary is one file, as a user's is, and never asks for what a reference lacks). The
terminology test set is the test sentences to which one or two terms apply. `--out`
writes the glossary (`glossary.tsv`) and the set (`test.en`, `test.de`), so that
`evaluate.py --src --ref --glossary` reproduces the scores.

Prints the set's size, then for plain and constrained beam search: term use (the share
of terms whose target word the translation holds, as a whole word), sacreBLEU on the
set, and sentences/s (median of `--passes` passes in alternation, after a compiling
one), and the constrained/plain speed ratio.
"""

import argparse
import collections
import math
import re
import statistics
from pathlib import Path

import sacrebleu

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.glossary import Glossary, term_use
from seq2seq.decoding.translator import Translator

from common import MULTI30K, alternate, machine, report

WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
  return WORD.findall(text)


def dictionary(src: list[str], tgt: list[str], min_count: int, min_dice: float
               ) -> dict[str, str]:
  """English word (lower case) -> its German word by the Dice coefficient of the pairs
  in which both occur; German in its most frequent spelling."""
  src_count, tgt_count, both = collections.Counter(), collections.Counter(), collections.Counter()
  spelling: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
  for s, t in zip(src, tgt):
    s_words = {w.lower() for w in words(s) if len(w) > 2 and w.isalpha()}
    t_words = set()
    for w in words(t):
      if len(w) > 2 and w.isalpha():
        t_words.add(w.lower())
        spelling[w.lower()][w] += 1
    src_count.update(s_words)
    tgt_count.update(t_words)
    both.update((a, b) for a in s_words for b in t_words)
  best: dict[str, tuple[float, str]] = {}
  for (a, b), n in both.items():
    if src_count[a] < min_count:
      continue
    dice = 2 * n / (src_count[a] + tgt_count[b])
    if dice >= min_dice and dice > best.get(a, (0.0, ""))[0]:
      best[a] = (dice, b)
  return {a: spelling[b].most_common(1)[0][0] for a, (_, b) in best.items()}


def terminology_set(entries: dict[str, str], src: list[str], ref: list[str]
                    ) -> tuple[Glossary, list[int]]:
  """(the glossary of the entries that hold across the test set, the indices of the
  test sentences to which one or two of its terms apply)."""
  holds = {}
  for word, german in entries.items():
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)
    target = re.compile(rf"(?<!\w){re.escape(german)}(?!\w)")
    found = [i for i, s in enumerate(src) if pattern.search(s)]
    if found and all(target.search(ref[i]) for i in found):
      holds[word] = german
  glossary = Glossary.of(holds)
  chosen = [i for i, s in enumerate(src) if 1 <= len(glossary.applying(s)) <= 2]
  return glossary, chosen


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--passes", type=int, default=3)
  p.add_argument("--min-count", type=int, default=20)
  p.add_argument("--min-dice", type=float, default=0.3)
  p.add_argument("--out", default=None, help="write glossary.tsv, test.en, test.de here")
  args = p.parse_args()
  entries = dictionary(read_lines(MULTI30K / "train.en.gz"), read_lines(MULTI30K / "train.de.gz"),
                       args.min_count, args.min_dice)
  test_src = read_lines(MULTI30K / "test_2016_flickr.en.gz")
  test_ref = read_lines(MULTI30K / "test_2016_flickr.de.gz")
  glossary, chosen = terminology_set(entries, test_src, test_ref)
  src, ref = [test_src[i] for i in chosen], [test_ref[i] for i in chosen]
  if args.out:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "glossary.tsv").write_text("".join(f"{t.source}\t{'|'.join(t.targets)}\n"
                                              for t in glossary.terms), encoding="utf-8")
    (out / "test.en").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (out / "test.de").write_text("".join(s + "\n" for s in ref), encoding="utf-8")
  t = Translator.load(args.workdir, args.checkpoint)
  found = {}

  def plain():
    found["plain"] = t.translate(src, beam_size=args.beam, split_sentences=False)

  def constrained():
    found["glossary"] = t.translate(src, beam_size=args.beam, split_sentences=False,
                                    glossary=glossary)

  for run in (plain, constrained):  # compiles
    run()
  seconds = alternate({"plain": plain, "glossary": constrained}, rounds=args.passes)
  result = {"benchmark": "glossary", "dictionary": len(entries), "terms": len(glossary.terms),
            "sentences": len(src), "beam": args.beam, "checkpoint": args.checkpoint}
  for name in ("plain", "glossary"):
    used, total = term_use(glossary, src, found[name])
    result[name] = {"term_use": round(used / total, 4), "terms_applied": total,
                    "bleu": round(sacrebleu.corpus_bleu(found[name], [ref]).score, 2),
                    "sentences_per_s": round(len(src) / statistics.median(seconds[name]), 1),
                    "seconds": [round(x, 2) for x in seconds[name]]}
  result["speed_ratio"] = round(result["glossary"]["sentences_per_s"]
                                / result["plain"]["sentences_per_s"], 2)
  assert math.isfinite(result["speed_ratio"])
  report({**result, **machine()})


if __name__ == "__main__":
  main()
