"""Transformer encoder-decoder (Vaswani et al., 2017) in Haiku.

`Model` wraps one `hk.multi_transform` whose apply functions share a parameter
tree: `apply` (teacher-forced logits), `encode`, `init_cache` and `decode_step`
(one token per sequence with an explicit KV cache). All submodules are built in
constructors so that every apply function finds them under the same names.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import haiku as hk
import jax
import jax.numpy as jnp

from seq2seq import layers, masks
from seq2seq.config import ModelConfig
from seq2seq.layers import Dense, Embedding, FeedForward, MultiHeadAttention, dropout, norm_layer
from seq2seq.vocab import BOS_ID

Cache = dict[str, Any]
Params = hk.Params

# The self-attention cache's length is a whole number of blocks of this many positions,
# and beam search moves it block by block, only the blocks written so far.
CACHE_BLOCK = 8


def reorder_cache(cache: Cache, parents_R: jnp.ndarray) -> Cache:
  """The cache of each hypothesis' parent: row r becomes row `parents_R[r]` (beam search,
  after choosing its beams), as fairseq's `reorder_incremental_state`.

  Only the positions written so far (below `cache['index']`) are moved, one block of
  `CACHE_BLOCK` at a time in a loop per tensor: the later positions are written before
  they are read. A step early in a long search moves a fraction of the cache (a whole
  reorder of 4 layers' `[320, 4, 64, 32]` keys and values took 13 ms per step here,
  the blocks up to step 16 4 ms; bench/README.md).
  """
  blocks = (cache["index"] + CACHE_BLOCK - 1) // CACHE_BLOCK

  def reorder(x_RHLK):
    def move(block, x):
      start = block * CACHE_BLOCK
      part = jax.lax.dynamic_slice_in_dim(x, start, CACHE_BLOCK, axis=2)
      part = jnp.take(part, parents_R, axis=0, mode="clip")
      return jax.lax.dynamic_update_slice_in_dim(x, part, start, axis=2)
    return jax.lax.fori_loop(0, blocks, move, x_RHLK)

  layers_ = [{name: reorder(x) for name, x in layer.items()} for layer in cache["layers"]]
  return {"index": cache["index"], "layers": layers_}


def shift_right(tgt_out_BT: jnp.ndarray, segments_BT: jnp.ndarray | None = None
                ) -> jnp.ndarray:
  """Decoder input: BOS followed by the labels without their last position (in a packed
  row, BOS at the start of every segment)."""
  bos = jnp.full((tgt_out_BT.shape[0], 1), BOS_ID, tgt_out_BT.dtype)
  shifted = jnp.concatenate([bos, tgt_out_BT[:, :-1]], axis=1)
  if segments_BT is None:
    return shifted
  return jnp.where(masks.segment_positions(segments_BT) == 0, BOS_ID, shifted)


def drop_path_rates(rate: float, num_layers: int) -> list[float]:
  """Stochastic depth's rate for each layer of a stack: linear in depth (Huang et al.
  2016), `rate / N` at the first of N layers up to `rate` at the last."""
  return [rate * (i + 1) / num_layers for i in range(num_layers)]


class _Residual(hk.Module):
  """Wraps a sub-layer with dropout, stochastic depth (`drop_path`, the rate of this
  layer), a residual connection and pre- or post-norm."""

  def __init__(self, cfg: ModelConfig, drop_path: float = 0.0, name: str | None = None):
    super().__init__(name=name)
    self.cfg = cfg
    self.drop_path = drop_path
    self.norm = norm_layer(cfg.norm, "norm")

  def _branch(self, y: jnp.ndarray, is_training: bool) -> jnp.ndarray:
    y = dropout(y, self.cfg.dropout, is_training)
    return layers.drop_path(y, self.drop_path, is_training)

  def __call__(self, x: jnp.ndarray, sublayer: Callable[[jnp.ndarray], jnp.ndarray],
               is_training: bool) -> jnp.ndarray:
    if is_training and jax.default_backend() == "cpu":
      # one buffer per block for the residual stream and its gradient (XLA:CPU's fusion)
      x = layers.materialize(x, layers.key_words(hk.next_rng_key())[0].astype(jnp.float32))
    if self.cfg.pre_norm:
      return x + self._branch(sublayer(self.norm(x)), is_training)
    return self.norm(x + self._branch(sublayer(x), is_training))


class EncoderLayer(hk.Module):
  """Self-attention and feed-forward, each with a residual (`drop_path`: this layer's
  stochastic depth rate)."""

  def __init__(self, cfg: ModelConfig, drop_path: float = 0.0, name: str | None = None):
    super().__init__(name=name)
    self.self_attention = MultiHeadAttention(cfg.num_heads, cfg.head_dim,
                                             cfg.attention_dropout, cfg.qk_norm,
                                             name="self_attention")
    self.feed_forward = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.dropout,
                                    cfg.glu, name="feed_forward")
    self.res_attention = _Residual(cfg, drop_path, name="res_attention")
    self.res_ff = _Residual(cfg, drop_path, name="res_ff")

  def __call__(self, x_BSD, mask, is_training, rotation=None):
    """`rotation`: the self-attention's `rotary_tables` (None: not rotary)."""
    x_BSD = self.res_attention(
        x_BSD, lambda h: self.self_attention(h, h, mask, is_training, None, rotation),
        is_training)
    return self.res_ff(x_BSD, lambda h: self.feed_forward(h, is_training), is_training)


class DecoderLayer(hk.Module):
  """Causal self-attention, cross-attention to the encoder, feed-forward (`drop_path`:
  this layer's stochastic depth rate)."""

  def __init__(self, cfg: ModelConfig, drop_path: float = 0.0, name: str | None = None):
    super().__init__(name=name)
    self.cfg = cfg
    self.self_attention = MultiHeadAttention(cfg.num_heads, cfg.head_dim,
                                             cfg.attention_dropout, cfg.qk_norm,
                                             name="self_attention")
    self.cross_attention = MultiHeadAttention(cfg.num_heads, cfg.head_dim,
                                              cfg.attention_dropout, cfg.qk_norm,
                                              name="cross_attention")
    self.feed_forward = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.dropout,
                                    cfg.glu, name="feed_forward")
    self.res_self = _Residual(cfg, drop_path, name="res_self")
    self.res_cross = _Residual(cfg, drop_path, name="res_cross")
    self.res_ff = _Residual(cfg, drop_path, name="res_ff")

  def __call__(self, x_BTD, memory_BSD, self_mask, cross_mask, is_training, probs_sink=None,
               rotation=None):
    """`rotation`: the self-attention's `rotary_tables` (None: not rotary)."""
    x_BTD = self.res_self(
        x_BTD, lambda h: self.self_attention(h, h, self_mask, is_training, None, rotation),
        is_training)
    x_BTD = self.res_cross(
        x_BTD, lambda h: self.cross_attention(h, memory_BSD, cross_mask, is_training,
                                              probs_sink), is_training)
    return self.res_ff(x_BTD, lambda h: self.feed_forward(h, is_training), is_training)

  def init_cache(self, memory_BSD: jnp.ndarray, max_len: int, beam_size: int
                 ) -> tuple[Cache, Cache]:
    """An empty self-attention cache `[B * W, H, L, K]`, and the encoder's keys/values
    `[B, H, S, K]`, once per sentence."""
    shape = (memory_BSD.shape[0] * beam_size, self.cfg.num_heads, max_len, self.cfg.head_dim)
    zeros = jnp.zeros(shape, memory_BSD.dtype)
    cross_k, cross_v = self.cross_attention.project_kv(memory_BSD, head_major=True)
    return {"k": zeros, "v": zeros}, {"k": cross_k, "v": cross_v}

  def step(self, x_B1D, cache: Cache, source: Cache, index, src_mask, rotation=None
           ) -> tuple[jnp.ndarray, Cache]:
    """One decoding position: writes its key/value at `index` and attends to 0..index
    (with `rotation`, the position's `rotary_tables`, the cached keys are stored rotated)."""
    new_cache = {}

    def self_attend(h_B1D):
      q_B1HK, k_BH1K, v_BH1K = self.self_attention.project_qkv(h_B1D, rotation)
      new_cache["k"] = jax.lax.dynamic_update_slice_in_dim(cache["k"], k_BH1K, index, axis=2)
      new_cache["v"] = jax.lax.dynamic_update_slice_in_dim(cache["v"], v_BH1K, index, axis=2)
      mask = masks.cache_mask(index, cache["k"].shape[2])
      return self.self_attention.attend_heads(q_B1HK, new_cache["k"], new_cache["v"], mask,
                                              head_major=True)

    def cross_attend(h_R1D):
      # The W beams of a sentence (consecutive rows) are W query positions over the
      # sentence's one copy of the encoder keys: a [W, S] attention, not W [1, S] ones.
      h_BWD = h_R1D.reshape(source["k"].shape[0], -1, h_R1D.shape[-1])
      out_BWD = self.cross_attention.attend(h_BWD, source["k"], source["v"], src_mask,
                                            head_major=True)
      return out_BWD.reshape(h_R1D.shape)

    x_B1D = self.res_self(x_B1D, self_attend, False)
    x_B1D = self.res_cross(x_B1D, cross_attend, False)
    x_B1D = self.res_ff(x_B1D, lambda h: self.feed_forward(h, False), False)
    return x_B1D, new_cache


class Transformer(hk.Module):
  """Encoder-decoder with shared (tied) or separate embeddings."""

  def __init__(self, cfg: ModelConfig, name: str | None = "transformer"):
    super().__init__(name=name)
    self.cfg = cfg
    dtype = jnp.dtype(cfg.dtype)
    emb = lambda n: Embedding(cfg.vocab_size, cfg.d_model, cfg.max_len, cfg.positional,
                              dtype, cfg.fix_norm, name=n)
    if cfg.tied_embeddings:
      self.src_embed = self.tgt_embed = emb("shared_embedding")
      self.output = self.tgt_embed.attend
      self.output_weights = lambda: (self.tgt_embed.table(),
                                     jnp.zeros((cfg.vocab_size,), jnp.float32))
    else:
      self.src_embed, self.tgt_embed = emb("src_embedding"), emb("tgt_embedding")
      projection = Dense(cfg.vocab_size, name="output_projection")
      self.output = lambda x: projection(x).astype(jnp.float32)
      self.output_weights = lambda: (lambda w, b: (w.T, b))(*projection.params(cfg.d_model))
    self.encoder_layers = [
        EncoderLayer(cfg, rate, name=f"encoder_layer_{i}")
        for i, rate in enumerate(drop_path_rates(cfg.drop_path, cfg.encoder_layers))]
    self.decoder_layers = [
        DecoderLayer(cfg, rate, name=f"decoder_layer_{i}")
        for i, rate in enumerate(drop_path_rates(cfg.drop_path, cfg.decoder_layers))]
    # Pre-norm stacks need a final norm: their residual stream is never normalised.
    self.encoder_norm = norm_layer(cfg.norm, "encoder_norm") if cfg.pre_norm else (lambda x: x)
    self.decoder_norm = norm_layer(cfg.norm, "decoder_norm") if cfg.pre_norm else (lambda x: x)

  def _positions(self, ids_BT, segments_BT=None):
    if segments_BT is not None:
      return masks.segment_positions(segments_BT)
    return jnp.broadcast_to(jnp.arange(ids_BT.shape[1]), ids_BT.shape)

  def _rotation(self, positions_BT):
    """The self-attention layers' `rotary_tables` for these positions, once per stack;
    None where positions are added to the embeddings instead."""
    if self.cfg.positional != "rotary":
      return None
    return layers.rotary_tables(positions_BT, self.cfg.head_dim)

  def encode(self, src_BS: jnp.ndarray, is_training: bool = False,
             src_segments_BS: jnp.ndarray | None = None) -> jnp.ndarray:
    """Source ids `[B, S]` -> memory `[B, S, D]`. With segment ids (packed rows, 0 =
    padding), each sentence of a row attends to itself only and counts positions from 0."""
    positions_BS = self._positions(src_BS, src_segments_BS)
    x_BSD = self.src_embed(src_BS, positions_BS, self.cfg.word_dropout if is_training else 0.0)
    x_BSD = dropout(x_BSD, self.cfg.dropout, is_training)
    if src_segments_BS is None:
      mask = masks.padding_mask(src_BS)
    else:
      mask = masks.segment_mask(src_segments_BS, src_segments_BS)
    rotation = self._rotation(positions_BS)
    for layer in self.encoder_layers:
      x_BSD = layer(x_BSD, mask, is_training, rotation)
    return self.encoder_norm(x_BSD)

  def decode(self, tgt_in_BT, memory_BSD, src_BS, is_training: bool = False,
             probs_sink: list | None = None, src_segments_BS=None, tgt_segments_BT=None):
    """Teacher-forced decoder: input ids `[B, T]` -> logits `[B, T, V]` (float32)."""
    return self.output(self.decode_features(tgt_in_BT, memory_BSD, src_BS, is_training,
                                            probs_sink, src_segments_BS, tgt_segments_BT))

  def decode_features(self, tgt_in_BT, memory_BSD, src_BS, is_training: bool = False,
                      probs_sink: list | None = None, src_segments_BS=None,
                      tgt_segments_BT=None):
    """`decode` up to the output layer: the decoder's output `[B, T, D]`."""
    positions_BT = self._positions(tgt_in_BT, tgt_segments_BT)
    x_BTD = self.tgt_embed(tgt_in_BT, positions_BT, self.cfg.word_dropout if is_training else 0.0)
    x_BTD = dropout(x_BTD, self.cfg.dropout, is_training)
    if tgt_segments_BT is None:
      self_mask = masks.decoder_self_mask(tgt_in_BT)
      cross_mask = masks.padding_mask(src_BS)
    else:
      self_mask = (masks.causal_mask(tgt_in_BT.shape[1])
                   & masks.segment_mask(tgt_segments_BT, tgt_segments_BT))
      cross_mask = masks.segment_mask(tgt_segments_BT, src_segments_BS)
    rotation = self._rotation(positions_BT)
    for layer in self.decoder_layers:
      x_BTD = layer(x_BTD, memory_BSD, self_mask, cross_mask, is_training, probs_sink,
                    rotation)
    return self.decoder_norm(x_BTD)

  def __call__(self, src_BS, tgt_in_BT, is_training: bool = False,
               src_segments_BS=None, tgt_segments_BT=None):
    return self.output(self.features(src_BS, tgt_in_BT, is_training, src_segments_BS,
                                     tgt_segments_BT))

  def features(self, src_BS, tgt_in_BT, is_training: bool = False,
               src_segments_BS=None, tgt_segments_BT=None):
    """The teacher-forced decoder output `[B, T, D]` (the logits before the output layer)."""
    if (src_segments_BS is None) != (tgt_segments_BT is None):
      raise ValueError("packed batches need segment ids for both source and target")
    memory_BSD = self.encode(src_BS, is_training, src_segments_BS)
    return self.decode_features(tgt_in_BT, memory_BSD, src_BS, is_training, None,
                                src_segments_BS, tgt_segments_BT)

  def features_and_output_weights(self, src_BS, tgt_in_BT, is_training: bool = False,
                                  src_segments_BS=None, tgt_segments_BT=None):
    """`features`, and the output layer's weights `[V, D]` and bias `[V]` (float32):
    the training loss computes the logits itself (`loss.output_loss_sums`)."""
    return (self.features(src_BS, tgt_in_BT, is_training, src_segments_BS, tgt_segments_BT),
            *self.output_weights())

  def cross_attention(self, src_BS, tgt_in_BT) -> jnp.ndarray:
    """Cross-attention probabilities of every decoder layer, `[layers, B, H, T, S]`."""
    sink: list = []
    self.decode(tgt_in_BT, self.encode(src_BS), src_BS, probs_sink=sink)
    return jnp.stack(sink)

  def init_cache(self, memory_BSD, src_BS, max_len: int, beam_size: int = 1
                 ) -> tuple[Cache, Cache]:
    """The decoding state for `max_len` steps of `beam_size` hypotheses per sentence.

    Returns:
      cache: what each hypothesis owns, `B * W` rows (the W beams of a sentence
        consecutive): `{"index": [] int32, "layers": [{"k", "v": [B*W, H, L, K]}, ...]}`,
        L `max_len` rounded up to whole `CACHE_BLOCK`s. A search reorders its rows as
        beams are chosen (`reorder_cache`); the scalar index is shared.
      source: what the hypotheses of a sentence share and no search reorders, `B` rows:
        `{"mask": [B, 1, 1, S], "layers": [{"k", "v": [B, H, S, K]}, ...]}` (the encoder
        keys/values of each layer's cross-attention).
    """
    length = -(-max_len // CACHE_BLOCK) * CACHE_BLOCK  # whole blocks (`reorder_cache`)
    layers, source = zip(*(layer.init_cache(memory_BSD, length, beam_size)
                           for layer in self.decoder_layers))
    cache = {"index": jnp.zeros((), jnp.int32), "layers": list(layers)}
    return cache, {"mask": masks.padding_mask(src_BS), "layers": list(source)}

  def decode_step(self, ids_B: jnp.ndarray, cache: Cache, source: Cache
                  ) -> tuple[jnp.ndarray, Cache]:
    """Feeds one token per row at position `cache['index']`. Returns logits `[B, V]`
    (float32) and the updated cache; `source` is read only."""
    index = cache["index"]
    ids_B1 = ids_B[:, None]
    positions_B1 = jnp.broadcast_to(index, ids_B1.shape)
    x_B1D = self.tgt_embed(ids_B1, positions_B1)
    rotation = self._rotation(positions_B1)
    new_layers = []
    for layer, layer_cache, layer_source in zip(self.decoder_layers, cache["layers"],
                                                source["layers"]):
      x_B1D, layer_cache = layer.step(x_B1D, layer_cache, layer_source, index, source["mask"],
                                      rotation)
      new_layers.append(layer_cache)
    logits_B1V = self.output(self.decoder_norm(x_B1D))
    return logits_B1V[:, 0], {"index": index + 1, "layers": new_layers}


class Model:
  """The Haiku transforms of `Transformer`, with an explicit, checked rng policy."""

  def __init__(self, cfg: ModelConfig):
    self.cfg = cfg
    # The dtype of every matmul's operands: cfg.matmul_dtype where this backend runs it
    # with float32 products, else float32 (with a warning; the model is the same).
    self.matmul_dtype = cfg.matmul_dtype
    if cfg.matmul_dtype != "float32":
      why = layers.rounded_products_unsupported(cfg.matmul_dtype, jax.default_backend())
      if why is not None:
        logging.getLogger(__name__).warning(
            "model.matmul_dtype=%s: this %s backend does not run %s x %s -> float32 "
            "matmuls (%s); using float32 operands", cfg.matmul_dtype,
            jax.default_backend(), cfg.matmul_dtype, cfg.matmul_dtype, why)
        self.matmul_dtype = "float32"

    def scoped(f):  # traced with these matmul operands (layers.matmul_operands)
      def call(*args, **kwargs):
        with layers.matmul_operands(self.matmul_dtype):
          return f(*args, **kwargs)
      return call

    def fns():
      t = Transformer(cfg)
      return scoped(t.__call__), tuple(map(scoped, (
          t.__call__, t.encode, t.init_cache, t.decode_step, t.cross_attention,
          t.features_and_output_weights)))

    self._transformed = hk.multi_transform(fns)

  def init(self, rng: jax.Array, src_BS: jnp.ndarray, tgt_in_BT: jnp.ndarray) -> Params:
    return self._transformed.init(rng, src_BS, tgt_in_BT, is_training=True)

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
        return Transformer(cfg)(ids_BT, ids_BT, is_training=False)

    dummy = jax.ShapeDtypeStruct((1, 4), jnp.int32)
    return jax.eval_shape(hk.transform(init_fn).init, None, dummy)

  def apply(self, params: Params, src_BS, tgt_in_BT, *, rng: jax.Array | None = None,
            is_training: bool = False, src_segments_BS=None, tgt_segments_BT=None,
            dropout_scale=None) -> jnp.ndarray:
    """Teacher-forced logits `[B, T, V]`; `is_training` turns dropout on and needs `rng`;
    `dropout_scale` (a float or traced scalar) multiplies every dropout rate.

    Packed rows (several sentence pairs per row) pass segment ids `[B, S]` and `[B, T]`
    (1, 2, ... per sentence, 0 for padding); the decoder input then has BOS at every
    segment start (`shift_right(tgt, tgt_segments)`).
    """
    if is_training and rng is None:
      raise ValueError("Model.apply(is_training=True) applies dropout and needs an rng: "
                       "pass rng=jax.random.PRNGKey(...) (inference needs none)")
    with layers.scaled_dropout(dropout_scale):
      return self._transformed.apply[0](params, rng, src_BS, tgt_in_BT,
                                        is_training=is_training,
                                        src_segments_BS=src_segments_BS,
                                        tgt_segments_BT=tgt_segments_BT)

  def apply_features(self, params: Params, src_BS, tgt_in_BT, *, rng: jax.Array | None = None,
                     is_training: bool = False, src_segments_BS=None, tgt_segments_BT=None,
                     dropout_scale=None):
    """As `apply`, up to the output layer: (decoder output `[B, T, D]`, output weights
    `[V, D]`, output bias `[V]`)."""
    if is_training and rng is None:
      raise ValueError("Model.apply_features(is_training=True) applies dropout and needs an "
                       "rng: pass rng=jax.random.PRNGKey(...)")
    with layers.scaled_dropout(dropout_scale):
      return self._transformed.apply[5](params, rng, src_BS, tgt_in_BT,
                                        is_training=is_training,
                                        src_segments_BS=src_segments_BS,
                                        tgt_segments_BT=tgt_segments_BT)

  def encode(self, params: Params, src_BS) -> jnp.ndarray:
    return self._transformed.apply[1](params, None, src_BS)

  def init_cache(self, params: Params, memory_BSD, src_BS, max_len: int,
                 beam_size: int = 1) -> tuple[Cache, Cache]:
    """(cache, source): see `Transformer.init_cache`."""
    return self._transformed.apply[2](params, None, memory_BSD, src_BS, max_len, beam_size)

  def decode_step(self, params: Params, ids_B, cache: Cache, source: Cache
                  ) -> tuple[jnp.ndarray, Cache]:
    return self._transformed.apply[3](params, None, ids_B, cache, source)

  def cross_attention(self, params: Params, src_BS, tgt_in_BT) -> jnp.ndarray:
    return self._transformed.apply[4](params, None, src_BS, tgt_in_BT)

  reorder_cache = staticmethod(reorder_cache)


def count_params(params: Params) -> int:
  return sum(x.size for x in jax.tree_util.tree_leaves(params))
