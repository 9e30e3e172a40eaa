"""The self-attention cache: a step's attention over the rows that hold its positions, and
the reorders of beam search, against dense NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.decoding import decode
from seq2seq.model import kv_cache

R, H, K, MAX_LEN = 6, 2, 4, 20  # 3 blocks of 8


def dense_attention(q, keys, values, index):
  """Softmax attention of q `[R, H, K]` over positions 0..index of `[R, L, H, K]`."""
  scores = np.einsum("rhk,rlhk->rhl", q, keys[:, :index + 1])
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  return np.einsum("rhl,rlhk->rhk", probs, values[:, :index + 1])


def random_layer(moves: bool):
  """A layer's cache in `init_layer`'s layout, filled with random numbers."""
  rng = np.random.default_rng(0)
  shape = kv_cache.init_layer(R, H, MAX_LEN, K, jnp.float32, moves)["k"].shape
  return {"k": jnp.asarray(rng.normal(size=shape), jnp.float32),
          "v": jnp.asarray(rng.normal(size=shape), jnp.float32)}


@pytest.fixture(scope="module")
def layer():
  return random_layer(moves=True)


@pytest.mark.parametrize("index", [0, 1, 7, 8, 9, 16, 19])
@pytest.mark.parametrize("moves", [False, True])
def test_a_step_attends_over_the_rows_holding_its_positions_and_its_own(index, moves):
  rng = np.random.default_rng(index)
  q, k_new, v_new = (rng.normal(size=(R, H, K)).astype(np.float32) for _ in range(3))
  layer = random_layer(moves)
  if moves:  # [R, L, H, K], L in whole blocks (24); any row may hold an earlier position
    assert layer["k"].shape == (R, 24, H, K)
    holders = rng.integers(0, R, (R, 24))
    holders[:, index] = np.arange(R)  # each row holds its newest position
  else:  # [R, H, L, K]; each row holds its own positions
    assert layer["k"].shape == (R, H, MAX_LEN, K)
    holders = np.broadcast_to(np.arange(R)[:, None], (R, MAX_LEN))
  out, new = jax.jit(kv_cache.attend)(q, k_new, v_new, layer, jnp.int32(index),
                                      jnp.asarray(holders) if moves else None)
  if not moves:  # position by position, as the beam layout
    layer, new = ({n: x.transpose(0, 2, 1, 3) for n, x in c.items()} for c in (layer, new))
  keys, values = (np.asarray(layer[n]).copy() for n in ("k", "v"))
  keys[:, index], values[:, index] = k_new, v_new
  step_1L = np.arange(holders.shape[1])[None, :]
  np.testing.assert_allclose(
      np.asarray(out), dense_attention(q, keys[holders, step_1L], values[holders, step_1L], index),
      rtol=1e-5, atol=1e-5)
  # The cache now holds the new position in each row's own place; nothing else moved.
  for name, expected in (("k", keys), ("v", values)):
    np.testing.assert_array_equal(np.asarray(new[name]), expected)


def test_reorders_compose_and_survive_setting_sentences_aside(layer):
  assert kv_cache.init([layer], moves=False)["origins"] is None
  origins = np.arange(R * 24).reshape(R, 24) % 7
  cache = {**kv_cache.init([layer], moves=True), "origins": jnp.asarray(origins, jnp.int32)}
  first, second = jnp.array([1, 1, 0, 5, 3, 3]), jnp.array([0, 0, 2, 4, 4, 3])
  twice = kv_cache.reorder(kv_cache.reorder(cache, first), second)
  np.testing.assert_array_equal(twice["origins"], origins[np.asarray(first)][np.asarray(second)])
  # Beams of width 2: once a step has written position 0, each row holds its own; the
  # reorder hands row 4 the history of row 5 (its sentence's beam 1), and sentence 2
  # (rows 4, 5) set in front of a batch of one still reads it there.
  fresh = kv_cache.claim(kv_cache.init([layer], moves=True), 2)
  np.testing.assert_array_equal(kv_cache.holding_rows(fresh, 2)[:, 0], np.arange(R))
  once = kv_cache.reorder(fresh, jnp.array([1, 1, 2, 2, 5, 4]))
  np.testing.assert_array_equal(kv_cache.holding_rows(once, 2)[:, 0], [1, 1, 2, 2, 5, 4])
  alone = decode.take_rows(once, jnp.array([2]), 3)
  np.testing.assert_array_equal(kv_cache.holding_rows(alone, 2)[:, 0], [1, 0])
  # The next position is each row's own; the earlier one stays where the reorder put it.
  later = kv_cache.claim(kv_cache.stepped(once, [layer]), 2)
  np.testing.assert_array_equal(kv_cache.holding_rows(later, 2)[:, 1], np.arange(R))
  np.testing.assert_array_equal(kv_cache.holding_rows(later, 2)[:, 0], [1, 1, 2, 2, 5, 4])
  greedy = kv_cache.init([random_layer(False)], moves=False)
  assert kv_cache.holding_rows(greedy, 1) is None and kv_cache.claim(greedy, 1) is greedy


def test_settling_moves_each_position_into_its_hypothesis_row(layer):
  cache = kv_cache.claim(kv_cache.init([layer], moves=True), 3)
  cache = kv_cache.reorder(cache, jnp.array([2, 0, 0, 4, 4, 5]))
  holders = np.asarray(kv_cache.holding_rows(cache, 3))
  settled = kv_cache.settled(cache, 3)
  for name in ("k", "v"):
    np.testing.assert_array_equal(np.asarray(settled["layers"][0][name])[:, 0],
                                  np.asarray(layer[name])[holders[:, 0], 0])
  np.testing.assert_array_equal(kv_cache.holding_rows(settled, 3),
                                np.broadcast_to(np.arange(R)[:, None], holders.shape))
