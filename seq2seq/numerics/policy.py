"""The numerics policy: the `Numerics` object the model takes, and `resolve`, which makes
the machine-dependent choice once per process and use, logged with its reason."""


from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging

import jax
import jax.numpy as jnp

from seq2seq.numerics import ops, speed_probe

log = logging.getLogger(__name__)

USES = ("training", "decoding")
# The scalar the residual stream's buffers hang on, set while a training trace runs
# (`Numerics.training_residuals`); None elsewhere.
_RESIDUAL_ANCHOR: contextvars.ContextVar = contextvars.ContextVar("residual_anchor",
                                                                  default=None)
# The fewest rows a search runs: XLA:CPU computes a lone row's attention products with
# other kernels than two or more rows', which round differently, so that a sentence's
# translation would depend on whether it came alone (`ops.MATMUL_ROWS` pads the rest).
LEAST_ROWS = 2


@dataclasses.dataclass(frozen=True)
class Numerics:
  """The operand dtype of every matmul and the backend the model runs on.

  `operand_dtype` "float32": plain products. "bfloat16": the operands are rounded to
  bfloat16 and the products accumulate in float32 (forward and backward), which CPUs
  with AMX or AVX-512 BF16 run faster; parameters stay float32 either way.
  """

  operand_dtype: str = "float32"
  backend: str = dataclasses.field(default_factory=jax.default_backend)
  why: str = dataclasses.field(default="", compare=False, repr=False)  # the resolver's reason

  def matmul(self, x: jnp.ndarray, w: jnp.ndarray) -> jnp.ndarray:
    """`x @ w` for `x` `[..., K]` and a matrix `w` `[K, N]`."""
    return ops.matmul(x, w, self.operand_dtype)

  def einsum(self, spec: str, a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """`jnp.einsum(spec, a, b)` in `a`'s dtype (an explicit two-operand spec)."""
    return ops.einsum(spec, a, b, self.operand_dtype)

  def einsum_float32(self, spec: str, a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """`jnp.einsum(spec, a, b)` with float32 operands whatever the policy: decoding's
    attention products (one query per row), too small for rounding to pay."""
    return ops.einsum(spec, a, b, "float32")

  def transposed_weights(self, w: jnp.ndarray) -> jnp.ndarray:
    """`w.T` in the operand dtype, made once per search rather than at every step."""
    return ops.transposed_weights(w, self.operand_dtype)

  @staticmethod
  def rowwise(fn, x: jnp.ndarray) -> jnp.ndarray:
    """`fn(x)` for a function of each row (last axis), e.g. a softmax: a row's result does
    not depend on how many rows share the call."""
    return ops.rowwise(fn, x)

  @staticmethod
  def layer_norm(x: jnp.ndarray, scale: jnp.ndarray, offset: jnp.ndarray,
                 epsilon: float = ops.LAYER_NORM_EPSILON) -> jnp.ndarray:
    """`hk.LayerNorm`'s function over the last axis (float32): a row's result does not
    depend on how many rows share the call (`rowwise`, in blocks of
    `ops.LAYER_NORM_ROWS` rows at most)."""
    return ops.rowwise(lambda x: ops.layer_norm(x, scale, offset, epsilon), x,
                       ops.LAYER_NORM_ROWS)

  @staticmethod
  def keep_mask(key: jax.Array, rate, shape: tuple[int, ...]) -> jnp.ndarray:
    """A Bernoulli(1 - rate) dropout keep mask of `shape`, deterministic in `key`."""
    return ops.keep_mask(key, rate, shape)

  def residual_stream(self, x: jnp.ndarray) -> jnp.ndarray:
    """`x` (the identity). Within `training_residuals` on XLA:CPU, `x` and its gradient
    in a buffer of their own: XLA:CPU would otherwise fuse every later layer's gradient
    into each layer's consumers (`ops.own_buffer`)."""
    anchor = _RESIDUAL_ANCHOR.get()
    if anchor is None or self.backend != "cpu":
      return x
    return ops.own_buffer(x, anchor)

  @staticmethod
  @contextlib.contextmanager
  def training_residuals(params):
    """The context of a training trace (`Model.apply(is_training=True)`), in which
    `residual_stream` keeps each residual in a buffer of its own. The buffers hang on a
    conditional on one parameter's first element: a float scalar the trace computes,
    replicated like every parameter, which XLA cannot fold away."""
    anchor = jnp.asarray(jax.tree_util.tree_leaves(params)[0].reshape(-1)[0], jnp.float32)
    reset = _RESIDUAL_ANCHOR.set(anchor)
    try:
      yield
    finally:
      _RESIDUAL_ANCHOR.reset(reset)

  def shared_table(self, x: jnp.ndarray) -> jnp.ndarray:
    """`x` (the identity), computed once into a buffer of its own on XLA:CPU: a small
    table that many larger operations read, such as the rotary cosines and sines. XLA:CPU
    fuses an element-wise producer into each consumer and evaluates it again for every
    element the consumer writes: each decoding step computed its position's cosine and
    sine for every row, head and layer (docs/experiments.md, Decoding)."""
    if self.backend != "cpu":
      return x
    return ops.own_buffer(x, x.reshape(-1)[0].astype(jnp.float32))


def resolve(matmul_dtype: str, use: str = "training", backend: str | None = None) -> Numerics:
  """The `Numerics` for a model configured with `matmul_dtype`, for `use`.

  training: "auto" takes the operand dtype whose training products run faster on this
  machine (`speed_probe`, timed once per machine); "bfloat16" where the backend cannot
  run rounded products falls back to float32 with a warning. decoding: a model trained
  with float32 operands decodes with float32; one trained with bfloat16 (or "auto")
  decodes with whichever dtype runs decoding's products faster here (the weights are
  rounded once per search, the attention products stay float32).
  """
  if use not in USES:
    raise ValueError(f"use must be one of {USES}, got {use!r}")
  if matmul_dtype not in ("float32", "bfloat16", "auto"):
    raise ValueError(f"matmul_dtype must be 'float32', 'bfloat16' or 'auto', got "
                     f"{matmul_dtype!r}")
  return _resolve(matmul_dtype, use, backend or jax.default_backend())


@functools.lru_cache(maxsize=None)
def _resolve(matmul_dtype: str, use: str, backend: str) -> Numerics:
  """`resolve`, once per process and arguments, so that its choice is logged once."""
  if matmul_dtype == "float32":
    return Numerics("float32", backend, "configured")
  if use == "decoding":
    dtype, why = speed_probe.fastest_operand_dtype(backend, use="decoding")
    log.info("decoding with %s matmul operands (trained with %s): %s", dtype, matmul_dtype,
             why)
    return Numerics(dtype, backend, why)
  if matmul_dtype == "auto":
    dtype, why = speed_probe.fastest_operand_dtype(backend)
    log.info("model.matmul_dtype=auto: %s operands (%s)", dtype, why)
    return Numerics(dtype, backend, why)
  why = speed_probe.rounded_products_unsupported(matmul_dtype, backend)
  if why is not None:
    log.warning("model.matmul_dtype=%s: this %s backend does not run %s x %s -> float32 "
                "matmuls (%s); using float32 operands", matmul_dtype, backend, matmul_dtype,
                matmul_dtype, why)
    return Numerics("float32", backend, why)
  return Numerics(matmul_dtype, backend, "configured")


clear_cache = _resolve.cache_clear  # tests that change the probe's answer
