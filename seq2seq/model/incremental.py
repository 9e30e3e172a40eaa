"""Decoding one position at a time: the Transformer's decoder (transformer.py) computed
for one new token per row, with a cache of what earlier positions computed.

The same functions as the teacher-forced model, in layouts that run faster on XLA:CPU
when a step has one query per row; tests/model/test_incremental.py proves each step's
logits equal to the teacher-forced model's:

- the self-attention's query, key and value projections as one `[rows, D] x [D, 3D]`
  matmul (`project_qkv`) instead of three `[D, D]` ones;
- the self-attention's keys and values in the cache of `kv_cache.py` (beam search: an
  ancestor table, so that reordering beams moves integers, not keys);
- the cross-attention's keys and values head-major, `[B, H, S, K]`, projected once per
  sentence (`init_layer`): a step contracts them in place instead of transposing all of
  them for every token, and the W beams of a sentence are W queries over its one copy;
- the tied output layer's table transposed once per search (`output_logits`).

Each function takes the modules of the teacher-forced model (a `Transformer`, its
`DecoderLayer`s and their `MultiHeadAttention`s) and runs inside the same Haiku
transform, so it reads the same parameters.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from seq2seq.model import kv_cache, masks
from seq2seq.model.layers import MultiHeadAttention, rotary
from seq2seq.numerics import Numerics

Cache = dict[str, Any]


def project_qkv(attention: MultiHeadAttention, x_BTD: jnp.ndarray,
                rotation: tuple | None = None
                ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
  """Self-attention's queries `[B, T, H, K]` and head-major keys and values `[B, H, T, K]`
  from one matmul with the three projections side by side. With `rotation`
  (`layers.rotary_tables`), queries and keys are rotated."""
  d_in = x_BTD.shape[-1]
  inner = attention.num_heads * attention.head_dim
  (wq, bq), (wk, bk), (wv, bv) = (m.params(d_in) for m in (attention.query, attention.key,
                                                            attention.value))
  w = jnp.concatenate([wq, wk, wv], axis=1)
  b = jnp.concatenate([bq, bk, bv]).astype(x_BTD.dtype)
  qkv = attention.numerics.matmul(x_BTD, w) + b.reshape((1,) * (x_BTD.ndim - 1) + b.shape)
  q, k, v = (attention._split(qkv[..., i * inner:(i + 1) * inner]) for i in range(3))
  if rotation is not None:
    q, k = rotary(q, rotation), rotary(k, rotation)
  return q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)


def self_attend(attention: MultiHeadAttention, x_R1D: jnp.ndarray, cache: dict,
                index: jnp.ndarray, holders_RL: jnp.ndarray | None,
                rotation: tuple | None = None) -> tuple[jnp.ndarray, dict]:
  """One position's self-attention over a layer's cache (`kv_cache.attend`: each
  position read from the row `holders_RL` names, if given). Returns `[R, 1, D]` and the
  cache with this position's key and value written."""
  q_R1HK, k_RH1K, v_RH1K = project_qkv(attention, x_R1D, rotation)
  out_RHK, cache = kv_cache.attend(q_R1HK[:, 0] * (attention.head_dim ** -0.5),
                                   k_RH1K[:, :, 0], v_RH1K[:, :, 0], cache, index, holders_RL)
  return attention.out(out_RHK.reshape(out_RHK.shape[0], 1, -1)), cache


def cross_keys(attention: MultiHeadAttention, memory_BSD: jnp.ndarray
               ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """The encoder's keys and values for a cross-attention, head-major `[B, H, S, K]`."""
  k, v = attention.project_kv(memory_BSD)
  return k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)


def cross_attend(attention: MultiHeadAttention, q_BTD: jnp.ndarray, k_BHSK: jnp.ndarray,
                 v_BHSK: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
  """`MultiHeadAttention.attend_heads` over head-major keys and values, with float32
  operands (a step's few queries per sentence make these products too small for
  bfloat16 to pay for converting them)."""
  einsum = attention.numerics.einsum_float32
  q_BTHK = attention._split(attention.query(q_BTD)) * (attention.head_dim ** -0.5)
  scores_BHTS = einsum("bthk,bhsk->bhts", q_BTHK, k_BHSK).astype(jnp.float32)  # q . k
  scores_BHTS = jnp.where(mask, scores_BHTS, jnp.finfo(jnp.float32).min)
  probs_BHTS = Numerics.rowwise(jax.nn.softmax, scores_BHTS).astype(v_BHSK.dtype)
  # With the output head-major, XLA:CPU runs this product as one batched matmul instead
  # of a slow strided one: the same sums as `probs @ v`, in another order of rounding.
  out_BTHK = einsum("bhts,bhsk->bhtk", probs_BHTS, v_BHSK).transpose(0, 2, 1, 3)
  return attention.out(out_BTHK.reshape(*out_BTHK.shape[:2], -1))


def init_layer(layer, memory_BSD: jnp.ndarray, max_len: int, beam_size: int
               ) -> tuple[Cache, Cache]:
  """A `DecoderLayer`'s empty self-attention cache (`kv_cache.init_layer`, `B * W` rows),
  and the encoder's keys and values `[B, H, S, K]`, once per sentence."""
  cache = kv_cache.init_layer(memory_BSD.shape[0] * beam_size, layer.cfg.num_heads, max_len,
                              layer.cfg.head_dim, memory_BSD.dtype, moves=beam_size > 1)
  cross_k, cross_v = cross_keys(layer.cross_attention, memory_BSD)
  return cache, {"k": cross_k, "v": cross_v}


def layer_step(layer, x_B1D, cache: Cache, source: Cache, index, src_mask, holders_RL=None,
               rotation=None) -> tuple[jnp.ndarray, Cache]:
  """`DecoderLayer.__call__` for one position: writes its key and value at `index` and
  attends to 0..index, each position read from the row `holders_RL` names if given
  (with `rotation`, the position's `rotary_tables`: the cached keys are stored rotated)."""
  new_cache = {}

  def attend_self(h_B1D):
    out_B1D, new_cache["layer"] = self_attend(layer.self_attention, h_B1D, cache, index,
                                              holders_RL, rotation)
    return out_B1D

  def attend_source(h_R1D):
    # The W beams of a sentence (consecutive rows) are W query positions over the
    # sentence's one copy of the encoder keys: a [W, S] attention, not W [1, S] ones.
    h_BWD = h_R1D.reshape(source["k"].shape[0], -1, h_R1D.shape[-1])
    out_BWD = cross_attend(layer.cross_attention, h_BWD, source["k"], source["v"], src_mask)
    return out_BWD.reshape(h_R1D.shape)

  x_B1D = layer.res_self(x_B1D, attend_self, None)
  x_B1D = layer.res_cross(x_B1D, attend_source, None)
  x_B1D = layer.res_ff(x_B1D, layer.feed_forward, None)
  return x_B1D, new_cache["layer"]


def init_cache(transformer, memory_BSD, src_BS, max_len: int, beam_size: int = 1
               ) -> tuple[Cache, Cache]:
  """The decoding state for `max_len` steps of `beam_size` hypotheses per sentence.

  Returns:
    cache: what each hypothesis owns, `B * W` rows (the W beams of a sentence
      consecutive): `{"index": [] int32, "origins": [B*W, L] int32, "layers": [{"k",
      "v": [B*W, L, H, K]}, ...]}`, L = `max_len` in whole blocks; with W = 1 no
      origins and `[B, H, L, K]`, L = `max_len` (`kv_cache.init_layer`). A search
      reorders the beams' histories as it chooses them (`kv_cache.reorder`: the origins
      only); the scalar index is shared.
    source: what the hypotheses of a sentence share and no search reorders, `B` rows:
      `{"mask": [B, 1, 1, S], "layers": [{"k", "v": [B, H, S, K]}, ...]}` (the encoder
      keys/values of each layer's cross-attention).
  """
  layers, source = zip(*(init_layer(layer, memory_BSD, max_len, beam_size)
                         for layer in transformer.decoder_layers))
  return (kv_cache.init(list(layers), moves=beam_size > 1),
          {"mask": masks.padding_mask(src_BS), "layers": list(source)})


def output_logits(transformer, x_B1D: jnp.ndarray) -> jnp.ndarray:
  """The output layer for a step, float32. Tied: the table as `[D, V]` in the operand
  dtype (`Numerics.transposed_weights`, made once per search instead of at every step)
  and one form of the product for any number of rows, so that a sentence's translation
  does not depend on its batch."""
  if not transformer.cfg.tied_embeddings:
    return transformer.output(x_B1D)
  numerics = transformer.numerics
  table_DV = numerics.transposed_weights(transformer.tgt_embed.table())  # table_VD.T
  logits = numerics.matmul(x_B1D, table_DV).astype(jnp.float32)  # x_B1D @ table_DV
  return transformer.with_output_bias(logits)


def decode_step(transformer, ids_B: jnp.ndarray, cache: Cache, source: Cache
                ) -> tuple[jnp.ndarray, Cache]:
  """Feeds one token per row at position `cache['index']`. Returns logits `[B, V]`
  (float32) and the updated cache; `source` is read only. Each row reads its earlier
  positions from the rows that `kv_cache.reorder` left them in (`kv_cache.holding_rows`)."""
  width = ids_B.shape[0] // source["mask"].shape[0]  # hypotheses per sentence
  cache = kv_cache.claim(cache, width)
  index, holders_BL = cache["index"], kv_cache.holding_rows(cache, width)
  ids_B1 = ids_B[:, None]
  positions_B1 = jnp.broadcast_to(index, ids_B1.shape)
  x_B1D = transformer.embed_target(ids_B1, positions_B1)
  rotation = transformer.rotation_tables(index.reshape(1, 1))  # one position for every row
  new_layers = []
  for layer, layer_cache, layer_source in zip(transformer.decoder_layers, cache["layers"],
                                              source["layers"]):
    x_B1D, layer_cache = layer_step(layer, x_B1D, layer_cache, layer_source, index,
                                    source["mask"], holders_BL, rotation)
    new_layers.append(layer_cache)
  logits_B1V = output_logits(transformer, transformer.decoder_norm(x_B1D))
  return logits_B1V[:, 0], kv_cache.stepped(cache, new_layers)
