"""The CTranslate2 engine: a model exported by `seq2seq-export`, behind the same
`engine.Engine` contract as the JAX `Translator`.

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
Ensembles, glossaries and attention are JAX-engine features.

Threads follow CTranslate2's advice for CPUs (`ThreadPlan`): for throughput, several
batches translated at once, one thread each (`inter_threads` = cores, `intra_threads` =
1), which is the default; for the latency of one request at a time, one batch on every
core. A call with more than `batch_size` sentences is split into batches that run on the
parallel workers; the server feeds it `parallel_batches` batches at once.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from seq2seq.config import CT2_THREADS
from seq2seq.decoding.engine import Alignment, EngineLimits, SentenceEngine
from seq2seq.decoding.engine_io import (
  Hypothesis,
  PairScore,
  SearchSettings,
  has_text,
)
from seq2seq.rundir import ctranslate2_model
from seq2seq.vocab import EOS_ID, cut_at_eos


def usable_cores() -> int:
  """The cores this process may run on (its affinity: `taskset` counts), at least 1."""
  try:
    return max(len(os.sched_getaffinity(0)), 1)
  except AttributeError:  # no sched_getaffinity (macOS)
    return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class ThreadPlan:
  """CTranslate2's threads: `inter` batches translated at once (workers, each holding the
  model's weights shared), each on `intra` threads."""

  mode: str  # throughput, latency, or "fixed" for an explicit INTERxINTRA
  inter: int
  intra: int

  @classmethod
  def of(cls, spec: str, cores: int | None = None) -> "ThreadPlan":
    """`spec` as `decode.ct2_threads` takes it, over `cores` (default: `usable_cores`)."""
    cores = cores or usable_cores()
    if spec == "throughput":
      return cls("throughput", cores, 1)
    if spec == "latency":
      return cls("latency", 1, cores)
    if not re.fullmatch(CT2_THREADS, spec):
      raise ValueError(f"CTranslate2 threads {spec!r}: expected throughput, latency or "
                       "INTERxINTRA (positive counts, e.g. 2x1)")
    inter, _, intra = spec.partition("x")
    return cls("fixed", int(inter), int(intra))

  def describe(self) -> dict[str, Any]:
    return {"mode": self.mode, "inter_threads": self.inter, "intra_threads": self.intra}


class CTranslate2Translator(SentenceEngine):
  """A CTranslate2 model directory written by `seq2seq-export`, with its tokenizer."""

  engine = "ctranslate2"

  def __init__(self, path: str | os.PathLike, device: str = "cpu", compute_type: str = "default",
               **decode_overrides):
    """`decode_overrides`: DecodeConfig fields over the export's, `ct2_threads` (the
    `ThreadPlan`) among them."""
    ct2 = ctranslate2_model.import_ctranslate2()
    self.path = Path(path)
    self.info, cfg, self.tokenizer = ctranslate2_model.load_export(path)
    self.model_cfg = cfg.model
    self.max_len = cfg.model.max_len
    self.languages = (cfg.data.src_lang, cfg.data.tgt_lang)
    if cfg.data.multilingual:  # the export of every direction: the token is ours to add
      self.set_directions(cfg.data.direction_pairs())
    # the export of one direction of several: CTranslate2 adds its token to each source
    self.added_source = 1 if self.info.get("source_token") else 0
    self.decode_cfg = dataclasses.replace(cfg.decode, **decode_overrides)
    self.threads = ThreadPlan.of(self.decode_cfg.ct2_threads)
    self.translator = ct2.Translator(str(path), device=device, compute_type=compute_type,
                                     inter_threads=self.threads.inter,
                                     intra_threads=self.threads.intra)
    self._ct2 = ct2

  @classmethod
  def load(cls, path: str | os.PathLike, **kwargs) -> "CTranslate2Translator":
    return cls(path, **kwargs)

  # ------------------------------------------------------------------ the Engine contract

  @property
  def limits(self) -> EngineLimits:
    return EngineLimits(self.source_limit(), self.max_len - 2,
                        parallel_batches=self.threads.inter)  # one per CTranslate2 worker

  def describe(self) -> dict[str, Any]:
    return {**super().describe(), "threads": self.threads.describe()}

  def source_limit(self) -> int:
    return super().source_limit() - self.added_source

  def translate_ids(self, src_ids: Sequence[np.ndarray], settings: SearchSettings | None = None,
                    **changes) -> list[list[tuple[np.ndarray, float]]]:
    """Each id sequence (EOS included, as the JAX engine takes it) searched; the best
    `max(nbest, 1)` hypotheses (ids, score) of each, best first."""
    s = self.settings(settings, **changes)
    texts = [self.tokenizer.decode([ids])[0] for ids in src_ids]
    hyps = self.hypotheses(texts, s.changed(nbest=s.nbest or 1), None,
                           [(i, 0) for i in range(len(texts))])
    return [[(np.asarray(h.ids + [EOS_ID], np.int32), h.score) for h in found]
            for found in hyps]

  def align(self, sources: Sequence[str], target_ids: Sequence[Sequence[int]]
            ) -> list[Alignment]:
    """The pieces' spans without weights: an exported model returns no attention here,
    so documents place styles by relative position."""
    return self.alignments(sources, target_ids, [None] * len(sources))

  def warm_up(self, max_batch: int, longest: int = 64,
              also: Sequence[SearchSettings] = ()) -> None:
    """CTranslate2 compiles nothing: one translation (at the defaults and at each of
    `also`) loads what it loads lazily."""
    for settings in (None, *also):
      self.translate(["A man in a blue shirt is standing on a ladder."], settings)

  def reload(self) -> int | None:
    return None  # an export holds one checkpoint

  # ------------------------------------------------------------------ its own

  def encode(self, texts: Sequence[str], line_numbers: Sequence[int] | None = None
             ) -> list[list[str]]:
    """Source pieces of each text, EOS excluded (CTranslate2 appends it, where the model
    reads one), truncated to the model's maximum with a warning naming the line, like the
    JAX engine's."""
    cut = -1 if self.tokenizer.source_eos else None
    return [self.tokenizer.pieces(x[:cut]) for x in self.encode_sources(texts, line_numbers)]

  def _ids(self, pieces: Sequence[str]) -> list[int]:
    return [self.tokenizer.sp.piece_to_id(p) for p in pieces]

  def detokenize(self, ids: Sequence[int]) -> str:
    return self.tokenizer.decode([ids])[0]

  def hypotheses(self, texts: list[str], settings: SearchSettings,
                 prefixes: Sequence[str] | None, owners: Sequence[tuple[int, int]]
                 ) -> list[list[Hypothesis]]:
    if settings.glossary is not None:
      raise ValueError("a glossary needs the JAX engine: CTranslate2 gives no attention "
                       "to place terms by")
    c = self.decode_cfg
    hyps: list[list[Hypothesis]] = [[Hypothesis("", 0.0, [])] for _ in texts]
    nonempty = [i for i, t in enumerate(texts) if has_text(t)]
    sources = self.encode([texts[i] for i in nonempty],
                          [owners[i][0] + 1 for i in nonempty]) if nonempty else []
    # no pieces once normalised: "", as for an empty line
    lead = len(self.source_token())
    nonempty = [i for i, s in zip(nonempty, sources) if len(s) > lead]
    sources = [s for s in sources if len(s) > lead]
    if not nonempty:
      return hyps
    target_prefix = None
    if prefixes is not None:
      target_prefix = [self.tokenizer.pieces(ids) or None
                       for ids in self.tokenizer.encode_target([prefixes[i] for i in nonempty])]
    options = dict(max_batch_size=settings.batch_size, return_scores=True,
                   min_decoding_length=0, max_input_length=self.model_cfg.max_len,
                   # the JAX engine's limit for the longest source, one per call
                   max_decoding_length=max(1, min(
                       self.model_cfg.max_len - 1,
                       int(c.max_len_a * max(len(s) for s in sources) + c.max_len_b))))
    if settings.sampling is None:
      results = self.translator.translate_batch(
          sources, target_prefix, beam_size=settings.beam_size, length_penalty=settings.alpha,
          num_hypotheses=settings.hypotheses(c), **options)
      found = [[(self._ids(h), s) for h, s in zip(r.hypotheses, r.scores)] for r in results]
    else:
      found = self._sample(sources, target_prefix, settings.sampling,
                           max(settings.nbest, 1), options)
    for i, options_i in zip(nonempty, found):
      hyps[i] = [Hypothesis(self.detokenize(ids), float(score), cut_at_eos(ids))
                 for ids, score in options_i]
    return hyps

  def _sample(self, sources, target_prefix, sampling, draws: int, options):
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
            settings: SearchSettings | None = None, **changes) -> list[PairScore]:
    """Forced decoding, as `Translator.score`: log-probability of each target (pieces +
    EOS) given its source."""
    if len(sources) != len(targets):
      raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    rows = self.settings(settings, **changes).batch_size
    tgt = [self.tokenizer.pieces(ids) for ids in self.tokenizer.encode_target(targets)]
    results = self.translator.score_batch(self.encode(sources), tgt, max_batch_size=rows)
    return [PairScore(float(np.sum(r.log_probs)), len(r.log_probs)) for r in results]
