"""The model's searches: decode.py's greedy, beam and sampling searches over a `Model` or
an `Ensemble` (the source encoded once, the KV cache), and forced decoding.

Jitted by `Translator`, which pads batches to the run's length buckets and passes the
search settings as static arguments.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seq2seq.decoding import decode
from seq2seq.decoding.decode import Sampling
from seq2seq.model.ensemble import Ensemble
from seq2seq.model.transformer import Model, shift_right
from seq2seq.vocab import BOS_ID, EOS_ID, PAD_ID


def output_limits(src_BS: jnp.ndarray, max_len_a: float, max_len_b: int, max_steps: int
                  ) -> jnp.ndarray:
  """Per-sentence output length limit a * source_length + b (EOS included), capped."""
  src_len_B = jnp.sum(src_BS != PAD_ID, axis=1) - 1  # without the source EOS
  limit = jnp.floor(max_len_a * src_len_B + max_len_b).astype(jnp.int32)
  return jnp.clip(limit, 1, max_steps)


def max_steps_for(src_len: int, max_len_a: float, max_len_b: int, model_max_len: int) -> int:
  """Static step count for a batch padded to `src_len` (so one compile per bucket)."""
  return int(min(model_max_len, max(1, int(max_len_a * src_len + max_len_b))))


def search(model: Model | Ensemble, params, src_BS: jnp.ndarray, *,
           beam_size: int, alpha: float,
           max_len_a: float, max_len_b: int, max_steps: int,
           sampling: Sampling | None = None, keys_B: jax.Array | None = None,
           prefix_BP: jnp.ndarray | None = None, nbest: int | None = None,
           min_rows: int = 0, beam_stop: str = "exact", bias_V: jnp.ndarray | None = None
           ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Encodes once, then searches with the KV cache.

  The encoder's keys/values are the search's `source` (one row per sentence, never
  reordered by beams); the batch shrinks to `min_rows` sentences as they finish
  (`decode`'s module docstring). `model` is one model or an `Ensemble` (with a tuple of
  its members' parameters): either gives the search one decoding interface.

  `bias_V` is added to every step's logits (`NEG_INF` for a piece the search may not write).

  Returns:
    ids `[B, W, T]` (W = 1 for greedy) and scores `[B, W]`: the log-probability for
    greedy, log-probability / length penalty for beam search. Beam search stops once the
    best `nbest` of the W (default all) are final, as `beam_stop` judges it
    (`decode.beam_search`'s `stop`).
  """
  max_len_B = output_limits(src_BS, max_len_a, max_len_b, max_steps)
  if prefix_BP is not None:  # room for the prefix and max_len_b pieces after it
    prefix_len_B = jnp.sum(prefix_BP != PAD_ID, axis=1)
    max_len_B = jnp.clip(jnp.maximum(max_len_B, prefix_len_B + max_len_b), 1, max_steps)
  width = 1 if sampling is not None else beam_size  # cache rows per sentence
  memory_BSD = model.encode(params, src_BS)
  cache, source = model.init_cache(params, memory_BSD, src_BS, max_steps, width)
  def step(ids, c, src):
    logits, c = model.decode_step(params, ids, c, src)
    if bias_V is not None:  # pieces the search may not write (a zero-shot target's)
      logits = logits + bias_V[None].astype(logits.dtype)
    return logits, c
  reorder = model.reorder_cache
  args = dict(bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID, source=source,
              prefix_BP=prefix_BP, min_rows=min_rows)
  if sampling is not None:
    choose = decode.sampler(sampling.temperature, sampling.top_k, sampling.top_p)
    seqs_BT, logprob_B = decode.greedy_search(step, cache, max_len_B, max_steps, **args,
                                              choose=choose, keys_B=keys_B)
    return seqs_BT[:, None], logprob_B[:, None]
  if beam_size == 1:
    seqs_BT, logprob_B = decode.greedy_search(step, cache, max_len_B, max_steps, **args)
    return seqs_BT[:, None], logprob_B[:, None]
  return decode.beam_search(step, cache, max_len_B, max_steps, beam_size, alpha, **args,
                            nbest=nbest, reorder=reorder, stop=beam_stop)


def forced_logprob(model: Model | Ensemble, params, src_BS: jnp.ndarray,
                   tgt_out_BT: jnp.ndarray) -> jnp.ndarray:
  """Sum over each row of log p(target piece | source, previous pieces), padding excluded
  (for an ensemble, p renormalised from the mean of the members' log-probabilities, as
  the search uses it)."""
  logp_BTV = jax.nn.log_softmax(model.log_probs(params, src_BS, shift_right(tgt_out_BT)))
  picked_BT = jnp.take_along_axis(logp_BTV, tgt_out_BT[..., None], axis=-1)[..., 0]
  return jnp.sum(jnp.where(tgt_out_BT != PAD_ID, picked_BT, 0.0), axis=1)


def cross_attention(model: Model, params, src_BS: jnp.ndarray, tgt_out_BT: jnp.ndarray
                    ) -> jnp.ndarray:
  """`[B, T, S]`: how much each target position attends to each source piece as the model
  predicts it (the decoder's cross-attention, mean over its layers and heads: as a word
  alignment, better than the last layer's alone, whose article attends to its noun),
  teacher-forced on `tgt_out_BT` (the target's pieces and EOS)."""
  probs_LBHTS = model.cross_attention(params, src_BS, shift_right(tgt_out_BT))
  return jnp.mean(probs_LBHTS.astype(jnp.float32), axis=(0, 2))
