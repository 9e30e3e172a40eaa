"""Time one epoch of subword sampling: seq2seq's samplers against SentencePiece's own.

  python bench/subword_sampling_speed.py SPM_MODEL [DATA_DIR] [ALPHA]
  # default DATA_DIR ../shared/data/multi30k, ALPHA 0.5 (the recipe's)

Samples both sides of the training split (`train.en[.gz]`, `train.de[.gz]`) as one list
of sentences, five epochs each, and prints the median seconds per epoch of
`subword_sampling.LatticeSampler` (with the seconds it spends building the lattices
once), of `NBestSampler` (n-best 8), and of SentencePiece's sampling in one thread (how
`Tokenizer.sample_encode` calls it), plus how many sentences each epoch re-segments.
"""

import statistics
import sys
import time
from pathlib import Path

from seq2seq.data import subword_sampling
from seq2seq.data.textfiles import read_lines
from seq2seq.data.tokenizer import Tokenizer


def _lines(directory: Path, name: str) -> list[str]:
  for path in (directory / name, directory / f"{name}.gz"):
    if path.exists():
      return read_lines(path)
  raise SystemExit(f"{directory / name}[.gz] not found")


def _median_seconds(fn, epochs: int = 5) -> tuple[float, list]:
  times, out = [], None
  for epoch in range(epochs):
    start = time.perf_counter()
    out = fn(epoch)
    times.append(time.perf_counter() - start)
  return statistics.median(times), out


def main():
  if len(sys.argv) < 2:
    raise SystemExit(__doc__)
  tok = Tokenizer.load(sys.argv[1])
  data = Path(sys.argv[2] if len(sys.argv) > 2 else "../shared/data/multi30k")
  alpha = float(sys.argv[3]) if len(sys.argv) > 3 else 0.5
  texts = _lines(data, "train.en") + _lines(data, "train.de")
  best = tok.encode(texts)
  changed = lambda seqs: sum(list(s) != b for s, b in zip(seqs, best))
  print(f"{len(texts)} sentences, alpha {alpha}")

  start = time.perf_counter()
  lattice = subword_sampling.LatticeSampler(tok, texts, alpha)
  print(f"LatticeSampler: lattices of {lattice.num_words} distinct words built in "
        f"{time.perf_counter() - start:.2f} s")
  for name, sampler in (("LatticeSampler", lattice),
                        ("NBestSampler (n-best 8)",
                         subword_sampling.NBestSampler(tok, texts, alpha, 8))):
    seconds, (flat, offsets) = _median_seconds(sampler.sample)
    seqs = [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    print(f"{name}: {seconds:.3f} s per epoch; {changed(seqs)} sentences not in their "
          "best segmentation")
  for nbest in (-1, 8):
    seconds, seqs = _median_seconds(lambda e, n=nbest: tok.sample_encode(texts, alpha, n, e))
    print(f"SentencePiece (n-best {nbest}, one thread): {seconds:.3f} s per epoch; "
          f"{changed(seqs)} sentences not in their best segmentation")


if __name__ == "__main__":
  main()
