"""Several models over one vocabulary as one model: the mean of their log-probabilities.

`Ensemble` has the single `Model`'s inference interface (encode, init_cache, decode_step,
reorder_cache, log_probs), each taking a tuple of the members' parameters, so that the
searches and forced decoding see one model (fairseq's `EnsembleModel`). Each member keeps
its own cache and encoder output; the searches renormalise the mean with their own
log-softmax.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp

from seq2seq.model.transformer import Cache, Model


class Ensemble:
  """Members' log-probabilities averaged at every step; parameters a tuple, one per member."""

  def __init__(self, models: Sequence[Model]):
    if len(models) < 2:
      raise ValueError(f"an ensemble needs at least 2 models, got {len(models)}")
    self.models = tuple(models)

  def __eq__(self, other) -> bool:  # as `Model`'s: equal members, equal ensembles
    return type(other) is Ensemble and self.models == other.models

  def __hash__(self) -> int:
    return hash(self.models)

  def __repr__(self) -> str:
    return f"Ensemble({list(self.models)!r})"

  def encode(self, params: Sequence, src_BS: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """Each member's encoder output `[B, S, D]`."""
    return tuple(m.encode(p, src_BS) for m, p in zip(self.models, params))

  def init_cache(self, params: Sequence, memory: Sequence[jnp.ndarray], src_BS: jnp.ndarray,
                 max_len: int, beam_size: int = 1) -> tuple[tuple[Cache, ...], tuple[Cache, ...]]:
    """(caches, sources): each member's `Model.init_cache`."""
    caches, sources = zip(*(m.init_cache(p, mem, src_BS, max_len, beam_size)
                            for m, p, mem in zip(self.models, params, memory)))
    return tuple(caches), tuple(sources)

  def decode_step(self, params: Sequence, ids_B: jnp.ndarray, cache: Sequence[Cache],
                  source: Sequence[Cache]) -> tuple[jnp.ndarray, tuple[Cache, ...]]:
    """The mean of the members' log-probabilities `[B, V]`, and their updated caches."""
    outputs = [m.decode_step(p, ids_B, c, src)
               for m, p, c, src in zip(self.models, params, cache, source)]
    logp = [jax.nn.log_softmax(logits.astype(jnp.float32)) for logits, _ in outputs]
    return sum(logp) / len(logp), tuple(c for _, c in outputs)

  def reorder_cache(self, cache: Sequence[Cache], parents_R: jnp.ndarray) -> tuple[Cache, ...]:
    return tuple(m.reorder_cache(c, parents_R) for m, c in zip(self.models, cache))

  def log_probs(self, params: Sequence, src_BS, tgt_in_BT) -> jnp.ndarray:
    """The mean of the members' teacher-forced log-probabilities `[B, T, V]`."""
    logp = [m.log_probs(p, src_BS, tgt_in_BT) for m, p in zip(self.models, params)]
    return sum(logp) / len(logp)
