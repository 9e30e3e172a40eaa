"""The training loss: label-smoothed cross entropy, summed over non-pad tokens.

`loss_sums` takes logits. `output_loss_sums` takes the decoder's output and the output
layer's weights instead and never holds the `[tokens, vocab]` logits or their gradient:
it computes them chunk by chunk, forward and again backward (a custom VJP, one extra
matmul). Its peak memory is lower by the logits' size, and with bfloat16 operands
XLA:CPU runs it faster (`train.loss_chunk`; docs/experiments.md).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from seq2seq.numerics import ops
from seq2seq.vocab import CLOSED_BIAS, PAD_ID

SUM_KEYS = ("loss", "nll", "tokens", "correct")


def _open_mean(logits_NV: jnp.ndarray, closed: bool) -> jnp.ndarray:
  """The mean logit of each row over the open classes (all of them unless `closed`)."""
  if not closed:
    return jnp.mean(logits_NV, axis=-1)
  open_NV = logits_NV > CLOSED_BIAS / 2
  return (jnp.sum(jnp.where(open_NV, logits_NV, 0.0), axis=-1)
          / jnp.sum(open_NV, axis=-1).astype(jnp.float32))


def loss_sums(logits_BTV: jnp.ndarray, labels_BT: jnp.ndarray, smoothing: float,
              closed: bool = False) -> dict[str, jnp.ndarray]:
  """Label-smoothed cross entropy summed over non-pad tokens, without a one-hot `[B, T, V]`.

  With smoothing e the target distribution is (1 - e) on the label plus e / V on every
  piece, so loss = -(1 - e) log p(label) - e * mean_v log p(v). "correct" counts the
  tokens whose label has the largest logit (`_is_top`). `closed`: the model may have
  closed rows (`CLOSED_BIAS`), which the smoothing leaves out.
  """
  logits_BTV = logits_BTV.astype(jnp.float32)
  lse_BT = jax.nn.logsumexp(logits_BTV, axis=-1)
  label_logit_BT = jnp.take_along_axis(logits_BTV, labels_BT[..., None], axis=-1)[..., 0]
  nll_BT = lse_BT - label_logit_BT
  smooth_BT = lse_BT - _open_mean(logits_BTV, closed)
  loss_BT = (1.0 - smoothing) * nll_BT + smoothing * smooth_BT
  weight_BT = (labels_BT != PAD_ID).astype(jnp.float32)
  correct_BT = _is_top(logits_BTV, label_logit_BT)
  return {"loss": jnp.sum(loss_BT * weight_BT), "nll": jnp.sum(nll_BT * weight_BT),
          "tokens": jnp.sum(weight_BT), "correct": jnp.sum(correct_BT * weight_BT)}


def _is_top(logits_NV: jnp.ndarray, label_logit_N: jnp.ndarray) -> jnp.ndarray:
  """1.0 where the label's logit is the largest, else 0.0 (no gradient).

  The same as `argmax(logits) == label` except on exact ties, which count as correct
  here. A max is a plain reduction; XLA:CPU runs argmax as a variadic (value, index)
  reduction over the whole `[tokens, vocab]` array, a share of the `compact` training
  step (docs/experiments.md).
  """
  top_N = jnp.max(jax.lax.stop_gradient(logits_NV), axis=-1)
  return (jax.lax.stop_gradient(label_logit_N) >= top_N).astype(jnp.float32)


def output_loss_sums(x_BTD: jnp.ndarray, w_VD: jnp.ndarray, b_V: jnp.ndarray,
                     labels_BT: jnp.ndarray, smoothing: float, chunk: int = 512,
                     matmul_dtype: str = "float32", closed: bool = False
                     ) -> dict[str, jnp.ndarray]:
  """`loss_sums(x @ w.T + b, labels)`, computed `chunk` tokens at a time.

  Args: decoder output `[B, T, D]` (compute dtype), output weights `[V, D]` and bias
  `[V]` (float32), labels `[B, T]`; `matmul_dtype`: the output layer's operands, as
  the model's (`ops.einsum`). Equal to `loss_sums` of the full logits up to float
  rounding, and so are its gradients with respect to x, w and b.
  """
  d = x_BTD.shape[-1]
  x_ND, labels_N = x_BTD.reshape(-1, d), labels_BT.reshape(-1)
  pad = -x_ND.shape[0] % chunk  # padding tokens have the PAD label: weight 0
  x_GCD = jnp.pad(x_ND, ((0, pad), (0, 0))).reshape(-1, chunk, d)
  labels_GC = jnp.pad(labels_N, (0, pad), constant_values=PAD_ID).reshape(-1, chunk)
  loss, nll, correct = _chunked_sums(x_GCD, w_VD, b_V, labels_GC, smoothing, matmul_dtype,
                                     closed)
  tokens = jnp.sum((labels_BT != PAD_ID).astype(jnp.float32))
  return {"loss": loss, "nll": nll, "tokens": tokens, "correct": correct}


def _logits(x_CD, w_VD, b_V, matmul_dtype):
  """As the model's output layer: the matmul in the compute dtype (operands rounded to
  `matmul_dtype`), then float32."""
  return ops.einsum("cd,vd->cv", x_CD, w_VD, matmul_dtype).astype(jnp.float32) + b_V[None, :]


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _chunked_sums(x_GCD, w_VD, b_V, labels_GC, smoothing, matmul_dtype, closed):
  return _chunked_sums_fwd(x_GCD, w_VD, b_V, labels_GC, smoothing, matmul_dtype, closed)[0]


def _chunked_sums_fwd(x_GCD, w_VD, b_V, labels_GC, smoothing, matmul_dtype, closed):
  def chunk_sums(args):
    x_CD, labels_C = args
    logits_CV = _logits(x_CD, w_VD, b_V, matmul_dtype)
    lse_C = jax.nn.logsumexp(logits_CV, axis=-1)
    label_logit_C = jnp.take_along_axis(logits_CV, labels_C[:, None], axis=-1)[:, 0]
    nll_C = lse_C - label_logit_C
    loss_C = (1.0 - smoothing) * nll_C + smoothing * (lse_C - _open_mean(logits_CV, closed))
    weight_C = (labels_C != PAD_ID).astype(jnp.float32)
    correct_C = _is_top(logits_CV, label_logit_C)
    return (jnp.sum(loss_C * weight_C), jnp.sum(nll_C * weight_C),
            jnp.sum(correct_C * weight_C), lse_C)

  loss_G, nll_G, correct_G, lse_GC = jax.lax.map(chunk_sums, (x_GCD, labels_GC))
  sums = (jnp.sum(loss_G), jnp.sum(nll_G), jnp.sum(correct_G))
  return sums, (x_GCD, w_VD, b_V, labels_GC, lse_GC)


def _chunked_sums_bwd(smoothing, matmul_dtype, closed, residuals, cotangents):
  x_GCD, w_VD, b_V, labels_GC, lse_GC = residuals
  g_loss, g_nll, _ = cotangents  # accuracy has no gradient
  vocab = w_VD.shape[0]
  if closed:  # the smoothing's share of each class: e / (open classes) on the open ones
    open_V = (b_V > CLOSED_BIAS / 2).astype(jnp.float32)
    smoothed = lambda g: g * smoothing * (open_V / jnp.sum(open_V))[None, :]
  else:
    smoothed = lambda g: g * smoothing / vocab

  def chunk_grads(acc, args):
    dw_DV, db_V = acc
    x_CD, labels_C, lse_C = args
    p_CV = jnp.exp(_logits(x_CD, w_VD, b_V, matmul_dtype) - lse_C[:, None])
    label_CV = jnp.arange(vocab)[None, :] == labels_C[:, None]
    weight_C1 = (labels_C != PAD_ID).astype(jnp.float32)[:, None]
    # d loss / d logits = p - (1 - e) onehot - e / V;  d nll / d logits = p - onehot
    dlogits_CV = weight_C1 * ((g_loss + g_nll) * p_CV
                              - jnp.where(label_CV, (1.0 - smoothing) * g_loss + g_nll, 0.0)
                              - smoothed(g_loss))
    dx_CD = ops.einsum("cv,vd->cd", dlogits_CV.astype(x_CD.dtype), w_VD, matmul_dtype)
    # Summed as [D, V]: a product in that order needs only the small x transposed
    # (`ops._rounded_dot`); the sum is transposed once, after the last chunk.
    dw_DV = dw_DV + ops.einsum("cd,cv->dv", x_CD.astype(jnp.float32), dlogits_CV,
                                   matmul_dtype)
    return (dw_DV, db_V + jnp.sum(dlogits_CV, axis=0)), dx_CD

  (dw_DV, db_V), dx_GCD = jax.lax.scan(chunk_grads, (jnp.zeros_like(w_VD.T), jnp.zeros_like(b_V)),
                                       (x_GCD, labels_GC, lse_GC))
  return dx_GCD, ops.transpose_product(dw_DV, (1, 0)), db_V, None


_chunked_sums.defvjp(_chunked_sums_fwd, _chunked_sums_bwd)
