"""The training loss: label smoothing, the accuracy count, the chunked output layer."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.config import PRESETS, Config, TrainConfig
from seq2seq.model.transformer import Model, shift_right
from seq2seq.training.loss import SUM_KEYS, loss_sums, output_loss_sums
from seq2seq.training.train_step import DataParallelSteps


def test_label_smoothed_loss_matches_the_one_hot_definition():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 7)).astype(np.float32)
  labels = np.array([[4, 5, 0], [6, 0, 0]])
  sums = loss_sums(logits, labels, 0.1)
  logp = jax.nn.log_softmax(logits)
  target = 0.9 * np.eye(7)[labels] + 0.1 / 7
  per_token = -(target * logp).sum(-1)
  mask = labels != 0
  np.testing.assert_allclose(sums["loss"], per_token[mask].sum(), rtol=1e-5)
  assert sums["tokens"] == 3


def test_loss_counts_a_token_correct_when_its_label_is_the_argmax():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(2, 4, 7)).astype(np.float32)
  top = logits.argmax(-1)
  labels = np.array([[top[0, 0], (top[0, 1] + 1) % 7, top[0, 2], 0],
                     [(top[1, 0] + 3) % 7, top[1, 1], 0, 0]])
  labels = np.where(np.arange(4) < [[3], [2]], np.maximum(labels, 1), 0)  # ids 1..6 real
  want = ((top == labels) & (labels != 0)).sum()
  assert 0 < want < 5
  for sums in (loss_sums(logits, labels, 0.1), jax.jit(loss_sums, static_argnums=2)(
      logits, labels, 0.1)):
    assert float(sums["correct"]) == want


# The tied output layer (the embedding table, whose gradient adds to the inputs') in
# float32, gradients and all; the untied one (weights and a bias) with bfloat16 operands.
@pytest.mark.parametrize("tied,dtype,matmul_dtype", [
    (True, "float32", "float32"), (False, "float32", "bfloat16")])
@pytest.mark.slow
def test_chunked_output_loss_equals_the_full_logits(tied, dtype, matmul_dtype):
  """Loss sums and gradients (of every parameter) of `output_loss_sums`, in chunks that
  do not divide the tokens, equal those of `loss_sums` on the full logits."""
  cfg = dataclasses.replace(PRESETS["tiny"], tied_embeddings=tied, dtype=dtype,
                            matmul_dtype=matmul_dtype, encoder_layers=1, decoder_layers=1)
  model = Model(cfg)
  rng = np.random.default_rng(0)
  src = jnp.asarray(rng.integers(4, cfg.vocab_size, (3, 9)))
  tgt = jnp.asarray(rng.integers(4, cfg.vocab_size, (3, 7))).at[1, 4:].set(0)
  params = model.init(jax.random.PRNGKey(0), src, shift_right(tgt))
  key = jax.random.PRNGKey(1)

  def full(p):
    logits = model.apply(p, src, shift_right(tgt), rng=key, is_training=True)
    sums = loss_sums(logits, tgt, 0.1)
    return sums["loss"] + 0.5 * sums["nll"], sums

  def chunked(p):
    x, w, b = model.apply_features(p, src, shift_right(tgt), rng=key, is_training=True)
    # 21 tokens: 6 chunks, 3 padded
    sums = output_loss_sums(x, w, b, tgt, 0.1, chunk=4, matmul_dtype=model.numerics.operand_dtype)
    return sums["loss"] + 0.5 * sums["nll"], sums

  (_, want), grads_want = jax.jit(jax.value_and_grad(full, has_aux=True))(params)
  (_, got), grads_got = jax.jit(jax.value_and_grad(chunked, has_aux=True))(params)
  low_precision = "bfloat16" in (dtype, matmul_dtype)
  tol = 3e-2 if low_precision else 1e-4
  for k in SUM_KEYS:
    np.testing.assert_allclose(got[k], want[k], rtol=tol)
  assert got["tokens"] == 18
  with pytest.raises(ValueError, match=r"train.loss_chunk=-1: expected an integer >= 0"):
    DataParallelSteps(Config(model=cfg, train=TrainConfig(loss_chunk=-1)), model)
  if low_precision:
    return  # bfloat16 gradients of both forms differ by their own rounding: sums only
  # each parameter's gradient, to float rounding relative to its largest element (or to
  # 1 % of the largest of all: the key biases' true gradient is 0, theirs is rounding)
  scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree_util.tree_leaves(grads_want))
  errors = jax.tree_util.tree_map(
      lambda a, b: float(jnp.max(jnp.abs(a - b)) / max(float(jnp.max(jnp.abs(b))), scale / 100)),
      grads_got, grads_want)
  assert max(jax.tree_util.tree_leaves(errors)) < tol, errors
