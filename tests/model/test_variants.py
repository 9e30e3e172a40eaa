"""The model options of models trained elsewhere (docs/pretrained.md): each computes
what it names, the defaults stay this package's, and closed output rows are never
predicted nor smoothed towards."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.config import ModelConfig
from seq2seq.model.layers import ACTIVATIONS, sinusoidal_positions
from seq2seq.model.transformer import Model, shift_right
from seq2seq.training.loss import loss_sums, output_loss_sums
from seq2seq.vocab import BOS_ID, CLOSED_BIAS, EOS_ID

CFG = ModelConfig(vocab_size=40, d_model=16, num_heads=2, d_ff=32, encoder_layers=1,
                  decoder_layers=1, max_len=16, dropout=0.0)
SRC = np.array([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, 0]], np.int32)
TGT = np.array([[10, 11, EOS_ID], [12, EOS_ID, 0]], np.int32)


def model_and_params(**changes):
  cfg = dataclasses.replace(CFG, **changes)
  model = Model(cfg)
  return model, model.init(jax.random.PRNGKey(0), SRC, shift_right(TGT))


def test_the_sinusoid_layouts():
  d, rows = 8, 5
  interleaved = sinusoidal_positions(rows, d)
  halves = sinusoidal_positions(rows, d, "halves")
  np.testing.assert_array_equal(halves, np.concatenate([interleaved[:, 0::2],
                                                        interleaved[:, 1::2]], axis=1))
  t2t = sinusoidal_positions(rows, d, "tensor2tensor")
  freq = np.exp(-math.log(10000.0) * np.arange(d // 2) / (d // 2 - 1))
  np.testing.assert_allclose(t2t[3], np.concatenate([np.sin(3 * freq), np.cos(3 * freq)]),
                             rtol=1e-6)
  assert not np.allclose(t2t, halves)


@pytest.mark.parametrize("name, x, expected", [
    ("swish", 1.0, 1.0 / (1.0 + math.exp(-1.0))),
    ("gelu_sigmoid", 1.0, 1.0 / (1.0 + math.exp(-1.702))),
    ("gelu_erf", 1.0, 0.5 * (1.0 + math.erf(1.0 / math.sqrt(2.0)))),
    ("relu", -1.0, 0.0),
])
def test_the_activations(name, x, expected):
  assert float(ACTIVATIONS[name](jnp.float32(x))) == pytest.approx(expected, rel=1e-5)


def test_a_zero_start_does_not_read_the_bos_embedding():
  model, params = model_and_params(decoder_start="zeros")
  tgt_in = shift_right(TGT)
  changed = jax.tree_util.tree_map(np.array, params)
  changed["transformer/~/shared_embedding"]["embeddings"][BOS_ID] += 3.0
  a, b = model.apply(params, SRC, tgt_in), model.apply(changed, SRC, tgt_in)
  # the first position reads only BOS on the target side; its row is not read there
  # (it is an output row too: the BOS logit moves, no other)
  others = np.arange(CFG.vocab_size) != BOS_ID
  np.testing.assert_allclose(np.asarray(a)[:, 0, others], np.asarray(b)[:, 0, others],
                             rtol=1e-5, atol=1e-5)
  model_bos, _ = model_and_params()
  assert not np.allclose(model_bos.apply(params, SRC, tgt_in)[:, 0], a[:, 0])


def test_the_embedding_scale_and_the_output_bias():
  scaled, params = model_and_params(output_bias=True)
  unscaled = Model(dataclasses.replace(CFG, output_bias=True, embedding_scale=False))
  tgt_in = shift_right(TGT)
  assert not np.allclose(scaled.apply(params, SRC, tgt_in), unscaled.apply(params, SRC, tgt_in))
  shifted = jax.tree_util.tree_map(np.array, params)
  shifted["transformer"]["output_bias"] += np.arange(CFG.vocab_size, dtype=np.float32)
  np.testing.assert_allclose(
      scaled.apply(shifted, SRC, tgt_in) - scaled.apply(params, SRC, tgt_in),
      np.broadcast_to(np.arange(CFG.vocab_size, dtype=np.float32), (2, 3, CFG.vocab_size)),
      rtol=1e-5, atol=1e-4)


def test_the_layer_norm_epsilon_is_used():
  model, params = model_and_params()
  other = Model(dataclasses.replace(CFG, layer_norm_epsilon=0.5))
  tgt_in = shift_right(TGT)
  assert not np.allclose(model.apply(params, SRC, tgt_in), other.apply(params, SRC, tgt_in))


def closed_params(model, params):
  closed = jax.tree_util.tree_map(np.array, params)
  closed["transformer"]["output_bias"][[0, 2]] = CLOSED_BIAS
  return closed


def test_closed_rows_have_no_probability_and_no_smoothing():
  model, params = model_and_params(output_bias=True)
  params = closed_params(model, params)
  tgt_in = shift_right(TGT)
  logp = np.asarray(model.log_probs(params, SRC, tgt_in))
  assert np.all(np.exp(logp[..., [0, 2]]) == 0.0)
  # the loss is the smoothed loss over the open rows alone
  logits = model.apply(params, SRC, tgt_in)
  open_rows = np.setdiff1d(np.arange(CFG.vocab_size), [0, 2])
  remap = np.full(CFG.vocab_size, -1)
  remap[open_rows] = np.arange(len(open_rows))
  labels = np.where(TGT > 0, remap[TGT], 0)
  expected = loss_sums(logits[..., open_rows], jnp.asarray(np.where(TGT > 0, labels, 0)), 0.1)
  # TGT's padding keeps label 0 (pad) in both: weight 0
  got = loss_sums(logits, jnp.asarray(TGT), 0.1, closed=True)
  assert float(got["loss"]) == pytest.approx(float(expected["loss"]), rel=1e-5)
  assert float(got["loss"]) < 1e3


def test_the_chunked_loss_and_its_gradient_with_closed_rows():
  model, params = model_and_params(output_bias=True)
  params = closed_params(model, params)
  tgt_in = shift_right(TGT)

  def full(p):
    return loss_sums(model.apply(p, SRC, tgt_in), jnp.asarray(TGT), 0.1, closed=True)["loss"]

  def chunked(p):
    x, w, b = model.apply_features(p, SRC, tgt_in)
    return output_loss_sums(x, w, b, jnp.asarray(TGT), 0.1, chunk=4, closed=True)["loss"]

  assert float(full(params)) == pytest.approx(float(chunked(params)), rel=1e-5)
  g_full, g_chunked = jax.grad(full)(params), jax.grad(chunked)(params)
  for k in g_full:
    for n in g_full[k]:
      np.testing.assert_allclose(g_full[k][n], g_chunked[k][n], rtol=1e-4, atol=1e-5)
  # nothing pushes a closed row open
  assert np.all(np.asarray(g_chunked["transformer"]["output_bias"])[[0, 2]] == 0.0)


def test_the_defaults_are_this_package_s_model():
  cfg = ModelConfig()
  assert (cfg.sinusoidal, cfg.embedding_scale, cfg.output_bias, cfg.decoder_start,
          cfg.layer_norm_epsilon) == ("interleaved", True, False, "bos", 1e-5)
  assert "transformer" not in model_and_params()[1]  # no output bias parameter


@pytest.mark.parametrize("field, value", [("activation", "tanh"), ("sinusoidal", "mixed"),
                                          ("decoder_start", "eos"),
                                          ("layer_norm_epsilon", 0.0)])
def test_an_unknown_option_value_is_refused_by_name(field, value):
  with pytest.raises(ValueError, match=f"model.{field}"):
    dataclasses.replace(CFG, **{field: value})
