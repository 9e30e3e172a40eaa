"""Transformer encoder-decoder (Vaswani et al., 2017) in Haiku.

The teacher-forced model: `Transformer` computes logits `[B, T, V]` from source and
target ids, each layer the function docs/model.md walks through. `Model` wraps one
`hk.multi_transform` whose apply functions (`Apply`, by name) share a parameter tree:
teacher-forced logits, `encode`, and incremental decoding's `init_cache` and
`decode_step` (incremental.py: the same decoder one token at a time). All submodules
are built in constructors so that every apply function finds them under the same names.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp

from seq2seq.config import ModelConfig
from seq2seq.model import incremental, kv_cache, layers, masks
from seq2seq.model.layers import (
  Dense,
  Dropout,
  Embedding,
  FeedForward,
  LayerNorm,
  MultiHeadAttention,
  dropout,
)
from seq2seq.numerics import Numerics, resolve
from seq2seq.vocab import BOS_ID

Cache = dict[str, Any]
Params = hk.Params

def shift_right(tgt_out_BT: jnp.ndarray, segments_BT: jnp.ndarray | None = None
                ) -> jnp.ndarray:
  """Decoder input: BOS followed by the labels without their last position (in a packed
  row, BOS at the start of every segment)."""
  bos = jnp.full((tgt_out_BT.shape[0], 1), BOS_ID, tgt_out_BT.dtype)
  shifted = jnp.concatenate([bos, tgt_out_BT[:, :-1]], axis=1)
  if segments_BT is None:
    return shifted
  return jnp.where(masks.segment_positions(segments_BT) == 0, BOS_ID, shifted)


class _Residual(hk.Module):
  """Wraps a sub-layer with dropout, a residual connection and pre- or post-norm."""

  def __init__(self, cfg: ModelConfig, numerics: Numerics, name: str | None = None):
    super().__init__(name=name)
    self.pre_norm, self.numerics = cfg.pre_norm, numerics
    self.norm = LayerNorm(cfg.layer_norm_epsilon, name="norm")

  def __call__(self, x: jnp.ndarray, sublayer: Callable[[jnp.ndarray], jnp.ndarray],
               drop: Dropout | None) -> jnp.ndarray:
    rate = drop.residual if drop else None
    x = self.numerics.residual_stream(x)  # x (in training on XLA:CPU, a buffer of its own)
    if self.pre_norm:
      return x + dropout(sublayer(self.norm(x)), rate)
    return self.norm(x + dropout(sublayer(x), rate))


def _rates(drop: Dropout | None) -> tuple[Any, Any]:
  """(residual, attention) dropout rates; (None, None) in inference."""
  return (drop.residual, drop.attention) if drop else (None, None)


class EncoderLayer(hk.Module):
  """Self-attention and feed-forward, each with a residual."""

  def __init__(self, cfg: ModelConfig, numerics: Numerics, name: str | None = None):
    super().__init__(name=name)
    self.self_attention = MultiHeadAttention(cfg.num_heads, cfg.head_dim, numerics,
                                             name="self_attention")
    self.feed_forward = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, numerics,
                                    name="feed_forward")
    self.res_attention = _Residual(cfg, numerics, name="res_attention")
    self.res_ff = _Residual(cfg, numerics, name="res_ff")

  def __call__(self, x_BSD, mask, drop: Dropout | None, rotation=None):
    """`rotation`: the self-attention's `rotary_tables` (None: not rotary)."""
    residual, attention = _rates(drop)
    x_BSD = self.res_attention(
        x_BSD, lambda h: self.self_attention(h, h, mask, attention, None, rotation), drop)
    return self.res_ff(x_BSD, lambda h: self.feed_forward(h, residual), drop)


class DecoderLayer(hk.Module):
  """Causal self-attention, cross-attention to the encoder, feed-forward."""

  def __init__(self, cfg: ModelConfig, numerics: Numerics, name: str | None = None):
    super().__init__(name=name)
    self.cfg = cfg
    self.self_attention = MultiHeadAttention(cfg.num_heads, cfg.head_dim, numerics,
                                             name="self_attention")
    self.cross_attention = MultiHeadAttention(cfg.num_heads, cfg.head_dim, numerics,
                                              name="cross_attention")
    self.feed_forward = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, numerics,
                                    name="feed_forward")
    self.res_self = _Residual(cfg, numerics, name="res_self")
    self.res_cross = _Residual(cfg, numerics, name="res_cross")
    self.res_ff = _Residual(cfg, numerics, name="res_ff")

  def __call__(self, x_BTD, memory_BSD, self_mask, cross_mask, drop: Dropout | None,
               probs_sink=None, rotation=None):
    """`rotation`: the self-attention's `rotary_tables` (None: not rotary)."""
    residual, attention = _rates(drop)
    x_BTD = self.res_self(
        x_BTD, lambda h: self.self_attention(h, h, self_mask, attention, None, rotation), drop)
    x_BTD = self.res_cross(
        x_BTD, lambda h: self.cross_attention(h, memory_BSD, cross_mask, attention,
                                              probs_sink), drop)
    return self.res_ff(x_BTD, lambda h: self.feed_forward(h, residual), drop)

class Transformer(hk.Module):
  """Encoder-decoder with shared (tied) or separate embeddings. `drop`: the dropout rates
  of a training trace, None in inference.

  A variant replaces a building block in a subclass (docs/model.md):
  `embedding_module`, the token embedding with its positional encoding."""

  embedding_module = Embedding

  def __init__(self, cfg: ModelConfig, numerics: Numerics, name: str | None = "transformer"):
    super().__init__(name=name)
    self.cfg, self.numerics = cfg, numerics
    dtype = jnp.dtype(cfg.dtype)
    emb = lambda n: self.embedding_module(cfg.vocab_size, cfg.d_model, cfg.max_len, cfg.positional,
                              dtype, numerics, name=n, scale=cfg.embedding_scale,
                              sinusoidal=cfg.sinusoidal)
    if cfg.tied_embeddings:
      self.src_embed = self.tgt_embed = emb("shared_embedding")
      self.output = lambda x: self.with_output_bias(self.tgt_embed.logits(x))
      self.output_weights = lambda: (self.tgt_embed.table(), self.output_bias())
    else:
      self.src_embed, self.tgt_embed = emb("src_embedding"), emb("tgt_embedding")
      projection = Dense(cfg.vocab_size, numerics, name="output_projection")
      self.output = lambda x: projection(x).astype(jnp.float32)
      self.output_weights = lambda: (lambda w, b: (w.T, b))(*projection.params(cfg.d_model))
    self.encoder_layers = [EncoderLayer(cfg, numerics, name=f"encoder_layer_{i}")
                           for i in range(cfg.encoder_layers)]
    self.decoder_layers = [DecoderLayer(cfg, numerics, name=f"decoder_layer_{i}")
                           for i in range(cfg.decoder_layers)]
    # Pre-norm stacks need a final norm: their residual stream is never normalised.
    eps = cfg.layer_norm_epsilon
    self.encoder_norm = LayerNorm(eps, name="encoder_norm") if cfg.pre_norm else (lambda x: x)
    self.decoder_norm = LayerNorm(eps, name="decoder_norm") if cfg.pre_norm else (lambda x: x)

  def output_bias(self) -> jnp.ndarray:
    """The tied output layer's bias `[V]`, float32: a parameter with
    `model.output_bias`, else zeros. An imported model closes the rows of tokens its
    source had not (`rundir/importing.py`) with a bias no logit reaches."""
    if not self.cfg.output_bias:
      return jnp.zeros((self.cfg.vocab_size,), jnp.float32)
    return hk.get_parameter("output_bias", [self.cfg.vocab_size], jnp.float32, init=jnp.zeros)

  def with_output_bias(self, logits: jnp.ndarray) -> jnp.ndarray:
    """Tied logits (float32) plus the output bias, where the model has one."""
    if not self.cfg.output_bias:
      return logits
    bias = self.output_bias()
    return logits + bias.reshape((1,) * (logits.ndim - 1) + bias.shape)

  def embed_target(self, ids_BT, positions_BT):
    """The decoder's input embeddings: BOS a zero vector with `decoder_start="zeros"`."""
    if self.cfg.decoder_start == "zeros":
      return self.tgt_embed(ids_BT, positions_BT, zero_id=BOS_ID)
    return self.tgt_embed(ids_BT, positions_BT)

  def _positions(self, ids_BT, segments_BT=None):
    if segments_BT is not None:
      return masks.segment_positions(segments_BT)
    return jnp.broadcast_to(jnp.arange(ids_BT.shape[1]), ids_BT.shape)

  def rotation_tables(self, positions_BT):
    """The self-attention layers' `rotary_tables` for these positions, once per stack;
    None where positions are added to the embeddings instead."""
    if self.cfg.positional != "rotary":
      return None
    return tuple(self.numerics.shared_table(t)
                 for t in layers.rotary_tables(positions_BT, self.cfg.head_dim))

  def encode(self, src_BS: jnp.ndarray, drop: Dropout | None = None,
             src_segments_BS: jnp.ndarray | None = None) -> jnp.ndarray:
    """Source ids `[B, S]` -> memory `[B, S, D]`. With segment ids (packed rows, 0 =
    padding), each sentence of a row attends to itself only and counts positions from 0."""
    positions_BS = self._positions(src_BS, src_segments_BS)
    x_BSD = dropout(self.src_embed(src_BS, positions_BS), _rates(drop)[0])
    if src_segments_BS is None:
      mask = masks.padding_mask(src_BS)
    else:
      mask = masks.segment_mask(src_segments_BS, src_segments_BS)
    rotation = self.rotation_tables(positions_BS)
    for layer in self.encoder_layers:
      x_BSD = layer(x_BSD, mask, drop, rotation)
    return self.encoder_norm(x_BSD)

  def decode_features(self, tgt_in_BT, memory_BSD, src_BS, drop: Dropout | None = None,
                      probs_sink: list | None = None, src_segments_BS=None,
                      tgt_segments_BT=None):
    """Teacher-forced decoder up to the output layer: input ids `[B, T]` -> `[B, T, D]`."""
    positions_BT = self._positions(tgt_in_BT, tgt_segments_BT)
    x_BTD = dropout(self.embed_target(tgt_in_BT, positions_BT), _rates(drop)[0])
    if tgt_segments_BT is None:
      self_mask = masks.decoder_self_mask(tgt_in_BT)
      cross_mask = masks.padding_mask(src_BS)
    else:
      self_mask = (masks.causal_mask(tgt_in_BT.shape[1])
                   & masks.segment_mask(tgt_segments_BT, tgt_segments_BT))
      cross_mask = masks.segment_mask(tgt_segments_BT, src_segments_BS)
    rotation = self.rotation_tables(positions_BT)
    for layer in self.decoder_layers:
      x_BTD = layer(x_BTD, memory_BSD, self_mask, cross_mask, drop, probs_sink, rotation)
    return self.decoder_norm(x_BTD)

  def __call__(self, src_BS, tgt_in_BT, drop: Dropout | None = None,
               src_segments_BS=None, tgt_segments_BT=None):
    """Teacher-forced logits `[B, T, V]` (float32)."""
    return self.output(self.features(src_BS, tgt_in_BT, drop, src_segments_BS,
                                     tgt_segments_BT))

  def features(self, src_BS, tgt_in_BT, drop: Dropout | None = None,
               src_segments_BS=None, tgt_segments_BT=None):
    """The teacher-forced decoder output `[B, T, D]` (the logits before the output layer)."""
    if (src_segments_BS is None) != (tgt_segments_BT is None):
      raise ValueError("packed batches need segment ids for both source and target")
    memory_BSD = self.encode(src_BS, drop, src_segments_BS)
    return self.decode_features(tgt_in_BT, memory_BSD, src_BS, drop, None,
                                src_segments_BS, tgt_segments_BT)

  def features_and_output_weights(self, src_BS, tgt_in_BT, drop: Dropout | None = None,
                                  src_segments_BS=None, tgt_segments_BT=None):
    """`features`, and the output layer's weights `[V, D]` and bias `[V]` (float32):
    the training loss computes the logits itself (`loss.output_loss_sums`)."""
    return (self.features(src_BS, tgt_in_BT, drop, src_segments_BS, tgt_segments_BT),
            *self.output_weights())

  def cross_attention(self, src_BS, tgt_in_BT) -> jnp.ndarray:
    """Cross-attention probabilities of every decoder layer, `[layers, B, H, T, S]`."""
    sink: list = []
    self.output(self.decode_features(tgt_in_BT, self.encode(src_BS), src_BS, probs_sink=sink))
    return jnp.stack(sink)

class Apply(NamedTuple):
  """The apply functions of `Model`'s one `hk.multi_transform`, by name."""

  logits: Callable  # (params, rng, src, tgt_in, drop, src_segments, tgt_segments)
  features: Callable  # the same, up to the output layer, with its weights
  encode: Callable  # (params, None, src) -> memory
  init_cache: Callable  # (params, None, memory, src, max_len, beam_size)
  decode_step: Callable  # (params, None, ids, cache, source)
  cross_attention: Callable  # (params, None, src, tgt_in)


class Model:
  """The Haiku transforms of `Transformer`, with an explicit, checked rng policy. A
  subclass setting `transformer_module` is the model of a variant (docs/model.md)."""

  transformer_module = Transformer

  def __init__(self, cfg: ModelConfig, numerics: Numerics | None = None):
    """`numerics`: how the products are computed (`seq2seq.numerics.resolve`); by default
    resolved from `cfg.matmul_dtype` for training."""
    self.cfg = cfg
    self.numerics = numerics or resolve(cfg.matmul_dtype)

    def fns():
      t = self.transformer_module(cfg, self.numerics)
      return t.__call__, Apply(t.__call__, t.features_and_output_weights, t.encode,
                               functools.partial(incremental.init_cache, t),
                               functools.partial(incremental.decode_step, t),
                               t.cross_attention)

    self._transformed = hk.multi_transform(fns)

  # Models of one configuration and numerics compute the same functions: they are equal,
  # so that the programs jitted for one (the searches, the training steps) serve the
  # next one made in the process instead of being traced and compiled again.
  def __eq__(self, other) -> bool:
    return type(other) is type(self) and (self.cfg, self.numerics) == (other.cfg,
                                                                       other.numerics)

  def __hash__(self) -> int:
    return hash((type(self).__name__, self.cfg, self.numerics))

  def __repr__(self) -> str:  # what __eq__ compares: the program store's name for the model
    return f"{type(self).__name__}({self.cfg!r}, {self.numerics!r})"

  def dropout_rates(self, scale=None) -> Dropout:
    """The training trace's dropout rates, times `scale` (a float or traced scalar: the
    dropout ramp's factor at this update) when given. A rate of 0 stays a Python 0.0,
    so that no rng is drawn for it."""
    rate = lambda r: r if scale is None or not r else r * scale
    return Dropout(rate(self.cfg.dropout), rate(self.cfg.attention_dropout))

  def init(self, rng: jax.Array, src_BS: jnp.ndarray, tgt_in_BT: jnp.ndarray) -> Params:
    return self._transformed.init(rng, src_BS, tgt_in_BT, self.dropout_rates())
  def param_shapes(self) -> Params:
    """Names, shapes and dtypes of the parameters (`jax.ShapeDtypeStruct`s), without
    computing them: a trace of `init` whose initializers are zeros (tracing the random
    initializers was most of the cost of loading a checkpoint)."""
    cfg = self.cfg

    def zeros(next_creator, shape, dtype, init, context):
      del init, context
      return next_creator(shape, dtype, jnp.zeros)

    def init_fn(ids_BT):
      with hk.custom_creator(zeros):
        return self.transformer_module(cfg, Numerics())(ids_BT, ids_BT)

    dummy = jax.ShapeDtypeStruct((1, 4), jnp.int32)
    return jax.eval_shape(hk.transform(init_fn).init, None, dummy)

  def _dropout(self, what: str, rng, is_training: bool, dropout_scale) -> Dropout | None:
    """A call's dropout rates: None in inference; in training, an rng is required."""
    if is_training and rng is None:
      raise ValueError(f"Model.{what}(is_training=True) applies dropout and needs an rng: "
                       "pass rng=jax.random.PRNGKey(...) (inference needs none)")
    return self.dropout_rates(dropout_scale) if is_training else None

  def _numerics_for(self, params: Params, is_training: bool):
    """The numerics policy's context for a call: in training, the residual stream's own
    buffers (`Numerics.training_residuals`)."""
    if not is_training:
      return contextlib.nullcontext()
    return self.numerics.training_residuals(params)

  def apply(self, params: Params, src_BS, tgt_in_BT, *, rng: jax.Array | None = None,
            is_training: bool = False, src_segments_BS=None, tgt_segments_BT=None,
            dropout_scale=None) -> jnp.ndarray:
    """Teacher-forced logits `[B, T, V]`; `is_training` turns dropout on and needs `rng`;
    `dropout_scale` (a float or traced scalar) multiplies every dropout rate.

    Packed rows (several sentence pairs per row) pass segment ids `[B, S]` and `[B, T]`
    (1, 2, ... per sentence, 0 for padding); the decoder input then has BOS at every
    segment start (`shift_right(tgt, tgt_segments)`).
    """
    drop = self._dropout("apply", rng, is_training, dropout_scale)
    with self._numerics_for(params, is_training):
      return self._transformed.apply.logits(params, rng, src_BS, tgt_in_BT, drop,
                                            src_segments_BS, tgt_segments_BT)

  def apply_features(self, params: Params, src_BS, tgt_in_BT, *, rng: jax.Array | None = None,
                     is_training: bool = False, src_segments_BS=None, tgt_segments_BT=None,
                     dropout_scale=None):
    """As `apply`, up to the output layer: (decoder output `[B, T, D]`, output weights
    `[V, D]`, output bias `[V]`)."""
    drop = self._dropout("apply_features", rng, is_training, dropout_scale)
    with self._numerics_for(params, is_training):
      return self._transformed.apply.features(params, rng, src_BS, tgt_in_BT, drop,
                                              src_segments_BS, tgt_segments_BT)

  def encode(self, params: Params, src_BS) -> jnp.ndarray:
    return self._transformed.apply.encode(params, None, src_BS)

  def init_cache(self, params: Params, memory_BSD, src_BS, max_len: int,
                 beam_size: int = 1) -> tuple[Cache, Cache]:
    """(cache, source): see `incremental.init_cache`."""
    return self._transformed.apply.init_cache(params, None, memory_BSD, src_BS, max_len,
                                              beam_size)

  def decode_step(self, params: Params, ids_B, cache: Cache, source: Cache
                  ) -> tuple[jnp.ndarray, Cache]:
    return self._transformed.apply.decode_step(params, None, ids_B, cache, source)

  def cross_attention(self, params: Params, src_BS, tgt_in_BT) -> jnp.ndarray:
    return self._transformed.apply.cross_attention(params, None, src_BS, tgt_in_BT)

  def log_probs(self, params: Params, src_BS, tgt_in_BT) -> jnp.ndarray:
    """Teacher-forced log-probabilities `[B, T, V]` (float32), in inference."""
    return jax.nn.log_softmax(self.apply(params, src_BS, tgt_in_BT).astype(jnp.float32))

  reorder_cache = staticmethod(kv_cache.reorder)


def count_params(params: Params) -> int:
  return sum(x.size for x in jax.tree_util.tree_leaves(params))
