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
import io
import logging
import os
import queue
import threading
from pathlib import Path
from typing import Iterator, Sequence

import datasets
import jax
import numpy as np

from seq2seq.config import DataConfig
from seq2seq.runtime import write_atomic
from seq2seq.tokenizer import Tokenizer
from seq2seq.vocab import EOS_ID, PAD_ID, truncate_keeping_eos

log = logging.getLogger(__name__)
datasets.disable_progress_bars()


class DataError(ValueError):
  """Input data is missing or malformed; the message names the file and line."""


# ------------------------------------------------------------------------------ reading


def read_lines(path: str | os.PathLike) -> list[str]:
  """Lines of a UTF-8 text file, plain or gzipped, without their line endings.

  Only '\\n' ends a line (str.splitlines would also split on U+2028 and friends and
  misalign a parallel corpus). Invalid UTF-8 is an error naming the file and line.
  """
  path = Path(path)
  opener = gzip.open if path.suffix == ".gz" else open
  try:
    with opener(path, "rb") as f:
      raw = f.read()
  except (OSError, EOFError) as e:
    raise DataError(f"{path}: cannot read: {e}") from e
  return split_lines(raw, f"{path},", strict=True)


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


def _local_split(cfg: DataConfig, split: str) -> datasets.Dataset:
  src_path = find_split_file(cfg.dir, split, cfg.src_lang)
  tgt_path = find_split_file(cfg.dir, split, cfg.tgt_lang)
  src, tgt = read_lines(src_path), read_lines(tgt_path)
  if len(src) != len(tgt):
    raise DataError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                    "parallel files must be aligned line by line")
  return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def _field(example: dict, dotted: str):
  value = example
  for part in dotted.split("."):
    value = value[part]
  return value


def _hub_split(cfg: DataConfig, split: str) -> datasets.Dataset:
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
  keep = ds.filter(lambda ex: bool(ex["src"].strip()) and bool(ex["tgt"].strip()))
  if len(keep) < len(ds):
    log.warning("dropped %d empty or whitespace-only pairs of %d", len(ds) - len(keep), len(ds))
  if len(keep) == 0:
    raise DataError("no non-empty sentence pairs left in the training corpus")
  return keep


# ----------------------------------------------------------------------------- encoding


@dataclasses.dataclass
class EncodedCorpus:
  """Token ids (EOS appended) of aligned source and target sentences."""

  src: list[np.ndarray]
  tgt: list[np.ndarray]

  def __len__(self):
    return len(self.src)

  def lengths(self) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([len(x) for x in self.src]), np.array([len(x) for x in self.tgt]))


def _pack(seqs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
  offsets = np.cumsum([0] + [len(s) for s in seqs])
  flat = np.concatenate(seqs) if seqs else np.zeros(0, np.int32)
  return flat.astype(np.int32), offsets


def _unpack(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
  return [flat[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def encode_texts(tok: Tokenizer, texts: Sequence[str]) -> list[np.ndarray]:
  return [np.array(ids + [EOS_ID], np.int32) for ids in tok.encode(texts)]


def encode_dataset(tok: Tokenizer, ds: datasets.Dataset, cache_path: Path | None = None
                   ) -> EncodedCorpus:
  """Encodes both columns once; with `cache_path`, reuses (or writes) a .npz cache."""
  if cache_path is not None and cache_path.exists():
    with np.load(cache_path) as z:
      return EncodedCorpus(_unpack(z["src"], z["src_off"]), _unpack(z["tgt"], z["tgt_off"]))
  corpus = EncodedCorpus(encode_texts(tok, ds["src"]), encode_texts(tok, ds["tgt"]))
  if cache_path is not None:
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    (src, src_off), (tgt, tgt_off) = _pack(corpus.src), _pack(corpus.tgt)
    buffer = io.BytesIO()
    np.savez(buffer, src=src, src_off=src_off, tgt=tgt, tgt_off=tgt_off)
    write_atomic(cache_path, buffer.getvalue())
  return corpus


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

  def __init__(self, corpus: EncodedCorpus, cfg: DataConfig, num_devices: int = 1):
    self.corpus, self.cfg, self.num_devices = corpus, cfg, num_devices
    self.src_len, self.tgt_len = corpus.lengths()
    longest = np.maximum(self.src_len, self.tgt_len)
    limit, name = cfg.max_train_len, "max_train_len"
    if cfg.pack_length and cfg.pack_length < limit:
      limit, name = cfg.pack_length, "pack_length"
    keep = longest <= limit
    if (~keep).any():
      log.warning("dropped %d of %d training pairs longer than %s=%d pieces",
                  int((~keep).sum()), len(keep), name, limit)
    if not keep.any():
      raise DataError(f"every training pair is longer than {name}={limit}")
    self.num_pairs = int(keep.sum())
    self.kept = np.flatnonzero(keep)
    self.lengths = LengthBuckets.from_config(cfg, cfg.max_train_len)
    bucket_of = np.array([self.lengths.length_for(int(n)) for n in longest])
    self.buckets = {int(b): np.flatnonzero(keep & (bucket_of == b))
                    for b in self.lengths.boundaries}
    self.buckets = {b: idx for b, idx in self.buckets.items() if len(idx)}

  def epoch_batches(self, epoch: int) -> list:
    """One epoch's batches in training order: index arrays of pairs, or with packing,
    lists of rows (each an index array of the pairs packed in it)."""
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

  def make_batch(self, idx) -> Batch:
    if self.cfg.pack_length:
      return self._packed_batch(idx)
    src = [self.corpus.src[i] for i in idx]
    tgt = [self.corpus.tgt[i] for i in idx]
    length = self.lengths.length_for(max(max(len(x), len(y)) for x, y in zip(src, tgt)))
    return pad_batch(src, tgt, rows_for(length, self.cfg.max_tokens, self.num_devices),
                     length, length)

  def _packed_batch(self, rows: list[np.ndarray]) -> Batch:
    """Every packed batch has the same shape `[rows_for(L), L]` (empty rows at the end)."""
    length = self.cfg.pack_length
    n = rows_for(length, self.cfg.max_tokens, self.num_devices)
    src, tgt, src_seg, tgt_seg = (np.full((n, length), PAD_ID, np.int32) for _ in range(4))
    for r, pairs in enumerate(rows):
      s_at = t_at = 0
      for k, i in enumerate(pairs, start=1):
        x, y = self.corpus.src[i], self.corpus.tgt[i]
        src[r, s_at:s_at + len(x)], src_seg[r, s_at:s_at + len(x)] = x, k
        tgt[r, t_at:t_at + len(y)], tgt_seg[r, t_at:t_at + len(y)] = y, k
        s_at, t_at = s_at + len(x), t_at + len(y)
    return Batch(src, tgt, src_seg, tgt_seg)

  def iterate(self, epoch: int = 0, index: int = 0) -> Iterator[tuple[int, int, Batch]]:
    """Yields (epoch, index of the next batch, batch) forever, from the given position."""
    while True:
      order = self.epoch_batches(epoch)
      for i in range(index, len(order)):
        yield epoch, i + 1, self.make_batch(order[i])
      epoch, index = epoch + 1, 0


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
