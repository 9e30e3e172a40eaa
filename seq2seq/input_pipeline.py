"""Parallel text -> Hugging Face `datasets` -> SentencePiece ids -> length-bucketed batches.

Sources: a local folder of `{split}.{lang}` / `{split}.{lang}.gz` files aligned by line,
or a Hub data set (by name, or a folder written by `Dataset.save_to_disk`) whose source
and target fields are mapped by config. Either way a split becomes a `datasets.Dataset`
with the columns `src` and `tgt`.

Training batches hold whole sentences grouped by length: each pair goes to the first
bucket boundary L >= max(source length, target length), both sides are padded to L, and
a batch has max_tokens // L rows. So `jit` sees one shape per bucket, whatever the data.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import itertools
import logging
import os
import queue
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import jax
import numpy as np

from seq2seq import subword_sampling
from seq2seq.config import DataConfig
from seq2seq.tokenizer import Tokenizer
from seq2seq.vocab import EOS_ID, PAD_ID, truncate_keeping_eos

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

  def __add__(self, other: "Ragged") -> "Ragged":
    """The sequences of `self` followed by those of `other`, in one new in-memory array."""
    flat = np.concatenate([self.flat, other.flat], dtype=np.int32)
    offsets = np.concatenate([self.offsets, other.offsets[1:] + self.offsets[-1]],
                             dtype=np.int64)
    return Ragged(flat, offsets)


@dataclasses.dataclass
class EncodedCorpus:
  """Token ids (EOS appended) of aligned source and target sentences."""

  src: Ragged
  tgt: Ragged

  def __len__(self):
    return len(self.src)

  def lengths(self) -> tuple[np.ndarray, np.ndarray]:
    return self.src.lengths(), self.tgt.lengths()

  def both_directions(self) -> "EncodedCorpus":
    """Pairs 0..N-1 as they are, then pairs N..2N-1 the same ones swapped (target ->
    source): the corpus of a bidirectional epoch (`data.bidirectional_epochs`). Needs the
    joint vocabulary, which both sides always share here."""
    return EncodedCorpus(self.src + self.tgt, self.tgt + self.src)


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
    self.src = make(list(ds["src"]))
    # `data.sampling_sides="source"`: the target's one segmentation, encoded once.
    if cfg.sampling_sides == "source":
      self.tgt, self.fixed_tgt = None, Ragged.from_list(encode_texts(tok, list(ds["tgt"])))
    else:
      self.tgt, self.fixed_tgt = make(list(ds["tgt"])), None

  def corpus(self, epoch: int) -> EncodedCorpus:
    seed = int(np.random.default_rng([self.cfg.seed, epoch, 11]).integers(2**31))
    tgt = self.fixed_tgt if self.tgt is None else _with_eos(*self.tgt.sample(seed + 1))
    return EncodedCorpus(_with_eos(*self.src.sample(seed)), tgt)


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


# ----------------------------------------------------------------------------- batching


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Batch:
  """Padded ids: `src [B, S]`, `tgt [B, T]` (labels, EOS-terminated; the decoder input
  is BOS + tgt shifted right). Rows that are all padding carry no loss.

  Packed batches also carry segment ids (1, 2, ... for the pairs of a row, 0 for
  padding) for both sides; pair k of a row is segment k on both sides. Unpacked
  batches have None there. A Batch is a pytree: `jax.device_put(batch, sharding)`
  moves all of it in one call, and jitted steps take it whole.
  """

  src: np.ndarray
  tgt: np.ndarray
  src_segments: np.ndarray | None = None
  tgt_segments: np.ndarray | None = None

  @property
  def shape(self):
    return (self.src.shape, self.tgt.shape)


@dataclasses.dataclass(frozen=True)
class LengthBuckets:
  """The padded lengths that training, evaluation and decoding batches use.

  A sequence of n pieces is padded to the first boundary >= n, so `jit` compiles one
  program per boundary, not one per batch. Built from `data.bucket_boundaries` and the
  longest sequence allowed (`data.max_train_len` for training batches, `model.max_len`
  for evaluation and decoding), which is always the last boundary.
  """

  boundaries: tuple[int, ...]

  @classmethod
  def from_config(cls, data_cfg: DataConfig, longest: int) -> "LengthBuckets":
    return cls(tuple(sorted({b for b in data_cfg.bucket_boundaries if b < longest}
                            | {longest})))

  @property
  def longest(self) -> int:
    return self.boundaries[-1]

  def length_for(self, n: int) -> int:
    """The padded length of a sequence of n pieces (n itself past the last boundary)."""
    for b in self.boundaries:
      if n <= b:
        return b
    return int(n)


def pad_batch(src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], rows: int,
              src_len: int, tgt_len: int) -> Batch:
  s = np.full((rows, src_len), PAD_ID, np.int32)
  t = np.full((rows, tgt_len), PAD_ID, np.int32)
  for i, (x, y) in enumerate(zip(src, tgt)):
    s[i, :len(x)] = x
    t[i, :len(y)] = y
  return Batch(s, t)


def rows_for(length: int, max_tokens: int, multiple: int) -> int:
  """Rows of a batch padded to `length` under the token budget, a multiple of `multiple`."""
  rows = max(1, max_tokens // length)
  return max(multiple, rows // multiple * multiple)


class TrainBatches:
  """Shuffled training batches with a resumable (epoch, index) position.

  Batches are either length-bucketed (each padded to its bucket's length) or, with
  `pack_length`, rows of `pack_length` pieces per side holding several pairs each.
  Each epoch's batch list is a pure function of (seed, epoch), so a resumed run sees
  exactly the batches an uninterrupted run would.
  """

  def __init__(self, corpus: EncodedCorpus, cfg: DataConfig, num_devices: int = 1,
               sampler: SubwordSampler | None = None):
    self.cfg, self.num_devices, self.sampler = cfg, num_devices, sampler
    self.lengths = LengthBuckets.from_config(cfg, cfg.max_train_len)
    self.base = corpus  # the pairs as given, one direction
    # Which corpus self.corpus holds: (the epoch whose segmentation it is, with a
    # sampler, else None; whether it holds both directions).
    self.corpus_key: tuple[int | None, bool] = (None, False)
    self._use(corpus, announce=True)

  def _corpus_key(self, epoch: int) -> tuple[int | None, bool]:
    return (epoch if self.sampler is not None else None,
            epoch < self.cfg.bidirectional_epochs)

  def corpus_for(self, epoch: int) -> EncodedCorpus:
    """The pairs that epoch `epoch` draws its batches from: the given corpus, or with a
    sampler its segmentation for that epoch; during the first `data.bidirectional_epochs`
    epochs followed by the same pairs swapped."""
    sampler_epoch, both = self._corpus_key(epoch)
    corpus = self.base if sampler_epoch is None else self.sampler.corpus(sampler_epoch)
    return corpus.both_directions() if both else corpus

  def _use(self, corpus: EncodedCorpus, announce: bool):
    """Indexes `corpus` by length: which pairs are kept, and each bucket's pairs."""
    cfg = self.cfg
    self.corpus = corpus
    self.src_len, self.tgt_len = corpus.lengths()
    longest = np.maximum(self.src_len, self.tgt_len)
    limit, name = cfg.max_train_len, "max_train_len"
    if cfg.pack_length and cfg.pack_length < limit:
      limit, name = cfg.pack_length, "pack_length"
    keep = longest <= limit
    if (~keep).any():
      (log.warning if announce else log.debug)(
          "dropped %d of %d training pairs longer than %s=%d pieces",
          int((~keep).sum()), len(keep), name, limit)
    if not keep.any():
      raise DataError(f"every training pair is longer than {name}={limit}")
    self.num_pairs = int(keep.sum())
    self.kept = np.flatnonzero(keep)
    bounds = np.array(self.lengths.boundaries)
    bucket_of = bounds[np.minimum(np.searchsorted(bounds, longest), len(bounds) - 1)]
    self.buckets = {int(b): np.flatnonzero(keep & (bucket_of == b))
                    for b in self.lengths.boundaries}
    self.buckets = {b: idx for b, idx in self.buckets.items() if len(idx)}

  def epoch_batches(self, epoch: int) -> list:
    """One epoch's batches in training order: index arrays of pairs, or with packing,
    lists of rows (each an index array of the pairs packed in it). The batches index
    this epoch's corpus (`corpus_for`), which `make_batch` then reads: build the batches
    of one epoch before asking for the next one's."""
    key = self._corpus_key(epoch)
    if self.corpus_key != key:
      self._use(self.corpus_for(epoch), announce=False)
      self.corpus_key = key
    rng = np.random.default_rng([self.cfg.seed, epoch])
    if self.cfg.pack_length:
      return self._packed_epoch(rng)
    batches = []
    for length, idx in self.buckets.items():
      rows = rows_for(length, self.cfg.max_tokens, self.num_devices)
      idx = rng.permutation(idx)
      batches += [idx[i:i + rows] for i in range(0, len(idx), rows)]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]

  def _packed_epoch(self, rng: np.random.Generator, open_rows: int = 16) -> list:
    """Packs the shuffled pairs into rows: each pair goes into the first of up to
    `open_rows` partly filled rows where both its sides fit; when none has room, the
    fullest row is closed. On Multi30k the rows end up ~92 % full: a row closes when
    either side is full (German runs 3.6 % more pieces than English), and first fit
    leaves gaps that no remaining pair fits."""
    length = self.cfg.pack_length
    rows: list[list[int]] = []
    open_: list[list] = []  # [pairs, src used, tgt used]
    for i in rng.permutation(self.kept):
      s, t = int(self.src_len[i]), int(self.tgt_len[i])
      for row in open_:
        if row[1] + s <= length and row[2] + t <= length:
          row[0].append(i)
          row[1] += s
          row[2] += t
          break
      else:
        if len(open_) == open_rows:
          fullest = max(range(len(open_)), key=lambda k: open_[k][1] + open_[k][2])
          rows.append(open_.pop(fullest)[0])
        open_.append([[i], s, t])
    rows += [row[0] for row in open_]
    per_batch = rows_for(length, self.cfg.max_tokens, self.num_devices)
    return [[np.array(r) for r in rows[i:i + per_batch]] for i in range(0, len(rows), per_batch)]

  def make_batch(self, idx, part: int = 0, parts: int = 1) -> Batch:
    """The batch of `idx` (an entry of `epoch_batches`), or with `parts` > 1 only its rows
    [part * R / parts, (part + 1) * R / parts) of its R rows: the share of one process of
    a cluster, which builds nothing of the other processes' rows."""
    if self.cfg.pack_length:
      return self._packed_batch(idx, part, parts)
    length = self.lengths.length_for(int(max(self.src_len[idx].max(), self.tgt_len[idx].max())))
    rows = rows_for(length, self.cfg.max_tokens, self.num_devices)
    mine = slice(*_share(rows, part, parts))
    src = [self.corpus.src[i] for i in idx[mine]]
    tgt = [self.corpus.tgt[i] for i in idx[mine]]
    return pad_batch(src, tgt, rows // parts, length, length)

  def _packed_batch(self, rows: list[np.ndarray], part: int = 0, parts: int = 1) -> Batch:
    """Every packed batch has the same shape `[rows_for(L), L]` (empty rows at the end)."""
    length = self.cfg.pack_length
    n = rows_for(length, self.cfg.max_tokens, self.num_devices)
    first, last = _share(n, part, parts)
    src, tgt, src_seg, tgt_seg = (np.full((last - first, length), PAD_ID, np.int32)
                                  for _ in range(4))
    for r, pairs in enumerate(rows[first:last]):
      s_at = t_at = 0
      for k, i in enumerate(pairs, start=1):
        x, y = self.corpus.src[i], self.corpus.tgt[i]
        src[r, s_at:s_at + len(x)], src_seg[r, s_at:s_at + len(x)] = x, k
        tgt[r, t_at:t_at + len(y)], tgt_seg[r, t_at:t_at + len(y)] = y, k
        s_at, t_at = s_at + len(x), t_at + len(y)
    return Batch(src, tgt, src_seg, tgt_seg)

  def templates(self, part: int = 0, parts: int = 1) -> list[Batch]:
    """One all-padding batch of each shape that this epoch's batches take (one per
    length bucket holding pairs, or the one packed shape), with `make_batch`'s rows of
    `part`: what a step can be compiled for before the first real batch arrives."""
    if self.cfg.pack_length:
      return [self._packed_batch([], part, parts)]
    out = []
    for length in self.buckets:
      rows = rows_for(length, self.cfg.max_tokens, self.num_devices)
      out.append(pad_batch([], [], rows // parts, length, length))
    return out

  def iterate(self, epoch: int = 0, index: int = 0, part: int = 0, parts: int = 1
              ) -> Iterator[tuple[int, int, Batch]]:
    """Yields (epoch, index of the next batch, batch) forever, from the given position;
    with `parts` > 1, each batch holds only the rows of `part` (see `make_batch`)."""
    while True:
      order = self.epoch_batches(epoch)
      for i in range(index, len(order)):
        yield epoch, i + 1, self.make_batch(order[i], part, parts)
      epoch, index = epoch + 1, 0


def _share(rows: int, part: int, parts: int) -> tuple[int, int]:
  """Rows [first, last) of `part` when `rows` are split evenly into `parts`."""
  if rows % parts:
    raise ValueError(f"{rows} batch rows cannot be split evenly over {parts} processes")
  return part * rows // parts, (part + 1) * rows // parts


def eval_batches(corpus: EncodedCorpus, rows: int, lengths: LengthBuckets, multiple: int = 1
                 ) -> Iterator[Batch]:
  """Every pair in the original order; sequences longer than `lengths.longest` (the
  model's maximum) are truncated, keeping EOS, rather than dropped, so each is scored."""
  rows = max(multiple, rows // multiple * multiple)
  cut = lambda ids: np.asarray(truncate_keeping_eos(ids, lengths.longest), np.int32)
  for start in range(0, len(corpus), rows):
    src = [cut(x) for x in corpus.src[start:start + rows]]
    tgt = [cut(y) for y in corpus.tgt[start:start + rows]]
    s_len = lengths.length_for(max(len(x) for x in src))
    t_len = lengths.length_for(max(len(y) for y in tgt))
    yield pad_batch(src, tgt, rows, s_len, t_len)


def local_rows(batch: Batch, part: int, parts: int) -> Batch:
  """Rows [part * B / parts, (part + 1) * B / parts) of a batch of B rows."""
  if parts == 1:
    return batch
  first, last = _share(batch.src.shape[0], part, parts)
  return jax.tree_util.tree_map(lambda x: x[first:last], batch)


def padding_fraction(batches: Sequence[Batch]) -> float:
  """Share of padded positions among all source and target positions."""
  total = sum(b.src.size + b.tgt.size for b in batches)
  real = sum(int((b.src != PAD_ID).sum() + (b.tgt != PAD_ID).sum()) for b in batches)
  return 1.0 - real / total


def prefetch(iterator: Iterator, size: int = 4) -> Iterator:
  """Runs `iterator` in a background thread so batching stays off the critical path."""
  q: queue.Queue = queue.Queue(maxsize=size)
  sentinel = object()

  def worker():
    try:
      for item in iterator:
        q.put(item)
    except BaseException as e:  # re-raised in the consumer
      q.put(e)
    q.put(sentinel)

  threading.Thread(target=worker, daemon=True).start()
  while True:
    item = q.get()
    if item is sentinel:
      return
    if isinstance(item, BaseException):
      raise item
    yield item
