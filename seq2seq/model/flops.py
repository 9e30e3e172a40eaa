"""Model FLOPs counted from the architecture (for throughput as a fraction of the ceiling).

Only real (non-pad) tokens count: padding is wasted work, not useful work. A matmul
with an [in, out] weight costs 2 * in * out FLOPs per token forward; training adds a
backward pass of twice the forward cost.
"""

from __future__ import annotations

from seq2seq.config import ModelConfig


def forward_flops(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
  """Forward FLOPs of one sentence pair with the given real lengths."""
  D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
  attn_proj = 4 * D * D  # q, k, v, out
  ff = 2 * D * F
  enc = cfg.encoder_layers * src_len * (attn_proj + ff + 2 * src_len * D)  # + QK^T, PV
  dec = cfg.decoder_layers * (
      tgt_len * (attn_proj + ff + 2 * D * D + 2 * tgt_len * D + 2 * src_len * D)
      + src_len * 2 * D * D)  # cross-attention keys/values are projected per source token
  output = tgt_len * D * V
  return 2.0 * (enc + dec + output)


def train_flops(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
  """Forward + backward FLOPs of one pair (backward ~ twice the forward)."""
  return 3.0 * forward_flops(cfg, src_len, tgt_len)
