"""Paragraphs against sentences: test_2016_flickr's sentences four at a time as
paragraphs, translated as paragraphs (cut into sentences by the Translator) and one
sentence per line (joined afterwards), scored with sacreBLEU on the paragraphs.

  python bench/paragraphs.py --workdir RUN [--checkpoint averaged] [--beam 5] [--passes 3]
  python bench/paragraphs.py --workdir RUN --unpunctuated   # captions joined as they are

Each sentence is given a full stop where it ends without one (captions joined into
running text), on both sides; with `--unpunctuated`, each source sentence's final
punctuation is removed instead, so that nothing marks where one ends (subtitles, chat,
transcripts), and the paragraphs are also translated without the cut at sentence starts
(`sentences.split_run_ons`) to show what it gives. Prints the BLEU of both, and of the paragraphs translated
as one sequence each (`split_sentences=False`, how every entry point took a paragraph
before), the speed of each (sentences/s, median of `--passes` passes in alternation
after a compiling one), and the splitter's boundary accuracy: the share of paragraphs
cut back into exactly their four sentences.
"""

import argparse
import statistics

import sacrebleu

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding import sentences
from seq2seq.decoding.translator import Translator

from common import MULTI30K, add_results_flag, alternate, machine, report


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--passes", type=int, default=3)
  p.add_argument("--size", type=int, default=4, help="sentences per paragraph")
  p.add_argument("--unpunctuated", action="store_true",
                 help="remove each source sentence's final punctuation")
  add_results_flag(p)
  args = p.parse_args()
  src = [s.strip().rstrip(".!?").rstrip() if args.unpunctuated
         else sentences.with_full_stop(s.strip())
         for s in read_lines(MULTI30K / "test_2016_flickr.en.gz")]
  ref = [sentences.with_full_stop(s.strip())
         for s in read_lines(MULTI30K / "test_2016_flickr.de.gz")]
  n = args.size
  groups = [range(i, min(i + n, len(src))) for i in range(0, len(src), n)]
  paragraphs = [" ".join(src[i] for i in g) for g in groups]
  references = [" ".join(ref[i] for i in g) for g in groups]
  t = Translator.load(args.workdir, args.checkpoint)
  found = [[part for s in sentences.split_sentences(p, t.languages[0])
            for part in sentences.split_run_ons(s, t.languages[0])] for p in paragraphs]
  exact = sum([s.strip() for s in f if s.strip()] == [src[i] for i in g]
              for f, g in zip(found, groups))
  out = {}

  def as_paragraphs():
    out["paragraphs"] = t.translate(paragraphs, beam_size=args.beam)

  def as_sentences():
    lines = t.translate(src, beam_size=args.beam, split_sentences=False)
    out["sentences"] = [" ".join(lines[i] for i in g) for g in groups]

  def as_sequences():
    out["unsplit"] = t.translate(paragraphs, beam_size=args.beam, split_sentences=False)

  for run in (as_paragraphs, as_sentences, as_sequences):  # compiles
    run()
  starters, sentences.STARTERS = sentences.STARTERS, {}
  out["no_run_on_cut"] = t.translate(paragraphs, beam_size=args.beam)
  sentences.STARTERS = starters
  seconds = alternate({"paragraphs": as_paragraphs, "sentences": as_sentences},
                      rounds=args.passes)
  bleu = {k: round(sacrebleu.corpus_bleu(v, [references]).score, 2) for k, v in out.items()}
  speed = {k: round(len(src) / statistics.median(v), 1) for k, v in seconds.items()}
  report(args.results, {"benchmark": "paragraphs", "paragraphs": len(paragraphs), "sentences": len(src),
          "beam": args.beam, "checkpoint": args.checkpoint,
          "bleu_paragraphs": bleu["paragraphs"], "bleu_sentences_joined": bleu["sentences"],
          "bleu_paragraphs_unsplit": bleu["unsplit"],
          "bleu_paragraphs_without_run_on_cut": bleu["no_run_on_cut"],
          "unpunctuated": args.unpunctuated,
          "sentences_per_s_paragraphs": speed["paragraphs"],
          "sentences_per_s_sentences": speed["sentences"],
          "speed_ratio": round(speed["paragraphs"] / speed["sentences"], 3),
          "boundary_accuracy": round(exact / len(paragraphs), 4),
          "identical_paragraphs": sum(a == b for a, b in zip(out["paragraphs"],
                                                            out["sentences"])),
          **machine()})


if __name__ == "__main__":
  main()
