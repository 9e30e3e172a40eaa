"""Attention masks on hand-built cases (True = may attend)."""

import jax.numpy as jnp
import numpy as np

from seq2seq.model import masks
from seq2seq.vocab import PAD_ID, UNK_ID


def test_padding_mask_hides_pad_only():
  ids = jnp.array([[5, UNK_ID, 3, PAD_ID], [7, PAD_ID, PAD_ID, PAD_ID]])
  m = masks.padding_mask(ids)
  assert m.shape == (2, 1, 1, 4)
  # <unk> is a real token, never padding (Flax's `ids > 0` would get this wrong).
  np.testing.assert_array_equal(m[:, 0, 0], [[True, True, True, False],
                                             [True, False, False, False]])


def test_causal_mask_is_lower_triangular():
  m = masks.causal_mask(3)
  assert m.shape == (1, 1, 3, 3)
  np.testing.assert_array_equal(m[0, 0], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])


def test_decoder_self_mask_combines_causal_and_padding():
  m = masks.decoder_self_mask(jnp.array([[4, 5, PAD_ID]]))
  np.testing.assert_array_equal(m[0, 0], [[1, 0, 0], [1, 1, 0], [1, 1, 0]])


def test_segment_mask_keeps_pairs_apart():
  q = jnp.array([[1, 1, 2, 0]])
  k = jnp.array([[1, 2, 2, 0, 0]])
  m = masks.segment_mask(q, k)
  assert m.shape == (1, 1, 4, 5)
  np.testing.assert_array_equal(m[0, 0], [[1, 0, 0, 0, 0],
                                          [1, 0, 0, 0, 0],
                                          [0, 1, 1, 0, 0],
                                          [0, 0, 0, 0, 0]])  # padding queries see nothing


def test_segment_positions_restart_at_every_segment():
  seg = jnp.array([[1, 1, 1, 2, 2, 3, 0, 0]])
  np.testing.assert_array_equal(masks.segment_positions(seg)[0], [0, 1, 2, 0, 1, 0, 0, 1])
