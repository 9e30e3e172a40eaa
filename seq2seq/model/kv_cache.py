"""The decoder's self-attention cache: its layouts, beam reordering, and attention over it.

Beam search keeps each layer's keys and values as `[R, L, H, K]`: R hypotheses, L
positions (whole blocks of J = `BLOCK`), H heads of K features, and never moves them.
Each row writes its own position's key and value in place; which row holds each earlier
position of a hypothesis is in the cache's `origins` (`[R, L]`, a beam number within
the sentence for every position). Reordering the beams reorders that table only, L
integers per row (`reorder`); a step reads each position from the row that holds it,
one block of J positions at a time, over the blocks written so far. An ancestor
table, in other words, rather than taking every written block from the parent's row and
writing it back at each step (fairseq's `reorder_incremental_state` moves the whole
cache), moves that cost a large share of beam 5's time (docs/experiments.md, Decoding:
`profile_decode.py`).

A search whose rows never move (greedy, sampling: one hypothesis per sentence) keeps
`[R, H, L, K]` and attends over the whole length in one product: on its batches of 64
rows, a loop over blocks costs more than the unwritten positions do
(docs/experiments.md, "Figures behind the code").

The cache's leaves have their rows first, as `decode.py` expects: `decode.take_rows` sets
sentences aside with their beams, and the origins stay valid, being beam numbers within
the sentence.
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
  """One layer's empty keys and values: `[rows, L, heads, head_dim]` (L: `max_len` in
  whole blocks) for rows that a search reorders (`moves`, beam search), else
  `[rows, heads, max_len, head_dim]`."""
  shape = ((rows, blocks_for(max_len) * BLOCK, heads, head_dim) if moves
           else (rows, heads, max_len, head_dim))
  zeros = jnp.zeros(shape, dtype)
  return {"k": zeros, "v": zeros}


def _masked_softmax(scores: jnp.ndarray, seen: jnp.ndarray) -> jnp.ndarray:
  """Softmax over the last axis of the positions `seen`. finfo.min instead of -inf for the
  others: unwritten positions' scores never become NaN."""
  return Numerics.rowwise(jax.nn.softmax,  # softmax over the positions seen
                          jnp.where(seen, scores, jnp.finfo(jnp.float32).min))


def init(layers: list[Cache], moves: bool) -> Cache:
  """The whole cache: the position to write, the layers' keys and values, and for rows
  that move (`moves`) the beam whose row holds each position of each row (`origins`;
  a position is set when it is written, so none is read before)."""
  origins = jnp.zeros(layers[0]["k"].shape[:2], jnp.int32) if moves else None
  return {"index": jnp.zeros((), jnp.int32), "origins": origins, "layers": layers}


def reorder(cache: Cache, parents_R: jnp.ndarray) -> Cache:
  """The cache of each hypothesis' parent: row r takes row `parents_R[r]`'s history (beam
  search, after choosing its beams). Only the origins move; the keys and values stay."""
  return {**cache, "origins": cache["origins"][parents_R]}


def _own_beams(rows: int, width: int) -> jnp.ndarray:
  """Each row's beam number within its sentence, `[R]`."""
  return jnp.arange(rows, dtype=jnp.int32) % width


def claim(cache: Cache, width: int) -> Cache:
  """The cache with each row's own beam (its row number modulo `width`) holding the
  position about to be written; unchanged where rows never move."""
  if cache["origins"] is None:
    return cache
  own_R = _own_beams(cache["origins"].shape[0], width)
  return {**cache, "origins": cache["origins"].at[:, cache["index"]].set(own_R)}


def holding_rows(cache: Cache, width: int) -> jnp.ndarray | None:
  """For every row and position, the row of the current batch that holds it, `[R, L]`
  (its sentence's first row plus the origin's beam number); None where rows never move."""
  if cache["origins"] is None:
    return None
  rows = cache["origins"].shape[0]
  first_R1 = (jnp.arange(rows, dtype=jnp.int32) // width * width)[:, None]
  return first_R1 + cache["origins"]


def stepped(cache: Cache, layers: list[Cache]) -> Cache:
  """The cache after a step wrote `layers`: the next position."""
  return {**cache, "index": cache["index"] + 1, "layers": layers}


def settled(cache: Cache, width: int) -> Cache:
  """The cache with every position moved into the row of its hypothesis and each row its
  own origin: what the origins stand for, made physical (a whole reorder, for tests and
  benchmarks)."""
  holders_RL = holding_rows(cache, width)
  if holders_RL is None:
    return cache
  positions_1L = jnp.arange(holders_RL.shape[1])[None, :]
  layers = [{name: x[holders_RL, positions_1L] for name, x in layer.items()}
            for layer in cache["layers"]]
  own_RL = jnp.broadcast_to(_own_beams(holders_RL.shape[0], width)[:, None],
                            holders_RL.shape)
  return {**cache, "origins": own_RL, "layers": layers}


def attend(q_RHK: jnp.ndarray, k_RHK: jnp.ndarray, v_RHK: jnp.ndarray, layer: Cache,
           index: jnp.ndarray, holders_RL: jnp.ndarray | None) -> tuple[jnp.ndarray, Cache]:
  """One position's self-attention: writes its key and value (`k_RHK`, `v_RHK`) at
  `index` of each row, and attends the (scaled) queries over positions 0..index, each
  read from the row that holds it (`holders_RL`, `holding_rows`; None for the layout
  whose rows never move). Returns the heads' outputs `[R, H, K]` and the layer's cache
  (in `init_layer`'s layout). Its products take float32 operands whatever the model's
  `matmul_dtype`: one query per row makes them matrix-vector products, whose operands,
  new at every step, bfloat16 would convert every step (slower than float32,
  `speed_probe.layer_product_seconds`; docs/experiments.md, "Figures behind the code")."""
  if holders_RL is None:
    return _attend_whole(q_RHK, k_RHK, v_RHK, layer, index)
  rows, length, heads, head_dim = layer["k"].shape
  write = lambda x, new_RHK: jax.lax.dynamic_update_slice_in_dim(
      x, new_RHK[:, None].astype(x.dtype), index, axis=1)
  keys, values = write(layer["k"], k_RHK), write(layer["v"], v_RHK)
  written = index // BLOCK + 1  # blocks holding positions 0..index
  blocks = length // BLOCK

  def read(x, b):
    """Block b of every row's positions, each from the row that holds it: `[R, J, H, K]`."""
    holders_RJ = jax.lax.dynamic_slice_in_dim(holders_RL, b * BLOCK, BLOCK, axis=1)
    return x[holders_RJ, b * BLOCK + jnp.arange(BLOCK)[None, :]]

  def score(b, scores):
    part = jnp.einsum("rhk,rjhk->rhj", q_RHK, read(keys, b)).astype(jnp.float32)
    return jax.lax.dynamic_update_index_in_dim(scores, part, b, axis=2)

  scores = jax.lax.fori_loop(0, written, score,
                             jnp.zeros((rows, heads, blocks, BLOCK), jnp.float32))
  probs = _masked_softmax(scores.reshape(rows, heads, -1), jnp.arange(length) <= index)
  probs = probs.reshape(scores.shape).astype(values.dtype)

  def weigh(b, out):
    p = jax.lax.dynamic_index_in_dim(probs, b, axis=2, keepdims=False)
    return out + jnp.einsum("rhj,rjhk->rhk", p, read(values, b))

  out = jax.lax.fori_loop(0, written, weigh, jnp.zeros((rows, heads, head_dim), values.dtype))
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
