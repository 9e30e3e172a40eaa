"""Model properties: shapes, parameter count, causality, padding, rng policy, numerics."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.config import PRESETS, ModelConfig
from seq2seq.model import layers
from seq2seq.model.transformer import Model, count_params, shift_right
from seq2seq.numerics import ops, speed_probe
from seq2seq.vocab import PAD_ID

TINY = PRESETS["tiny"]
SRC = jnp.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0]])
TGT = jnp.array([[11, 12, 13, 3, 0], [14, 15, 16, 17, 3]])


def _init(cfg=TINY, src=SRC, tgt=TGT):
  model = Model(cfg)
  return model, model.init(jax.random.PRNGKey(0), src, shift_right(tgt))


def test_shapes():
  model, params = _init()
  B, S, T = SRC.shape[0], SRC.shape[1], TGT.shape[1]
  assert model.apply(params, SRC, shift_right(TGT)).shape == (B, T, TINY.vocab_size)
  memory = model.encode(params, SRC)
  assert memory.shape == (B, S, TINY.d_model)
  cache, source = model.init_cache(params, memory, SRC, max_len=9)
  # One hypothesis per sentence: heads first, 9 positions; beams: positions first, 2 whole
  # blocks of 8, and each row's table of the rows holding its positions (kv_cache)
  assert cache["layers"][0]["k"].shape == (B, TINY.num_heads, 9, TINY.head_dim)
  beams, _ = model.init_cache(params, memory, SRC, max_len=9, beam_size=3)
  assert beams["layers"][0]["k"].shape == (B * 3, 16, TINY.num_heads, TINY.head_dim)
  assert beams["origins"].shape == (B * 3, 16) and cache["origins"] is None
  assert source["layers"][0]["k"].shape == (B, TINY.num_heads, S, TINY.head_dim)
  logits, cache = model.decode_step(params, TGT[:, 0], cache, source)
  assert logits.shape == (B, TINY.vocab_size) and int(cache["index"]) == 1


@pytest.mark.parametrize("tied", [True, False])
def test_param_shapes_match_init(tied):
  cfg = dataclasses.replace(TINY, tied_embeddings=tied)
  want = jax.eval_shape(Model(cfg).init, jax.random.PRNGKey(0), SRC, shift_right(TGT))
  assert Model(cfg).param_shapes() == want


def test_base_parameter_count_matches_architecture():
  cfg = PRESETS["base"]
  V, D, F = cfg.vocab_size, cfg.d_model, cfg.d_ff
  attention = 4 * (D * D + D)
  ff = D * F + F + F * D + D
  norm = 2 * D
  encoder = cfg.encoder_layers * (attention + ff + 2 * norm) + norm
  decoder = cfg.decoder_layers * (2 * attention + ff + 3 * norm) + norm
  expected = V * D + encoder + decoder  # tied: one embedding, also the output layer
  shapes = jax.eval_shape(Model(cfg).init, jax.random.PRNGKey(0), SRC, TGT)
  assert count_params(shapes) == expected
  untied = dataclasses.replace(cfg, tied_embeddings=False)
  shapes = jax.eval_shape(Model(untied).init, jax.random.PRNGKey(0), SRC, TGT)
  assert count_params(shapes) == expected + 2 * V * D + V  # src, tgt embedding, output w+b


def test_decoder_causality_by_gradient():
  # Learned, untied positions: row j of the target position table feeds position j only.
  cfg = dataclasses.replace(TINY, positional="learned", tied_embeddings=False)
  model, params = _init(cfg)
  tgt_in = shift_right(TGT)
  key = "transformer/~/tgt_embedding"
  T = TGT.shape[1]
  for t in range(T):
    def logits_at_t(pos_table, t=t):
      p = dict(params)
      p[key] = {**params[key], "positions": pos_table}
      return model.apply(p, SRC, tgt_in)[:, t].sum()
    grad = jax.grad(logits_at_t)(params[key]["positions"])
    row_norms = np.abs(np.asarray(grad[:T])).sum(-1)
    assert np.all(row_norms[t + 1:] == 0.0), f"position {t} sees the future: {row_norms}"
    assert np.all(row_norms[:t + 1] > 0.0), f"position {t} ignores its prefix: {row_norms}"


def test_rotary_decoder_is_causal():
  # No position table to differentiate: change every later input token instead.
  model, params = _init(dataclasses.replace(TINY, positional="rotary"))
  tgt_in = shift_right(TGT)
  logits = np.asarray(model.apply(params, SRC, tgt_in))
  for t in range(TGT.shape[1] - 1):
    changed = tgt_in.at[:, t + 1:].set(42)
    logits2 = np.asarray(model.apply(params, SRC, changed))
    np.testing.assert_allclose(logits2[:, :t + 1], logits[:, :t + 1], atol=1e-5, rtol=1e-5)
    assert not np.allclose(logits2[:, t + 1], logits[:, t + 1])


def test_rotary_scores_depend_on_relative_position_only():
  q = jax.random.normal(jax.random.PRNGKey(0), (1, 6, 2, 8))
  k = jax.random.normal(jax.random.PRNGKey(1), (1, 6, 2, 8))
  positions = jnp.array([[0, 1, 2, 5, 9, 30]])
  rotate = lambda x, p: layers.rotary(x, layers.rotary_tables(p, x.shape[-1]))
  scores = lambda p: np.einsum("bthk,bshk->bhts", rotate(q, p), rotate(k, p))
  np.testing.assert_allclose(scores(positions + 17), scores(positions), atol=1e-4)
  # a rotation: lengths kept, directions changed, position 0 left alone
  rotated = np.asarray(rotate(q, positions))
  np.testing.assert_allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(q, axis=-1),
                             rtol=1e-5)
  np.testing.assert_allclose(rotated[:, 0], q[:, 0], rtol=1e-6)
  assert not np.allclose(rotated[:, 1:], q[:, 1:], atol=1e-2)
  unrotated = np.einsum("bthk,bshk->bhts", q, k)
  assert not np.allclose(scores(positions), unrotated, atol=1e-2)


def _target_positions(tgt):
  return np.asarray(tgt) != PAD_ID


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary"])
def test_padding_invariance(positional):
  model, params = _init(dataclasses.replace(TINY, positional=positional))
  tgt_in = shift_right(TGT)
  logits = np.asarray(model.apply(params, SRC, tgt_in))
  real = _target_positions(TGT)
  # Other ids at target positions whose label is padding.
  tgt_in2 = jnp.where(jnp.asarray(real), tgt_in, 55)
  logits2 = np.asarray(model.apply(params, SRC, tgt_in2))
  np.testing.assert_array_equal(logits[real], logits2[real])
  # More padding on both sides.
  src3 = jnp.pad(SRC, ((0, 0), (0, 5)))
  tgt3 = jnp.pad(TGT, ((0, 0), (0, 4)))
  logits3 = np.asarray(model.apply(params, src3, shift_right(tgt3)))[:, :TGT.shape[1]]
  np.testing.assert_allclose(logits[real], logits3[real], atol=1e-5, rtol=1e-5)


def test_encoder_states_under_source_padding_are_ignored():
  model, params = _init()
  tgt_in = shift_right(TGT)
  logits = np.asarray(model.apply(params, SRC, tgt_in))
  memory = model.encode(params, SRC)
  noisy = jnp.where((SRC == PAD_ID)[..., None], 100.0, memory)
  cache, source = model.init_cache(params, noisy, SRC, TGT.shape[1])
  steps = []
  for t in range(TGT.shape[1]):
    out, cache = model.decode_step(params, tgt_in[:, t], cache, source)
    steps.append(out)
  real = _target_positions(TGT)
  np.testing.assert_allclose(np.stack(steps, 1)[real], logits[real], atol=1e-5)


def test_cross_attention_is_used():
  model, params = _init()
  tgt_in = shift_right(TGT)
  logits = model.apply(params, SRC, tgt_in)
  logits2 = model.apply(params, SRC.at[0, 1].set(99), tgt_in)
  assert not np.allclose(logits[0], logits2[0])
  np.testing.assert_array_equal(logits[1], logits2[1])  # the other sentence is untouched


def test_fully_padded_source_gives_finite_logits():
  model, params = _init()
  src = SRC.at[1].set(PAD_ID)
  assert np.isfinite(np.asarray(model.apply(params, src, shift_right(TGT)))).all()


def test_jit_matches_eager_and_dropout_policy():
  cfg = dataclasses.replace(TINY, dropout=0.3)
  model, params = _init(cfg)
  tgt_in = shift_right(TGT)
  eager = model.apply(params, SRC, tgt_in)
  jitted = jax.jit(model.apply)(params, SRC, tgt_in)
  np.testing.assert_allclose(eager, jitted, atol=1e-5)
  np.testing.assert_array_equal(eager, model.apply(params, SRC, tgt_in))  # no dropout
  train = jax.jit(model.apply, static_argnames="is_training")
  a = train(params, SRC, tgt_in, rng=jax.random.PRNGKey(1), is_training=True)
  b = train(params, SRC, tgt_in, rng=jax.random.PRNGKey(2), is_training=True)
  a2 = train(params, SRC, tgt_in, rng=jax.random.PRNGKey(1), is_training=True)
  assert not np.allclose(a, b)
  np.testing.assert_array_equal(a, a2)
  with pytest.raises(ValueError, match="needs an rng"):
    model.apply(params, SRC, tgt_in, is_training=True)


def test_dropout_scale_multiplies_every_rate_even_when_traced():
  # every kind of dropout on, so that a scale that missed one would show
  cfg = dataclasses.replace(TINY, dropout=0.3, attention_dropout=0.2)
  half = dataclasses.replace(TINY, dropout=0.15, attention_dropout=0.1)
  model, params = _init(cfg)
  tgt_in, rng = shift_right(TGT), jax.random.PRNGKey(4)
  train = jax.jit(lambda scale: model.apply(params, SRC, tgt_in, rng=rng, is_training=True,
                                            dropout_scale=scale))
  # scale 0: no dropout at all, the evaluation logits
  np.testing.assert_allclose(train(jnp.float32(0.0)), model.apply(params, SRC, tgt_in),
                             atol=1e-5)
  # a traced scale of 0.5 is the model with half the rates, mask for mask
  halved = Model(half).apply(params, SRC, tgt_in, rng=rng, is_training=True)
  np.testing.assert_allclose(train(jnp.float32(0.5)), halved, atol=1e-5)
  full = model.apply(params, SRC, tgt_in, rng=rng, is_training=True)
  np.testing.assert_allclose(train(jnp.float32(1.0)), full, atol=1e-5)
  assert not np.allclose(halved, full)
  # the traced threshold gives the static mask's keep fraction
  mask = lambda r: ops.keep_mask(jax.random.PRNGKey(7), r, (4096, 64))
  np.testing.assert_array_equal(jax.jit(mask)(jnp.float32(0.3)), mask(0.3))
  assert np.all(jax.jit(mask)(jnp.float32(0.0)))


def test_bfloat16_compute_keeps_float32_params():
  cfg = dataclasses.replace(TINY, dtype="bfloat16")
  model, params = _init(cfg)
  assert {x.dtype for x in jax.tree_util.tree_leaves(params)} == {jnp.dtype("float32")}
  logits = model.apply(params, SRC, shift_right(TGT))
  assert logits.dtype == jnp.float32
  reference = Model(TINY).apply(params, SRC, shift_right(TGT))
  np.testing.assert_allclose(logits, reference, atol=0.15)


# Where the backend cannot run bfloat16 x bfloat16 -> float32 matmuls (XLA:CPU on a CPU
# without a library kernel for them), the model falls back to float32 operands: only the
# fallback can be tested there.
_NO_ROUNDED_PRODUCTS = speed_probe.rounded_products_unsupported("bfloat16", jax.default_backend())
needs_rounded_products = pytest.mark.skipif(
    _NO_ROUNDED_PRODUCTS is not None,
    reason=f"this backend does not run bfloat16 x bfloat16 -> float32 matmuls: "
           f"{_NO_ROUNDED_PRODUCTS}")


@needs_rounded_products
def test_bfloat16_matmul_operands_model():
  """`model.matmul_dtype="bfloat16"`: float32 params, activations and logits; the logits
  and the loss gradient within bfloat16 rounding of float32's (10 % of the norm: the
  rounding compounds over the layers); cached decoding still equal
  to the teacher-forced logits."""
  one_layer = dataclasses.replace(TINY, encoder_layers=1, decoder_layers=1)
  cfg = dataclasses.replace(one_layer, matmul_dtype="bfloat16")
  model, params = _init(cfg)
  reference = Model(one_layer)
  logits = model.apply(params, SRC, shift_right(TGT))
  want = reference.apply(params, SRC, shift_right(TGT))
  assert logits.dtype == jnp.float32
  np.testing.assert_allclose(logits, want, atol=0.05)
  assert float(jnp.max(jnp.abs(logits - want))) > 1e-5  # the operands were rounded

  def loss(m):
    return jax.jit(jax.grad(lambda p: jnp.sum(jax.nn.log_softmax(m.apply(p, SRC, shift_right(TGT)))[..., 5])))
  grads, grads_want = loss(model)(params), loss(reference)(params)
  # relative to each gradient, or to 1 % of the largest (the key biases' true gradient
  # is 0, and rounding is all there is of it)
  leaves = list(zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(grads_want)))
  scale = max(float(jnp.linalg.norm(w)) for _, w in leaves)
  for g, w in leaves:
    assert g.dtype == jnp.float32
    assert float(jnp.linalg.norm(g - w)) <= 0.1 * max(float(jnp.linalg.norm(w)), scale / 100)

  memory = model.encode(params, SRC)
  cache, source = model.init_cache(params, memory, SRC, max_len=TGT.shape[1])
  tgt_in = shift_right(TGT)
  step = jax.jit(model.decode_step)
  for t in range(TGT.shape[1]):
    step_logits, cache = step(params, tgt_in[:, t], cache, source)
    np.testing.assert_allclose(step_logits, logits[:, t], atol=0.05)


def test_config_validation():
  with pytest.raises(ValueError, match="matmul_dtype must be 'float32', 'bfloat16' or 'auto'"):
    ModelConfig(matmul_dtype="float16")
  with pytest.raises(ValueError, match="divisible"):
    ModelConfig(d_model=10, num_heads=3)
  with pytest.raises(ValueError, match="even head width"):
    ModelConfig(d_model=12, num_heads=4, positional="rotary")


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary"])
def test_packed_rows_equal_separate_rows(positional):
  # Two pairs in one packed row must give the logits that each gets alone in its row.
  model, params = _init(dataclasses.replace(TINY, positional=positional))
  s1, t1 = [5, 6, 7, 3], [11, 12, 3]
  s2, t2 = [9, 10, 3], [14, 15, 16, 17, 3]
  src = jnp.array([s1 + s2 + [0]])
  tgt = jnp.array([t1 + t2 + [0, 0]])
  src_seg = jnp.array([[1] * 4 + [2] * 3 + [0]])
  tgt_seg = jnp.array([[1] * 3 + [2] * 5 + [0, 0]])
  packed = model.apply(params, src, shift_right(tgt, tgt_seg), src_segments_BS=src_seg,
                       tgt_segments_BT=tgt_seg)
  alone1 = model.apply(params, jnp.array([s1]), shift_right(jnp.array([t1])))
  alone2 = model.apply(params, jnp.array([s2]), shift_right(jnp.array([t2])))
  np.testing.assert_allclose(packed[0, :3], alone1[0], atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(packed[0, 3:8], alone2[0], atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the boundaries are XLA:CPU's")
def test_a_training_step_keeps_a_fusion_boundary_on_every_residual():
  """`Numerics.residual_stream` puts each residual in a buffer of its own with a
  conditional on a parameter's value (`Numerics.training_residuals`): XLA cannot fold it away, in
  the forward pass or the gradient. No rng key is drawn for it."""
  cfg = dataclasses.replace(TINY, dropout=0.1)
  model, params = _init(cfg)
  tgt_in = shift_right(TGT)

  def loss(p, rng):
    return jnp.sum(model.apply(p, SRC, tgt_in, rng=rng, is_training=True) ** 2)

  hlo = jax.jit(jax.grad(loss)).lower(params, jax.random.PRNGKey(0)).compile().as_text()
  residuals = 2 * cfg.encoder_layers + 3 * cfg.decoder_layers
  assert hlo.count("conditional(") >= 2 * residuals  # forward and backward
