"""Per-row arg-max, top-k and log-sum-exp against JAX's own."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.decoding import decode
from seq2seq.numerics import row_select


@pytest.mark.parametrize("n,k", [(8000, 10), (1000, 6), (8001, 2), (8009, 5), (40, 4)])
def test_top_k_rows_equals_lax_top_k(n, k):
  x = jax.random.normal(jax.random.PRNGKey(n), (7, n))
  max_, values, index = row_select.max_top_k_rows(x, k)
  np.testing.assert_array_equal(np.asarray(max_), np.asarray(jnp.max(x, axis=-1)))
  ref_values, ref_index = jax.lax.top_k(x, k)
  np.testing.assert_array_equal(np.asarray(index), np.asarray(ref_index))
  np.testing.assert_array_equal(np.asarray(values), np.asarray(ref_values))


@pytest.mark.parametrize("n,k", [(8000, 10), (8000, 4), (1000, 6), (8009, 5)])
def test_top_k_rows_breaks_ties_as_lax_top_k(n, k):
  # few distinct values: whole groups tie, and the lowest index must win at every level
  rng = np.random.default_rng(n + k)
  x = jnp.asarray(rng.integers(0, 3, (9, n)).astype(np.float32))
  x = x.at[1].set(0.0).at[2, 5:].set(-1.0)
  max_, values, index = row_select.max_top_k_rows(x, k)
  ref_values, ref_index = jax.lax.top_k(x, k)
  np.testing.assert_array_equal(np.asarray(index), np.asarray(ref_index))
  np.testing.assert_array_equal(np.asarray(values), np.asarray(ref_values))
  np.testing.assert_array_equal(np.asarray(max_), np.asarray(jnp.max(x, axis=-1)))


@pytest.mark.parametrize("n", [8000, 8003, 100, 7, 1])
def test_argmax_rows_equals_the_first_maximum(n):
  rng = np.random.default_rng(n)
  x = rng.integers(0, 4, (9, n)).astype(np.float32)  # many ties: the first one wins
  x[2] = -np.inf
  x[3] = decode.NEG_INF
  x[4, -1] = 10.0  # the maximum in the last (padded) group
  np.testing.assert_array_equal(np.asarray(row_select.argmax_rows(jnp.asarray(x))),
                                np.argmax(x, axis=-1))
  np.testing.assert_array_equal(np.asarray(row_select.max_argmax_rows(jnp.asarray(x))[0]),
                                np.max(x, axis=-1))


def test_log_sum_exp_from_the_selections_maximum_is_jaxs():
  x = jax.random.normal(jax.random.PRNGKey(0), (6, 8000)) * 8.0
  for max_R in (row_select.max_argmax_rows(x)[0], row_select.max_top_k_rows(x, 10)[0]):
    np.testing.assert_array_equal(np.asarray(jax.jit(row_select.logsumexp_rows)(x, max_R)),
                                  np.asarray(jax.jit(jax.nn.logsumexp, static_argnums=1)(x, -1)))
