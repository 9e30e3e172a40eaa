"""Parallel text -> Hugging Face `datasets` -> SentencePiece ids, cached per run.

Sources: a local folder of `{split}.{lang}` / `{split}.{lang}.gz` files aligned by line,
or a Hub data set (by name, or a folder written by `Dataset.save_to_disk`) whose source
and target fields are mapped by config. Either way a split becomes a `datasets.Dataset`
with the columns `src` and `tgt`, and then an `EncodedCorpus` of ids (EOS appended),
memory-mapped from the run's cache. `prepare` does all of it for a training run.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import itertools
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from seq2seq import subword_sampling, tokenizer
from seq2seq.config import Config, DataConfig
from seq2seq.tokenizer import Tokenizer
from seq2seq.vocab import EOS_ID

if TYPE_CHECKING:
  import datasets

log = logging.getLogger(__name__)


def _datasets():
  """Hugging Face `datasets`, imported when a split is first loaded: translating never
  needs it, and its import (pandas, pyarrow) was ~40 % of `import seq2seq.translator`."""
  import datasets
  datasets.disable_progress_bars()
  return datasets


class DataError(ValueError):
  """Input data is missing or malformed; the message names the file and line."""


# ------------------------------------------------------------------------------ reading


def _open_binary(path: Path):
  try:
    return (gzip.open if path.suffix == ".gz" else open)(path, "rb")
  except OSError as e:
    raise DataError(f"{path}: cannot read: {e}") from e


def iter_lines(path: str | os.PathLike, strict: bool = True) -> Iterator[str]:
  """Lines of a UTF-8 text file, plain or gzipped, without their line endings, streamed.

  Only '\\n' ends a line (str.splitlines would also split on U+2028 and friends and
  misalign a parallel corpus). Invalid UTF-8 is an error naming the file and line.
  """
  path = Path(path)
  with _open_binary(path) as f:
    try:
      for number, raw in enumerate(f, 1):
        yield decode_line(raw[:-1] if raw.endswith(b"\n") else raw, f"{path},", number, strict)
    except (OSError, EOFError) as e:
      raise DataError(f"{path}: cannot read: {e}") from e


def read_lines(path: str | os.PathLike) -> list[str]:
  """All lines of a UTF-8 text file (plain or gzipped); see `iter_lines`."""
  return list(iter_lines(path))


def count_lines(path: str | os.PathLike) -> int:
  """Lines of a text file (plain or gzipped), counted without decoding or holding it."""
  path = Path(path)
  count, last = 0, b"\n"
  with _open_binary(path) as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      count, last = count + block.count(b"\n"), block[-1:]
  return count + (last != b"\n")


def split_lines(raw: bytes, name: str, strict: bool = True) -> list[str]:
  """Splits bytes on '\\n' and decodes each line as UTF-8.

  With `strict`, invalid UTF-8 raises DataError naming the line after the prefix `name`
  ("data/train.de," or "input"); otherwise it is replaced with U+FFFD and a warning.
  """
  chunks = raw.split(b"\n")
  if chunks and chunks[-1] == b"":
    chunks.pop()
  return [decode_line(chunk, name, number, strict) for number, chunk in enumerate(chunks, 1)]


def decode_line(chunk: bytes, name: str, number: int, strict: bool = True) -> str:
  """One line's bytes (without '\n') as text; a trailing '\r' is dropped. Invalid UTF-8
  raises DataError naming `name` and the line `number`, or with `strict=False` is
  replaced with U+FFFD and a warning."""
  try:
    return chunk.decode("utf-8").rstrip("\r")
  except UnicodeDecodeError as e:
    if strict:
      raise DataError(f"{name} line {number}: not valid UTF-8 ({e.reason} at byte "
                      f"{e.start})") from e
    log.warning("%s line %d: invalid UTF-8 replaced with U+FFFD", name, number)
    return chunk.decode("utf-8", errors="replace").rstrip("\r")


def find_split_file(directory: str | os.PathLike, split: str, lang: str) -> Path:
  directory = Path(directory)
  for name in (f"{split}.{lang}", f"{split}.{lang}.gz"):
    if (directory / name).exists():
      return directory / name
  available = sorted(p.name for p in directory.glob("*")) if directory.is_dir() else []
  raise DataError(f"split {split!r} not found: expected {directory / f'{split}.{lang}'} "
                  f"(or .gz); {directory} holds: {', '.join(available) or 'nothing'}")


def _parallel_lines(src_path: str, tgt_path: str, signature: str) -> Iterator[dict]:
  """Aligned pairs of two files, streamed; a length mismatch names both files and counts.
  (`signature`, the files' sizes and times, only makes the `datasets` cache key change
  when a file does.)"""
  del signature
  src_lines, tgt_lines = iter_lines(src_path), iter_lines(tgt_path)
  count = 0
  for count, (src, tgt) in enumerate(itertools.zip_longest(src_lines, tgt_lines), 1):
    if src is None or tgt is None:
      rest = 1 + sum(1 for _ in (src_lines if tgt is None else tgt_lines))
      n_src, n_tgt = (count - 1 + rest, count - 1) if tgt is None else (count - 1, count - 1 + rest)
      raise DataError(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; "
                      "parallel files must be aligned line by line")
    yield {"src": src, "tgt": tgt}


def _local_split(cfg: DataConfig, split: str) -> datasets.Dataset:
  """A split of local files as an on-disk (memory-mapped) Arrow data set, written by one
  streaming pass through `datasets`' cache, so a corpus of millions of lines is never
  held in memory."""
  datasets = _datasets()
  src_path = find_split_file(cfg.dir, split, cfg.src_lang)
  tgt_path = find_split_file(cfg.dir, split, cfg.tgt_lang)
  signature = ";".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                       for p in (src_path, tgt_path))
  features = datasets.Features({"src": datasets.Value("string"),
                                "tgt": datasets.Value("string")})
  try:
    return datasets.Dataset.from_generator(
        _parallel_lines, features=features,
        gen_kwargs={"src_path": str(src_path), "tgt_path": str(tgt_path),
                    "signature": signature})
  except datasets.exceptions.DatasetGenerationError as e:
    cause = e.__cause__
    while cause is not None and not isinstance(cause, DataError):
      cause = cause.__cause__
    if cause is not None:
      raise cause from None
    raise DataError(f"cannot read {src_path} and {tgt_path}: {e}") from e
  except ValueError as e:  # `datasets` refuses to build a table of no rows
    if "corresponds to no data" in str(e):
      raise DataError(f"split {split!r} of {cfg.dir} is empty") from None
    raise


def _field(example: dict, dotted: str):
  value = example
  for part in dotted.split("."):
    value = value[part]
  return value


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
          "instead: --config.data.dir=FOLDER with "
          "{split}.{lang}[.gz] files, or at a folder saved with Dataset.save_to_disk "
          "(--config.data.hub=FOLDER).") from e
  first = ds[0] if len(ds) else None
  for f in (cfg.src_field, cfg.tgt_field):
    try:
      if first is not None:
        _field(first, f)
    except (KeyError, TypeError) as e:
      raise DataError(f"Hub data set {cfg.hub!r} has no field {f!r}; its columns are "
                      f"{ds.column_names} (set data.src_field / data.tgt_field, dotted "
                      "for nested fields such as 'translation.en')") from e
  return ds.map(lambda ex: {"src": _field(ex, cfg.src_field), "tgt": _field(ex, cfg.tgt_field)},
                remove_columns=ds.column_names)


def load_split(cfg: DataConfig, split: str) -> datasets.Dataset:
  """A split as a Dataset with string columns `src` and `tgt`; empty splits are errors."""
  if not cfg.hub and not cfg.dir:
    raise DataError("no data source: set data.dir (a folder of {split}.{lang}[.gz] files) "
                    "or data.hub (a Hugging Face data set)")
  ds = _hub_split(cfg, split) if cfg.hub else _local_split(cfg, split)
  if len(ds) == 0:
    where = cfg.hub or cfg.dir
    raise DataError(f"split {split!r} of {where} is empty")
  return ds


def corpus_id(cfg: DataConfig, split: str, vocab_size: int) -> str:
  """Identifies a split's content (and the tokenizer settings) for caches and the tokenizer."""
  h = hashlib.sha256()
  if cfg.hub:
    h.update(f"hub:{cfg.hub}:{cfg.hub_config}:{cfg.hub_split(split)}:{cfg.src_field}:{cfg.tgt_field}".encode())
  else:
    for lang in (cfg.src_lang, cfg.tgt_lang):
      with open(find_split_file(cfg.dir, split, lang), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
          h.update(block)
  h.update(f"{cfg.spm_model_type}:{vocab_size}".encode())
  return h.hexdigest()[:16]


def drop_empty(ds: datasets.Dataset) -> datasets.Dataset:
  """Drops pairs where either side is empty or whitespace, logging how many."""
  keep = ds.filter(lambda b: [bool(s.strip()) and bool(t.strip())
                              for s, t in zip(b["src"], b["tgt"])], batched=True)
  if len(keep) < len(ds):
    log.warning("dropped %d empty or whitespace-only pairs of %d", len(ds) - len(keep), len(ds))
  if len(keep) == 0:
    raise DataError("no non-empty sentence pairs left in the training corpus")
  return keep


# ----------------------------------------------------------------------------- encoding


class Ragged:
  """Variable-length id sequences stored as one flat int32 array and offsets: sequence i
  is `flat[offsets[i]:offsets[i + 1]]`. Loaded from a cache, both are memory-mapped, so a
  corpus of millions of pairs costs memory only for the pages a batch reads (the layout
  of fairseq's indexed data sets)."""

  def __init__(self, flat: np.ndarray, offsets: np.ndarray):
    self.flat, self.offsets = flat, offsets

  @classmethod
  def from_list(cls, seqs: Sequence[Sequence[int]]) -> "Ragged":
    offsets = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum([len(x) for x in seqs], out=offsets[1:])
    flat = np.concatenate(seqs).astype(np.int32) if len(seqs) else np.zeros(0, np.int32)
    return cls(flat, offsets)

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(len(self)))]
    i = int(i)
    if not -len(self) <= i < len(self):
      raise IndexError(f"sequence {i} of {len(self)}")
    i %= len(self)
    return self.flat[self.offsets[i]:self.offsets[i + 1]]

  def __iter__(self) -> Iterator[np.ndarray]:
    return (self[i] for i in range(len(self)))

  def lengths(self) -> np.ndarray:
    return np.diff(self.offsets)



@dataclasses.dataclass
class EncodedCorpus:
  """Token ids (EOS appended) of aligned source and target sentences."""

  src: Ragged
  tgt: Ragged

  def __len__(self):
    return len(self.src)

  def lengths(self) -> tuple[np.ndarray, np.ndarray]:
    return self.src.lengths(), self.tgt.lengths()


def with_eos(pieces: Sequence[list[int]]) -> list[np.ndarray]:
  return [np.array(ids + [EOS_ID], np.int32) for ids in pieces]


def encode_texts(tok: Tokenizer, texts: Sequence[str]) -> list[np.ndarray]:
  return with_eos(tok.encode(texts))


ENCODE_BATCH = 20_000  # sentences per SentencePiece call while streaming a corpus


def encode_dataset(tok: Tokenizer, ds: datasets.Dataset, cache_path: Path | None = None
                   ) -> EncodedCorpus:
  """Encodes both columns in one streaming pass over the data set.

  With `cache_path` (a directory), the ids are written there once (`src.ids`,
  `src.offsets.npy`, the same for tgt; written to a temporary sibling and renamed when
  complete) and every later call, a resumed run or another process of a cluster,
  memory-maps them without a tokenizer or the text. Without it, the corpus is encoded in
  memory.
  """
  if cache_path is not None and cache_path.is_dir():
    return EncodedCorpus(*(_load_ragged(cache_path, side) for side in ("src", "tgt")))
  if cache_path is None:
    return EncodedCorpus(Ragged.from_list(encode_texts(tok, ds["src"])),
                         Ragged.from_list(encode_texts(tok, ds["tgt"])))
  tmp = cache_path.with_name(f"{cache_path.name}.tmp{os.getpid()}")
  tmp.mkdir(parents=True, exist_ok=True)
  lengths: dict[str, list[np.ndarray]] = {"src": [], "tgt": []}
  with open(tmp / "src.ids", "wb") as src_file, open(tmp / "tgt.ids", "wb") as tgt_file:
    files = {"src": src_file, "tgt": tgt_file}
    for batch in ds.iter(batch_size=ENCODE_BATCH):
      for side, f in files.items():
        ids = encode_texts(tok, batch[side])
        lengths[side].append(np.array([len(x) for x in ids], np.int64))
        f.write(np.concatenate(ids).astype("<i4").tobytes())
  for side, parts in lengths.items():
    offsets = np.zeros(sum(len(x) for x in parts) + 1, np.int64)
    np.cumsum(np.concatenate(parts), out=offsets[1:])
    np.save(tmp / f"{side}.offsets.npy", offsets)
  try:
    os.replace(tmp, cache_path)
  except OSError:  # another process finished the same cache first
    shutil.rmtree(tmp, ignore_errors=True)
  return encode_dataset(tok, ds, cache_path)


class SubwordSampler:
  """The training pairs segmented anew for each epoch (`data.sampling_alpha`): the
  corpus of epoch e is a pure function of (data.seed, e), in any process, so a resumed
  run and every process of a cluster see the same pieces (`seq2seq.subword_sampling`;
  BPE-dropout excepted, which SentencePiece draws)."""

  def __init__(self, tok: Tokenizer, ds: datasets.Dataset, cfg: DataConfig):
    self.cfg = cfg
    make = lambda texts: subword_sampling.make_sampler(
        tok, texts, cfg.sampling_alpha, cfg.sampling_nbest, cfg.spm_model_type)
    self.src, self.tgt = make(list(ds["src"])), make(list(ds["tgt"]))

  def corpus(self, epoch: int) -> EncodedCorpus:
    seed = int(np.random.default_rng([self.cfg.seed, epoch, 11]).integers(2**31))
    return EncodedCorpus(_with_eos(*self.src.sample(seed)),
                         _with_eos(*self.tgt.sample(seed + 1)))


def _with_eos(flat: np.ndarray, offsets: np.ndarray) -> Ragged:
  """Sequences given as flat ids and offsets, each followed by EOS."""
  ends = offsets[1:] + np.arange(1, len(offsets))  # each sequence's end, EOS included
  out = np.full(int(ends[-1]) if len(ends) else 0, EOS_ID, np.int32)
  keep = np.ones(len(out), bool)
  keep[ends - 1] = False
  out[keep] = flat
  return Ragged(out, np.concatenate([[0], ends]).astype(np.int64))


def _load_ragged(directory: Path, side: str) -> Ragged:
  offsets = np.load(directory / f"{side}.offsets.npy", mmap_mode="r")
  path = directory / f"{side}.ids"
  if path.stat().st_size != 4 * int(offsets[-1]):
    raise DataError(f"{path} holds {path.stat().st_size // 4} ids but its offsets expect "
                    f"{int(offsets[-1])}: a damaged cache; delete {directory} to re-encode")
  flat = np.memmap(path, dtype="<i4", mode="r") if offsets[-1] else np.zeros(0, np.int32)
  return Ragged(flat, offsets)


def tokenizer_sample(ds: datasets.Dataset, max_sentences: int, seed: int) -> list[str]:
  """The sentences SentencePiece trains on: both sides of every pair, or of
  `max_sentences // 2` pairs drawn uniformly from the whole corpus (not its head)."""
  pairs = max(max_sentences // 2, 1)
  if len(ds) > pairs:
    rows = np.sort(np.random.default_rng([seed, 7]).choice(len(ds), pairs, replace=False))
    ds = ds.select(rows)
  return list(ds["src"]) + list(ds["tgt"])


def cache_dir(cfg: Config, workdir: Path) -> Path:
  return Path(cfg.data.cache_dir) if cfg.data.cache_dir else workdir / "cache"


def training_pairs(cfg: Config) -> datasets.Dataset:
  """The training split as a `datasets` table, empty pairs dropped."""
  return drop_empty(load_split(cfg.data, cfg.data.train_split))


def prepare(cfg: Config, workdir: Path
            ) -> tuple[Tokenizer, EncodedCorpus, EncodedCorpus, list[str]]:
  """A training run's tokenizer (trained or reused), encoded training and validation
  corpora, and validation references.

  The training text is read only when the tokenizer or the encoded ids are not cached
  yet: a resumed run, or a process that joins after process 0 prepared the data, maps
  the ids from the run's cache."""
  vocab_size = cfg.model.vocab_size
  train_ds = functools.cache(lambda: training_pairs(cfg))
  train_id = corpus_id(cfg.data, cfg.data.train_split, vocab_size)
  given = cfg.data.spm_model
  if cfg.train.init_from:
    given = str(Path(cfg.train.init_from) / tokenizer.MODEL_FILE)
    if cfg.data.spm_model and Path(cfg.data.spm_model).resolve() != Path(given).resolve():
      raise tokenizer.TokenizerMismatchError(
          f"data.spm_model={cfg.data.spm_model} differs from the SentencePiece model of "
          f"train.init_from ({given}); a fine-tuned model keeps its source's vocabulary")
  tok = tokenizer.load_or_train(
      workdir, train_id,
      lambda: tokenizer_sample(train_ds(), cfg.data.spm_max_sentences, cfg.data.seed),
      vocab_size, cfg.data.spm_model_type, cfg.data.spm_max_sentences, given)
  if tok.vocab_size != vocab_size:
    raise tokenizer.TokenizerMismatchError(
        f"tokenizer has {tok.vocab_size} pieces but model.vocab_size={vocab_size}")
  cache = cache_dir(cfg, workdir)
  train_ids = cache / f"{cfg.data.train_split}-{train_id}-{tok.fingerprint()}"
  train = encode_dataset(tok, None if train_ids.is_dir() else train_ds(), train_ids)
  val_ds = load_split(cfg.data, cfg.data.val_split)
  val_id = corpus_id(cfg.data, cfg.data.val_split, vocab_size)
  val = encode_dataset(tok, val_ds, cache / f"{cfg.data.val_split}-{val_id}-{tok.fingerprint()}")
  log.info("data: %d training pairs, %d validation pairs, %d pieces",
           len(train), len(val), tok.vocab_size)
  return tok, train, val, list(val_ds["tgt"])
