"""Lexically constrained beam search: every finished hypothesis contains each of its
sentence's constraints, placed where the search finds best.

A sentence's constraints are `cons_BCAL`: C constraints of A alternatives of at most L
pieces each (padded with pad_id; `Hund|Hunde|Hundes` is one constraint of three
alternatives), met when one alternative appears contiguously in the output. This is
dynamic beam allocation (Post & Vilar, 2018) in the vectorized form of Hu et al. (2019),
as a strategy (`ConstrainedCandidates`) of the one compiled loop of `decode.beam_search`:

- Candidates: each beam's best 2W tokens, as in beam search, and the next piece of every
  alternative it has not met yet (so that a constraint can start, or go on, even where
  the model would not rank its piece among the best).
- Progress: each beam keeps, per alternative, how many of its pieces the output ends
  with (`advance`); a constraint is met when one alternative is complete, and stays met.
- Banks: a candidate's bank is how many constraint pieces it has placed (a met
  constraint counts its longest alternative's pieces, one under way the pieces it has
  so far), as Post & Vilar count constraint tokens. The W live beams
  are taken from the banks in turn, the best of each bank first (from the fullest bank
  down), then the second best of each, and so on: a bank that has fewer candidates
  leaves its turns to the others (`allocate`).
- Only a hypothesis that has met all its constraints may end; the output limit grows by
  the constraints' pieces so that one always can.

Rows never interact, so a sentence's result does not depend on its batch. A sentence
without constraints runs the plain `decode.beam_search` (the Translator never sends it
here), so its translation is unchanged.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from seq2seq.decoding import decode
from seq2seq.decoding.decode import (
  NEG_INF,
  BeamStrategy,
  Selection,
  TokensToLogits,
  gather_beams,
  gather_rows,
)
from seq2seq.numerics.row_select import logsumexp_rows, max_top_k_rows


def constraint_lengths(cons_BCAL: jnp.ndarray, pad_id: int) -> jnp.ndarray:
  """Pieces of each alternative, `[B, C, A]` (0: no such alternative)."""
  return jnp.sum(cons_BCAL != pad_id, axis=-1).astype(jnp.int32)


def extra_length(cons_BCAL: jnp.ndarray, pad_id: int) -> jnp.ndarray:
  """`[B]`: the pieces a sentence's constraints may add, its longest alternative's each."""
  return jnp.sum(jnp.max(constraint_lengths(cons_BCAL, pad_id), axis=-1), axis=-1)


def next_pieces(cons_BCAL, lengths_BCA, progress_BKCA):
  """The piece each alternative needs next, `[B, K, C, A]` (K beams or candidates)."""
  at = jnp.minimum(progress_BKCA, cons_BCAL.shape[-1] - 1)
  cons_BKCAL = jnp.broadcast_to(cons_BCAL[:, None], at.shape + cons_BCAL.shape[-1:])
  return jnp.take_along_axis(cons_BKCAL, at[..., None], axis=-1)[..., 0]


def advance(cons_BCAL, lengths_BCA, progress_BKCA, met_BKC, token_BK, word_start_V):
  """Progress and met constraints after emitting `token_BK` (K candidates of a sentence,
  each from the beam whose progress and met flags are given). An alternative goes on
  where the token is its next piece, starts again where it is its first, else resets.
  One whose pieces are all out (progress at its length) is met when the next token
  begins a word (`word_start_V[token]`: a piece with the word marker, punctuation, EOS):
  its last piece must end a word, as the glossary wrote it, not begin a longer one."""
  token = token_BK[:, :, None, None]
  real = lengths_BCA[:, None] > 0
  pending = real & (progress_BKCA >= lengths_BCA[:, None])
  met = met_BKC | jnp.any(pending & word_start_V[token_BK][:, :, None, None], axis=-1)
  goes_on = (next_pieces(cons_BCAL, lengths_BCA, progress_BKCA) == token) & real & ~pending
  starts = (cons_BCAL[:, None, :, :, 0] == token) & real
  progress = jnp.where(goes_on, progress_BKCA + 1, jnp.where(starts, 1, 0))
  progress = jnp.where(met[..., None], 0, progress)
  return progress, met


def placed(lengths_BCA, progress_BKCA, met_BKC) -> jnp.ndarray:
  """`[B, K]`: the constraint pieces each candidate has placed, its bank."""
  longest_BC = jnp.max(lengths_BCA, axis=-1)[:, None]
  per_constraint = jnp.where(met_BKC, longest_BC, jnp.max(progress_BKCA, axis=-1))
  return jnp.sum(per_constraint, axis=-1)


def allocate(scores_BM: jnp.ndarray, banks_BM: jnp.ndarray, valid_BM: jnp.ndarray,
             width: int, banks: int) -> jnp.ndarray:
  """The W candidates of each sentence that the banks' turns pick (see the module
  docstring), `[B, W]` indices, best score first. A candidate's turn is its rank within
  its bank; at equal turns the fuller bank goes first; invalid candidates never."""
  m = scores_BM.shape[1]
  index = jnp.arange(m)
  same_bank = banks_BM[:, :, None] == banks_BM[:, None, :]
  better = (scores_BM[:, None, :] > scores_BM[:, :, None]) | (
      (scores_BM[:, None, :] == scores_BM[:, :, None]) & (index[None, None, :] < index[None, :, None]))
  rank_BM = jnp.sum(same_bank & better & valid_BM[:, None, :], axis=-1)
  turn_BM = rank_BM * (banks + 1) + (banks - banks_BM)
  turn_BM = jnp.where(valid_BM, turn_BM, jnp.iinfo(jnp.int32).max // 2 + index[None, :])
  _, picked_BW = jax.lax.top_k(-turn_BM, width)
  picked_scores = jnp.take_along_axis(jnp.where(valid_BM, scores_BM, NEG_INF), picked_BW,
                                      axis=1)
  order = jnp.argsort(-picked_scores, axis=1, stable=True)
  return jnp.take_along_axis(picked_BW, order, axis=1)


class ConstrainedCandidates(BeamStrategy):
  """The constrained search's choices (module docstring): each beam proposes its 2W best
  tokens and the next piece of every alternative it has not met; candidates that have met
  every constraint may end; the W live beams are taken from the banks in turn."""

  def __init__(self, cons_BCAL: jnp.ndarray, word_start_V: jnp.ndarray, pad_id: int):
    self.cons_BCAL, self.word_start_V, self.pad_id = cons_BCAL, word_start_V, pad_id
    n_cons, _, n_pieces = cons_BCAL.shape[1:]
    self.banks = n_cons * n_pieces  # a candidate's bank: the constraint pieces it placed

  def start(self, batch, width):
    n_cons, n_alt, _ = self.cons_BCAL.shape[1:]
    lengths_BCA = constraint_lengths(self.cons_BCAL, self.pad_id)
    rows = dict(cons=self.cons_BCAL, lengths=lengths_BCA,
                wanted=jnp.sum(jnp.any(lengths_BCA > 0, axis=-1), axis=-1))  # real ones
    return rows, dict(progress=jnp.zeros((batch, width, n_cons, n_alt), jnp.int32),
                      met=jnp.zeros((batch, width, n_cons), bool))

  def propose(self, s, logits_RV, width):
    cons, lengths = s.rows["cons"], s.rows["lengths"]
    rows = s.live_logprobs.shape[0]
    per_beam = min(2 * width, logits_RV.shape[-1])
    max_R, top_logit_RK, top_token_RK = max_top_k_rows(logits_RV, per_beam)  # --> [R, 2W]
    lse_R = logsumexp_rows(logits_RV, max_R)  # as beam search computes it
    # the next piece of every alternative a beam has not met: candidates as well
    progress, met = s.extra["progress"], s.extra["met"]
    need_BWCA = next_pieces(cons, lengths, progress)
    open_BWCA = (lengths[:, None] > 0) & ~met[..., None] & (progress < lengths[:, None])
    need_RE = need_BWCA.reshape(rows * width, -1)  # --> [R, E], E = C * A
    fresh_RE = open_BWCA.reshape(rows * width, -1)
    fresh_RE &= ~jnp.any(need_RE[:, :, None] == top_token_RK[:, None, :], axis=-1)
    e = need_RE.shape[1]
    earlier = jnp.tril(jnp.ones((e, e), bool), -1)  # the same piece twice: keep the first
    fresh_RE &= ~jnp.any((need_RE[:, :, None] == need_RE[:, None, :]) & earlier[None]
                         & fresh_RE[:, None, :], axis=-1)
    need_logit_RE = jnp.take_along_axis(logits_RV, need_RE, axis=1)
    token_RK = jnp.concatenate([top_token_RK.astype(jnp.int32), need_RE], axis=1)
    logit_RK = jnp.concatenate([top_logit_RK, jnp.where(fresh_RE, need_logit_RE, NEG_INF)],
                               axis=1)  # --> [R, 2W + E]
    return token_RK, logit_RK, lse_R

  def select(self, s, scores_BM, token_BM, k, width, penalty, eos_id):
    cons, lengths = s.rows["cons"], s.rows["lengths"]
    progress_BM, met_BM = advance(
        cons, lengths, jnp.repeat(s.extra["progress"], k, axis=1),
        jnp.repeat(s.extra["met"], k, axis=1), token_BM,
        self.word_start_V)  # not in `rows`: the batch's shrinking takes those by sentence
    banks_BM = placed(lengths, progress_BM, met_BM)
    possible_BM = scores_BM > NEG_INF / 2
    is_eos_BM = token_BM == eos_id
    complete_BM = jnp.sum(met_BM, axis=-1) >= s.rows["wanted"][:, None]
    # Finished: candidates that end here having met every constraint, best W of them.
    new_scores_BM = jnp.where(is_eos_BM & complete_BM & possible_BM, scores_BM / penalty,
                              NEG_INF)
    top_new_BW, keep_new_BW = jax.lax.top_k(new_scores_BM, width)
    # Live: W candidates that did not end, taken from the banks in turn.
    going_on_BM = possible_BM & ~is_eos_BM
    pick_BW = allocate(scores_BM, banks_BM, going_on_BM, width, self.banks)
    live_logprobs = jnp.take_along_axis(jnp.where(going_on_BM, scores_BM, NEG_INF), pick_BW,
                                        axis=1)
    return Selection(top_new_BW, keep_new_BW, live_logprobs, pick_BW,
                     dict(progress=gather_beams(progress_BM, pick_BW),
                          met=gather_beams(met_BM, pick_BW)))


def beam_search(tokens_to_logits: TokensToLogits, cache: Any, max_len_B: jnp.ndarray,
                max_steps: int, beam_size: int, alpha: float, cons_BCAL: jnp.ndarray,
                word_start_V: jnp.ndarray, *,
                bos_id: int, eos_id: int, pad_id: int, source: Any = None,
                nbest: int | None = None, min_rows: int = 0,
                reorder: Callable[[Any, jnp.ndarray], Any] = gather_rows
                ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """`decode.beam_search` (with its "exact" stop) whose finished hypotheses each contain
  one alternative of every constraint of their sentence (`cons_BCAL`, module docstring),
  as whole words (`word_start_V`, `[V]` bool: the pieces that begin a word, `advance`):
  the same loop with `ConstrainedCandidates`. The output limit grows by the pieces the
  constraints may add, so that a hypothesis that meets them all can always end.

  Returns:
    Finished sequences `[B, W, max_steps]` and scores `[B, W]`, best first. A sentence
    that found no complete hypothesis within the limit keeps its best live beams (which
    lack a constraint; the limit leaves room, so this is the exception).
  """
  max_len_B = jnp.minimum(max_len_B + extra_length(cons_BCAL, pad_id), max_steps)
  return decode.beam_search(tokens_to_logits, cache, max_len_B, max_steps, beam_size, alpha,
                            bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, source=source,
                            nbest=nbest, min_rows=min_rows, reorder=reorder,
                            strategy=ConstrainedCandidates(cons_BCAL, word_start_V, pad_id))
