"""The decoder's self-attention cache: its layout, beam reordering, and attention over it.

Each layer keeps its keys and values as `[R, N, H, J, K]`: R hypotheses, the positions in
N blocks of J = `BLOCK`, H heads of K features. A decoding step attends over the blocks
written so far only, one block at a time in a loop as long as the step's number of
blocks, and not over the cache's whole length (fixed by the longest sentence the batch
may produce): at step 12 of a 72-position cache it reads 2 blocks instead of 9.

Beam search reorders the cache lazily. `reorder` only records each row's parent; the next
step's attention takes each block from the parent's row as it reads it and writes it
back, so the move and the attention share one pass over the written positions (fairseq's
`reorder_incremental_state` moves the whole cache first, then attends over it). The
cache's leaves have their rows first, as `decode.py` expects: `decode.take_rows` sets
sentences aside with their beams, whose parents are kept as beam numbers within the
sentence (a parent row's number modulo the beam size), valid after any such move.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from seq2seq import kernels

Cache = dict[str, Any]

BLOCK = 8  # positions per block


def blocks_for(max_len: int) -> int:
  """Blocks that hold `max_len` positions."""
  return -(-max_len // BLOCK)


def init_layer(rows: int, heads: int, max_len: int, head_dim: int, dtype) -> Cache:
  """One layer's empty keys and values, `[rows, blocks, heads, BLOCK, head_dim]`."""
  zeros = jnp.zeros((rows, blocks_for(max_len), heads, BLOCK, head_dim), dtype)
  return {"k": zeros, "v": zeros}


def init(layers: list[Cache]) -> Cache:
  """The whole cache: the position to write, each row's parent (pending until the next
  step reads it; a row's own number: none), and the layers' keys and values."""
  rows = layers[0]["k"].shape[0]
  return {"index": jnp.zeros((), jnp.int32), "parents": jnp.arange(rows, dtype=jnp.int32),
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
  return {"index": cache["index"] + 1, "parents": jnp.arange(cache["parents"].shape[0],
                                                             dtype=jnp.int32),
          "layers": layers}


def attend(q_RHK: jnp.ndarray, k_RHK: jnp.ndarray, v_RHK: jnp.ndarray, layer: Cache,
           index: jnp.ndarray, parents_R: jnp.ndarray | None, matmul_dtype: str
           ) -> tuple[jnp.ndarray, Cache]:
  """One position's self-attention: writes its key and value (`k_RHK`, `v_RHK`) at
  `index`, after moving the positions before it to each row's parent (`parents_R`, or
  none), and attends the (scaled) queries over positions 0..index. Returns the heads'
  outputs `[R, H, K]` and the layer's cache."""
  rows, blocks, heads, _, head_dim = layer["k"].shape
  written = index // BLOCK + 1  # blocks holding positions 0..index
  new_1J = (jnp.arange(BLOCK) == index % BLOCK)[None, None, :, None]

  def read(x, new_RHK, b):
    """Block b of every row as this step sees it, and the cache holding it."""
    if parents_R is None:
      return jax.lax.dynamic_index_in_dim(x, b, axis=1, keepdims=False), x
    block = jnp.where(new_1J & (b == written - 1), new_RHK[:, :, None, :].astype(x.dtype),
                      x[parents_R, b])
    return block, jax.lax.dynamic_update_index_in_dim(x, block, b, axis=1)

  if parents_R is None:  # nothing moves: only the new position is written
    def write(x, new_RHK):
      return jax.lax.dynamic_update_slice(x, new_RHK[:, None, :, None, :].astype(x.dtype),
                                          (0, index // BLOCK, 0, index % BLOCK, 0))
    layer = {"k": write(layer["k"], k_RHK), "v": write(layer["v"], v_RHK)}

  def score(b, carry):
    keys, scores = carry
    block, keys = read(keys, k_RHK, b)
    part = kernels.einsum("rhk,rhjk->rhj", q_RHK, block, matmul_dtype).astype(jnp.float32)
    return keys, jax.lax.dynamic_update_index_in_dim(scores, part, b, axis=2)

  scores = jnp.zeros((rows, heads, blocks, BLOCK), jnp.float32)
  keys, scores = jax.lax.fori_loop(0, written, score, (layer["k"], scores))
  seen = (jnp.arange(blocks * BLOCK) <= index).reshape(1, 1, blocks, BLOCK)
  # finfo.min instead of -inf: the unwritten blocks' scores (zeros) never become NaN.
  scores = jnp.where(seen, scores, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(scores.reshape(rows, heads, -1), axis=-1)
  probs = probs.reshape(scores.shape).astype(layer["v"].dtype)

  def weigh(b, carry):
    values, out = carry
    block, values = read(values, v_RHK, b)
    p = jax.lax.dynamic_index_in_dim(probs, b, axis=2, keepdims=False)
    return values, out + kernels.einsum("rhj,rhjk->rhk", p, block, matmul_dtype)

  out = jnp.zeros((rows, heads, head_dim), layer["v"].dtype)
  values, out = jax.lax.fori_loop(0, written, weigh, (layer["v"], out))
  return out, {"k": keys, "v": values}
