"""Attention masks, built once from token ids.

Every mask is boolean with True = may attend, shaped to broadcast against
attention scores `[B, H, Tq, Tk]` (so `[B, 1, Tq, Tk]` or `[B, 1, 1, Tk]`).
"""

import jax
import jax.numpy as jnp

from seq2seq.vocab import PAD_ID


def padding_mask(k_ids_BS: jnp.ndarray) -> jnp.ndarray:
  """Keys that are not padding may be attended to. Returns `[B, 1, 1, S]`."""
  return (k_ids_BS != PAD_ID)[:, None, None, :]


def causal_mask(length: int) -> jnp.ndarray:
  """Position t may attend to positions <= t. Returns `[1, 1, T, T]`."""
  return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


def decoder_self_mask(tgt_ids_BT: jnp.ndarray) -> jnp.ndarray:
  """Causal and target padding mask for decoder self-attention. Returns `[B, 1, T, T]`."""
  return causal_mask(tgt_ids_BT.shape[1]) & padding_mask(tgt_ids_BT)


def segment_mask(q_segments_BT: jnp.ndarray, k_segments_BS: jnp.ndarray) -> jnp.ndarray:
  """Packed rows: a query sees keys of its own segment only; segment 0 is padding.
  Returns `[B, 1, T, S]`."""
  same = q_segments_BT[:, :, None] == k_segments_BS[:, None, :]
  return (same & (k_segments_BS != 0)[:, None, :])[:, None]


def segment_positions(segments_BT: jnp.ndarray) -> jnp.ndarray:
  """Position of each token within its segment (0 at every segment start). `[B, T]`."""
  index = jnp.broadcast_to(jnp.arange(segments_BT.shape[1]), segments_BT.shape)
  starts = jnp.concatenate([jnp.ones_like(segments_BT[:, :1], bool),
                            segments_BT[:, 1:] != segments_BT[:, :-1]], axis=1)
  return index - jax.lax.cummax(jnp.where(starts, index, 0), axis=1)
