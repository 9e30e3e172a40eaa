"""A styled document against the same text plain: sentences per second of each.

  python bench/styled_documents.py --workdir RUN [--checkpoint averaged] [--beam 5] \
      [--paragraphs 200] [--rounds 3] [--source FILE]

The document is a Markdown report of `--paragraphs` paragraphs of test_2016_flickr's
sentences (or `--source`'s lines: data/sample/test.en for the tiny config), three to a
paragraph, one word of each paragraph in bold and, in every other
paragraph, one in italics; the plain text is the same paragraphs without the markup, as
`.txt`. Both are translated whole by `translate_document` (the styled one has its styles
carried by the engine's batched alignment), after a first pass of each that compiles, then
`--rounds` times in alternation. Prints the sentences per second of each and their ratio
(styled / plain), and checks that the styled translation's text, with its markup
removed, is the plain translation.
"""

import argparse
import re
import statistics
import tempfile
from pathlib import Path

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.engines import load_engine
from seq2seq.documents import translate_document

from common import MULTI30K, add_results_flag, alternate, machine, report


def documents(sentences: list[str], paragraphs: int) -> tuple[str, str]:
  """(the styled Markdown, the same text plain)."""
  styled, plain = [], []
  for p in range(paragraphs):
    text = " ".join(s.strip() for s in sentences[3 * p:3 * p + 3])
    words = text.split(" ")
    marked = list(words)
    marked[p % len(words)] = f"**{words[p % len(words)]}**"
    if p % 2 and len(words) > 4:
      k = (p % len(words) + len(words) // 2) % len(words)
      if not marked[k].startswith("**"):
        marked[k] = f"*{words[k]}*"
    styled.append(" ".join(marked))
    plain.append(text)
  return "\n\n".join(styled) + "\n", "\n\n".join(plain) + "\n"


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--paragraphs", type=int, default=200)
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--source", default=str(MULTI30K / "test_2016_flickr.en.gz"))
  add_results_flag(p)
  args = p.parse_args()
  src = read_lines(args.source)
  args.paragraphs = min(args.paragraphs, len(src) // 3)
  styled, plain = documents(src, args.paragraphs)
  engine = load_engine(args.workdir, checkpoint_name=args.checkpoint)
  settings = engine.defaults.changed(beam_size=args.beam)
  folder = Path(tempfile.mkdtemp())
  (folder / "report.md").write_text(styled)
  (folder / "report.txt").write_text(plain)
  out = {}

  def run(name):
    return lambda: out.__setitem__(name, translate_document(
        engine, folder / f"report.{name}", settings=settings, progress=False))

  variants = {"md": run("md"), "txt": run("txt")}
  for first in variants.values():  # compiles
    first()
  seconds = alternate(variants, args.rounds)
  bare = re.sub(r"\*+", "", out["md"])
  sentences = 3 * args.paragraphs
  rate = {k: sentences / statistics.median(v) for k, v in seconds.items()}
  result = {"name": f"styled-documents-{Path(args.workdir).name}", "kind": "documents",
            **machine(), "source": Path(args.source).name, "paragraphs": args.paragraphs,
            "beam": args.beam,
            "plain_sentences_per_s": round(rate["txt"], 1),
            "styled_sentences_per_s": round(rate["md"], 1),
            "styled_over_plain": round(rate["md"] / rate["txt"], 3),
            "same_text": bare.split() == out["txt"].split(),
            "seconds": {k: [round(s, 2) for s in v] for k, v in seconds.items()}}
  report(args.results, result)


if __name__ == "__main__":
  main()
