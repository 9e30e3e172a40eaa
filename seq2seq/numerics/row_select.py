"""Per-row selection over long rows (a batch's logits over the vocabulary), shaped for
XLA:CPU: the arg-max of greedy search and the top-k of beam search.

XLA:CPU runs `argmax` as a (value, index) reduction and `top_k` as a sort-like scan, each
element by element on one thread; both here split each row into groups and work with
plain max / min reductions and a top-k over a few groups (docs/experiments.md, Decoding).
"""

import jax
import jax.numpy as jnp


def _group_size(n: int, target: int = 64) -> int:
  """A divisor of n near `target` (so rows split into groups without padding), else target."""
  divisors = [g for g in range(target // 2, 2 * target + 1) if n % g == 0]
  return min(divisors, key=lambda g: abs(g - target)) if divisors else target


def argmax_rows(x_RN: jnp.ndarray) -> jnp.ndarray:
  """`jnp.argmax(x_RN, axis=-1)` as int32 for long rows (`max_argmax_rows`)."""
  return max_argmax_rows(x_RN)[1]


def max_argmax_rows(x_RN: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Each row's maximum, and its arg-max as int32 for long rows: the first index of the
  maximum. XLA:CPU runs argmax as a (value, index) reduction element by element, a
  quarter of a greedy step in a profile; here every pass is a plain max or min: the
  row's maximum over group maxima, the first group holding it, the first position in
  that group (docs/experiments.md, Decoding). A row holding NaN gives some index
  within the row."""
  rows, n = x_RN.shape
  group = _group_size(n, 16)
  num_groups = -(-n // group)
  if num_groups * group != n:
    x_RN = jnp.pad(x_RN, ((0, 0), (0, num_groups * group - n)), constant_values=-jnp.inf)
  x_RGg = x_RN.reshape(rows, num_groups, group)
  max_RG = jnp.max(x_RGg, axis=-1)
  max_R1 = jnp.max(max_RG, axis=-1, keepdims=True)
  first_R = jnp.min(jnp.where(max_RG == max_R1, jnp.arange(num_groups, dtype=jnp.int32),
                              num_groups), axis=-1)
  first_R = jnp.minimum(first_R, num_groups - 1)
  block_Rg = jnp.take_along_axis(x_RGg, first_R[:, None, None], axis=1,
                                 mode="promise_in_bounds")[:, 0]
  within_R = jnp.min(jnp.where(block_Rg == max_R1, jnp.arange(group, dtype=jnp.int32), group),
                     axis=-1)
  return max_R1[:, 0], jnp.minimum(first_R * group + within_R, n - 1)


def logsumexp_rows(x_RN: jnp.ndarray, max_R: jnp.ndarray) -> jnp.ndarray:
  """`jax.nn.logsumexp(x_RN, axis=-1)` given each row's maximum, as a search's selection
  finds it anyway: one pass over the rows instead of two (the same formula, so the same
  result)."""
  return max_R + jnp.log(jnp.sum(jnp.exp(x_RN - max_R[:, None]), axis=-1))


def top_k_rows(x_RN: jnp.ndarray, k: int) -> tuple[jnp.ndarray, jnp.ndarray]:
  """`lax.top_k` over the last axis of `[R, N]`, exact (up to ties), for long rows and
  small k (`max_top_k_rows`)."""
  return max_top_k_rows(x_RN, k)[1:]


def max_top_k_rows(x_RN: jnp.ndarray, k: int
                   ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
  """Each row's maximum, and `lax.top_k` over the last axis of `[R, N]`, exact (up to
  ties), for long rows and small k. The maximum comes from the group maxima, not from the
  top-k's values: read from those, XLA:CPU ran the top-k as a whole sort.

  XLA:CPU's top-k scans every row element by element on one thread (as long as the
  output layer). Instead: split each row into groups, keep the k groups with the
  largest maxima (every top-k element lies in one of them: a group outside them has k
  maxima above its own), and take the top k of those k groups only. Groups of about 64
  ran fastest (docs/experiments.md, Decoding). The k groups' candidates (640 for beam 5) are
  narrowed the same way, in groups of about 8, while that leaves more than 4k groups.
  """
  return _max_top_k(x_RN, k, 64)


def _max_top_k(x_RN: jnp.ndarray, k: int, target: int
               ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
  """`max_top_k_rows` with groups of about `target` elements."""
  rows, n = x_RN.shape
  group = _group_size(n, target)
  num_groups = -(-n // group)
  if num_groups <= 4 * k:
    return (jnp.max(x_RN, axis=-1), *jax.lax.top_k(x_RN, k))
  if num_groups * group != n:
    x_RN = jnp.pad(x_RN, ((0, 0), (0, num_groups * group - n)), constant_values=-jnp.inf)
  x_RGg = x_RN.reshape(rows, num_groups, group)
  max_RG = jnp.max(x_RGg, axis=-1)
  _, groups_Rk = jax.lax.top_k(max_RG, k)
  groups_Rk = jnp.sort(groups_Rk, axis=-1)  # candidates in index order: ties break as top_k's
  candidates = jnp.take_along_axis(x_RGg, groups_Rk[:, :, None], axis=1,
                                   mode="promise_in_bounds").reshape(rows, -1)  # no select
  _, values_Rk, pos_Rk = _max_top_k(candidates, k, 8)
  index_Rk = jnp.take_along_axis(groups_Rk, pos_Rk // group, axis=1) * group + pos_Rk % group
  return jnp.max(max_RG, axis=-1), values_Rk, index_Rk
