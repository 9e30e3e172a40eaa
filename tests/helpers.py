"""Shared test helpers: paths and small corpora written by the tests themselves."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
MULTI30K = Path(os.environ.get("SEQ2SEQ_MULTI30K", ROOT.parent / "shared" / "data" / "multi30k"))


def write_corpus(directory: Path, split: str, src_lines, tgt_lines, src="en", tgt="de"):
  directory.mkdir(parents=True, exist_ok=True)
  (directory / f"{split}.{src}").write_text("".join(l + "\n" for l in src_lines), "utf-8")
  (directory / f"{split}.{tgt}").write_text("".join(l + "\n" for l in tgt_lines), "utf-8")
  return directory
