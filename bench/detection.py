"""Language detection for seq2seq-serve's source "auto" and /detect: accuracy on Multi30k's
captions in English, German, French and Czech, whole and cut to 1-3 words, and time per
text, of the detector the server uses (py3langid, serving/detection.py) and, where it is
installed, lingua-language-detector beside it (not a dependency: measured for the choice).

  python bench/detection.py [--split test_2016_flickr] [--seed 0]

Each detector is restricted to the four languages, as the server restricts it to the
languages it serves. The short inputs are, for each caption, one run of 1, 2 or 3 words
(a seeded random start), punctuation stripped: what a user types into a search box.
Prints one JSON line per detector: accuracy per input length and language, and
milliseconds per text (one text per call, as a request brings it).
"""

import argparse
import random
import re
import statistics
import time

from seq2seq.data.textfiles import read_lines
from seq2seq.serving.detection import LanguageDetector

from common import MULTI30K, add_results_flag, machine, report

LANGUAGES = ("en", "de", "fr", "cs")


def lingua_detector():
  """lingua's detect(text) over the four languages, or None where it is not installed."""
  try:
    from lingua import Language, LanguageDetectorBuilder
  except ImportError:
    return None
  names = {"en": Language.ENGLISH, "de": Language.GERMAN, "fr": Language.FRENCH,
           "cs": Language.CZECH}
  detector = LanguageDetectorBuilder.from_languages(*names.values()).build()
  codes = {v: k for k, v in names.items()}
  return lambda text: codes.get(detector.detect_language_of(text), "")


def inputs(split: str, seed: int) -> dict:
  """{input kind: [(text, language)]}: the captions whole, and cut to 1, 2, 3 words."""
  rng = random.Random(seed)
  out = {"sentence": [], "1 word": [], "2 words": [], "3 words": []}
  for lang in LANGUAGES:
    for line in read_lines(MULTI30K / f"{split}.{lang}.gz"):
      out["sentence"].append((line, lang))
      words = re.findall(r"\w+", line)
      for n in (1, 2, 3):
        start = rng.randrange(max(1, len(words) - n + 1))
        out[f"{n} word" + ("s" if n > 1 else "")].append((" ".join(words[start:start + n]), lang))
  return out


def measure(detect, cases: dict) -> dict:
  result = {}
  seconds = []
  for kind, pairs in cases.items():
    right = {lang: [0, 0] for lang in LANGUAGES}
    for text, lang in pairs:
      started = time.perf_counter()
      found = detect(text)
      seconds.append(time.perf_counter() - started)
      right[lang][0] += found == lang
      right[lang][1] += 1
    total = sum(r for r, _ in right.values()) / sum(n for _, n in right.values())
    result[kind] = {"accuracy": round(total, 4), "texts": len(pairs),
                    **{lang: round(r / n, 4) for lang, (r, n) in right.items()}}
  result["ms_per_text"] = round(1000 * statistics.mean(seconds), 3)
  return result


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--split", default="test_2016_flickr")
  p.add_argument("--seed", type=int, default=0)
  add_results_flag(p)
  args = p.parse_args()
  cases = inputs(args.split, args.seed)
  ours = LanguageDetector(LANGUAGES)
  detectors = {"py3langid": lambda text: ours.detect(text)[0]}
  lingua = lingua_detector()
  if lingua is not None:
    detectors["lingua"] = lingua
  for name, detect in detectors.items():
    report(args.results, {"benchmark": "detection", "detector": name, "split": args.split,
            **measure(detect, cases), **machine()})


if __name__ == "__main__":
  main()
