"""Batches of a decoding call: id sequences sorted by length, padded to their length
bucket in a power-of-two number of rows, with each batch's step limit, sampling keys and
forced prefixes; the batches searched on a few threads, results in order; forced scoring
by the same batches. Ids in, ids out: the tokenizer and the model are the caller's.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from seq2seq.config import DecodeConfig
from seq2seq.data.input_pipeline import LengthBuckets, pad_batch
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding.engine_io import PairScore, SearchSettings
from seq2seq.decoding.model_search import max_steps_for
from seq2seq.numerics import LEAST_ROWS
from seq2seq.vocab import EOS_ID, PAD_ID


def batch_rows(sentences: int, batch_size: int, row_sizes: Sequence[int] = ()) -> int:
  """Rows of a decoding batch of `sentences` inputs: the next power of two, at most
  `batch_size`. A lone sentence (translate.py on one line) then runs a small search
  (`search_jobs` pads it to 2 rows) instead of a `batch_size`-row one, at the cost of a
  few more compiled shapes (at most log2(batch_size) + 1 per length bucket). With
  `row_sizes`, the smallest that holds the batch (the server's (1, max_batch))."""
  if row_sizes:
    return min([r for r in row_sizes if r >= sentences] or [batch_size])
  return min(batch_size, 1 << max(sentences - 1, 0).bit_length())


def ordered_map(fn, jobs: Iterator, workers: int) -> Iterator:
  """fn(job) for every job, up to `workers` of them running at once on threads; results
  in the order of the jobs. The next job starts before a finished one is handed over, so
  `workers` run while the caller uses a result. A lone job (a server's batch) runs on the
  calling thread: no pool is started for it."""
  jobs = iter(jobs)
  first = next(jobs, None)
  second = next(jobs, None) if first is not None else None
  if second is None:
    if first is not None:
      yield fn(first)
    return
  jobs = itertools.chain((first, second), jobs)
  if workers == 1:
    yield from map(fn, jobs)
    return
  with ThreadPoolExecutor(workers, thread_name_prefix="seq2seq-search") as pool:
    running = collections.deque()
    try:
      for job in jobs:
        running.append(pool.submit(fn, job))
        if len(running) == workers:
          yield running.popleft().result()
      while running:
        yield running.popleft().result()
    finally:  # the caller stopped early, or a search failed: start nothing more
      for future in running:
        future.cancel()


def encode_prefixes(tokenizer: Tokenizer, prefixes: Sequence[str], rows: Sequence[int],
                    max_len: int, numbers: Sequence[int] | None = None) -> list[np.ndarray]:
  """Pieces (no EOS) of the forced prefixes of texts `rows`; a prefix must leave room.
  `numbers[k]`: the 0-based line of `rows[k]` that an error names (default: `rows[k]`)."""
  pieces = tokenizer.encode_target([prefixes[i] for i in rows])
  for k, (i, ids) in enumerate(zip(rows, pieces)):
    if len(ids) >= max_len - 1:
      line = (i if numbers is None else numbers[k]) + 1
      raise ValueError(f"line {line}: the prefix has {len(ids)} pieces; the model's "
                       f"outputs are at most {max_len - 1}")
  return [np.asarray(ids, np.int32) for ids in pieces]


def search_jobs(src_ids: Sequence[np.ndarray], settings: SearchSettings, c: DecodeConfig,
                buckets: LengthBuckets, model_max_len: int,
                key_indices: Sequence[int] | None, prefix_ids: Sequence[np.ndarray] | None,
                row_sizes: Sequence[int] = (), bias: np.ndarray | None = None
                ) -> Iterator[tuple[list[int], dict]]:
  """(input indices, the search's array arguments) of each batch of `settings.batch_size`
  inputs at most, shortest first (`c`: the run's output limits): sources padded to their length bucket in `batch_rows` rows, with the batch's step
  limit, sampling keys, forced prefixes and the logits' bias (`model_search.search`)."""
  sampling = settings.sampling
  if sampling is not None and len(src_ids):
    base = jax.random.PRNGKey(sampling.seed)
    keys = sampling_keys(base, np.arange(len(src_ids)) if key_indices is None
                         else np.asarray(key_indices))
  order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
  for start in range(0, len(order), settings.batch_size):
    chunk = order[start:start + settings.batch_size]
    length = buckets.length_for(max(len(src_ids[i]) for i in chunk))
    rows = max(LEAST_ROWS, batch_rows(len(chunk), settings.batch_size, row_sizes))
    src = np.full((rows, length), PAD_ID, np.int32)
    src[:, 0] = EOS_ID  # filler rows: a one-token source, discarded below
    for row, i in enumerate(chunk):
      src[row, :] = PAD_ID
      src[row, :len(src_ids[i])] = src_ids[i]
    max_steps = max_steps_for(length, c.max_len_a, c.max_len_b, model_max_len)
    prefix = None
    if prefix_ids is not None:
      width = buckets.length_for(max(max(len(prefix_ids[i]) for i in chunk), 1))
      prefix = np.full((rows, width), PAD_ID, np.int32)
      for row, i in enumerate(chunk):
        prefix[row, :len(prefix_ids[i])] = prefix_ids[i]
      max_steps = max(max_steps, min(model_max_len, width + c.max_len_b))
    keys_B = None
    if sampling is not None:
      key_rows = np.zeros(rows, np.int32)  # filler rows reuse a key; discarded
      key_rows[:len(chunk)] = chunk
      keys_B = keys[key_rows]
    args = dict(src_BS=src, max_steps=max_steps, keys_B=keys_B, prefix_BP=prefix)
    if bias is not None:  # only then: the searches of every other call stay as they were
      args["bias_V"] = bias
    yield chunk, args


def sampling_keys(base: jax.Array, index: np.ndarray) -> jax.Array:
  """One key per input: fold_in(base, i) for an index i; for a pair (i, j), sentence j of
  text i, the same for j = 0 and fold_in(fold_in(base, i), j) for the text's later ones."""
  index = jnp.asarray(index, jnp.int32).reshape(len(index), -1)

  def key(ij):
    k = jax.random.fold_in(base, ij[0])
    if ij.shape[0] == 1:
      return k
    return jnp.where(ij[1] > 0, jax.random.fold_in(k, ij[1]), k)
  return jax.vmap(key)(index)


def forced_scores(logprob_fn, src_ids: Sequence[np.ndarray], tgt_ids: Sequence[np.ndarray],
                  rows: int, buckets: LengthBuckets) -> list[PairScore]:
  """`logprob_fn(src, tgt)` over the padded batches of `pair_batches`."""
  results: list = [None] * len(src_ids)
  for chunk, src_BS, tgt_BT in pair_batches(src_ids, tgt_ids, rows, buckets):
    logprob = np.asarray(logprob_fn(src_BS, tgt_BT))
    for row, i in enumerate(chunk):
      results[i] = PairScore(float(logprob[row]), len(tgt_ids[i]))
  return results


def bound_search(search_fn, params, settings: SearchSettings, c: DecodeConfig):
  """The jitted search (or its `.lower`) with the static settings bound (the call's, and
  the run's `c`): call it with one job's arguments (`search_jobs`)."""
  # The seed is in the keys; a compiled search serves every seed.
  sampling = settings.sampling
  unseeded = None if sampling is None else dataclasses.replace(sampling, seed=0)
  return functools.partial(search_fn, params, beam_size=settings.beam_size,
                           alpha=settings.alpha, max_len_a=c.max_len_a, max_len_b=c.max_len_b,
                           sampling=unseeded,
                           nbest=min(max(settings.nbest, 1), settings.beam_size),
                           min_rows=c.min_rows, beam_stop=c.beam_stop)


def pair_batches(src_ids: Sequence[np.ndarray], tgt_ids: Sequence[np.ndarray], rows: int,
                 buckets: LengthBuckets) -> Iterator[tuple[list[int], np.ndarray, np.ndarray]]:
  """(input indices, sources `[R, S]`, targets `[R, T]`) of padded batches of pairs for a
  forced pass (scores, alignments), by length (`R`: the next power of two of the pairs,
  at most `rows`; S and T: buckets, a batch's targets all of one bucket), so that a few
  compiled shapes serve any pairs, with little padding."""
  order = sorted(range(len(src_ids)), key=lambda i: (len(tgt_ids[i]), len(src_ids[i])))
  groups: dict[int, list[int]] = {}  # by the targets' length bucket: little padding
  for i in order:
    groups.setdefault(buckets.length_for(len(tgt_ids[i])), []).append(i)
  for chunk in (group[start:start + rows] for group in groups.values()
                for start in range(0, len(group), rows)):
    batch = pad_batch([src_ids[i] for i in chunk], [tgt_ids[i] for i in chunk],
                      max(LEAST_ROWS, batch_rows(len(chunk), rows)),
                      buckets.length_for(max(len(src_ids[i]) for i in chunk)),
                      buckets.length_for(max(len(tgt_ids[i]) for i in chunk)))
    yield chunk, batch.src, batch.tgt
