"""Building blocks: dense projection, embedding + positions, attention, feed-forward.

Parameters are always float32; each module casts them to the compute dtype of its
input (so `bfloat16` compute keeps float32 master weights). Layer norm and
softmax run in float32. Every matmul goes through `matmul` or `einsum`, whose operands
can be rounded to bfloat16 while the products stay float32 (`matmul_operands`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np


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
  element-wise kernels (~15 % of a `compact` training step, bench/README.md). Two
  rounds of MurmurHash3's finaliser over the element index, keyed by the two words of
  `key`, are one element-wise expression that XLA fuses into the dropout's multiply.
  Deterministic in `key`; masks of different keys, and of neighbouring elements, are
  uncorrelated (tests/test_model.py). `rate` is a float or a traced scalar (a scheduled
  rate, `scaled_dropout`).
  """
  words = key_words(key)
  index = jax.lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
  bits = _fmix32(_fmix32(index * jnp.uint32(0x9E3779B9) + words[0]) ^ words[1])
  if isinstance(rate, (int, float)):
    return bits >= np.uint32(min(round(rate * 2.0**32), 2**32 - 1))
  # float32 holds no integer between 2**32 - 256 and 2**32; clip below the overflow
  threshold = jnp.minimum(jnp.asarray(rate, jnp.float32) * 2.0**32, 2.0**32 - 256)
  return bits >= threshold.astype(jnp.uint32)


# The factor on every dropout rate while a `scaled_dropout` block traces the model.
_DROPOUT_SCALE: contextvars.ContextVar = contextvars.ContextVar("dropout_scale", default=None)


@contextlib.contextmanager
def scaled_dropout(scale):
  """Inside the block, every dropout rate (residual, embedding, feed-forward, attention,
  word, drop path) is the configured one times `scale`: a float or a traced scalar in [0, 1], such as
  a schedule's value at the current update (train.dropout_ramp_steps). None: as
  configured. A traced scale changes the rates without recompiling the step."""
  token = _DROPOUT_SCALE.set(scale)
  try:
    yield
  finally:
    _DROPOUT_SCALE.reset(token)


def scheduled_rate(rate: float):
  """`rate` times the scale of the enclosing `scaled_dropout` block, if any."""
  scale = _DROPOUT_SCALE.get()
  return rate if scale is None else rate * scale


def dropout(x: jnp.ndarray, rate: float, is_training: bool) -> jnp.ndarray:
  """Inverted dropout that only draws a key (and so only needs an rng) when training."""
  if not is_training or rate == 0.0:
    return x
  rate = scheduled_rate(rate)
  keep = keep_mask(hk.next_rng_key(), rate, x.shape)
  return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros_like(x))


def drop_path(x: jnp.ndarray, rate: float, is_training: bool) -> jnp.ndarray:
  """Stochastic depth: each row of `x` (axis 0, a sequence) kept whole with probability
  1 - rate and scaled by 1 / (1 - rate), or zeroed whole. Only draws a key when training
  with rate > 0."""
  if not is_training or rate == 0.0:
    return x
  rate = scheduled_rate(rate)
  keep_B = keep_mask(hk.next_rng_key(), rate, x.shape[:1])
  keep = keep_B.reshape(keep_B.shape + (1,) * (x.ndim - 1))
  return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros_like(x))


# The dtype matmul operands are rounded to while a `matmul_operands` block traces the model.
_MATMUL_DTYPE: contextvars.ContextVar = contextvars.ContextVar("matmul_dtype", default=None)


@contextlib.contextmanager
def matmul_operands(dtype: str | None):
  """Inside the block, `matmul` and `einsum` round their operands to `dtype`
  ("bfloat16"), accumulate and return float32 products (cast to the first operand's
  dtype), and their gradients do the same: each backward matmul takes the float32
  cotangent rounded to bfloat16. CPUs with AMX or AVX-512 BF16 run such matmuls faster
  than float32 ones (4.5x and 1.9x measured); XLA:CPU runs bfloat16 x bfloat16 ->
  bfloat16 ones *slower* (bench/README.md). None or "float32": plain matmuls in the
  operands' dtype."""
  token = _MATMUL_DTYPE.set(None if dtype in (None, "float32") else jnp.dtype(dtype))
  try:
    yield
  finally:
    _MATMUL_DTYPE.reset(token)


@functools.lru_cache(maxsize=None)
def rounded_products_unsupported(dtype: str, backend: str) -> str | None:
  """Why `backend` cannot run a matmul of `dtype` operands with float32 products, or
  None if it can. XLA:CPU runs it in a library kernel (oneDNN / XNNPACK) and rejects it
  at run time where none takes it ("Unsupported element type for DotThunk"); the probe
  runs once per dtype and backend."""
  x = jax.device_put(np.ones((1, 8, 8), jnp.dtype(dtype)), jax.devices(backend)[0])
  product = jax.jit(lambda a, b: jax.lax.dot_general(
      a, b, (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.float32))
  try:
    product(x, x).block_until_ready()
  except Exception as e:  # noqa: BLE001 (XLA's runtime error names no finer class)
    return str(e).splitlines()[-1][-200:]
  return None


def _indices(spec: str) -> tuple[str, str, str]:
  """The index letters of an explicit two-operand einsum: ("ab", "bc", "ac") for "ab,bc->ac"."""
  operands, out = spec.split("->")
  ia, ib = operands.split(",")
  return ia, ib, out


def einsum(spec: str, a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
  """`jnp.einsum(spec, a, b)` in `a`'s dtype, with operands rounded as the enclosing
  `matmul_operands` block says. `spec` is explicit ("ab,bc->ac"), and every index of an
  operand appears in the other one or in the output (so its gradient is an einsum too)."""
  dtype = _MATMUL_DTYPE.get()
  if dtype is None:
    return jnp.einsum(spec, a, b.astype(a.dtype))
  ia, ib, out = _indices(spec)
  for own, other in ((ia, ib), (ib, ia)):
    if set(own) - set(other) - set(out):
      raise ValueError(f"layers.einsum({spec!r}): an index of {own!r} is summed away "
                       "within that operand; its gradient is not one einsum")
  return _rounded_einsum(spec, dtype, a.dtype, b.dtype, a, b).astype(a.dtype)


def matmul(x: jnp.ndarray, w: jnp.ndarray) -> jnp.ndarray:
  """`x @ w` for `x` `[..., K]` and a matrix `w` `[K, N]`, as `einsum`: one 2-D matmul
  over the flattened leading axes."""
  if _MATMUL_DTYPE.get() is None:
    return x @ w.astype(x.dtype)
  x_MK = x.reshape(-1, x.shape[-1])
  return einsum("mk,kn->mn", x_MK, w).reshape(*x.shape[:-1], w.shape[-1])


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
  float32 itself (bench/README.md). It also folds a plain transpose into the matmul's
  dimensions or layout, so there an operand that needs one is copied behind a fusion
  boundary. Of the two operand orders it takes the one that copies fewer elements: for a
  weight gradient (a contraction over the tokens) it transposes the smaller operand and
  the weight-sized product, not a `[tokens, vocab]` cotangent (bench/README.md).
  """
  ia, ib, out = _indices(spec)
  size = {**dict(zip(ia, a.shape)), **dict(zip(ib, b.shape))}
  if _transposed_elements(ib, ia, out, size) < _transposed_elements(ia, ib, out, size):
    a, b, ia, ib = b, a, ib, ia
  batch, free_a, free_b, con = _dot_axes(ia, ib, out)
  token = a.reshape(-1)[0].astype(jnp.float32)  # never NaN for XLA to see: see materialize

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
def materialize(x: jnp.ndarray, token: jnp.ndarray) -> jnp.ndarray:
  """Identity that makes XLA:CPU compute `x`, and its gradient, into a buffer.

  XLA:CPU fuses element-wise producers into every consumer. Along the residual stream
  that fuses the gradient contributions of all later layers into each layer's consumers
  (one fusion of 87 inputs in `compact`), including the transposes that feed the
  weight-gradient matmuls, which then recompute it with strided reads
  (bench/README.md). `lax.optimization_barrier` does not stop this (XLA:CPU removes
  barriers before fusion); a conditional does. `token`: any replicated float scalar
  (a conditional on a sharded value would need a collective).
  """
  return _fusion_boundary(x, token)


def _materialize_fwd(x, token):
  return _fusion_boundary(x, token), token


def _materialize_bwd(token, g):
  return _fusion_boundary(g, token), None


materialize.defvjp(_materialize_fwd, _materialize_bwd)


class Dense(hk.Module):
  """y = x W + b over the last axis, float32 params cast to the input dtype."""

  def __init__(self, features: int, name: str | None = None):
    super().__init__(name=name)
    self.features = features

  def params(self, d_in: int) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The weights `[d_in, F]` and bias `[F]`, float32."""
    w = hk.get_parameter("w", [d_in, self.features], jnp.float32,
                         init=hk.initializers.VarianceScaling(1.0, "fan_avg", "uniform"))
    b = hk.get_parameter("b", [self.features], jnp.float32, init=jnp.zeros)
    return w, b

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    w, b = self.params(x.shape[-1])
    b = b.reshape((1,) * (x.ndim - 1) + b.shape)  # broadcast explicitly over the leading axes
    return matmul(x, w) + b.astype(x.dtype)


LAYER_NORM_EPSILON = 1e-5  # hk.LayerNorm's default


@jax.custom_vjp
def layer_norm(x: jnp.ndarray, scale: jnp.ndarray, offset: jnp.ndarray) -> jnp.ndarray:
  """`hk.LayerNorm` over the last axis of `x`, with a hand-written gradient.

  The gradient's two sums over the features that carry `scale`, of `g * scale` and
  `g * scale * x_hat`, are matrix-vector products with `scale` here. Left to autodiff,
  XLA:CPU feeds them to YNNPACK reductions that take only materialised operands, so it
  writes `scale` broadcast to the activations' shape for every layer norm, ~6 % of the
  `compact` step (bench/README.md).
  """
  return _layer_norm_fwd(x, scale, offset)[0]


def _layer_norm_fwd(x, scale, offset):
  mean = jnp.mean(x, axis=-1, keepdims=True)
  centred = x - mean
  rstd = jax.lax.rsqrt(jnp.mean(centred * centred, axis=-1, keepdims=True) + LAYER_NORM_EPSILON)
  x_hat = centred * rstd
  lead = (1,) * (x.ndim - 1)  # broadcast explicitly over the leading axes
  return x_hat * scale.reshape(lead + scale.shape) + offset.reshape(lead + offset.shape), (
      x_hat, rstd, scale)


def _layer_norm_bwd(residuals, g):
  x_hat, rstd, scale = residuals
  d = x_hat.shape[-1]
  g_ND, x_hat_ND = g.reshape(-1, d), x_hat.reshape(-1, d)
  mean_g = (g_ND @ scale).reshape(rstd.shape) / d  # the features' mean of g * scale
  mean_gx = ((g_ND * x_hat_ND) @ scale).reshape(rstd.shape) / d  # ... of g * scale * x_hat
  dx = rstd * (g * scale.reshape((1,) * (g.ndim - 1) + scale.shape) - mean_g - x_hat * mean_gx)
  return dx, jnp.sum(g_ND * x_hat_ND, axis=0), jnp.sum(g_ND, axis=0)


layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


class _LayerNormParams(hk.Module):
  """The "scale" and "offset" of a layer norm, named as `hk.LayerNorm` names them."""

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    d = x.shape[-1]
    scale = hk.get_parameter("scale", [d], jnp.float32, init=jnp.ones)
    offset = hk.get_parameter("offset", [d], jnp.float32, init=jnp.zeros)
    return layer_norm(x, scale, offset)


class LayerNorm(hk.Module):
  """Layer norm computed in float32, returned in the input dtype: `hk.LayerNorm`'s
  function and parameters (`ln/scale`, `ln/offset`), with `layer_norm`'s gradient."""

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    return _LayerNormParams(name="ln")(x.astype(jnp.float32)).astype(x.dtype)


def unit_length(x: jnp.ndarray, min_norm: float) -> jnp.ndarray:
  """`x / max(||x||, min_norm)` along the last axis."""
  sum_sq = jnp.sum(x * x, axis=-1, keepdims=True)
  return x * jax.lax.rsqrt(jnp.maximum(sum_sq, min_norm * min_norm))


class ScaleNorm(hk.Module):
  """ScaleNorm (Nguyen and Salazar, 2019): `g * x / ||x||` with one learned scalar `g`
  (initialised to sqrt(D), so that each component starts at unit scale, as after a layer
  norm), in float32, returned in the input dtype."""

  EPSILON = 1e-5  # the smallest norm divided by

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    d = x.shape[-1]
    g = hk.get_parameter("g", [], jnp.float32, init=hk.initializers.Constant(math.sqrt(d)))
    return (g * unit_length(x.astype(jnp.float32), self.EPSILON)).astype(x.dtype)


def norm_layer(kind: str, name: str) -> hk.Module:
  """The normalisation `ModelConfig.norm` names: "layer" or "scale"."""
  return {"layer": LayerNorm, "scale": ScaleNorm}[kind](name=name)


def sinusoidal_positions(max_len: int, d_model: int) -> np.ndarray:
  """Vaswani et al. sin/cos table. Returns `[max_len, D]`."""
  pos = np.arange(max_len)[:, None]
  inv_freq = np.exp(-math.log(10000.0) * np.arange(0, d_model, 2) / d_model)
  table = np.zeros((max_len, d_model), dtype=np.float32)
  table[:, 0::2] = np.sin(pos * inv_freq)
  table[:, 1::2] = np.cos(pos * inv_freq)
  return table


def rotary_tables(positions_BT: jnp.ndarray, head_dim: int
                  ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """cos and sin of the rotary angles position * 10000^(-2i/K), `[B, T, 1, K/2]`: computed
  once per stack (or decoding step) and shared by its layers' `rotary` calls."""
  half = head_dim // 2
  inv_freq = np.exp(-math.log(10000.0) * np.arange(half) / half).astype(np.float32)
  angle_BT1F = positions_BT.astype(jnp.float32)[:, :, None, None] * inv_freq[None, None, None]
  return jnp.cos(angle_BT1F), jnp.sin(angle_BT1F)


def rotary(x_BTHK: jnp.ndarray, tables: tuple[jnp.ndarray, jnp.ndarray]) -> jnp.ndarray:
  """Rotary position embedding (Su et al. 2021, "RoFormer"), split-half layout.

  Rotates the pair (x_i, x_{i + K/2}) of every head by the angle of its position
  (`rotary_tables`), so the dot product of a rotated query and a rotated key depends on
  their positions only through the difference. Args: `[B, T, H, K]` (K even).
  """
  cos, sin = tables
  half = x_BTHK.shape[-1] // 2
  x1, x2 = x_BTHK[..., :half].astype(jnp.float32), x_BTHK[..., half:].astype(jnp.float32)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BTHK.dtype)


class Embedding(hk.Module):
  """Token embedding scaled by sqrt(D) plus positional encoding (none for "rotary",
  whose positions the self-attention layers apply); `attend` gives output logits."""

  def __init__(self, vocab_size: int, d_model: int, max_len: int, positional: str,
               dtype: jnp.dtype, fix_norm: bool = False, name: str | None = None):
    super().__init__(name=name)
    self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
    self.positional, self.dtype, self.fix_norm = positional, dtype, fix_norm

  def _table(self) -> jnp.ndarray:
    # std D^-1/2 so that the sqrt(D)-scaled input embedding has unit variance and
    # the tied output layer starts with logits of unit scale.
    table = hk.get_parameter("embeddings", [self.vocab_size, self.d_model], jnp.float32,
                             init=hk.initializers.RandomNormal(self.d_model ** -0.5))
    if self.fix_norm:  # FixNorm (Nguyen and Salazar, 2019): every row of unit length
      table = unit_length(table, 1e-6)
    return table

  def __call__(self, ids_BT: jnp.ndarray, positions_BT: jnp.ndarray,
               word_dropout: float = 0.0) -> jnp.ndarray:
    """Args: ids and their positions, `[B, T]` int; `word_dropout`: the probability of
    zeroing a token's embedding (not its position encoding, not rescaled; training only).
    Returns `[B, T, D]` in the compute dtype."""
    x_BTD = jnp.take(self._table(), ids_BT, axis=0) * math.sqrt(self.d_model)
    if word_dropout > 0.0:
      keep_BT = keep_mask(hk.next_rng_key(), scheduled_rate(word_dropout), ids_BT.shape)
      x_BTD = jnp.where(keep_BT[..., None], x_BTD, 0.0)
    if self.positional == "learned":
      pos_table = hk.get_parameter("positions", [self.max_len, self.d_model], jnp.float32,
                                   init=hk.initializers.RandomNormal(0.02))
      x_BTD = x_BTD + jnp.take(pos_table, positions_BT, axis=0)
    elif self.positional == "sinusoidal":
      pos_table = jnp.asarray(sinusoidal_positions(self.max_len, self.d_model))
      x_BTD = x_BTD + jnp.take(pos_table, positions_BT, axis=0)
    return x_BTD.astype(self.dtype)

  def table(self) -> jnp.ndarray:
    """The embedding table `[V, D]`, float32 (the tied output layer's weights)."""
    return self._table()

  def attend(self, x_BTD: jnp.ndarray) -> jnp.ndarray:
    """Tied output layer: logits `[B, T, V]` in float32."""
    table_VD = self._table().astype(x_BTD.dtype)
    # A 2-D matmul on flattened tokens: XLA:CPU runs its backward pass about 1.5x faster
    # than the 3-D einsum's (bench/README.md).
    x_ND = x_BTD.reshape(-1, x_BTD.shape[-1])
    logits_NV = einsum("nd,vd->nv", x_ND, table_VD)
    return logits_NV.reshape(*x_BTD.shape[:-1], -1).astype(jnp.float32)


class MultiHeadAttention(hk.Module):
  """Multi-head scaled dot-product attention (self, causal self, or cross).

  With `qk_norm` > 0 (QK-norm, Henry et al. 2020), queries and keys are scaled to unit
  length per head and their dot products multiplied by one learned scalar, initialised to
  `qk_norm`, instead of 1 / sqrt(K). Keys are normalised where they are projected, so a
  KV cache holds them normalised."""

  EPSILON = 1e-6  # the smallest query or key length divided by (QK-norm)

  def __init__(self, num_heads: int, head_dim: int, dropout_rate: float = 0.0,
               qk_norm: float = 0.0, name: str | None = None):
    super().__init__(name=name)
    self.num_heads, self.head_dim, self.dropout_rate = num_heads, head_dim, dropout_rate
    self.qk_norm = qk_norm
    self.query = Dense(num_heads * head_dim, name="query")
    self.key = Dense(num_heads * head_dim, name="key")
    self.value = Dense(num_heads * head_dim, name="value")
    self.out = Dense(num_heads * head_dim, name="out")

  def _split(self, x_BTD: jnp.ndarray) -> jnp.ndarray:
    return x_BTD.reshape(*x_BTD.shape[:-1], self.num_heads, self.head_dim)

  def _keys(self, k_BSHK: jnp.ndarray) -> jnp.ndarray:
    """Keys as attention compares them: unit length per head with QK-norm, else as given."""
    if not self.qk_norm:
      return k_BSHK
    return unit_length(k_BSHK.astype(jnp.float32), self.EPSILON).astype(k_BSHK.dtype)

  def _scaled_queries(self, q_BTHK: jnp.ndarray) -> jnp.ndarray:
    """Queries times the logit scale: 1 / sqrt(K), or with QK-norm unit length per head
    times the learned scalar."""
    if not self.qk_norm:
      return q_BTHK * (self.head_dim ** -0.5)
    g = hk.get_parameter("qk_scale", [], jnp.float32,
                         init=hk.initializers.Constant(self.qk_norm))
    return (g * unit_length(q_BTHK.astype(jnp.float32), self.EPSILON)).astype(q_BTHK.dtype)

  # Keys and values come in one of two layouts. Teacher forcing uses `[B, S, H, K]`
  # straight from the projection (head-major keys were not faster to train on
  # XLA:CPU). The KV cache is head-major, `[B, H, S, K]`: a decoding step then
  # contracts the cache in place instead of transposing all of it for every new token
  # (bench/README.md).
  def project_kv(self, kv_BSD: jnp.ndarray, head_major: bool = False
                 ) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Keys and values `[B, S, H, K]`, or `[B, H, S, K]` with `head_major` (the cache)."""
    k, v = self._keys(self._split(self.key(kv_BSD))), self._split(self.value(kv_BSD))
    if head_major:
      k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    return k, v

  def project_qkv(self, x_BTD: jnp.ndarray, rotation: tuple | None = None
                  ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Self-attention's queries `[B, T, H, K]` and head-major keys and values
    `[B, H, T, K]` from one matmul with the three projections side by side (a decoding
    step: one `[rows, D] x [D, 3D]` matmul runs faster on XLA:CPU than three `[D, D]`).
    With `rotation` (`rotary_tables`), queries and keys are rotated (`rotary`)."""
    d_in, inner = x_BTD.shape[-1], self.num_heads * self.head_dim
    (wq, bq), (wk, bk), (wv, bv) = (m.params(d_in) for m in (self.query, self.key, self.value))
    w = jnp.concatenate([wq, wk, wv], axis=1)
    b = jnp.concatenate([bq, bk, bv]).astype(x_BTD.dtype)
    qkv = matmul(x_BTD, w) + b.reshape((1,) * (x_BTD.ndim - 1) + b.shape)
    q, k, v = (self._split(qkv[..., i * inner:(i + 1) * inner]) for i in range(3))
    if rotation is not None:
      q, k = rotary(q, rotation), rotary(k, rotation)
    return q, self._keys(k).transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)

  def attend(self, q_BTD: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray,
             mask: jnp.ndarray, is_training: bool = False,
             probs_sink: list | None = None, head_major: bool = False) -> jnp.ndarray:
    """Attends queries over given keys/values (laid out as `project_kv` gives them);
    mask broadcasts to `[B, H, T, S]`.

    `probs_sink`, if given, receives the attention probabilities `[B, H, T, S]` (for plots).
    """
    return self.attend_heads(self._split(self.query(q_BTD)), k, v, mask, is_training,
                             probs_sink, head_major)

  def attend_heads(self, q_BTHK: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray,
                   mask: jnp.ndarray, is_training: bool = False,
                   probs_sink: list | None = None, head_major: bool = False) -> jnp.ndarray:
    """`attend` for queries already projected and split into heads, `[B, T, H, K]`."""
    kv = "bhsk" if head_major else "bshk"
    q_BTHK = self._scaled_queries(q_BTHK)
    scores_BHTS = einsum(f"bthk,{kv}->bhts", q_BTHK, k).astype(jnp.float32)
    # finfo.min instead of -inf: a fully masked row gives a uniform distribution, not NaN.
    scores_BHTS = jnp.where(mask, scores_BHTS, jnp.finfo(jnp.float32).min)
    probs_BHTS = jax.nn.softmax(scores_BHTS, axis=-1)
    if probs_sink is not None:
      probs_sink.append(probs_BHTS)
    probs_BHTS = dropout(probs_BHTS, self.dropout_rate, is_training).astype(v.dtype)
    if head_major:
      # Decoding: with the output head-major, XLA:CPU runs the cross-attention product as
      # one batched matmul instead of a slow strided one (beam 5 at 320 hypotheses: -6 %
      # per step, bench/README.md); the same sums, in another order of rounding.
      out_BTHK = einsum("bhts,bhsk->bhtk", probs_BHTS, v).transpose(0, 2, 1, 3)
    else:
      out_BTHK = einsum("bhts,bshk->bthk", probs_BHTS, v)
    return self.out(out_BTHK.reshape(*out_BTHK.shape[:2], -1))

  def __call__(self, q_BTD: jnp.ndarray, kv_BSD: jnp.ndarray, mask: jnp.ndarray,
               is_training: bool = False, probs_sink: list | None = None,
               rotation: tuple | None = None) -> jnp.ndarray:
    """Args: queries `[B, T, D]`, keys/values source `[B, S, D]`, mask; `rotation`
    (self-attention with rotary positions, queries and keys from one sequence): the
    `rotary_tables` of their positions, which rotate both. Returns `[B, T, D]`."""
    k_BSHK, v_BSHK = self.project_kv(kv_BSD)
    q_BTHK = self._split(self.query(q_BTD))
    if rotation is not None:  # a rotation keeps each head's length (QK-norm's unit keys)
      q_BTHK, k_BSHK = rotary(q_BTHK, rotation), rotary(k_BSHK, rotation)
    return self.attend_heads(q_BTHK, k_BSHK, v_BSHK, mask, is_training, probs_sink)


class FeedForward(hk.Module):
  """Position-wise two-layer MLP: `outer(act(inner(x)))`, or with `glu`, the gated
  form `outer(act(inner(x)) * linear(x))` of Shazeer (2020) (ReGLU with ReLU, GEGLU with
  GELU): `inner` and `linear` are both `[D, F]` and run as one `[D, 2F]` matmul."""

  def __init__(self, d_model: int, d_ff: int, activation: str, dropout_rate: float,
               glu: bool = False, name: str | None = None):
    super().__init__(name=name)
    self.inner = Dense(d_ff, name="inner")
    self.linear = Dense(d_ff, name="linear") if glu else None
    self.outer = Dense(d_model, name="outer")
    self.activation = jax.nn.relu if activation == "relu" else jax.nn.gelu
    self.dropout_rate = dropout_rate

  def __call__(self, x_BTD: jnp.ndarray, is_training: bool = False) -> jnp.ndarray:
    if self.linear is None:
      h_BTF = self.activation(self.inner(x_BTD))
    else:
      (w1, b1), (w2, b2) = (self.inner.params(x_BTD.shape[-1]),
                            self.linear.params(x_BTD.shape[-1]))
      w, b = jnp.concatenate([w1, w2], axis=1), jnp.concatenate([b1, b2])
      b = b.reshape((1,) * (x_BTD.ndim - 1) + b.shape)
      h_BT2F = matmul(x_BTD, w) + b.astype(x_BTD.dtype)
      F = self.inner.features
      h_BTF = self.activation(h_BT2F[..., :F]) * h_BT2F[..., F:]
    h_BTF = dropout(h_BTF, self.dropout_rate, is_training)
    return self.outer(h_BTF)
