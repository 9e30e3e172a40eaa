"""Cleaning the training pairs before the vocabulary is trained, with a report.

Filters (`data.clean`, applied in this order; a pair counts under the first that removes
it):

  empty      either side is empty or white space
  long       either side is longer than `data.clean_max_chars` characters
  ratio      one side is more than `data.clean_max_ratio` times as long as the other, in
             characters, each side counted plus 10 (so short pairs are not judged on a
             word's difference)
  copy       the target equals the source (an untranslated copy), ignoring case and
             surrounding white space
  nontext    under `data.clean_min_letters` of a side's non-space characters are
             letters (markup, numbers, tables, URLs)
  duplicate  the same pair (source and target) appeared before

The result is a pure function of the corpus and the settings: the reason of every pair
is cached beside the encoded ids (`clean-ID.npy`), so a resumed run never re-reads the
text to clean it. `Report` counts each filter and keeps up to 3 examples of each, with
their line (pair) numbers; `corpus.prepare` prints it and writes it to the run
(`data_report.json`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from seq2seq.config import CLEAN_FILTERS as FILTERS
from seq2seq.config import DataConfig
from seq2seq.runtime import Progress

if TYPE_CHECKING:
  import datasets

log = logging.getLogger(__name__)

KEPT = 0  # reason code of a kept pair; filter i removes with code i + 1
EXAMPLES = 3
BATCH = 10_000


def settings_id(cfg: DataConfig) -> str:
  """Identifies the cleaning settings (part of the cache keys of the cleaned corpus)."""
  text = f"{cfg.clean}:{cfg.clean_max_chars}:{cfg.clean_max_ratio}:{cfg.clean_min_letters}"
  return hashlib.sha256(text.encode()).hexdigest()[:8]


def _letters(text: str) -> float:
  visible = [c for c in text if not c.isspace()]
  return sum(c.isalpha() for c in visible) / len(visible) if visible else 0.0


def _reason(src: str, tgt: str, active: list[str], cfg: DataConfig) -> int:
  """The code of the first active filter (other than duplicate) that removes the pair."""
  for name in active:
    if name == "empty":
      hit = not src.strip() or not tgt.strip()
    elif name == "long":
      hit = max(len(src), len(tgt)) > cfg.clean_max_chars
    elif name == "ratio":
      a, b = len(src.strip()) + 10, len(tgt.strip()) + 10
      hit = max(a, b) > cfg.clean_max_ratio * min(a, b)
    elif name == "copy":
      hit = src.strip().casefold() == tgt.strip().casefold()
    elif name == "nontext":
      hit = min(_letters(src), _letters(tgt)) < cfg.clean_min_letters
    else:
      continue
    if hit:
      return FILTERS.index(name) + 1
  return KEPT


def reasons(ds: datasets.Dataset, cfg: DataConfig) -> np.ndarray:
  """uint8 per pair: KEPT, or 1 + the index in FILTERS of the filter that removes it."""
  active = active_filters(cfg)
  out = np.zeros(len(ds), np.uint8)
  seen: set[bytes] = set()
  dup = FILTERS.index("duplicate") + 1
  start = 0
  with Progress("cleaning the training pairs", total=len(ds), unit="pairs") as progress:
    for batch in ds.iter(batch_size=BATCH):
      for i, (src, tgt) in enumerate(zip(batch["src"], batch["tgt"]), start):
        code = _reason(src, tgt, active, cfg)
        if code == KEPT and "duplicate" in active:
          key = hashlib.blake2b(f"{src}\t{tgt}".encode(), digest_size=12).digest()
          code = dup if key in seen else KEPT
          seen.add(key)
        out[i] = code
      start += len(batch["src"])
      progress.update(len(batch["src"]))
  return out


def active_filters(cfg: DataConfig) -> list[str]:
  """The filters of `data.clean` (checked by DataConfig), in the order they apply."""
  names = {x.strip() for x in cfg.clean.split(",")}
  return [n for n in FILTERS if n in names]


@dataclasses.dataclass
class Report:
  """What cleaning did to one corpus."""

  source: str
  pairs: int
  kept: int
  removed: dict[str, int]
  examples: dict[str, list[dict]]
  settings: dict

  @classmethod
  def build(cls, ds: datasets.Dataset, codes: np.ndarray, cfg: DataConfig, source: str
            ) -> "Report":
    removed, examples, active = {}, {}, active_filters(cfg)
    for i, name in enumerate(FILTERS):
      rows = np.flatnonzero(codes == i + 1)
      if name in active:
        removed[name] = int(len(rows))
      if len(rows):
        picked = ds.select(rows[:EXAMPLES])
        examples[name] = [{"line": int(r) + 1, "src": s[:200], "tgt": t[:200]}
                          for r, s, t in zip(rows, picked["src"], picked["tgt"])]
    settings = {k: getattr(cfg, k) for k in
                ("clean", "clean_max_chars", "clean_max_ratio", "clean_min_letters")}
    return cls(source, len(codes), int(np.sum(codes == KEPT)), removed, examples, settings)

  def lines(self) -> list[str]:
    out = [f"cleaning {self.source}: {self.pairs:,} pairs, {self.kept:,} kept, "
           f"{self.pairs - self.kept:,} removed"]
    for name, count in self.removed.items():
      out.append(f"  {name:<9} {count:>9,} removed")
      for ex in self.examples.get(name, [])[:1]:
        out.append(f"            e.g. line {ex['line']}: {ex['src'][:60]!r} ||| "
                   f"{ex['tgt'][:60]!r}")
    return out

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=1, ensure_ascii=False)


def clean(ds: datasets.Dataset, cfg: DataConfig, source: str, cache: Path | None
          ) -> tuple[datasets.Dataset, Report]:
  """The pairs that pass every filter, and the report. With `cache` (a file path without
  suffix), the reason codes are stored there as .npy and reused."""
  path = cache.with_suffix(".npy") if cache is not None else None
  if path is not None and path.is_file():
    codes = np.load(path)
  else:
    codes = reasons(ds, cfg)
    if path is not None:
      path.parent.mkdir(parents=True, exist_ok=True)
      tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npy")
      np.save(tmp, codes)
      os.replace(tmp, path)
  if len(codes) != len(ds):
    raise ValueError(f"{path} holds {len(codes)} reasons for {len(ds)} pairs: a damaged "
                     "cache; delete it to clean again")
  report = Report.build(ds, codes, cfg, source)
  kept = np.flatnonzero(codes == KEPT)
  return (ds if len(kept) == len(ds) else ds.select(kept)), report
