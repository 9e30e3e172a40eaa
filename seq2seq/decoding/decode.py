"""Greedy search, sampling and beam search over a `tokens_to_logits(ids_R, cache, source) -> (logits_RV, cache)`.

Model-agnostic, in the style of Flax's `decode.py`: a `lax.while_loop` over explicit
state, with the KV cache as a pytree carried through the loop (one token per step, no
recomputation of the prefix). The search sees ids only: BOS, EOS and PAD are arguments.
Sequences are returned without BOS; after a sequence's first EOS every position is PAD.

The cache holds one row per hypothesis (every leaf `[B * W, ...]`, the W beams of a
sentence consecutive, or a shared scalar such as the write position); beam search
reorders its rows. State that all hypotheses of a sentence share and that beams never
reorder (the encoder's keys and values) is the `source`, one row per sentence (every
leaf `[B, ...]`), handed to `tokens_to_logits` at every step.

A batch shrinks as its sentences finish (`min_rows`): once the unfinished sentences fit
in a quarter of the rows, the finished ones are set aside and the search goes on over a
quarter of the rows (cache, source and all), down to `min_rows`. A step's cost grows
with its rows, and without this a batch pays for its longest sentence on every row. Each
size is another copy of the step in the compiled search: quartering (64, 16 rows at
`min_rows` 8) compiles half the copies that halving (64, 32, 16, 8) would, at the same
speed (docs/experiments.md, Decoding). Each row's result is
unchanged: rows never interact, and a row's computation does not depend on the others.

Length limits are per sentence (`max_len_B`, EOS included) and bounded by the static
number of steps `max_steps`; the last allowed position can only be EOS.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from seq2seq.config import BEAM_STOPS
from seq2seq.numerics.row_select import (
  argmax_rows,
  logsumexp_rows,
  max_argmax_rows,
  max_top_k_rows,
)

# A large finite negative instead of -inf: -inf - -inf would give NaN in the scores.
NEG_INF = -1.0e7
# A shrinking batch goes on with 1 / SHRINK of its rows (shrink_sizes).
SHRINK = 4

TokensToLogits = Callable[[jnp.ndarray, Any, Any], tuple[jnp.ndarray, Any]]



@dataclasses.dataclass(frozen=True)
class Sampling:
  """Random sampling instead of search: temperature, top-k (0 = off), top-p (1 = off), and
  the seed; the key of input i is fold_in(PRNGKey(seed), i)."""

  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  seed: int = 0


def shrink_sizes(rows: int, min_rows: int) -> list[int]:
  """The batch sizes a search of `rows` rows goes through: a quarter of the size before
  while that is at least `min_rows` rows (`[rows]` when min_rows is 0)."""
  sizes = [rows]
  while min_rows and sizes[-1] // SHRINK >= min_rows:
    sizes.append(sizes[-1] // SHRINK)
  return sizes


def take_rows(tree: Any, index_N: jnp.ndarray, batch: int) -> Any:
  """Sentences `index_N` of every leaf of `tree` whose leading axis holds `batch`
  sentences of g consecutive rows each (`[batch * g, ...]`, g = 1 or the beam size);
  scalar leaves (shared by all rows) pass through."""
  def take(x):
    if x.ndim == 0:
      return x
    group = x.reshape((batch, -1) + x.shape[1:])
    return group[index_N].reshape((-1,) + x.shape[1:])
  return jax.tree_util.tree_map(take, tree)


def shrinking_while_loop(body, state, active: Callable[[Any], jnp.ndarray], max_steps: int,
                         sizes: Sequence[int], results: Callable[[Any], Any]) -> Any:
  """`lax.while_loop(body)` on `state` while `state.step < max_steps` and some sentence is
  still `active(state)` (`[n]` bool), over a batch that shrinks through `sizes`.

  At size n, the loop stops once the active sentences fit in the next size; they (and
  finished ones to fill up) are taken, in their order, and the loop goes on with them.
  Returns `results(state)` (a tree of `[batch, ...]` leaves) for every sentence of the
  first size, in its original row, each as it was when the sentence was set aside or
  the search ended.
  """
  rows = jnp.arange(sizes[0])  # each current row's row in the first batch
  out = None
  for size, next_size in zip(sizes, list(sizes[1:]) + [0]):
    cond = lambda s, n=next_size: (s.step < max_steps) & (jnp.sum(active(s)) > n)
    state = jax.lax.while_loop(cond, body, state)
    part = results(state)
    out = part if out is None else jax.tree_util.tree_map(
        lambda full, new, rows=rows: full.at[rows].set(new), out, part)
    if next_size:
      keep = jnp.argsort(~active(state), stable=True)[:next_size]  # active rows first
      state, rows = take_rows(state, keep, size), rows[keep]
  return out


def length_penalty(length: jnp.ndarray, alpha: float) -> jnp.ndarray:
  """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016); 1 when alpha = 0."""
  return ((5.0 + length.astype(jnp.float32)) / 6.0) ** alpha


class GreedyState(NamedTuple):
  step: jnp.ndarray  # [] int32: position being written
  seqs: jnp.ndarray  # [B, T] int32
  last: jnp.ndarray  # [B] int32: token fed at this step
  finished: jnp.ndarray  # [B] bool
  logprob: jnp.ndarray  # [B] float32: sum of chosen tokens' log-probabilities
  cache: Any
  rows: dict  # what each row keeps through the search: limit, prefix, keys, source


def prefix_tokens(prefix_RP: jnp.ndarray, step: jnp.ndarray, pad_id: int
                  ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """(each row's forced token at `step`, whether `step` is inside the row's forced prefix
  `prefix_RP`, padded with pad_id)."""
  forced_R = jax.lax.dynamic_index_in_dim(prefix_RP, jnp.minimum(step, prefix_RP.shape[1] - 1),
                                          axis=1, keepdims=False)
  return forced_R, (step < prefix_RP.shape[1]) & (forced_R != pad_id)


def force_prefix(x_RV: jnp.ndarray, prefix_RP: jnp.ndarray | None, step: jnp.ndarray,
                 pad_id: int) -> jnp.ndarray:
  """While `step` is inside a row's forced prefix (`prefix_RP`, padded with pad_id), only
  the prefix's token may be chosen; its score stays the model's."""
  if prefix_RP is None:
    return x_RV
  forced_R, active_R = prefix_tokens(prefix_RP, step, pad_id)
  other_RV = jnp.arange(x_RV.shape[-1])[None, :] != forced_R[:, None]
  return jnp.where(active_R[:, None] & other_RV, NEG_INF, x_RV)


def forced_tokens(token_R: jnp.ndarray, must_end_R: jnp.ndarray, prefix_RP: jnp.ndarray | None,
                  step: jnp.ndarray, eos_id: int, pad_id: int) -> jnp.ndarray:
  """A row's token where it has no choice: EOS at its last allowed position, the prefix's
  token inside its forced prefix, else `token_R`. For a search that picks one token per
  row, the same as choosing among logits masked to those tokens, without two passes
  over `[R, V]`."""
  token_R = jnp.where(must_end_R, eos_id, token_R)
  if prefix_RP is None:
    return token_R
  forced_R, active_R = prefix_tokens(prefix_RP, step, pad_id)
  return jnp.where(active_R, forced_R, token_R)


# choose(log_probs_BV, step, keys_B) -> tokens_B: a sampler (keys_B: one key per row).
Choose = Callable[[jnp.ndarray, jnp.ndarray, jax.Array], jnp.ndarray]


def sampler(temperature: float, top_k: int = 0, top_p: float = 1.0) -> Choose:
  """Draws each row's token from its tempered distribution, restricted to the `top_k`
  most likely tokens (0 = all) and to the smallest set whose probability reaches `top_p`
  (nucleus sampling). Row b at step t uses the key fold_in(keys_B[b], t), so a row's
  sample depends on its own key only, not on the other rows of the batch."""
  if temperature < 0 or not 0 < top_p <= 1 or top_k < 0:
    raise ValueError(f"sampling needs temperature >= 0, 0 < top_p <= 1 and top_k >= 0; got "
                     f"{temperature}, {top_p}, {top_k}")

  def choose(logp_BV: jnp.ndarray, step: jnp.ndarray, keys_B: jax.Array) -> jnp.ndarray:
    if temperature == 0:
      return argmax_rows(logp_BV)
    logits_BV = logp_BV / temperature
    if top_k:
      kth_B1 = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
      logits_BV = jnp.where(logits_BV < kth_B1, NEG_INF, logits_BV)
    if top_p < 1:
      sorted_BV = jnp.sort(logits_BV, axis=-1)[:, ::-1]
      cumulative_BV = jnp.cumsum(jax.nn.softmax(sorted_BV, axis=-1), axis=-1)
      # The smallest logit kept: the first whose cumulative probability reaches top_p.
      cut_B = jnp.minimum(jnp.sum(cumulative_BV < top_p, axis=-1), logits_BV.shape[-1] - 1)
      threshold_B1 = jnp.take_along_axis(sorted_BV, cut_B[:, None], axis=-1)
      logits_BV = jnp.where(logits_BV < threshold_B1, NEG_INF, logits_BV)
    draw = lambda key, logits_V: jax.random.categorical(jax.random.fold_in(key, step), logits_V)
    return jax.vmap(draw)(keys_B, logits_BV).astype(jnp.int32)

  return choose


def greedy_search(tokens_to_logits: TokensToLogits, cache: Any, max_len_B: jnp.ndarray,
                  max_steps: int, *, bos_id: int, eos_id: int, pad_id: int,
                  source: Any = None, choose: Choose | None = None,
                  keys_B: jax.Array | None = None, prefix_BP: jnp.ndarray | None = None,
                  min_rows: int = 0) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Arg-max decoding, or sampling with `choose=sampler(...)` and one key per row
  (`keys_B`). The batch shrinks down to `min_rows` rows as sentences finish (0: never;
  see the module docstring). Returns sequences `[B, max_steps]` and their
  log-probabilities `[B]` under the model (untempered)."""
  batch = max_len_B.shape[0]
  state = GreedyState(
      step=jnp.zeros((), jnp.int32),
      seqs=jnp.full((batch, max_steps), pad_id, jnp.int32),
      last=jnp.full((batch,), bos_id, jnp.int32),
      finished=jnp.zeros((batch,), bool),
      logprob=jnp.zeros((batch,), jnp.float32),
      cache=cache,
      rows=dict(max_len=max_len_B, prefix=prefix_BP, keys=keys_B, source=source))

  def body(s: GreedyState):
    logits_BV, cache = tokens_to_logits(s.last, s.cache, s.rows["source"])
    logits_BV = logits_BV.astype(jnp.float32)
    if choose is None:  # the arg-max of the logits: no [B, V] log-probabilities needed
      max_B, token_B = max_argmax_rows(logits_BV)
      lse_B = logsumexp_rows(logits_BV, max_B)
    else:
      lse_B = jax.nn.logsumexp(logits_BV, axis=-1)
      token_B = choose(logits_BV - lse_B[:, None], s.step, s.rows["keys"])
    token_B = forced_tokens(token_B, s.step + 1 >= s.rows["max_len"], s.rows["prefix"],
                            s.step, eos_id, pad_id)
    chosen = jnp.take_along_axis(logits_BV, token_B[:, None], axis=-1)[:, 0] - lse_B
    token_B = jnp.where(s.finished, pad_id, token_B)
    return s._replace(
        step=s.step + 1,
        seqs=s.seqs.at[:, s.step].set(token_B),
        last=token_B,
        finished=s.finished | (token_B == eos_id),
        logprob=s.logprob + jnp.where(s.finished, 0.0, chosen),
        cache=cache)

  return shrinking_while_loop(body, state, lambda s: ~s.finished, max_steps,
                              shrink_sizes(batch, min_rows), lambda s: (s.seqs, s.logprob))


class BeamState(NamedTuple):
  step: jnp.ndarray  # [] int32
  live_seqs: jnp.ndarray  # [B, W, T] int32
  live_logprobs: jnp.ndarray  # [B, W] float32, sorted descending
  finished_seqs: jnp.ndarray  # [B, W, T] int32
  finished_scores: jnp.ndarray  # [B, W] float32: log-prob / length penalty, sorted
  cache: Any  # leaves [B * W, ...]
  rows: dict  # what each sentence keeps through the search: limit, source, the strategy's
  done: jnp.ndarray  # [B] bool: the sentence's search has ended; its beams stay as they are
  extra: dict  # the strategy's state, leaves [B, ...] (per sentence, or per beam [B, W, ...])


def gather_beams(x: jnp.ndarray, beam_idx_BW: jnp.ndarray) -> jnp.ndarray:
  """x `[B, W', ...]` -> `[B, W, ...]`, picking beams `beam_idx_BW` of each batch row."""
  return jnp.take_along_axis(x, beam_idx_BW.reshape(beam_idx_BW.shape + (1,) * (x.ndim - 2)),
                             axis=1)


def gather_rows(cache: Any, parents_R: jnp.ndarray) -> Any:
  """The default `reorder` of beam search: row r of every cache leaf `[R, ...]` becomes
  row `parents_R[r]`; scalar leaves are shared."""
  return take_rows(cache, parents_R, parents_R.shape[0])


def extended(live_seqs_BWT: jnp.ndarray, beam_BN: jnp.ndarray, token_BN: jnp.ndarray,
             step: jnp.ndarray) -> jnp.ndarray:
  """`[B, N, T]`: the live sequences of beams `beam_BN`, each with its token at `step`."""
  return gather_beams(live_seqs_BWT, beam_BN).at[:, :, step].set(token_BN)


class Selection(NamedTuple):
  """A strategy's choice among a step's M = W * K candidates of each sentence."""

  finished_scores: jnp.ndarray  # [B, N] float32: candidates that end here, scored (else NEG_INF)
  finished: jnp.ndarray  # [B, N] int32: which candidates those are (indices into M)
  live_logprobs: jnp.ndarray  # [B, W] float32, sorted descending
  live: jnp.ndarray  # [B, W] int32: the candidates that go on (indices into M)
  extra: dict  # the strategy's state for the live beams


class BeamStrategy:
  """How beam search chooses, as fairseq's search strategies: which K candidates each beam
  proposes (`propose`), and which of a sentence's W * K candidates end and go on
  (`select`). `beam_search` runs one compiled loop around any strategy.

  `stop` is the rule that ends a sentence's search (`beam_search`'s docstring)."""

  stop = "exact"

  def start(self, batch: int, width: int) -> tuple[dict, dict]:
    """(per-sentence constants for `BeamState.rows`, the initial `BeamState.extra`)."""
    return {}, {}

  def propose(self, s: BeamState, logits_RV: jnp.ndarray, width: int
              ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Each row's candidates: (tokens `[R, K]`, their logits `[R, K]`, the row's
    log-sum-exp `[R]`); R = B * W."""
    raise NotImplementedError

  def select(self, s: BeamState, scores_BM: jnp.ndarray, token_BM: jnp.ndarray, k: int,
             width: int, penalty: jnp.ndarray, eos_id: int) -> Selection:
    """The candidates that end (scored: log-probability / `penalty`) and the W that go on."""
    raise NotImplementedError


class TopCandidates(BeamStrategy):
  """Plain beam search: each beam proposes its 2W best tokens; of a sentence's candidates
  the best 2W are kept, so that even if W of them end in EOS, W live ones remain. A
  forced prefix (`prefix_BP`, padded with pad_id) leaves its token the only choice while
  a sentence is inside it."""

  def __init__(self, stop: str = "exact", prefix_BP: jnp.ndarray | None = None,
               pad_id: int = 0):
    if stop not in BEAM_STOPS:
      raise ValueError(f"beam stop must be one of {', '.join(BEAM_STOPS)}, got {stop!r}")
    self.stop, self.prefix_BP, self.pad_id = stop, prefix_BP, pad_id

  def start(self, batch, width):
    prefix_RP = None if self.prefix_BP is None else jnp.repeat(self.prefix_BP, width, axis=0)
    return {"prefix": prefix_RP}, {"ended": jnp.zeros((batch,), jnp.int32)}

  def propose(self, s, logits_RV, width):
    # The best 2W candidates of a sentence are among the best 2W of each of its beams,
    # and log-softmax keeps the order within a row: select on the logits, then take
    # the log-probabilities of the W * 2W survivors only.
    per_beam = min(2 * width, logits_RV.shape[-1])
    max_R, top_logit_RK, top_token_RK = max_top_k_rows(
        force_prefix(logits_RV, s.rows["prefix"], s.step, self.pad_id), per_beam)  # --> [R, 2W]
    if s.rows["prefix"] is None:  # the maximum of the logits themselves
      lse_R = logsumexp_rows(logits_RV, max_R)
    else:
      lse_R = jax.nn.logsumexp(logits_RV, axis=-1)
    return top_token_RK, top_logit_RK, lse_R

  def select(self, s, scores_BM, token_BM, k, width, penalty, eos_id):
    top_logp_BC, top_idx_BC = jax.lax.top_k(scores_BM, 2 * width)  # --> [B, 2W]
    is_eos_BC = jnp.take_along_axis(token_BM, top_idx_BC, axis=1) == eos_id
    ended_B = s.extra["ended"]
    if self.stop == "count":  # candidates that end among the W best of the step
      ended_B += jnp.sum(is_eos_BC[:, :width] & (top_logp_BC[:, :width] > NEG_INF / 2),
                         axis=1, dtype=jnp.int32)
    # Live: the best W candidates that did not end.
    live_logprobs_BW, live_pick_BW = jax.lax.top_k(
        jnp.where(is_eos_BC, NEG_INF, top_logp_BC), width)  # --> [B, W]
    return Selection(jnp.where(is_eos_BC, top_logp_BC / penalty, NEG_INF), top_idx_BC,
                     live_logprobs_BW, jnp.take_along_axis(top_idx_BC, live_pick_BW, axis=1),
                     {"ended": ended_B})


def beam_search(tokens_to_logits: TokensToLogits, cache: Any, max_len_B: jnp.ndarray,
                max_steps: int, beam_size: int, alpha: float, *, bos_id: int, eos_id: int,
                pad_id: int, source: Any = None, prefix_BP: jnp.ndarray | None = None,
                nbest: int | None = None, min_rows: int = 0,
                reorder: Callable[[Any, jnp.ndarray], Any] = gather_rows,
                stop: str = "exact", strategy: BeamStrategy | None = None
                ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Beam search with the GNMT length penalty.

  A sentence's search ends when no live beam can still reach a better score than its
  `nbest`-th finished hypothesis. With the default `nbest = W`, all W finished
  hypotheses are final; with `nbest = 1` only the best is (the ones after it are the
  best found so far), and the search stops sooner: a sentence is done as soon as its
  best translation can no longer change.

  How a live beam's best reachable score is bounded (`stop`):
  - "exact": its log-probability over the length penalty at the sentence's maximum
    length. A log-probability only falls as a beam grows, and the penalty is largest
    there, so the bound holds: the best `nbest` results are those of a search run to
    the length limit (Flax's and tensor2tensor's rule).
  - "current": its log-probability over the penalty at the length it would have if it
    ended at the next step (Hugging Face's `early_stopping=False`). Not a bound when
    alpha > 0: a longer continuation could still score higher. With a large alpha the
    exact rule keeps live beams running far past the best hypothesis' EOS; this one
    stops them sooner, and the results may differ (docs/experiments.md, Decoding). The
    same as "exact" when alpha is 0.
  - "count": no bound; the search ends once W hypotheses have ended, counting the
    candidates that end in EOS among the W best of each step (fairseq's rule, and
    CTranslate2's whenever its length penalty is not 0). Results may differ from
    "exact"'s; it also ends where "exact" would, when nothing can change any more.

  Args:
    tokens_to_logits: one decoding step over `B * W` rows.
    cache: the per-hypothesis cache, `B * W` rows (see the module docstring).
    max_len_B: per-sentence output limit, EOS included, `<= max_steps`.
    max_steps: static number of positions.
    beam_size: W.
    alpha: length penalty exponent; 0 ranks by raw log-probability.
    bos_id, eos_id, pad_id: the special ids of the model's vocabulary.
    source: per-sentence state the beams share, `B` rows (see the module docstring).
    prefix_BP: optional forced first tokens of each sentence, padded with pad_id.
    nbest: how many of the W results must be final (1 to W; default W).
    min_rows: the batch shrinks down to this many sentences as sentences are done
      (0: never; see the module docstring).
    reorder: `reorder(cache, parents_R)`, the cache with row r taken from row
      `parents_R[r]` (a model may move only a table of the rows that hold each position,
      `kv_cache.reorder`).
    stop: "exact", "current" or "count", when a sentence's search ends (above).
    strategy: how candidates are proposed and chosen (default: `TopCandidates` with
      `stop` and `prefix_BP`).

  Returns:
    Finished sequences `[B, W, max_steps]` and scores `[B, W]`, best first.
  """
  batch, width = max_len_B.shape[0], beam_size
  nbest = width if nbest is None else nbest
  if not 1 <= nbest <= width:
    raise ValueError(f"nbest must be between 1 and the beam size {width}, got {nbest}")
  strategy = strategy or TopCandidates(stop, prefix_BP, pad_id)
  rows, extra = strategy.start(batch, width)
  # Only beam 0 is live at the start, so the W initial beams are not W copies.
  state = BeamState(
      step=jnp.zeros((), jnp.int32),
      live_seqs=jnp.full((batch, width, max_steps), pad_id, jnp.int32),
      live_logprobs=jnp.tile(jnp.array([0.0] + [NEG_INF] * (width - 1)), (batch, 1)),
      finished_seqs=jnp.full((batch, width, max_steps), pad_id, jnp.int32),
      finished_scores=jnp.full((batch, width), NEG_INF),
      cache=cache,
      rows=dict(rows, max_len=max_len_B, best_penalty=length_penalty(max_len_B, alpha),
                source=source),
      done=jnp.zeros((batch,), bool), extra=extra)

  def can_improve(s: BeamState) -> jnp.ndarray:
    # The best live beam's best reachable score (`stop`, in the docstring); live beams
    # are s.step pieces long, so the earliest they can end is at s.step + 1.
    if strategy.stop == "current":
      penalty_B = length_penalty(s.step + 1, alpha)
    else:
      penalty_B = s.rows["best_penalty"]
    improves = s.live_logprobs[:, 0] / penalty_B > s.finished_scores[:, nbest - 1]
    if strategy.stop == "count":
      improves &= s.extra["ended"] < width
    return improves

  def body(s: BeamState):
    rows = s.live_logprobs.shape[0]  # B, or fewer once the batch has shrunk
    last_BW = jnp.where(s.step == 0, bos_id, s.live_seqs[:, :, jnp.maximum(s.step - 1, 0)])
    logits_RV, cache = tokens_to_logits(last_BW.reshape(-1), s.cache, s.rows["source"])
    logits_RV = logits_RV.astype(jnp.float32)  # --> [R, V], R = B * W
    token_RK, logit_RK, lse_R = strategy.propose(s, logits_RV, width)  # --> [R, K]
    # A row at its last allowed position may only end: its candidates are EOS, then
    # impossible ones (what masking all but EOS would leave, without a pass over [R, V]).
    must_end_R1 = jnp.repeat(s.step + 1 >= s.rows["max_len"], width)[:, None]
    first_1K = (jnp.arange(token_RK.shape[1]) == 0)[None, :]
    logit_RK = jnp.where(must_end_R1, jnp.where(first_1K, logits_RV[:, eos_id][:, None],
                                                NEG_INF), logit_RK)
    token_RK = jnp.where(must_end_R1, jnp.where(first_1K, eos_id, pad_id), token_RK)
    k = token_RK.shape[1]
    logp_BWK = (logit_RK - lse_R[:, None]).reshape(rows, width, k)
    scores_BM = (s.live_logprobs[:, :, None] + logp_BWK).reshape(rows, -1)  # --> [B, M], M = W * K
    token_BM = token_RK.reshape(rows, -1).astype(jnp.int32)
    chosen = strategy.select(s, scores_BM, token_BM, k, width,
                             length_penalty(s.step + 1, alpha), eos_id)
    # Finished: the candidates that end here, merged with the old finished, best W kept.
    new_seqs_BNT = extended(s.live_seqs, chosen.finished // k, jnp.take_along_axis(
        token_BM, chosen.finished, axis=1), s.step)  # --> [B, N, T]
    finished_scores, keep = jax.lax.top_k(
        jnp.concatenate([s.finished_scores, chosen.finished_scores], axis=1), width)
    finished_seqs = gather_beams(jnp.concatenate([s.finished_seqs, new_seqs_BNT], axis=1),
                                 keep)  # --> [B, W, T]
    # Live: the W candidates that go on, and the cache rows of their beams.
    parent_BW = chosen.live // k
    live_seqs = extended(s.live_seqs, parent_BW,
                         jnp.take_along_axis(token_BM, chosen.live, axis=1), s.step)  # --> [B, W, T]
    if width > 1:  # one beam per sentence: its own parent, a cache that never moves
      cache = reorder(cache, (jnp.arange(rows)[:, None] * width + parent_BW).reshape(-1))
    # A sentence whose search has ended keeps its beams while the rest of its batch goes
    # on: its result does not depend on how long the others run (with stop="current",
    # going on could still change it).
    unless_done = functools.partial(kept_where_done, s.done)
    new = BeamState(s.step + 1, unless_done(live_seqs, s.live_seqs),
                    unless_done(chosen.live_logprobs, s.live_logprobs),
                    unless_done(finished_seqs, s.finished_seqs),
                    unless_done(finished_scores, s.finished_scores), cache, s.rows, s.done,
                    jax.tree_util.tree_map(unless_done, chosen.extra, s.extra))
    return new._replace(done=s.done | ~can_improve(new))

  # Every sentence finishes by its length limit, but keep live beams as a fallback for
  # rows that did not (max_steps < max_len_B cannot happen when called via the Translator).
  return run_beams(body, state, max_steps, batch, min_rows, alpha)


def kept_where_done(done_B: jnp.ndarray, new: jnp.ndarray, old: jnp.ndarray) -> jnp.ndarray:
  """`new`, with the rows of sentences whose search has ended (`done_B`) kept `old`."""
  return jnp.where(done_B.reshape((-1,) + (1,) * (new.ndim - 1)), old, new)


def run_beams(body, state, max_steps: int, batch: int, min_rows: int, alpha: float
              ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Runs a beam search's `body` from `state` (a state with `done`, `finished_seqs`,
  `finished_scores`, `live_seqs` and `live_logprobs`) until every sentence is done, the
  batch shrinking down to `min_rows`. Returns each sentence's finished hypotheses and
  scores, or, for a sentence that finished none, its live beams scored at the full
  length."""
  finished_seqs, finished_scores, live_seqs, live_logprobs = shrinking_while_loop(
      body, state, lambda s: ~s.done, max_steps, shrink_sizes(batch, min_rows),
      lambda s: (s.finished_seqs, s.finished_scores, s.live_seqs, s.live_logprobs))
  has_finished = finished_scores[:, :1] > NEG_INF / 2
  live_scores = live_logprobs / length_penalty(jnp.asarray(max_steps), alpha)
  seqs = jnp.where(has_finished[:, :, None], finished_seqs, live_seqs)
  scores = jnp.where(has_finished, finished_scores, live_scores)
  return seqs, scores
