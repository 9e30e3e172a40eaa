"""Translate text with a trained model: the `Translator` Python API.

    from seq2seq import Translator
    t = Translator.load("runs/multi30k")
    t.translate("A dog runs.", beam_size=5)            # a string gives a string
    t.translate(["A dog runs.", "Two cats."])           # a list gives a list

Sentences are sorted by length and decoded in batches of fixed row count, padded to the
run's length buckets (a handful of compiled shapes), then returned in the input order.
This module needs the model, the search and the tokenizer, never training code.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Iterator, Sequence

import jax
import numpy as np

from seq2seq.config import DecodeConfig, ModelConfig
from seq2seq.data.input_pipeline import LengthBuckets
from seq2seq.data.textfiles import one_line  # noqa: F401 (part of this module's API)
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.decoding import loading
from seq2seq.decoding.batching import (
  bound_search,
  encode_prefixes,
  forced_scores,
  ordered_map,
  search_jobs,
)
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
from seq2seq.decoding.glossary import Glossary, constraint_pieces, load_glossary, word_starts
from seq2seq.decoding.programs import ShapeCompileLog, compiled_functions, counting_programs
from seq2seq.decoding.sentences import Plan, TooLongError  # noqa: F401 (TooLongError: API)
from seq2seq.model.ensemble import Ensemble
from seq2seq.model.transformer import Model
from seq2seq.numerics import resolve
from seq2seq.rundir import checkpoint
from seq2seq.runtime import give_back_freed_memory
from seq2seq.vocab import cut_at_eos

log = logging.getLogger(__name__)


class Translator:
  """A model, its parameters and tokenizer, with compiled search functions reused across calls."""

  def __init__(self, model_cfg: ModelConfig, params, tokenizer: Tokenizer,
               decode_cfg: DecodeConfig | None = None,
               buckets: LengthBuckets | None = None,
               ensemble: Sequence[tuple[ModelConfig, Any]] = (),
               numerics_use: str = "training", languages: tuple[str, str] = ("en", "de")):
    """`buckets`: the padded source lengths of search batches (default:
    `decode_cfg.length_buckets` up to the model's max_len).
    `languages`: the (source, target) language codes the model translates between.
    `ensemble`: further (model config, parameters) members with the same vocabulary;
    search and scoring then use the mean of all members' log-probabilities.
    `numerics_use`: the `seq2seq.numerics.resolve` use whose operand dtype the models
    compute with: "training" (validation during training: as the run trains) or
    "decoding" (a loaded run: the dtype that decodes faster here)."""
    if tokenizer.vocab_size != model_cfg.vocab_size:
      raise checkpoint.CheckpointError(
          f"tokenizer has {tokenizer.vocab_size} pieces but the model's embedding has "
          f"{model_cfg.vocab_size} rows: the tokenizer does not belong to this checkpoint")
    self.model_cfg, self.params, self.tokenizer = model_cfg, params, tokenizer
    self.languages = tuple(languages)
    self.decode_cfg = decode_cfg or DecodeConfig()
    self.row_sizes: tuple[int, ...] = ()  # the rows a decoding batch may have (batch_rows)
    self.buckets = buckets or LengthBuckets.up_to(self.decode_cfg.length_buckets,
                                                  model_cfg.max_len)
    self.model = Model(model_cfg, resolve(model_cfg.matmul_dtype, numerics_use))
    for member_cfg, _ in ensemble:
      if member_cfg.vocab_size != model_cfg.vocab_size:
        raise checkpoint.CheckpointError(
            f"ensemble members have {model_cfg.vocab_size} and {member_cfg.vocab_size} "
            "pieces: they must share one vocabulary")
    self.ensemble_params = tuple(p for _, p in ensemble)
    models = self.model if not ensemble else Ensemble(
        [self.model, *(Model(c, resolve(c.matmul_dtype, numerics_use)) for c, _ in ensemble)])
    self.search_programs = 0  # searches this translator built (one per new batch shape
    # and settings): traced, or loaded from the program store
    self._search, self._forced_logprob = compiled_functions(models)
    self.keep_programs(self.decode_cfg.programs, at_least=False)
    self._shape_log = ShapeCompileLog()
    self._word_starts: np.ndarray | None = None  # word_starts(), made once

  def keep_programs(self, n: int, at_least: bool = True) -> None:
    """Keeps `n` compiled searches in memory (0: all), or at least `n` (`at_least`: a
    server's set of batch shapes); the least recently used beyond it are dropped. The
    limit belongs to the compiled functions, which translators of equal models share:
    the newest one's holds."""
    for programs in (self._search, self._forced_logprob):
      if not at_least:
        programs.limit = n
      elif programs.limit and (n == 0 or n > programs.limit):
        programs.limit = n
      programs.drop_beyond_limit()

  def all_params(self, params=None):
    """The parameters the compiled functions take: one tree, or a tuple for an ensemble."""
    params = self.params if params is None else params
    return (params, *self.ensemble_params) if self.ensemble_params else params

  @classmethod
  def load(cls, workdir: str | os.PathLike | Sequence[str | os.PathLike],
           checkpoint_name: str = "best", engine: str = "jax", **decode_overrides):
    """Loads a run directory written by train.py (config, tokenizer, parameters), or a
    list of run directories as an ensemble (the first run's search settings are used;
    all must share its SentencePiece model). `decode_overrides`: DecodeConfig fields.

    `engine="ctranslate2"` loads a directory written by `seq2seq-export` instead and
    returns a `ct2_engine.CTranslate2Translator` (same translate/score API)."""
    workdirs = loading.workdir_list(workdir, engine, checkpoint_name)
    if engine == "ctranslate2":
      from seq2seq.decoding.ct2_engine import CTranslate2Translator
      return CTranslate2Translator.load(workdirs[0], **decode_overrides)
    run = loading.read_run(workdirs, checkpoint_name)
    return cls(run.config.model, run.params, run.tokenizer,
               dataclasses.replace(run.config.decode, **decode_overrides), None, run.ensemble,
               numerics_use="decoding",
               languages=(run.config.data.src_lang, run.config.data.tgt_lang))

  @classmethod
  def from_pretrained(cls, name_or_path: str | os.PathLike, checkpoint_name: str = "best",
                      engine: str = "jax", revision: str | None = None, **decode_overrides):
    """`load`, by the name Hugging Face users know, for a run directory, an export or a
    model on the Hugging Face Hub (`"org/name"`, at `revision`): downloaded once into
    huggingface_hub's cache, read from there offline (HF_HUB_OFFLINE=1), with the token
    of `hf auth login` for a private one."""
    from seq2seq.rundir import hub
    return cls.load(hub.resolve(name_or_path, revision), checkpoint_name, engine,
                    **decode_overrides)

  def settings(self, beam_size: int | None = None, alpha: float | None = None,
               batch_size: int | None = None) -> DecodeConfig:
    """The run's decoding settings with the given ones in their place (None keeps the
    run's)."""
    return resolve_settings(self.decode_cfg, beam_size, alpha, batch_size)

  def encode(self, texts: Sequence[str], line_numbers: Sequence[int] | None = None
             ) -> list[np.ndarray]:
    return encode_sources(self.tokenizer, texts, self.model_cfg.max_len, line_numbers)

  def translate_batches(self, src_ids: Sequence[np.ndarray], params=None,
                        beam_size: int | None = None, alpha: float | None = None,
                        batch_size: int | None = None, sampling: Sampling | None = None,
                        key_indices: Sequence[int] | None = None,
                        prefix_ids: Sequence[np.ndarray] | None = None, nbest: int = 1,
                        constraint_ids: Sequence | None = None
                        ) -> Iterator[dict[int, list[tuple[np.ndarray, float]]]]:
    """Searches the id sequences batch by batch (shortest first, the settings' `workers`
    batches at once on threads); yields, in that order, per batch,
    {input index: the best `nbest` hypotheses (ids, score), best first; beam search
    stops as soon as these can no longer change}. With `sampling`, draws one
    sample per input instead, input i with the key fold_in(seed key, key_indices[i])
    (default i). `prefix_ids[i]` (pieces, no EOS) forces the start of input i's output;
    `constraint_ids[i]` (constraints, each a list of alternatives' pieces) must appear in
    it (`constraints.py`)."""
    c = self.settings(beam_size, alpha, batch_size)
    run = bound_search(self._search, self.all_params(params), c, sampling, nbest)

    def search(job):
      chunk, args = job
      key = (args["max_steps"], c.beam_size, nbest, sampling is None)
      with counting_programs(self):
        return (chunk, *self._shape_log.run(args["src_BS"].shape, key, lambda: run(**args)))

    jobs = search_jobs(src_ids, c, self.buckets, self.model_cfg.max_len, sampling,
                       key_indices, prefix_ids, self.row_sizes, constraint_ids,
                       None if constraint_ids is None else self.word_starts())
    for chunk, seqs, scores in ordered_map(search, jobs, c.workers):
      yield {i: [(seqs[row, k], float(scores[row, k])) for k in range(min(nbest, seqs.shape[1]))]
             for row, i in enumerate(chunk)}

  def lower_searches(self, src_ids: Sequence[np.ndarray], params=None,
                     beam_size: int | None = None, alpha: float | None = None,
                     batch_size: int | None = None, row_sizes: Sequence[int] | None = None
                     ) -> Iterator[jax.stages.Lowered]:
    """The searches `translate_batches` would run on these inputs (with `row_sizes` in
    place of the translator's), one per distinct batch shape, traced and lowered but not
    run: `.compile()` puts each in the cache that call uses, so it then compiles nothing
    (the trainer compiles the validation's searches this way before the first update)."""
    c = self.settings(beam_size, alpha, batch_size)
    run = bound_search(self._search.lower, self.all_params(params), c, None, 1)
    seen = set()
    for _, args in search_jobs(src_ids, c, self.buckets, self.model_cfg.max_len, None, None,
                               None, self.row_sizes if row_sizes is None else row_sizes):
      shape = (args["src_BS"].shape, args["max_steps"])
      if shape not in seen:
        seen.add(shape)
        with counting_programs(self):
          lowered = run(**args)
        yield lowered

  def translate_ids(self, src_ids: Sequence[np.ndarray], params=None,
                    beam_size: int | None = None, alpha: float | None = None,
                    batch_size: int | None = None, sampling: Sampling | None = None,
                    key_indices: Sequence[int] | None = None,
                    prefix_ids: Sequence[np.ndarray] | None = None, nbest: int = 1,
                    constraint_ids: Sequence | None = None
                    ) -> list[list[tuple[np.ndarray, float]]]:
    """Searches each id sequence; returns, per input, the best `nbest` hypotheses (ids,
    score), best first."""
    results: list = [None] * len(src_ids)
    for found in self.translate_batches(src_ids, params, beam_size, alpha, batch_size,
                                        sampling, key_indices, prefix_ids, nbest,
                                        constraint_ids):
      for i, hyps in found.items():
        results[i] = hyps
    return results

  def translate(self, texts: str | Sequence[str], beam_size: int | None = None,
                alpha: float | None = None, nbest: int = 0, batch_size: int | None = None,
                sampling: Sampling | None = None, first_index: int = 0,
                prefixes: Sequence[str] | None = None, split_sentences: bool = True,
                glossary=None):
    """Translates a text or a list of texts. Empty or whitespace-only texts give "".

    Each text is cut into sentences in the run's source language (`split_sentences=False`:
    a text is one sentence, for sentence-per-line data), and a part longer than the model
    takes is cut at clause punctuation or white space (`sentences.Plan`); the sentences of
    all texts are searched together and each text's translations joined with its own
    spacing and line breaks. A part that cannot be cut to fit raises `TooLongError`.

    With `sampling=Sampling(temperature, top_k, top_p, seed)`, draws from the model
    instead of searching (beam size and alpha are unused); text i (counted from
    `first_index`, for a stream read in parts) has its own random key, so a seed gives
    the same samples whatever the batch size.

    Returns:
      For a string, its translation; for a list, a list of translations. With
      `nbest=N > 0`, N `Hypothesis` (text, score, ids) per input instead, best first
      (with sampling: N samples, seeds seed .. seed + N - 1, sorted by log-probability).

    `prefixes[i]` (a string, "" for none) forces the start of text i's translation: the
    output begins with the prefix's pieces and the search continues from them.

    `glossary` (a `glossary.Glossary`, a {source term: target term} mapping, or a TSV
    file's path): each sentence in which a source term occurs is translated with the
    constrained beam search, its translation holding one of the term's target
    alternatives; sentences without a term translate as without the glossary.
    """
    if isinstance(texts, str):
      return self.translate([texts], beam_size, alpha, nbest, batch_size, sampling,
                            first_index, None if prefixes is None else [prefixes],
                            split_sentences, glossary)[0]
    texts = list(texts)
    c = self.settings(beam_size, alpha, batch_size)
    check_request(texts, prefixes, c, nbest, sampling)
    glossary = load_glossary(glossary, sampling, prefixes)
    plan = Plan.of(texts, self.languages[0] if split_sentences else None, self.count_pieces,
                   source_limit(self.model_cfg.max_len, c), first_index)
    hyps = self.hypotheses(plan.sentences, c, nbest, sampling, plan.prefixes(prefixes),
                           [(first_index + i, j) for i, j in plan.owners()], glossary)
    out = pick(plan.join(hyps), nbest, c)
    if len(texts) > c.batch_size:  # a pass of several batches: worth a few ms (the
      give_back_freed_memory()  # server's single batches are not)
    return out

  def score_ids(self, src_ids: Sequence[np.ndarray], tgt_ids: Sequence[np.ndarray],
                batch_size: int | None = None) -> list[PairScore]:
    """Forced decoding: the model's log-probability of each target (ids ending in EOS)."""
    if len(src_ids) != len(tgt_ids):
      raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
    return forced_scores(lambda src, tgt: self._forced_logprob(self.all_params(), src, tgt),
                         src_ids, tgt_ids, self.settings(batch_size=batch_size).batch_size,
                         self.buckets)

  def score(self, sources: Sequence[str], targets: Sequence[str],
            batch_size: int | None = None) -> list[PairScore]:
    """Forced decoding of given translations: each target's log-probability given its
    source, with the target's token count (its pieces + EOS)."""
    if len(sources) != len(targets):
      raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    return self.score_ids(self.encode(sources), self.encode(targets), batch_size)

  def detokenize(self, seq: np.ndarray) -> str:
    """Text of an output id sequence (cut at its first EOS)."""
    return self.tokenizer.decode([seq])[0]

  def word_starts(self) -> np.ndarray:
    """`glossary.word_starts` of the tokenizer, made once."""
    if self._word_starts is None:
      self._word_starts = word_starts(self.tokenizer)
    return self._word_starts

  def search_with_constraints(self, ids: list[np.ndarray], constraint_ids: list[list],
                              c: DecodeConfig, nbest: int) -> list:
    """`translate_ids` of the sentences a glossary term applies to with the constrained
    search, and of the others with the plain one (unchanged by the glossary)."""
    found: list = [None] * len(ids)
    for constrained in (False, True):
      group = [k for k, cons in enumerate(constraint_ids) if bool(cons) == constrained]
      if not group:
        continue
      results = self.translate_ids(
          [ids[k] for k in group], beam_size=c.beam_size, alpha=c.alpha,
          batch_size=c.batch_size, nbest=nbest,
          constraint_ids=[constraint_ids[k] for k in group] if constrained else None)
      for k, hyps in zip(group, results):
        found[k] = hyps
    return found

  def count_pieces(self, texts: list[str]) -> list[int]:
    """The pieces of each text as a source, EOS included."""
    return [len(x) + 1 for x in self.tokenizer.encode(texts)]

  def hypotheses(self, texts: list[str], c: DecodeConfig, nbest: int,
                 sampling: Sampling | None, prefixes: Sequence[str] | None,
                 owners: Sequence[tuple[int, int]], glossary: Glossary | None = None
                 ) -> list[list[Hypothesis]]:
    """`Translator.translate`'s hypotheses for each sentence, best first (one "" for empty
    ones). `owners[k]`: sentence k's text (0-based, counted over the whole input: errors
    name it, its number picks a sampling key) and its place within that text."""
    # A text with nothing to translate (blank, control characters such as NUL, or no pieces
    # once normalised) translates to "", as an empty line does.
    nonempty = [i for i, t in enumerate(texts) if has_text(t)]
    ids = self.encode([texts[i] for i in nonempty],
                      [owners[i][0] + 1 for i in nonempty]) if nonempty else []
    kept = [k for k, x in enumerate(ids) if len(x) > 1]
    nonempty, ids = [nonempty[k] for k in kept], [ids[k] for k in kept]
    prefix_ids = (None if prefixes is None else
                  encode_prefixes(self.tokenizer, prefixes, nonempty, self.model_cfg.max_len,
                                  [owners[i][0] for i in nonempty]))
    if glossary is not None:
      constraint_ids = [constraint_pieces(self.tokenizer, glossary.applying(texts[i]),
                                          self.model_cfg.max_len, owners[i][0])
                        for i in nonempty]
      found = self.search_with_constraints(ids, constraint_ids, c,
                                           hypotheses_needed(c, nbest, sampling))
    elif sampling is None:
      found = self.translate_ids(ids, beam_size=c.beam_size, alpha=c.alpha,
                                 batch_size=c.batch_size, prefix_ids=prefix_ids,
                                 nbest=hypotheses_needed(c, nbest, sampling))
    else:
      key_indices = [owners[i] for i in nonempty]
      draws = [self.translate_ids(ids, batch_size=c.batch_size, key_indices=key_indices,
                                  sampling=dataclasses.replace(sampling, seed=sampling.seed + n),
                                  prefix_ids=prefix_ids)
               for n in range(max(nbest, 1))]
      found = [sorted((d[k][0] for d in draws), key=lambda h: -h[1]) for k in range(len(ids))]
    hyps: list[list[Hypothesis]] = [[Hypothesis("", 0.0, [])] for _ in texts]
    for i, options in zip(nonempty, found):
      hyps[i] = [Hypothesis(self.detokenize(seq), score, cut_at_eos(seq))
                 for seq, score in options]
    return hyps


