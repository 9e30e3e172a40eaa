"""Where a split's pairs come from, as a Hugging Face `datasets.Dataset` of `src`, `tgt`.

A split is read from, in order:
  - its path (`data.train_path`, `val_path`, `test_path`): a two-column `.tsv`, a `.jsonl`
    file (either may be gzipped), or `SRC_FILE,TGT_FILE`, two files aligned by line;
  - a folder (`data.dir`) holding `{split}.{src_lang}` and `{split}.{tgt_lang}`, or
    `{split}.tsv` or `{split}.jsonl` (each plain or .gz);
  - a Hub data set (`data.hub`: a name, or a folder written by `save_to_disk`), its fields
    given or found (`textfiles.find_fields`).
Local files are streamed once into `datasets`' on-disk cache, so a corpus of millions of
lines is never held in memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from seq2seq.config import DataConfig
from seq2seq.data import textfiles
from seq2seq.data.textfiles import DataError

if TYPE_CHECKING:
  import datasets

# A run's validation pairs held out of its training pairs (corpus.training_split), as
# JSON Lines with fields src and tgt: read by `load_split` for the validation split.
HELDOUT_FILE = "heldout.jsonl"


def heldout_file(cfg: DataConfig) -> str:
  """The name of a run's held-out validation pairs (one file per direction in a run of
  several: `heldout.en-de.jsonl`)."""
  return f"heldout.{cfg.src_lang}-{cfg.tgt_lang}.jsonl" if cfg.multilingual else HELDOUT_FILE


def _datasets():
  """Hugging Face `datasets`, imported when a split is first loaded: translating never
  needs it, and its import (pandas, pyarrow) was a large part of `import seq2seq.decoding.translator`."""
  import datasets
  datasets.disable_progress_bars()
  return datasets


def split_path(cfg: DataConfig, split: str) -> str:
  """The path given for `split` (`data.train_path` etc.), or ""."""
  field = path_field(cfg, split)
  return getattr(cfg, field) if field else ""


def path_field(cfg: DataConfig, split: str) -> str:
  """The field that gives `split` a path: "train_path", "val_path", "test_path" or ""."""
  return {cfg.test_split: "test_path", cfg.val_split: "val_path",
          cfg.train_split: "train_path"}.get(split, "")


def _kind(path: Path) -> str:
  name = path.name.removesuffix(".gz")
  return "tsv" if name.endswith(".tsv") else "jsonl" if name.endswith(".jsonl") else ""


def local_files(cfg: DataConfig, split: str) -> tuple[str, list[Path]] | None:
  """("tsv" | "jsonl" | "pair", its files) of a split read from local files; None when
  the split is read from the Hub or has no files (`DataError` when a given path is
  missing)."""
  given = split_path(cfg, split)
  if given:
    paths = [Path(p.strip()) for p in given.split(",")]
    for p in paths:
      if not p.is_file():
        raise DataError(f"data.{path_field(cfg, split)}: {p} does not exist")
    if len(paths) == 2:
      return "pair", paths
    if len(paths) == 1 and _kind(paths[0]):
      return _kind(paths[0]), paths
    raise DataError(f"data.{path_field(cfg, split)}={given!r}: expected FILE.tsv, FILE.jsonl (either "
                    "may end in .gz) or SRC_FILE,TGT_FILE")
  if not cfg.dir:
    return None
  folder = Path(cfg.dir)
  found = lambda name: next((folder / n for n in (name, name + ".gz")
                             if (folder / n).is_file()), None)
  pair = [found(f"{split}.{cfg.src_lang}"), found(f"{split}.{cfg.tgt_lang}")]
  if all(pair):
    return "pair", pair
  for kind in ("tsv", "jsonl"):
    if (path := found(f"{split}.{kind}")) is not None:
      return kind, [path]
  return None


def has_split(cfg: DataConfig, split: str) -> bool:
  """Whether the source holds `split` (a Hub data set is asked for its split names)."""
  if split_path(cfg, split) or (cfg.dir and not cfg.hub):
    return local_files(cfg, split) is not None
  if not cfg.hub:
    return False
  if Path(cfg.hub).is_dir():
    loaded = _datasets().load_from_disk(cfg.hub)
    return not isinstance(loaded, _datasets().DatasetDict) or cfg.hub_split(split) in loaded
  try:
    return cfg.hub_split(split) in _datasets().get_dataset_split_names(
        cfg.hub, cfg.hub_config or None)
  except Exception:  # noqa: BLE001 (offline, unknown name...: load_split names it)
    return True


def _pairs(kind: str, first: str, second: str, cfg: dict, signature: str) -> Iterator[dict]:
  """The pairs of local files (`second` only for a file pair; `signature`, the files'
  sizes and times, only makes the `datasets` cache key change when a file does). No
  argument is a list: `datasets` would take a list for shards."""
  del signature
  if kind == "pair":
    pairs = textfiles.iter_file_pair(first, second)
  elif kind == "tsv":
    pairs = textfiles.iter_tsv(first)
  else:
    pairs = textfiles.iter_jsonl(first, cfg["src_field"], cfg["tgt_field"],
                                 cfg["src_lang"], cfg["tgt_lang"])
  for src, tgt in pairs:
    yield {"src": src, "tgt": tgt}


def _local_split(cfg: DataConfig, split: str, kind: str, paths: list[Path]
                 ) -> datasets.Dataset:
  datasets = _datasets()
  signature = ";".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                       for p in paths)
  features = datasets.Features({"src": datasets.Value("string"),
                                "tgt": datasets.Value("string")})
  settings = {k: getattr(cfg, k) for k in ("src_field", "tgt_field", "src_lang", "tgt_lang")}
  try:
    return datasets.Dataset.from_generator(
        _pairs, features=features,
        gen_kwargs={"kind": kind, "first": str(paths[0]),
                    "second": str(paths[1]) if len(paths) > 1 else "", "cfg": settings,
                    "signature": signature})
  except datasets.exceptions.DatasetGenerationError as e:
    cause = e.__cause__
    while cause is not None and not isinstance(cause, DataError):
      cause = cause.__cause__
    if cause is not None:
      raise cause from None
    raise DataError(f"cannot read {', '.join(map(str, paths))}: {e}") from e
  except ValueError as e:  # `datasets` refuses to build a table of no rows
    if "corresponds to no data" in str(e):
      raise DataError(f"split {split!r} ({', '.join(map(str, paths))}) is empty") from None
    raise


def _hub_split(cfg: DataConfig, split: str) -> datasets.Dataset:
  datasets = _datasets()
  split = cfg.hub_split(split)
  if Path(cfg.hub).is_dir():
    loaded = datasets.load_from_disk(cfg.hub)
    if isinstance(loaded, datasets.DatasetDict):
      if split not in loaded:
        raise DataError(f"split {split!r} not in {cfg.hub}; it has {', '.join(loaded)}")
      ds = loaded[split]
    else:
      ds = loaded
  else:
    try:
      ds = datasets.load_dataset(cfg.hub, cfg.hub_config or None, split=split)
    except (ConnectionError, OSError) as e:
      raise DataError(
          f"cannot load Hub data set {cfg.hub!r} (config {cfg.hub_config!r}, split "
          f"{split!r}): {e}. Without network access, point the package at local files "
          "instead (data.train_path, data.dir), or at a folder saved with "
          "Dataset.save_to_disk (--config.data.hub=FOLDER).") from e
  if not len(ds):
    return ds
  first, where = ds[0], f"Hub data set {cfg.hub!r}"
  fields = ((cfg.src_field, cfg.tgt_field) if cfg.src_field and cfg.tgt_field else
            textfiles.find_fields(first, cfg.src_lang, cfg.tgt_lang, where))
  for f in fields:
    try:
      textfiles.field(first, f)
    except (KeyError, TypeError):
      raise DataError(f"{where} has no field {f!r}; its columns are {ds.column_names} (set "
                      "data.src_field / data.tgt_field, dotted for nested fields such as "
                      "'translation.en')") from None
  return ds.map(lambda ex: {"src": textfiles.field(ex, fields[0]),
                            "tgt": textfiles.field(ex, fields[1])},
                remove_columns=ds.column_names)


def load_split(cfg: DataConfig, split: str, workdir: str | Path | None = None
               ) -> datasets.Dataset:
  """A split as a Dataset with string columns `src` and `tgt`; empty splits are errors.
  With a run's `workdir`, the validation split of a source without one is the run's
  held-out pairs."""
  files = local_files(cfg, split)
  heldout = Path(workdir or ".") / heldout_file(cfg)
  if (files is None and workdir is not None and split == cfg.val_split
      and heldout.is_file() and not has_split(cfg, split)):
    return _local_split(dataclasses.replace(cfg, src_field="src", tgt_field="tgt"), split,
                        "jsonl", [heldout])
  if files is not None:
    ds = _local_split(cfg, split, *files)
  elif cfg.hub and not split_path(cfg, split):
    ds = _hub_split(cfg, split)
  elif cfg.dir:
    folder = Path(cfg.dir)
    held = sorted(p.name for p in folder.glob("*")) if folder.is_dir() else []
    raise DataError(f"split {split!r} not found: expected {folder / split}.{cfg.src_lang} "
                    f"and .{cfg.tgt_lang}, or {split}.tsv or {split}.jsonl (each may end "
                    f"in .gz); {folder} holds: {', '.join(held) or 'nothing'}")
  else:
    field = path_field(cfg, split)
    given = f"data.{field} (FILE.tsv, FILE.jsonl or SRC_FILE,TGT_FILE), " if field else ""
    raise DataError(f"no data for split {split!r}: set {given}data.dir (a folder) or data.hub")
  if len(ds) == 0:
    raise DataError(f"split {split!r} of {cfg.hub or cfg.dir or split_path(cfg, split)} "
                    "is empty")
  return ds


def corpus_id(cfg: DataConfig, split: str, vocab_size: int) -> str:
  """Identifies a split's content (and the tokenizer settings) for caches and the tokenizer."""
  h = hashlib.sha256()
  files = local_files(cfg, split)
  if files is None:
    h.update(f"hub:{cfg.hub}:{cfg.hub_config}:{cfg.hub_split(split)}:{cfg.src_field}:"
             f"{cfg.tgt_field}:{cfg.src_lang}:{cfg.tgt_lang}".encode())
  else:
    kind, paths = files
    if kind == "jsonl":
      h.update(f"jsonl:{cfg.src_field}:{cfg.tgt_field}:{cfg.src_lang}:{cfg.tgt_lang}".encode())
    elif kind == "tsv":
      h.update(b"tsv:")
    for path in paths:
      with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
          h.update(block)
  h.update(f"{cfg.spm_model_type}:{vocab_size}".encode())
  return h.hexdigest()[:16]
