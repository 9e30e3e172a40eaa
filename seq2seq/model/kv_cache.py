"""The decoder's self-attention cache: its layouts, beam reordering, and attention over it.

Beam search keeps each layer's keys and values as `[R, N, H, J, K]`: R hypotheses, the
positions in N blocks of J = `BLOCK`, H heads of K features. A step attends over the
blocks written so far only, one block at a time in a loop as long as the step's number
of blocks. The reorder is deferred: `reorder` only records each row's parent; the next
step's attention takes each block from the parent's row as it reads it and writes it
back, so the move and the attention share one pass over the written positions (fairseq's
`reorder_incremental_state` moves the whole cache first, then attends over it). One
layer's step at 320 rows and position 15 took 0.92 ms against 1.72 ms for the cache moved
by blocks and then attended over its whole length of 72 positions; over whole beam-5
passes the gain is smaller than this VM's drift (bench/README.md).

A search whose rows never move (greedy, sampling: one hypothesis per sentence) keeps
`[R, H, L, K]` and attends over the whole length in one product: on its batches of 64
rows, the block loop's copies and per-block products cost more than the unwritten
positions do (greedy: 2.05-2.52 s of thread time for 1,000 sentences against 1.72-1.85 s).

The cache's leaves have their rows first, as `decode.py` expects: `decode.take_rows` sets
sentences aside with their beams, whose parents are kept as beam numbers within the
sentence (a parent row's number modulo the beam size), valid after any such move.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from seq2seq.numerics import Numerics

Cache = dict[str, Any]

BLOCK = 8  # positions per block


def blocks_for(max_len: int) -> int:
  """Blocks that hold `max_len` positions."""
  return -(-max_len // BLOCK)


def init_layer(rows: int, heads: int, max_len: int, head_dim: int, dtype, moves: bool
               ) -> Cache:
  """One layer's empty keys and values: `[rows, blocks, heads, BLOCK, head_dim]` for
  rows that a search moves (`moves`, beam search), else `[rows, heads, max_len, head_dim]`."""
  shape = ((rows, blocks_for(max_len), heads, BLOCK, head_dim) if moves
           else (rows, heads, max_len, head_dim))
  zeros = jnp.zeros(shape, dtype)
  return {"k": zeros, "v": zeros}


def _own_rows(rows: int) -> jnp.ndarray:
  """Parents where none is pending: each row its own."""
  return jnp.arange(rows, dtype=jnp.int32)


def _masked_softmax(scores: jnp.ndarray, seen: jnp.ndarray) -> jnp.ndarray:
  """Softmax over the last axis of the positions `seen`. finfo.min instead of -inf for the
  others: unwritten positions' scores never become NaN."""
  return Numerics.rowwise(jax.nn.softmax,  # softmax over the positions seen
                          jnp.where(seen, scores, jnp.finfo(jnp.float32).min))


def init(layers: list[Cache]) -> Cache:
  """The whole cache: the position to write, each row's parent (pending until the next
  step reads it; a row's own number: none), and the layers' keys and values."""
  return {"index": jnp.zeros((), jnp.int32), "parents": _own_rows(layers[0]["k"].shape[0]),
          "layers": layers}


def reorder(cache: Cache, parents_R: jnp.ndarray) -> Cache:
  """The cache of each hypothesis' parent: row r becomes row `parents_R[r]` (beam search,
  after choosing its beams). Only recorded here; the next step's `attend` moves the rows."""
  return {**cache, "parents": cache["parents"][parents_R]}


def parent_rows(cache: Cache, width: int) -> jnp.ndarray | None:
  """Each row's pending parent as a row of the current batch (its sentence's first row
  plus the parent's beam number), or None where nothing can be pending (width 1)."""
  if width == 1:
    return None
  rows = cache["parents"].shape[0]
  return jnp.arange(rows, dtype=jnp.int32) // width * width + cache["parents"] % width


def stepped(cache: Cache, layers: list[Cache]) -> Cache:
  """The cache after a step wrote `layers`: the next position, no parent pending."""
  return {"index": cache["index"] + 1, "parents": _own_rows(cache["parents"].shape[0]),
          "layers": layers}


def attend(q_RHK: jnp.ndarray, k_RHK: jnp.ndarray, v_RHK: jnp.ndarray, layer: Cache,
           index: jnp.ndarray, parents_R: jnp.ndarray | None) -> tuple[jnp.ndarray, Cache]:
  """One position's self-attention: writes its key and value (`k_RHK`, `v_RHK`) at
  `index`, after moving the positions before it to each row's parent (`parents_R`; None
  for the whole layout, whose rows never move), and attends the (scaled) queries over
  positions 0..index. Returns the heads' outputs `[R, H, K]` and the layer's cache (in
  `init_layer`'s layout). Its products take float32 operands whatever the model's
  `matmul_dtype`: one query per row makes them matrix-vector products, whose operands,
  new at every step, bfloat16 would convert every step (6-7x slower than float32 on an
  AMD EPYC with AVX-512 BF16, `speed_probe.layer_product_seconds`)."""
  if (layer["k"].ndim == 4) != (parents_R is None):
    raise ValueError("kv_cache.attend: rows move (parents_R) in the blocked layout only, "
                     "and always do there (init_layer's moves)")
  if parents_R is None:
    return _attend_whole(q_RHK, k_RHK, v_RHK, layer, index)
  rows, blocks, heads, _, head_dim = layer["k"].shape
  written = index // BLOCK + 1  # blocks holding positions 0..index
  new_1J = (jnp.arange(BLOCK) == index % BLOCK)[None, None, :, None]

  def read(x, new_RHK, b):
    """Block b of every row as this step sees it, and the cache holding it."""
    block = jnp.where(new_1J & (b == written - 1), new_RHK[:, :, None, :].astype(x.dtype),
                      x[parents_R, b])
    return block, jax.lax.dynamic_update_index_in_dim(x, block, b, axis=1)

  def score(b, carry):
    keys, scores = carry
    block, keys = read(keys, k_RHK, b)
    part = jnp.einsum("rhk,rhjk->rhj", q_RHK, block).astype(jnp.float32)
    return keys, jax.lax.dynamic_update_index_in_dim(scores, part, b, axis=2)

  scores = jnp.zeros((rows, heads, blocks, BLOCK), jnp.float32)
  keys, scores = jax.lax.fori_loop(0, written, score, (layer["k"], scores))
  probs = _masked_softmax(scores.reshape(rows, heads, -1), jnp.arange(blocks * BLOCK) <= index)
  probs = probs.reshape(scores.shape).astype(layer["v"].dtype)

  def weigh(b, carry):
    values, out = carry
    block, values = read(values, v_RHK, b)
    p = jax.lax.dynamic_index_in_dim(probs, b, axis=2, keepdims=False)
    return values, out + jnp.einsum("rhj,rhjk->rhk", p, block)

  out = jnp.zeros((rows, heads, head_dim), layer["v"].dtype)
  values, out = jax.lax.fori_loop(0, written, weigh, (layer["v"], out))
  return out, {"k": keys, "v": values}


def _attend_whole(q_RHK, k_RHK, v_RHK, layer: Cache, index) -> tuple[jnp.ndarray, Cache]:
  """`attend` for the `[R, H, L, K]` layout: the new position written in place, one
  product over the whole length, the positions after index masked."""
  def write(x, new_RHK):
    return jax.lax.dynamic_update_slice_in_dim(x, new_RHK[:, :, None].astype(x.dtype), index,
                                               axis=2)
  keys, values = write(layer["k"], k_RHK), write(layer["v"], v_RHK)
  scores = jnp.einsum("rhk,rhlk->rhl", q_RHK, keys).astype(jnp.float32)
  probs = _masked_softmax(scores, jnp.arange(keys.shape[2]) <= index)
  out = jnp.einsum("rhl,rhlk->rhk", probs.astype(values.dtype), values)
  return out, {"k": keys, "v": values}
