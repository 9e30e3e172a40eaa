"""Model FLOPs counted by hand for a small architecture."""

import dataclasses

from seq2seq.config import ModelConfig
from seq2seq.model import flops


def test_forward_flops_match_a_hand_count():
  cfg = ModelConfig(vocab_size=10, d_model=4, num_heads=2, d_ff=8, encoder_layers=1,
                    decoder_layers=1)
  S, T = 3, 2
  # Encoder, per source token: q, k, v, out projections 4*D*D = 64 multiply-adds, the
  # feed-forward 2*D*F = 64, scores and weighted sum 2*S*D = 24 -> 152, x 3 tokens = 456.
  encoder = 3 * (64 + 64 + 24)
  # Decoder, per target token: self-attention projections 64 + feed-forward 64 +
  # cross-attention q and out 2*D*D = 32 + self scores/sum 2*T*D = 16 + cross
  # scores/sum 2*S*D = 24 -> 200, x 2 tokens = 400; cross keys/values 2*D*D = 32 per
  # source token, x 3 = 96.
  decoder = 2 * (64 + 64 + 32 + 16 + 24) + 3 * 32
  output = T * 4 * 10  # D x V per target token
  assert flops.forward_flops(cfg, S, T) == 2.0 * (encoder + decoder + output)
  assert flops.train_flops(cfg, S, T) == 3 * flops.forward_flops(cfg, S, T)


def test_flops_grow_with_depth_and_length():
  cfg = ModelConfig()
  deeper = dataclasses.replace(cfg, encoder_layers=6)
  assert flops.forward_flops(deeper, 20, 20) > flops.forward_flops(cfg, 20, 20)
  assert flops.forward_flops(cfg, 20, 40) > flops.forward_flops(cfg, 20, 20)
