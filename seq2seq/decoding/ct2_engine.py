"""Translate with a model exported to CTranslate2 (`seq2seq-export`), behind the same API
as the JAX `Translator`: `translate`, `score`, `settings`, `encode`, `detokenize`.

The run's SentencePiece model tokenizes and detokenizes, so the two engines see and
produce the same pieces; the run's search settings (beam size, output length limits,
batch size) are the defaults. What differs, by CTranslate2's design:
- length penalty: CTranslate2 divides a hypothesis' log-probability by
  `length ** alpha` (its `length_penalty`); the JAX engine uses GNMT's
  `((5 + length) / 6) ** alpha`. `--alpha` is passed to CTranslate2 as its exponent,
  so the same alpha ranks lengths differently (alpha 0, raw log-probability, is the
  same in both). An export's default is `EXPORT_FILE`'s `length_penalty`.
- the output length limit is one per batch (a * longest source + b), not per sentence;
- sampling draws from CTranslate2's global random generator (`--seed` seeds it), so a
  seed gives the same samples for the same batches, not regardless of batch size.
Ensembles and attention plots are JAX-engine features.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from seq2seq.config import DecodeConfig
from seq2seq.decoding.engine_io import (
  Hypothesis,
  PairScore,
  Sampling,
  check_request,
  encode_sources,
  has_text,
  hypotheses_needed,
  pick,
  resolve_settings,
  source_limit,
)
from seq2seq.decoding.sentences import Plan
from seq2seq.rundir import ctranslate2_model
from seq2seq.vocab import cut_at_eos


class CTranslate2Translator:
  """A CTranslate2 model directory written by `seq2seq-export`, with its tokenizer."""

  engine = "ctranslate2"

  def __init__(self, path: str | os.PathLike, device: str = "cpu", compute_type: str = "default",
               threads: int = 0, **decode_overrides):
    """`threads`: CTranslate2's intra-op threads (0 = one per core)."""
    ct2 = ctranslate2_model.import_ctranslate2()
    self.path = Path(path)
    self.info, cfg, self.tokenizer = ctranslate2_model.load_export(path)
    self.model_cfg = cfg.model
    self.languages = (cfg.data.src_lang, cfg.data.tgt_lang)
    self.decode_cfg = dataclasses.replace(cfg.decode, **decode_overrides)
    self.translator = ct2.Translator(str(path), device=device, compute_type=compute_type,
                                     intra_threads=threads or (os.cpu_count() or 1))
    self._ct2 = ct2

  @classmethod
  def load(cls, path: str | os.PathLike, **kwargs) -> "CTranslate2Translator":
    return cls(path, **kwargs)

  def settings(self, beam_size: int | None = None, alpha: float | None = None,
               batch_size: int | None = None) -> DecodeConfig:
    """The export's search settings with the given ones in their place (as the JAX engine)."""
    return resolve_settings(self.decode_cfg, beam_size, alpha, batch_size)

  def encode(self, texts: Sequence[str], line_numbers: Sequence[int] | None = None
             ) -> list[list[str]]:
    """Source pieces of each text, EOS excluded (CTranslate2 appends it), truncated to the
    model's maximum with a warning naming the line, like the JAX engine's."""
    ids = encode_sources(self.tokenizer, texts, self.model_cfg.max_len, line_numbers)
    return [self.tokenizer.pieces(x[:-1]) for x in ids]

  def _ids(self, pieces: Sequence[str]) -> list[int]:
    return [self.tokenizer.sp.piece_to_id(p) for p in pieces]

  def detokenize(self, ids: Sequence[int]) -> str:
    return self.tokenizer.decode([ids])[0]

  def count_pieces(self, texts: list[str]) -> list[int]:
    """The pieces of each text as a source, EOS included."""
    return [len(x) + 1 for x in self.tokenizer.encode(texts)]

  def translate(self, texts: str | Sequence[str], beam_size: int | None = None,
                alpha: float | None = None, nbest: int = 0, batch_size: int | None = None,
                sampling: Sampling | None = None, first_index: int = 0,
                prefixes: Sequence[str] | None = None, split_sentences: bool = True,
                glossary=None):
    """As `Translator.translate` (see the module docstring for what differs); no glossary:
    CTranslate2 has no constrained search."""
    if glossary is not None:
      raise ValueError("a glossary needs the JAX engine: CTranslate2 has no constrained "
                       "search (its target prefixes force the start of a translation only)")
    if isinstance(texts, str):
      return self.translate([texts], beam_size, alpha, nbest, batch_size, sampling,
                            prefixes=None if prefixes is None else [prefixes],
                            split_sentences=split_sentences)[0]
    texts = list(texts)
    c = self.settings(beam_size, alpha, batch_size)
    check_request(texts, prefixes, c, nbest, sampling)
    plan = Plan.of(texts, self.languages[0] if split_sentences else None, self.count_pieces,
                   source_limit(self.model_cfg.max_len, c), first_index)
    hyps = self.hypotheses(plan.sentences, c, nbest, sampling, plan.prefixes(prefixes),
                           [first_index + i + 1 for i, _ in plan.owners()])
    return pick(plan.join(hyps), nbest, c)

  def hypotheses(self, texts: list[str], c: DecodeConfig, nbest: int,
                 sampling: Sampling | None, prefixes: Sequence[str] | None,
                 line_numbers: Sequence[int]) -> list[list[Hypothesis]]:
    """Each sentence's hypotheses, best first (one "" for empty ones); `line_numbers[k]`:
    the 1-based text of sentence k, which warnings name."""
    hyps: list[list[Hypothesis]] = [[Hypothesis("", 0.0, [])] for _ in texts]
    nonempty = [i for i, t in enumerate(texts) if has_text(t)]
    sources = self.encode([texts[i] for i in nonempty],
                          [line_numbers[i] for i in nonempty]) if nonempty else []
    # no pieces once normalised: "", as for an empty line
    nonempty, sources = [i for i, s in zip(nonempty, sources) if s], [s for s in sources if s]
    if not nonempty:
      return hyps
    target_prefix = None
    if prefixes is not None:
      target_prefix = [self.tokenizer.pieces(ids) or None
                       for ids in self.tokenizer.encode([prefixes[i] for i in nonempty])]
    options = dict(max_batch_size=c.batch_size, return_scores=True, min_decoding_length=0,
                   max_input_length=self.model_cfg.max_len,
                   # the JAX engine's limit for the longest source, one per call
                   max_decoding_length=max(1, min(
                       self.model_cfg.max_len - 1,
                       int(c.max_len_a * max(len(s) for s in sources) + c.max_len_b))))
    if sampling is None:
      results = self.translator.translate_batch(
          sources, target_prefix, beam_size=c.beam_size, length_penalty=c.alpha,
          num_hypotheses=hypotheses_needed(c, nbest, sampling), **options)
      found = [[(self._ids(h), s) for h, s in zip(r.hypotheses, r.scores)] for r in results]
    else:
      found = self._sample(sources, target_prefix, sampling, max(nbest, 1), options)
    for i, options_i in zip(nonempty, found):
      hyps[i] = [Hypothesis(self.detokenize(ids), float(score), cut_at_eos(ids))
                 for ids, score in options_i]
    return hyps

  def _sample(self, sources, target_prefix, sampling: Sampling, draws: int, options):
    """`draws` samples per source (seeds seed .. seed + draws - 1), best first."""
    greedy = sampling.temperature == 0
    found = [[] for _ in sources]
    for n in range(draws):
      self._ct2.set_random_seed(sampling.seed + n)
      results = self.translator.translate_batch(
          sources, target_prefix, beam_size=1, length_penalty=0,
          sampling_topk=1 if greedy else sampling.top_k,
          sampling_topp=sampling.top_p, sampling_temperature=sampling.temperature or 1.0,
          **options)
      for k, r in enumerate(results):
        # with return_scores and no length penalty, the score is the sum of log-probs
        found[k].append((self._ids(r.hypotheses[0]), r.scores[0]))
    return [sorted(f, key=lambda h: -h[1]) for f in found]

  def score(self, sources: Sequence[str], targets: Sequence[str],
            batch_size: int | None = None) -> list[PairScore]:
    """Forced decoding, as `Translator.score`: log-probability of each target (pieces +
    EOS) given its source."""
    if len(sources) != len(targets):
      raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    rows = self.settings(batch_size=batch_size).batch_size
    tgt = [self.tokenizer.pieces(ids) for ids in self.tokenizer.encode(targets)]
    results = self.translator.score_batch(self.encode(sources), tgt, max_batch_size=rows)
    return [PairScore(float(np.sum(r.log_probs)), len(r.log_probs)) for r in results]
