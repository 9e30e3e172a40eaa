"""The self-attention cache: a step's attention and the rows it moves, against dense NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.decoding import decode
from seq2seq.model import kv_cache

R, H, K, MAX_LEN = 6, 2, 4, 20  # 3 blocks of 8


def positions(x):
  """[R, N, H, J, K] -> [R, N * J, H, K]: the cache position by position."""
  return np.asarray(x).transpose(0, 1, 3, 2, 4).reshape(x.shape[0], -1, x.shape[2], x.shape[4])


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
@pytest.mark.parametrize("moved", [False, True])
def test_a_step_attends_over_its_parents_positions_and_its_own(index, moved):
  rng = np.random.default_rng(index)
  q, k_new, v_new = (rng.normal(size=(R, H, K)).astype(np.float32) for _ in range(3))
  parents = rng.integers(0, R, R) if moved else np.arange(R)
  layer = random_layer(moved)
  out, new = jax.jit(kv_cache.attend)(
      q, k_new, v_new, layer, jnp.int32(index), jnp.asarray(parents) if moved else None)
  if not moved:  # [R, H, L, K]: already position by position
    layer, new = ({n: x[:, :, :, None].transpose(0, 2, 1, 3, 4) for n, x in c.items()}
                  for c in (layer, new))
  keys, values = positions(layer["k"])[parents], positions(layer["v"])[parents]
  keys[:, index], values[:, index] = k_new, v_new
  np.testing.assert_allclose(np.asarray(out), dense_attention(q, keys, values, index),
                             rtol=1e-5, atol=1e-5)
  # The cache now holds exactly that: the parents' positions before index, the new one at
  # index; the blocks after index's block stay as they were.
  untouched = (index // kv_cache.BLOCK + 1) * kv_cache.BLOCK if moved else index + 1
  for name, expected in (("k", keys), ("v", values)):
    got = positions(new[name])
    np.testing.assert_array_equal(got[:, :index + 1], expected[:, :index + 1])
    np.testing.assert_array_equal(got[:, untouched:], positions(layer[name])[:, untouched:])


def test_reorders_compose_and_survive_setting_sentences_aside(layer):
  cache = kv_cache.init([layer])
  first, second = jnp.array([1, 1, 0, 5, 3, 3]), jnp.array([0, 0, 2, 4, 4, 3])
  twice = kv_cache.reorder(kv_cache.reorder(cache, first), second)
  np.testing.assert_array_equal(twice["parents"], np.asarray(first)[np.asarray(second)])
  # Beams of width 2: sentence 2 (rows 4, 5) moved to the front of a batch of one keeps
  # its rows' parents within itself.
  once = kv_cache.reorder(cache, jnp.array([1, 1, 2, 2, 5, 4]))
  np.testing.assert_array_equal(kv_cache.parent_rows(once, 2), [1, 1, 2, 2, 5, 4])
  alone = decode.take_rows(once, jnp.array([2]), 3)
  np.testing.assert_array_equal(kv_cache.parent_rows(alone, 2), [1, 0])
  assert kv_cache.parent_rows(once, 1) is None  # greedy: nothing to move
  with pytest.raises(ValueError, match="blocked layout only"):
    kv_cache.attend(*[jnp.zeros((R, H, K))] * 3, random_layer(False), jnp.int32(0),
                    jnp.arange(R))
  np.testing.assert_array_equal(kv_cache.stepped(once, [layer])["parents"], np.arange(R))
