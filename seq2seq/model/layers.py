"""Building blocks: dense projection, layer norm, embedding + positions, attention,
feed-forward.

Parameters are always float32; each module casts them to the compute dtype of its
input (so `bfloat16` compute keeps float32 master weights). Layer norm and softmax run
in float32. Every product goes through the model's one `Numerics` (`numerics.matmul`,
`numerics.einsum`); the comment at each call gives its plain JAX meaning, and the
numerics decide the operand dtype and how XLA:CPU runs it. Dropout rates are given per
call: `None` (or 0) in inference, where no rng is drawn.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from seq2seq.numerics import Numerics
from seq2seq.numerics.ops import LAYER_NORM_EPSILON


class Dropout(NamedTuple):
  """A training trace's dropout rates (floats, or traced scalars when a ramp scales
  them). A model in inference gets `None` instead and draws no rng."""

  residual: float | jax.Array  # sub-layer outputs, embeddings, feed-forward hidden
  attention: float | jax.Array  # attention probabilities


def dropout(x: jnp.ndarray, rate: float | jax.Array | None) -> jnp.ndarray:
  """Inverted dropout; draws a key (and so needs an rng) only for a rate that may be > 0."""
  if rate is None or (isinstance(rate, (int, float)) and rate == 0.0):
    return x
  keep = Numerics.keep_mask(hk.next_rng_key(), rate, x.shape)  # bernoulli(key, 1 - rate)
  return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros_like(x))


class Dense(hk.Module):
  """y = x W + b over the last axis, float32 params cast to the input dtype."""

  def __init__(self, features: int, numerics: Numerics, name: str | None = None):
    super().__init__(name=name)
    self.features, self.numerics = features, numerics

  def params(self, d_in: int) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The weights `[d_in, F]` and bias `[F]`, float32."""
    w = hk.get_parameter("w", [d_in, self.features], jnp.float32,
                         init=hk.initializers.VarianceScaling(1.0, "fan_avg", "uniform"))
    b = hk.get_parameter("b", [self.features], jnp.float32, init=jnp.zeros)
    return w, b

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    w, b = self.params(x.shape[-1])
    b = b.reshape((1,) * (x.ndim - 1) + b.shape)  # broadcast explicitly over the leading axes
    return self.numerics.matmul(x, w) + b.astype(x.dtype)  # x @ w + b


class _LayerNormParams(hk.Module):
  """The "scale" and "offset" of a layer norm, named as `hk.LayerNorm` names them."""

  def __init__(self, epsilon: float, name: str | None = None):
    super().__init__(name=name)
    self.epsilon = epsilon

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    d = x.shape[-1]
    scale = hk.get_parameter("scale", [d], jnp.float32, init=jnp.ones)
    offset = hk.get_parameter("offset", [d], jnp.float32, init=jnp.zeros)
    # (x - mean) / sqrt(var + eps) * scale + offset over the last axis
    return Numerics.layer_norm(x, scale, offset, self.epsilon)


class LayerNorm(hk.Module):
  """Layer norm computed in float32, returned in the input dtype: `hk.LayerNorm`'s
  function and parameters (`ln/scale`, `ln/offset`), with `Numerics.layer_norm`'s gradient."""

  def __init__(self, epsilon: float = LAYER_NORM_EPSILON, name: str | None = None):
    super().__init__(name=name)
    self.epsilon = epsilon

  def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
    return _LayerNormParams(self.epsilon, name="ln")(x.astype(jnp.float32)).astype(x.dtype)


def sinusoidal_positions(max_len: int, d_model: int, layout: str = "interleaved"
                         ) -> np.ndarray:
  """A sin/cos position table `[max_len, D]` (`ModelConfig.sinusoidal`): "interleaved"
  (Vaswani et al.: sin at even, cos at odd dimensions, frequencies 10000^(-2i/D)),
  "halves" (the same frequencies, sines first then cosines), "tensor2tensor" (sines then
  cosines, frequencies 10000^(-i/(D/2-1)))."""
  pos = np.arange(max_len)[:, None]
  half = d_model // 2
  if layout == "tensor2tensor":
    inv_freq = np.exp(-math.log(10000.0) * np.arange(half) / max(half - 1, 1))
  else:
    inv_freq = np.exp(-math.log(10000.0) * np.arange(0, d_model, 2) / d_model)
  table = np.zeros((max_len, d_model), dtype=np.float32)
  if layout == "interleaved":
    table[:, 0::2] = np.sin(pos * inv_freq)
    table[:, 1::2] = np.cos(pos * inv_freq)
  else:
    table[:, :half] = np.sin(pos * inv_freq)
    table[:, half:2 * half] = np.cos(pos * inv_freq)
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
  """Token embedding scaled by sqrt(D) (unless `scale` is False) plus positional encoding
  (a `sinusoidal` table of `sinusoidal_positions`, a learned one, or none for "rotary",
  whose positions the self-attention layers apply); `logits` is the tied output layer
  (Flax's `Embed.attend`)."""

  def __init__(self, vocab_size: int, d_model: int, max_len: int, positional: str,
               dtype: jnp.dtype, numerics: Numerics, name: str | None = None,
               scale: bool = True, sinusoidal: str = "interleaved"):
    super().__init__(name=name)
    self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
    self.positional, self.dtype, self.numerics = positional, dtype, numerics
    self.scale, self.sinusoidal = scale, sinusoidal

  def table(self) -> jnp.ndarray:
    """The embedding table `[V, D]`, float32 (the tied output layer's weights)."""
    # std D^-1/2 so that the sqrt(D)-scaled input embedding has unit variance and
    # the tied output layer starts with logits of unit scale.
    return hk.get_parameter("embeddings", [self.vocab_size, self.d_model], jnp.float32,
                            init=hk.initializers.RandomNormal(self.d_model ** -0.5))

  def __call__(self, ids_BT: jnp.ndarray, positions_BT: jnp.ndarray,
               zero_id: int | None = None) -> jnp.ndarray:
    """Args: ids and their positions, `[B, T]` int; `zero_id`: a token whose embedding is
    a zero vector (a Marian decoder's start), positions still added. Returns `[B, T, D]`
    in the compute dtype."""
    x_BTD = jnp.take(self.table(), ids_BT, axis=0)
    if self.scale:
      x_BTD = x_BTD * math.sqrt(self.d_model)
    if zero_id is not None:
      x_BTD = jnp.where((ids_BT == zero_id)[..., None], 0.0, x_BTD)
    if self.positional == "learned":
      pos_table = hk.get_parameter("positions", [self.max_len, self.d_model], jnp.float32,
                                   init=hk.initializers.RandomNormal(0.02))
      x_BTD = x_BTD + jnp.take(pos_table, positions_BT, axis=0)
    elif self.positional == "sinusoidal":
      pos_table = jnp.asarray(sinusoidal_positions(self.max_len, self.d_model,
                                                   self.sinusoidal))
      x_BTD = x_BTD + jnp.take(pos_table, positions_BT, axis=0)
    return x_BTD.astype(self.dtype)

  def logits(self, x_BTD: jnp.ndarray) -> jnp.ndarray:
    """Tied output layer: logits `[B, T, V]` in float32."""
    table_VD = self.table().astype(x_BTD.dtype)
    # A 2-D matmul on flattened tokens: XLA:CPU runs its backward pass faster
    # than the 3-D einsum's.
    x_ND = x_BTD.reshape(-1, x_BTD.shape[-1])
    logits_NV = self.numerics.einsum("nd,vd->nv", x_ND, table_VD)  # x_ND @ table_VD.T
    return logits_NV.reshape(*x_BTD.shape[:-1], -1).astype(jnp.float32)


class MultiHeadAttention(hk.Module):
  """Multi-head scaled dot-product attention (self, causal self, or cross), keys and
  values `[B, S, H, K]` straight from the projections. Decoding one position at a time
  computes the same in other layouts (`incremental.py`)."""

  def __init__(self, num_heads: int, head_dim: int, numerics: Numerics,
               name: str | None = None):
    super().__init__(name=name)
    self.num_heads, self.head_dim, self.numerics = num_heads, head_dim, numerics
    inner = num_heads * head_dim
    self.query, self.key, self.value, self.out = (
        Dense(inner, numerics, name=n) for n in ("query", "key", "value", "out"))

  def _split(self, x_BTD: jnp.ndarray) -> jnp.ndarray:
    return x_BTD.reshape(*x_BTD.shape[:-1], self.num_heads, self.head_dim)

  def project_kv(self, kv_BSD: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Keys and values `[B, S, H, K]`."""
    return self._split(self.key(kv_BSD)), self._split(self.value(kv_BSD))

  def attend_heads(self, q_BTHK: jnp.ndarray, k_BSHK: jnp.ndarray, v_BSHK: jnp.ndarray,
                   mask: jnp.ndarray, rate: float | jax.Array | None = None,
                   probs_sink: list | None = None) -> jnp.ndarray:
    """Attention of queries already projected and split into heads, `[B, T, H, K]`, over
    keys and values `[B, S, H, K]`; mask broadcasts to `[B, H, T, S]`; `rate`: attention
    dropout; `probs_sink`, if given, receives the probabilities `[B, H, T, S]` (plots)."""
    q_BTHK = q_BTHK * (self.head_dim ** -0.5)
    scores_BHTS = self.numerics.einsum("bthk,bshk->bhts", q_BTHK, k_BSHK).astype(jnp.float32)
    # finfo.min instead of -inf: a fully masked row gives a uniform distribution, not NaN.
    scores_BHTS = jnp.where(mask, scores_BHTS, jnp.finfo(jnp.float32).min)
    probs_BHTS = Numerics.rowwise(jax.nn.softmax, scores_BHTS)  # softmax over S
    if probs_sink is not None:
      probs_sink.append(probs_BHTS)
    probs_BHTS = dropout(probs_BHTS, rate).astype(v_BSHK.dtype)
    out_BTHK = self.numerics.einsum("bhts,bshk->bthk", probs_BHTS, v_BSHK)  # probs @ v
    return self.out(out_BTHK.reshape(*out_BTHK.shape[:2], -1))

  def __call__(self, q_BTD: jnp.ndarray, kv_BSD: jnp.ndarray, mask: jnp.ndarray,
               rate: float | jax.Array | None = None, probs_sink: list | None = None,
               rotation: tuple | None = None) -> jnp.ndarray:
    """Args: queries `[B, T, D]`, keys/values source `[B, S, D]`, mask, attention dropout
    `rate`; `rotation` (self-attention with rotary positions, queries and keys from one
    sequence): the `rotary_tables` of their positions, which rotate both. Returns
    `[B, T, D]`."""
    k_BSHK, v_BSHK = self.project_kv(kv_BSD)
    q_BTHK = self._split(self.query(q_BTD))
    if rotation is not None:
      q_BTHK, k_BSHK = rotary(q_BTHK, rotation), rotary(k_BSHK, rotation)
    return self.attend_heads(q_BTHK, k_BSHK, v_BSHK, mask, rate, probs_sink)


# `ModelConfig.activation`'s functions.
ACTIVATIONS = {
    "relu": jax.nn.relu,
    "gelu": jax.nn.gelu,  # the tanh approximation
    "gelu_erf": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_sigmoid": lambda x: x * jax.nn.sigmoid(1.702 * x),
    "swish": jax.nn.silu,
}


class FeedForward(hk.Module):
  """Position-wise two-layer MLP: `outer(dropout(act(inner(x))))`."""

  def __init__(self, d_model: int, d_ff: int, activation: str, numerics: Numerics,
               name: str | None = None):
    super().__init__(name=name)
    self.inner = Dense(d_ff, numerics, name="inner")
    self.outer = Dense(d_model, numerics, name="outer")
    self.activation = ACTIVATIONS[activation]

  def __call__(self, x_BTD: jnp.ndarray, rate: float | jax.Array | None = None
               ) -> jnp.ndarray:
    return self.outer(dropout(self.activation(self.inner(x_BTD)), rate))
