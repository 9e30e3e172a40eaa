"""Encoded pairs -> length-bucketed (or packed) batches, shuffled per epoch and resumable.

Training batches hold whole sentences grouped by length: each pair goes to the first
bucket boundary L >= max(source length, target length), both sides are padded to L, and
a batch has max_tokens // L rows. So `jit` sees one shape per bucket, whatever the data.
Forced-decoding evaluation (the validation loss) pads to the same boundaries
(`LengthBuckets`); searches pad sources to `decode.length_buckets`, coarser ones.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from typing import Iterator, Sequence

import jax
import numpy as np

from seq2seq.config import DataConfig
from seq2seq.data import multilingual
from seq2seq.data.corpus import EncodedCorpus, SubwordSampler
from seq2seq.data.textfiles import DataError
from seq2seq.vocab import PAD_ID, truncate_keeping_eos

log = logging.getLogger(__name__)



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
  def up_to(cls, boundaries: Sequence[int], longest: int) -> "LengthBuckets":
    """`boundaries` below `longest`, then `longest`."""
    return cls(tuple(sorted({b for b in boundaries if b < longest} | {longest})))

  @classmethod
  def from_config(cls, data_cfg: DataConfig, longest: int) -> "LengthBuckets":
    return cls.up_to(data_cfg.bucket_boundaries, longest)

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
    self.base = corpus  # the pairs as given
    # The epoch whose segmentation self.corpus holds (with a sampler), else None.
    self.corpus_epoch: int | None = None
    self._use(corpus, announce=True)

  def corpus_for(self, epoch: int) -> EncodedCorpus:
    """The pairs that epoch `epoch` draws its batches from: the given corpus, or with a
    sampler its segmentation for that epoch."""
    return self.base if self.sampler is None else self.sampler.corpus(epoch)

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
    self.bucket_of = bucket_of
    self.buckets = {int(b): np.flatnonzero(keep & (bucket_of == b))
                    for b in self.lengths.boundaries}
    self.buckets = {b: idx for b, idx in self.buckets.items() if len(idx)}

  def epoch_batches(self, epoch: int) -> list:
    """One epoch's batches in training order: index arrays of pairs, or with packing,
    lists of rows (each an index array of the pairs packed in it). The batches index
    this epoch's corpus (`corpus_for`), which `make_batch` then reads: build the batches
    of one epoch before asking for the next one's."""
    if self.sampler is not None and self.corpus_epoch != epoch:
      self._use(self.corpus_for(epoch), announce=False)
      self.corpus_epoch = epoch
    rng = np.random.default_rng([self.cfg.seed, epoch])
    drawn = None  # several directions: the epoch's pairs, drawn with the temperature
    if self.corpus.direction is not None:
      drawn = multilingual.draw_epoch(self.corpus.direction, self.kept,
                                      self.cfg.temperature, rng)
    if self.cfg.pack_length:
      return self._packed_epoch(rng, drawn)
    batches = []
    for length, idx in self.buckets.items():
      rows = rows_for(length, self.cfg.max_tokens, self.num_devices)
      idx = rng.permutation(idx) if drawn is None else drawn[self.bucket_of[drawn] == length]
      batches += [idx[i:i + rows] for i in range(0, len(idx), rows)]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]

  def _packed_epoch(self, rng: np.random.Generator, drawn: np.ndarray | None = None,
                    open_rows: int = 16) -> list:
    """Packs the shuffled pairs into rows: each pair goes into the first of up to
    `open_rows` partly filled rows where both its sides fit; when none has room, the
    fullest row is closed. Rows end up nearly full: a row closes when either side is
    full (a German side runs a little longer than its English one), and first fit
    leaves gaps that no remaining pair fits."""
    length = self.cfg.pack_length
    rows: list[list[int]] = []
    open_: list[list] = []  # [pairs, src used, tgt used]
    for i in rng.permutation(self.kept) if drawn is None else drawn:
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

  def make_batch(self, idx, process: int = 0, processes: int = 1) -> Batch:
    """The batch of `idx` (an entry of `epoch_batches`), or with `processes` > 1 only rows
    [process * R / processes, (process + 1) * R / processes) of its R rows: one process's
    share of a cluster's batch (it builds nothing of the other processes' rows)."""
    if self.cfg.pack_length:
      return self._packed_batch(idx, process, processes)
    length = self.lengths.length_for(int(max(self.src_len[idx].max(), self.tgt_len[idx].max())))
    rows = rows_for(length, self.cfg.max_tokens, self.num_devices)
    mine = slice(*_share(rows, process, processes))
    src = [self.corpus.src[i] for i in idx[mine]]
    tgt = [self.corpus.tgt[i] for i in idx[mine]]
    return pad_batch(src, tgt, rows // processes, length, length)

  def _packed_batch(self, rows: list[np.ndarray], process: int = 0, processes: int = 1) -> Batch:
    """Every packed batch has the same shape `[rows_for(L), L]` (empty rows at the end)."""
    length = self.cfg.pack_length
    n = rows_for(length, self.cfg.max_tokens, self.num_devices)
    first, last = _share(n, process, processes)
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

  def templates(self, process: int = 0, processes: int = 1, epoch: int | None = None,
                index: int = 0) -> list[Batch]:
    """One all-padding batch of each shape that this epoch's batches take (one per
    length bucket holding pairs, or the one packed shape), with `make_batch`'s rows of
    `process`'s share: what a step can be compiled for before the first real batch arrives.
    With `epoch`, in the order that epoch's batches from `index` on first take them."""
    if self.cfg.pack_length:
      return [self._packed_batch([], process, processes)]
    first_use: dict[int, int] = {}
    if epoch is not None:  # (with a sampler, this indexes the epoch's segmentation)
      for i, idx in enumerate(self.epoch_batches(epoch)[index:]):
        longest = int(max(self.src_len[idx].max(), self.tgt_len[idx].max()))
        first_use.setdefault(self.lengths.length_for(longest), i)
    order = sorted(self.buckets, key=lambda length: (length not in first_use,
                                                     first_use.get(length, length)))
    out = []
    for length in order:
      rows = rows_for(length, self.cfg.max_tokens, self.num_devices)
      out.append(pad_batch([], [], rows // processes, length, length))
    return out

  def iterate(self, epoch: int = 0, index: int = 0, process: int = 0, processes: int = 1
              ) -> Iterator[tuple[int, int, Batch]]:
    """Yields (epoch, index of the next batch, batch) forever, from the given position;
    with `processes` > 1, each batch holds only the rows of `process` (see `make_batch`)."""
    while True:
      order = self.epoch_batches(epoch)
      for i in range(index, len(order)):
        yield epoch, i + 1, self.make_batch(order[i], process, processes)
      epoch, index = epoch + 1, 0


def _share(rows: int, process: int, processes: int) -> tuple[int, int]:
  """Rows [first, last) of `process` when `rows` are split evenly into `processes`."""
  if rows % processes:
    raise ValueError(f"{rows} batch rows cannot be split evenly over {processes} processes")
  return process * rows // processes, (process + 1) * rows // processes


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


def local_rows(batch: Batch, process: int, processes: int) -> Batch:
  """Rows [process * B / processes, (process + 1) * B / processes) of a batch of B rows."""
  if processes == 1:
    return batch
  first, last = _share(batch.src.shape[0], process, processes)
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
