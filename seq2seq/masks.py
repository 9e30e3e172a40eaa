"""Attention masks, built once from token ids.

Every mask is boolean with True = may attend, shaped to broadcast against
attention scores `[B, H, Tq, Tk]` (so `[B, 1, Tq, Tk]` or `[B, 1, 1, Tk]`).
"""

import jax.numpy as jnp

from seq2seq.tokenizer import PAD_ID


def padding_mask(k_ids_BS: jnp.ndarray) -> jnp.ndarray:
  """Keys that are not padding may be attended to. Returns `[B, 1, 1, S]`."""
  return (k_ids_BS != PAD_ID)[:, None, None, :]


def causal_mask(length: int) -> jnp.ndarray:
  """Position t may attend to positions <= t. Returns `[1, 1, T, T]`."""
  return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


def decoder_self_mask(tgt_ids_BT: jnp.ndarray) -> jnp.ndarray:
  """Causal and target padding mask for decoder self-attention. Returns `[B, 1, T, T]`."""
  return causal_mask(tgt_ids_BT.shape[1]) & padding_mask(tgt_ids_BT)


def cache_mask(index: jnp.ndarray, cache_len: int) -> jnp.ndarray:
  """During incremental decoding, the new token sees cache slots 0..index. Returns `[1, 1, 1, L]`."""
  return (jnp.arange(cache_len) <= index)[None, None, None, :]
