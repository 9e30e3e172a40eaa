"""The XLA:CPU-shaped operations behind `Numerics`: what the model computes, arranged so
that XLA:CPU computes it fast, or alike for any number of rows. Each function has the
plain JAX meaning its docstring gives:

  einsum(spec, a, b, operand_dtype)   a two-operand einsum; with operand_dtype "bfloat16"
                                      the operands are rounded, the products float32
  matmul(x, w, operand_dtype)         x @ w over the last axis, the same way
  matmul_rows(rows, operand_dtype)    the rows matmul pads a call to: alike for any batch
  rowwise(fn, x, max_rows)            fn of each row, the same for any number of rows
  transpose_product(r, perm)          r.transpose(perm) of a product, as a copy
  transposed_weights(w, dtype)        w.T rounded, as a copy computed outside a loop
  keep_mask(key, rate, shape)         a Bernoulli(1 - rate) dropout mask
  own_buffer(x, token)                identity; x and its gradient get their own buffer
  layer_norm(x, scale, offset)        hk.LayerNorm's function, with its own gradient

The tests compare each with its plain JAX meaning (tests/numerics/test_ops.py).
"""

from __future__ import annotations

import functools
import logging
import math

import jax
import jax.numpy as jnp
import numpy as np

log = logging.getLogger(__name__)


def _fmix32(h: jnp.ndarray) -> jnp.ndarray:
  """MurmurHash3's 32-bit finaliser: each input bit flips each output bit with p ~ 1/2."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def key_words(key: jax.Array) -> jnp.ndarray:
  """The uint32 words of a PRNG key, raw (`PRNGKey`) or typed (`jax.random.key`)."""
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    key = jax.random.key_data(key)
  return key.astype(jnp.uint32).reshape(-1)


def keep_mask(key: jax.Array, rate, shape: tuple[int, ...]) -> jnp.ndarray:
  """Bernoulli(1 - rate) keep mask from a counter-based hash of each element's index.

  `jax.random.bernoulli` runs threefry, which XLA:CPU executes as a loop of separate
  element-wise kernels (a large share of a `compact` training step in
  bench/profile_train_step.py). Two
  rounds of MurmurHash3's finaliser over the element index, keyed by the two words of
  `key`, are one element-wise expression that XLA fuses into the dropout's multiply.
  Deterministic in `key`; masks of different keys, and of neighbouring elements, are
  uncorrelated (tests/numerics/test_ops.py). `rate` is a float or a traced scalar (a rate
  scaled by the dropout ramp).
  """
  words = key_words(key)
  index = jax.lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
  bits = _fmix32(_fmix32(index * jnp.uint32(0x9E3779B9) + words[0]) ^ words[1])
  if isinstance(rate, (int, float)):
    return bits >= np.uint32(min(round(rate * 2.0**32), 2**32 - 1))
  # float32 holds no integer between 2**32 - 256 and 2**32; clip below the overflow
  threshold = jnp.minimum(jnp.asarray(rate, jnp.float32) * 2.0**32, 2.0**32 - 256)
  return bits >= threshold.astype(jnp.uint32)


def _indices(spec: str) -> tuple[str, str, str]:
  """The index letters of an explicit two-operand einsum: ("ab", "bc", "ac") for "ab,bc->ac"."""
  operands, out = spec.split("->")
  ia, ib = operands.split(",")
  return ia, ib, out


def einsum(spec: str, a: jnp.ndarray, b: jnp.ndarray, operand_dtype: str | None = None
           ) -> jnp.ndarray:
  """`jnp.einsum(spec, a, b)` in `a`'s dtype. With `operand_dtype` "bfloat16" the operands
  are rounded to it and the products accumulate in float32, forward and backward (each
  backward matmul takes the float32 cotangent rounded too): CPUs with AMX or AVX-512 BF16
  run such matmuls faster than float32 ones, while XLA:CPU runs bfloat16 x
  bfloat16 -> bfloat16 ones slower than float32. None or "float32": a plain einsum.
  `spec` is explicit ("ab,bc->ac"), and every index of an operand appears in the other
  one or in the output (so its gradient is an einsum too)."""
  if operand_dtype in (None, "float32"):
    return jnp.einsum(spec, a, b.astype(a.dtype))
  ia, ib, out = _indices(spec)
  for own, other in ((ia, ib), (ib, ia)):
    if set(own) - set(other) - set(out):
      raise ValueError(f"einsum({spec!r}): an index of {own!r} is summed away "
                       "within that operand; its gradient is not one einsum")
  dtype = jnp.dtype(operand_dtype)
  return _rounded_einsum(spec, dtype, a.dtype, b.dtype, a, b).astype(a.dtype)


# XLA:CPU (jaxlib 0.10) runs small matmuls and row reductions with other kernels than
# large ones, which round differently: a sentence's translation would depend on its batch.
# float32: calls of fewer than 64 rows take other kernels, so they are padded to 64 with
# zero rows. bfloat16 operands on a CPU with AMX: the kernels work in blocks of 16 to 128
# rows and compute a block's last row or two with another kernel when that is all the
# block holds, so in a call of 16k + 1 or 16k + 2 rows the last one or two differ from the
# same rows in a larger call. Padded to a multiple of 4 rows, every block keeps 4 or more:
# every row count then agrees (tests/numerics/test_ops.py sweeps them), and a lone
# sentence decodes nearly as fast as with 2 rows, faster than with a multiple of 8
# (bench/lone_sentence.py; docs/experiments.md).
MATMUL_ROWS = {"float32": 64, "bfloat16": 4}
MATMUL_ROW_MULTIPLE = {"float32": 1, "bfloat16": 4}
REDUCTION_ELEMENTS = 4096
# At 4,096 rows or more, whatever their width, XLA:CPU fuses a layer norm's reductions into
# one loop, which rounds otherwise than the smaller calls' separate reductions (a sentence
# searched in a batch of 64 padded to 64 pieces, with bfloat16 operands, translated
# otherwise than alone). Larger layer norms run in blocks of this many rows.
LAYER_NORM_ROWS = 2048


def matmul_rows(rows: int, operand_dtype: str | None = None) -> int:
  """The rows `matmul` multiplies for a call of `rows`: at least `MATMUL_ROWS`, a whole
  multiple of `MATMUL_ROW_MULTIPLE` (the call's own rows, then zero rows)."""
  dtype = operand_dtype or "float32"
  least, multiple = MATMUL_ROWS.get(dtype, 1), MATMUL_ROW_MULTIPLE.get(dtype, 1)
  return max(least, -(-rows // multiple) * multiple)


def matmul(x: jnp.ndarray, w: jnp.ndarray, operand_dtype: str | None = None) -> jnp.ndarray:
  """`x @ w` for `x` `[..., K]` and a matrix `w` `[K, N]`, as `einsum`: one 2-D matmul
  over the flattened leading axes, of `matmul_rows` rows, so that a row's product does
  not depend on the rows beside it."""
  dtype = operand_dtype or "float32"
  x_MK = x.reshape(-1, x.shape[-1])
  rows = x_MK.shape[0]
  padded = matmul_rows(rows, dtype)
  if padded != rows:
    x_MK = jnp.pad(x_MK, ((0, padded - rows), (0, 0)))
    return matmul(x_MK, w, operand_dtype)[:rows].reshape(*x.shape[:-1], w.shape[-1])
  if dtype == "float32":
    return x @ w.astype(x.dtype)
  return einsum("mk,kn->mn", x_MK, w, operand_dtype).reshape(*x.shape[:-1], w.shape[-1])


def rowwise(fn, x: jnp.ndarray, max_rows: int | None = None) -> jnp.ndarray:
  """`fn(x)` for a function of each row (last axis) of `x`, e.g. a softmax, computed over
  at least `REDUCTION_ELEMENTS` elements: a row's result does not depend on the rows.
  With `max_rows`, a larger call computes `fn` on blocks of that many rows (the last one
  padded), one after another in a loop."""
  d = x.shape[-1]
  rows, least = math.prod(x.shape[:-1]), -(-REDUCTION_ELEMENTS // d)
  x_ND = x.reshape(rows, d)
  if max_rows is not None and rows > max_rows:
    size = max(max_rows, least)
    blocks = -(-rows // size)
    x_ND = jnp.pad(x_ND, ((0, blocks * size - rows), (0, 0))).reshape(blocks, size, d)
    return jax.lax.map(fn, x_ND).reshape(blocks * size, d)[:rows].reshape(x.shape)
  if rows >= least:
    return fn(x)
  return fn(jnp.pad(x_ND, ((0, least - rows), (0, 0))))[:rows].reshape(x.shape)


def _dot_axes(ia: str, ib: str, out: str) -> tuple[list, list, list, list]:
  """The batch, free-in-`a`, free-in-`b` and contracted indices of `ia,ib->out`."""
  batch = [c for c in out if c in ia and c in ib]
  free_a = [c for c in out if c in ia and c not in ib]
  free_b = [c for c in out if c in ib and c not in ia]
  con = [c for c in ia if c in ib and c not in out]
  return batch, free_a, free_b, con


def _transposed_elements(ia: str, ib: str, out: str, size: dict) -> int:
  """How many elements `_rounded_dot` moves to bring `ia,ib->out` into row-major
  `[batch, M, K] x [batch, K, N]` form with `a` on the left: each operand whose axes
  are out of that order, and the product if its `[batch, M, N]` order is not `out`'s."""
  batch, free_a, free_b, con = _dot_axes(ia, ib, out)
  moved = 0
  for axes, order in ((ia, batch + free_a + con), (ib, batch + con + free_b),
                      (batch + free_a + free_b, list(out))):
    if list(axes) != order:
      moved += math.prod(size[c] for c in axes)
  return moved


def _rounded_dot(spec: str, a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
  """`einsum(spec, a, b)` for operands already rounded, with float32 products, as one
  batched matmul `[batch, M, K] x [batch, K, N]` in row-major layout.

  XLA:CPU sends only that form to its fast bfloat16 kernels; any other (a contraction
  over the first axis, a transposed operand) it converts to float32 and runs slower than
  float32 itself. It also folds a plain transpose into the matmul's
  dimensions or layout, so there an operand that needs one is copied behind a fusion
  boundary. Of the two operand orders it takes the one that copies fewer elements: for a
  weight gradient (a contraction over the tokens) it transposes the smaller operand and
  the weight-sized product, not a `[tokens, vocab]` cotangent.
  """
  ia, ib, out = _indices(spec)
  size = {**dict(zip(ia, a.shape)), **dict(zip(ib, b.shape))}
  if _transposed_elements(ib, ia, out, size) < _transposed_elements(ia, ib, out, size):
    a, b, ia, ib = b, a, ib, ia
  batch, free_a, free_b, con = _dot_axes(ia, ib, out)
  token = a.reshape(-1)[0].astype(jnp.float32)  # never NaN for XLA to see: see own_buffer

  def arrange(x, axes, order, rows, cols):
    perm = [axes.index(c) for c in order]
    if perm != sorted(perm):
      x = x.transpose(perm)
      if jax.default_backend() == "cpu":
        x = _fusion_boundary(x, token)
    n = lambda cs: math.prod(size[c] for c in cs)
    return x.reshape(n(batch), n(rows), n(cols))

  a3 = arrange(a, ia, batch + free_a + con, free_a, con)
  b3 = arrange(b, ib, batch + con + free_b, con, free_b)
  r = jax.lax.dot_general(a3, b3, (((2,), (1,)), ((0,), (0,))),
                          preferred_element_type=jnp.float32)
  order = batch + free_a + free_b
  r = r.reshape([size[c] for c in order])
  perm = [order.index(c) for c in out]
  return r if perm == sorted(perm) else transpose_product(r, perm)


def transpose_product(r: jnp.ndarray, perm) -> jnp.ndarray:
  """`r.transpose(perm)` of a matmul's product `r`, as a copy: on the CPU behind a fusion
  boundary, as XLA would otherwise make the transpose the product's layout, or swap the
  product's operands into a contraction over their first axis, neither of which its fast
  bfloat16 kernels take."""
  if jax.default_backend() == "cpu":
    r = _fusion_boundary(r, r.reshape(-1)[0].astype(jnp.float32))
  return r.transpose(perm)


def transposed_weights(w: jnp.ndarray, operand_dtype: str | None = None) -> jnp.ndarray:
  """`w.T` in `operand_dtype`, a copy that depends on `w` only: inside a loop (a decoding
  step) XLA makes it once, before the loop, not at every step; and `matmul` with it takes
  one form for any number of rows (no operand for `_rounded_dot` to transpose)."""
  w = w.astype(operand_dtype or w.dtype).T
  if jax.default_backend() == "cpu":
    w = _fusion_boundary(w, w.reshape(-1)[0].astype(jnp.float32))
  return w


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _rounded_einsum(spec, dtype, a_dtype, b_dtype, a, b):
  return _rounded_einsum_fwd(spec, dtype, a_dtype, b_dtype, a, b)[0]


def _rounded_einsum_fwd(spec, dtype, a_dtype, b_dtype, a, b):
  a_r, b_r = a.astype(dtype), b.astype(dtype)
  return _rounded_dot(spec, a_r, b_r), (a_r, b_r)


def _rounded_einsum_bwd(spec, dtype, a_dtype, b_dtype, residuals, g):
  a_r, b_r = residuals
  ia, ib, out = _indices(spec)
  g_r = g.astype(dtype)
  da = _rounded_dot(f"{out},{ib}->{ia}", g_r, b_r)
  db = _rounded_dot(f"{out},{ia}->{ib}", g_r, a_r)
  return da.astype(a_dtype), db.astype(b_dtype)


_rounded_einsum.defvjp(_rounded_einsum_fwd, _rounded_einsum_bwd)


def _fusion_boundary(x: jnp.ndarray, token: jnp.ndarray) -> jnp.ndarray:
  """`x`, passed through a conditional: XLA fuses nothing across it. `token` is a float
  scalar that XLA cannot see is never NaN, so it cannot remove the conditional; the
  second branch is never taken."""
  return jax.lax.cond(token == token, lambda v: v, lambda v: v + 0, x)


@jax.custom_vjp
def own_buffer(x: jnp.ndarray, token: jnp.ndarray) -> jnp.ndarray:
  """Identity that makes XLA:CPU compute `x`, and its gradient, into a buffer.

  XLA:CPU fuses element-wise producers into every consumer. Along the residual stream
  that fuses the gradient contributions of all later layers into each layer's consumers
  (one fusion of 87 inputs in `compact`), including the transposes that feed the
  weight-gradient matmuls, which then recompute it with strided reads
  (bench/profile_train_step.py). `lax.optimization_barrier` does not stop this (XLA:CPU removes
  barriers before fusion); a conditional does. `token`: any replicated float scalar
  (a conditional on a sharded value would need a collective).
  """
  return _fusion_boundary(x, token)


def _own_buffer_fwd(x, token):
  return _fusion_boundary(x, token), token


def _own_buffer_bwd(token, g):
  return _fusion_boundary(g, token), None


own_buffer.defvjp(_own_buffer_fwd, _own_buffer_bwd)


LAYER_NORM_EPSILON = 1e-5  # hk.LayerNorm's default


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def layer_norm(x: jnp.ndarray, scale: jnp.ndarray, offset: jnp.ndarray,
               epsilon: float = LAYER_NORM_EPSILON) -> jnp.ndarray:
  """`hk.LayerNorm` over the last axis of `x`, with a hand-written gradient.

  The gradient's two sums over the features that carry `scale`, of `g * scale` and
  `g * scale * x_hat`, are matrix-vector products with `scale` here. Left to autodiff,
  XLA:CPU feeds them to YNNPACK reductions that take only materialised operands, so it
  writes `scale` broadcast to the activations' shape for every layer norm, a share of the
  `compact` step (bench/profile_train_step.py).
  """
  return _layer_norm_fwd(x, scale, offset, epsilon)[0]


def _layer_norm_fwd(x, scale, offset, epsilon=LAYER_NORM_EPSILON):
  mean = jnp.mean(x, axis=-1, keepdims=True)
  centred = x - mean
  rstd = jax.lax.rsqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + epsilon)
  x_hat = centred * rstd
  lead = (1,) * (x.ndim - 1)  # broadcast explicitly over the leading axes
  return x_hat * scale.reshape(lead + scale.shape) + offset.reshape(lead + offset.shape), (
      x_hat, rstd, scale)


def _layer_norm_bwd(epsilon, residuals, g):
  del epsilon  # in rstd already
  x_hat, rstd, scale = residuals
  d = x_hat.shape[-1]
  g_ND, x_hat_ND = g.reshape(-1, d), x_hat.reshape(-1, d)
  mean_g = (g_ND @ scale).reshape(rstd.shape) / d  # the features' mean of g * scale
  mean_gx = ((g_ND * x_hat_ND) @ scale).reshape(rstd.shape) / d  # ... of g * scale * x_hat
  dx = rstd * (g * scale.reshape((1,) * (g.ndim - 1) + scale.shape) - mean_g - x_hat * mean_gx)
  return dx, jnp.sum(g_ND * x_hat_ND, axis=0), jnp.sum(g_ND, axis=0)


layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)
