"""Subword regularization with a random generator the project owns.

Each epoch of `data.sampling_alpha` > 0 segments the training text anew (Kudo 2018;
Provilkov et al. 2020 for BPE). The segmentation of epoch e must be a pure function of
(data.seed, e): a resumed run continues the run it resumes, and every process of a
cluster builds the same batch plan. SentencePiece's own sampling is not: sentencepiece
0.2.3 draws other pieces in every process for the same `set_random_generator_seed`.
So the unigram model's distributions are sampled here, with numpy generators:

- `LatticeSampler` (`data.sampling_nbest=-1`, the default): every segmentation, drawn
  from the unigram lattice with probability proportional to exp(alpha * its score),
  exactly SentencePiece's `enable_sampling=True, nbest_size=-1`. The lattice factorises
  over words: a piece holds the word mark "▁" only as its first character, so a
  sentence's segmentation is one independent segmentation per "▁"-word. Each distinct
  word's lattice is built once (forward pass included); an epoch then draws every word
  of the corpus at once, one vectorised backward-sampling step per piece.
- `NBestSampler` (`data.sampling_nbest=n`): one of SentencePiece's n best segmentations
  of each sentence (deterministic), drawn with probability proportional to
  exp(alpha * score), as SentencePiece does.
- `SentencePieceSampler`: BPE-dropout, still drawn by SentencePiece, so it keeps the
  process dependence above (a warning says so).

A sampler's `sample(seed)` gives the corpus's pieces as one flat int32 array and
offsets (sentence i is `flat[offsets[i]:offsets[i + 1]]`), without EOS.
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import Sequence

import numpy as np

from seq2seq.data.tokenizer import Tokenizer
from seq2seq.vocab import UNK_ID

log = logging.getLogger(__name__)

WORD_MARK = "\u2581"
UNK_PENALTY = 10.0  # SentencePiece scores an unknown character min(piece score) - 10


class UnsupportedModelError(ValueError):
  """A SentencePiece model whose lattice this module does not reproduce."""


def _flat(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
  offsets = np.zeros(len(seqs) + 1, np.int64)
  np.cumsum([len(s) for s in seqs], out=offsets[1:])
  flat = np.fromiter((i for s in seqs for i in s), np.int32, count=int(offsets[-1]))
  return flat, offsets


def _pick(keys: np.ndarray, group: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """One draw per entry of `group`: `keys` holds, for group g = 0, 1, ..., g plus the
  running sum of its candidates' probabilities (the last exactly g + 1), so the first
  key above g + u, u uniform in [0, 1), indexes the drawn candidate."""
  return np.searchsorted(keys, group + rng.random(len(group)), side="right")


class _Pieces:
  """The unigram model's normal pieces, their scores, and how an unknown character is
  written (its UTF-8 bytes with byte fallback, else UNK)."""

  def __init__(self, tok: Tokenizer):
    sp = tok.sp
    self.score: dict[str, tuple[int, float]] = {}
    for i in range(sp.get_piece_size()):
      if sp.is_unknown(i) or sp.is_control(i) or sp.is_unused(i) or sp.is_byte(i):
        continue
      piece = sp.id_to_piece(i)
      if WORD_MARK in piece[1:]:
        raise UnsupportedModelError(
            f"piece {i} {piece!r} holds the word mark {WORD_MARK!r} after its first "
            "character (a model trained with split_by_whitespace=false?); subword "
            "sampling needs pieces that never span two words: use a model seq2seq "
            "trained, or data.sampling_alpha=0")
      self.score[piece] = (i, sp.get_score(i))
    if not self.score:
      raise UnsupportedModelError("the SentencePiece model has no normal pieces")
    self.max_len = max(map(len, self.score))
    self.unk_score = min(s for _, s in self.score.values()) - UNK_PENALTY
    self.byte_ids = [sp.piece_to_id(f"<0x{b:02X}>") for b in range(256)]
    self.byte_fallback = all(sp.is_byte(i) for i in self.byte_ids)

  def unknown(self, char: str) -> tuple[int, ...]:
    if self.byte_fallback:
      return tuple(self.byte_ids[b] for b in char.encode("utf-8"))
    return (UNK_ID,)


class LatticeSampler:
  """Segmentations of `texts` drawn from the unigram lattice (nbest -1): see the module
  docstring. Building costs one lattice per distinct word; `sample` then draws the whole
  corpus in a fraction of SentencePiece's own time (docs/experiments.md)."""

  def __init__(self, tok: Tokenizer, texts: Sequence[str], alpha: float):
    if alpha <= 0:
      raise ValueError(f"alpha={alpha}: expected > 0")
    self.pieces, self.alpha = _Pieces(tok), alpha
    types: dict[str, int] = {}
    occ_type, words_per_text = [], np.zeros(len(texts), np.int64)
    for i, text in enumerate(texts):
      words = self._words(tok.sp.normalize(text))
      words_per_text[i] = len(words)
      occ_type.extend(types.setdefault(w, len(types)) for w in words)
    self.occ_type = np.asarray(occ_type, np.int32)  # each word of the corpus: its lattice
    self.occ_text = np.repeat(np.arange(len(texts), dtype=np.int32), words_per_text)
    self.num_texts = len(texts)
    self._build(list(types))

  @staticmethod
  def _words(normalized: str) -> list[str]:
    head, *rest = normalized.split(WORD_MARK)
    return ([head] if head else []) + [WORD_MARK + w for w in rest]

  def _lattice(self, word: str) -> list[tuple[int, int, tuple[int, ...], float]]:
    """Edges (start, end, ids, alpha * score) over the word's characters, as
    SentencePiece builds them: every piece found at each position, and an unknown
    character where no one-character piece starts."""
    edges, table = [], self.pieces.score
    for i in range(len(word)):
      single = False
      for end in range(i + 1, min(i + self.pieces.max_len, len(word)) + 1):
        hit = table.get(word[i:end])
        if hit is not None:
          edges.append((i, end, (hit[0],), self.alpha * hit[1]))
          single |= end == i + 1
      if not single:
        edges.append((i, i + 1, self.pieces.unknown(word[i]), self.alpha * self.pieces.unk_score))
    return edges

  def _build(self, words: list[str]) -> None:
    """Global arrays over every word's lattice: node g = base[t] + position; the
    edges ending at each node, grouped by that node, with `keys` for `_pick`."""
    self.end_node = np.zeros(len(words), np.int64)
    keys, start_node, first, edge_ids = [], [], [], []
    base = 0
    for t, word in enumerate(words):
      edges = sorted(self._lattice(word), key=lambda e: e[1])
      fwd = [0.0] * (len(word) + 1)  # log-sum of exp(alpha * score) over paths to each node
      k = 0
      for end in range(1, len(word) + 1):  # forward filtering, then each node's table
        group = []
        while k < len(edges) and edges[k][1] == end:
          group.append(edges[k])
          k += 1
        logits = [fwd[s] + score for s, _, _, score in group]
        top = max(logits)
        weights = list(itertools.accumulate(math.exp(x - top) for x in logits))
        fwd[end] = top + math.log(weights[-1])
        node = base + end
        keys.extend(node + w / weights[-1] for w in weights[:-1])
        keys.append(node + 1.0)
        start_node.extend(base + s for s, _, _, _ in group)
        first.extend(s == 0 for s, _, _, _ in group)
        edge_ids.extend(ids for _, _, ids, _ in group)
      self.end_node[t] = base + len(word)
      base += len(word) + 1
    self.keys = np.asarray(keys, np.float64)
    self.start_node = np.asarray(start_node, np.int64)
    self.first = np.asarray(first, bool)
    self.ids_flat, self.ids_offsets = _flat(edge_ids)
    self.num_words = len(words)

  def sample(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    occ, node = np.arange(len(self.occ_type)), self.end_node[self.occ_type]
    drawn_occ, drawn_edge, drawn_step = [], [], []
    step = 0
    while occ.size:  # backward sampling, every unfinished word at once
      edge = _pick(self.keys, node, rng)
      drawn_occ.append(occ)
      drawn_edge.append(edge)
      drawn_step.append(np.full(occ.size, step))
      more = ~self.first[edge]
      occ, node = occ[more], self.start_node[edge[more]]
      step += 1
    occ, edge, step = (np.concatenate(x) if x else np.zeros(0, np.int64)
                       for x in (drawn_occ, drawn_edge, drawn_step))
    order = np.lexsort((-step, occ))  # each word's edges, first to last
    occ, edge = occ[order], edge[order]
    # Each edge's ids (one, or an unknown character's bytes), in order.
    lens = np.diff(self.ids_offsets)[edge]
    total = int(lens.sum())
    starts = self.ids_offsets[edge] - np.concatenate([[0], np.cumsum(lens)[:-1]])
    flat = self.ids_flat[np.repeat(starts, lens) + np.arange(total)]
    per_text = np.bincount(self.occ_text[occ], weights=lens, minlength=self.num_texts)
    offsets = np.zeros(self.num_texts + 1, np.int64)
    np.cumsum(per_text.astype(np.int64), out=offsets[1:])
    if not self.pieces.byte_fallback:  # SentencePiece writes a run of unknowns as one UNK
      flat, offsets = _merge_unknown_runs(flat, offsets)
    return flat.astype(np.int32), offsets


def _merge_unknown_runs(flat: np.ndarray, offsets: np.ndarray):
  starts = np.zeros(len(flat), bool)
  starts[offsets[:-1][offsets[:-1] < len(flat)]] = True
  repeat = (flat == UNK_ID) & np.concatenate([[False], flat[:-1] == UNK_ID]) & ~starts
  kept = np.concatenate([[0], np.cumsum(~repeat)])
  return flat[~repeat], kept[offsets]


class NBestSampler:
  """One of the n best segmentations of each text (`data.sampling_nbest=n`), drawn with
  probability proportional to exp(alpha * score), as SentencePiece samples them; the
  n-best lists are SentencePiece's (deterministic), the draw is numpy's."""

  def __init__(self, tok: Tokenizer, texts: Sequence[str], alpha: float, nbest: int):
    pieces = _Pieces(tok)
    self.tok, self.texts, self.alpha, self.nbest = tok, list(texts), alpha, nbest
    # A candidate's score: its pieces' scores, an unknown character's penalty once (its
    # first byte; continuation bytes are 0b10xxxxxx).
    self.id_score = np.zeros(tok.vocab_size)
    for i, score in pieces.score.values():
      self.id_score[i] = score
    for b, i in enumerate(pieces.byte_ids):
      if pieces.byte_fallback and b & 0xC0 != 0x80:
        self.id_score[i] = pieces.unk_score
    self.id_score[UNK_ID] = pieces.unk_score

  def sample(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
    lists = [c or [[]] for c in self.tok.sp.nbest_encode(self.texts, nbest_size=self.nbest,
                                                          out_type=int)]
    candidates = [c for cands in lists for c in cands]
    flat, offsets = _flat(candidates)
    of_candidate = np.repeat(np.arange(len(candidates)), np.diff(offsets))
    logits = self.alpha * np.bincount(of_candidate, weights=self.id_score[flat],
                                      minlength=len(candidates))
    count = np.array([len(c) for c in lists])
    first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    probs = np.exp(logits - np.repeat(np.maximum.reduceat(logits, first), count))
    probs /= np.repeat(np.add.reduceat(probs, first), count)
    running = np.cumsum(probs)
    within = running - np.repeat(running[first] - probs[first], count)  # each text's cdf
    keys = np.repeat(np.arange(len(lists)), count) + within
    keys[first + count - 1] = np.arange(len(lists)) + 1.0
    drawn = _pick(keys, np.arange(len(lists)), np.random.default_rng(seed))
    return _flat([candidates[i] for i in drawn])


class SentencePieceSampler:
  """BPE-dropout, drawn by SentencePiece: reproducible within a process only."""

  def __init__(self, tok: Tokenizer, texts: Sequence[str], alpha: float):
    log.warning("BPE-dropout is drawn by SentencePiece, which samples other pieces in each "
                "process for the same seed: a resumed run or another process of a cluster "
                "segments an epoch differently (a unigram model does not)")
    self.tok, self.texts, self.alpha = tok, list(texts), alpha

  def sample(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
    return _flat(self.tok.sample_encode(self.texts, self.alpha, -1, seed))


def make_sampler(tok: Tokenizer, texts: Sequence[str], alpha: float, nbest: int,
                 model_type: str):
  if model_type == "bpe":
    return SentencePieceSampler(tok, texts, alpha)
  if nbest > 0:
    return NBestSampler(tok, texts, alpha, nbest)
  return LatticeSampler(tok, texts, alpha)
