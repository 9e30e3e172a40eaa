"""The JAX engine: a trained run's model, parameters and tokenizer, with the compiled
searches it reuses across calls (`engine.Engine`; `Translator` is its Python name).

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
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Sequence

import jax
import numpy as np

from seq2seq.config import DecodeConfig, ModelConfig
from seq2seq.data.input_pipeline import LengthBuckets
from seq2seq.data.textfiles import one_line  # noqa: F401 (part of this module's API)
from seq2seq.data.tokenizer import LANGUAGE_PIECES_FILE, Tokenizer
from seq2seq.decoding import agreement, loading
from seq2seq.decoding.batching import (
  bound_search,
  encode_prefixes,
  forced_scores,
  ordered_map,
  pair_batches,
  search_jobs,
)
from seq2seq.decoding.engine import Alignment, EngineLimits, SentenceEngine
from seq2seq.decoding.engine_io import (  # noqa: F401 (Sampling: part of this module's API)
  Hypothesis,
  PairScore,
  Sampling,
  SearchSettings,
  encode_sources,
  has_text,
)
from seq2seq.decoding.glossary import Glossary, check_terms
from seq2seq.decoding.programs import ShapeCompileLog, compiled_functions, counting_programs
from seq2seq.decoding.sentences import Plan, TooLongError  # noqa: F401 (TooLongError: API)
from seq2seq.decoding.term_placement import place_terms
from seq2seq.model.ensemble import Ensemble
from seq2seq.model.transformer import Model
from seq2seq.numerics import resolve
from seq2seq.rundir import checkpoint
from seq2seq.runtime import give_back_freed_memory
from seq2seq.vocab import EOS_ID, cut_at_eos

log = logging.getLogger(__name__)

WARM_UP = "A man in a blue shirt is standing on a ladder cleaning windows."


class Translator(SentenceEngine):
  """A model, its parameters and tokenizer, with compiled search functions reused across calls."""

  engine = "jax"

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
    self._weights = {"params": params}  # shared with its views (`for_direction`)
    self.model_cfg, self.tokenizer = model_cfg, tokenizer
    self.max_len = model_cfg.max_len
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
    self._search, self._forced_logprob, self._cross_attention = compiled_functions(models)
    self.keep_programs(self.decode_cfg.programs, at_least=False)
    self._shape_log = ShapeCompileLog()
    self.followed: tuple[Any, str, Path] | None = None  # (run, checkpoint kind, step
    # directory served): what `reload` looks for newer ones of

  @property
  def params(self):
    """The parameters it translates with: one tree, shared by the views of its other
    directions (`for_direction`), so that `reload` swaps them in for all of them."""
    return self._weights["params"]

  @params.setter
  def params(self, params) -> None:
    self._weights["params"] = params

  def keep_programs(self, n: int, at_least: bool = True) -> None:
    """Keeps `n` compiled searches in memory (0: all), or at least `n` (`at_least`: a
    server's set of batch shapes); the least recently used beyond it are dropped. The
    limit belongs to the compiled functions, which translators of equal models share:
    the newest one's holds."""
    for programs in (self._search, self._forced_logprob, self._cross_attention):
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
           checkpoint_name: str = "best", **decode_overrides) -> "Translator":
    """Loads a run directory written by train.py (config, tokenizer, parameters), or a
    list of run directories as an ensemble (the first run's search settings are used;
    all must share its SentencePiece model). `decode_overrides`: DecodeConfig fields.
    (`engines.load_engine` chooses between this engine and CTranslate2's.)"""
    workdirs = loading.workdir_list(workdir, "jax", checkpoint_name)
    # the step served, looked up first: one written while this loads is newer (`reload`)
    followed = None
    if len(workdirs) == 1 and checkpoint_name in checkpoint.KINDS:
      try:
        followed = checkpoint.checkpoint_path(workdirs[0], checkpoint_name)
      except checkpoint.CheckpointError:
        pass  # read_run says what is wrong with the directory
    run = loading.read_run(workdirs, checkpoint_name)
    translator = cls(run.config.model, run.params, run.tokenizer,
                     dataclasses.replace(run.config.decode, **decode_overrides), None,
                     run.ensemble, numerics_use="decoding",
                     languages=(run.config.data.src_lang, run.config.data.tgt_lang))
    if run.config.data.multilingual:
      pieces = Path(workdirs[0]) / LANGUAGE_PIECES_FILE
      translator.set_directions(run.config.data.direction_pairs(), json.loads(
          pieces.read_text()) if pieces.is_file() else None)
    if followed is not None:
      translator.followed = (workdirs[0], checkpoint_name, followed)
    return translator

  @classmethod
  def from_pretrained(cls, name_or_path: str | os.PathLike, checkpoint_name: str = "best",
                      revision: str | None = None, **decode_overrides) -> "Translator":
    """`load`, by the name Hugging Face users know, for a run directory or a model on the
    Hugging Face Hub (`"org/name"`, at `revision`): downloaded once into huggingface_hub's
    cache, read from there offline (HF_HUB_OFFLINE=1), with the token of `hf auth login`
    for a private one."""
    from seq2seq.rundir import hub
    return cls.load(hub.resolve(name_or_path, revision), checkpoint_name, **decode_overrides)

  # ------------------------------------------------------------------ the Engine contract

  @property
  def limits(self) -> EngineLimits:
    return EngineLimits(self.source_limit(), self.max_len - 2, tuple(self.row_sizes),
                        glossary=True, attention=True,
                        parallel_batches=self.decode_cfg.workers)

  def describe(self) -> dict[str, Any]:
    out = super().describe()
    out["model"]["ensemble"] = 1 + len(self.ensemble_params)
    if self.followed is not None and self.followed[2].name.isdigit():
      out["step"] = int(self.followed[2].name)
    return out

  def translate_ids(self, src_ids: Sequence[np.ndarray], settings: SearchSettings | None = None,
                    *, params=None, key_indices: Sequence[int] | None = None,
                    prefix_ids: Sequence[np.ndarray] | None = None, **changes
                    ) -> list[list[tuple[np.ndarray, float]]]:
    """Searches each id sequence; returns, per input, the best `max(nbest, 1)`
    hypotheses (ids, score), best first (`translate_batches`)."""
    results: list = [None] * len(src_ids)
    for found in self.translate_batches(src_ids, self.settings(settings, **changes), params,
                                        key_indices, prefix_ids):
      for i, hyps in found.items():
        results[i] = hyps
    return results

  def score(self, sources: Sequence[str], targets: Sequence[str],
            settings: SearchSettings | None = None, **changes) -> list[PairScore]:
    """Forced decoding of given translations: each target's log-probability given its
    source, with the target's token count (its pieces + EOS)."""
    if len(sources) != len(targets):
      raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    return self.score_ids(self.encode_sources(sources), self.encode(targets, target=True),
                          self.settings(settings, **changes).batch_size)

  def align(self, sources: Sequence[str], target_ids: Sequence[Sequence[int]],
            batch_size: int | None = None) -> list[Alignment]:
    """Each pair's `Alignment`: the model's cross-attention as it predicts the target's
    pieces (`[T + 1, S]` with the EOS row and column), computed in batches padded to the
    length buckets, as the searches are, by one compiled program per shape."""
    if len(sources) != len(target_ids):
      raise ValueError(f"{len(sources)} sources but {len(target_ids)} targets")
    src_ids = self.encode_sources(sources)
    lead = len(self.source_token())  # the language token's column is left out
    tgt_ids = [np.asarray(list(t) + [EOS_ID], np.int32) for t in target_ids]
    rows = batch_size or self.decode_cfg.batch_size
    weights: list = [None] * len(sources)
    for chunk, src_BS, tgt_BT in pair_batches(src_ids, tgt_ids, rows, self.buckets):
      probs_BTS = np.asarray(self._cross_attention(self.params, src_BS, tgt_BT))
      for row, i in enumerate(chunk):
        weights[i] = probs_BTS[row, :len(tgt_ids[i]), lead:len(src_ids[i])]
    return self.alignments(sources, target_ids, weights)

  def warm_up(self, max_batch: int, longest: int = 64,
              also: Sequence[SearchSettings] = ()) -> None:
    """Compiles, before a server says it is ready, the searches it runs first: batches of
    1 or `max_batch` rows of every length bucket up to `longest` pieces, at the default
    settings, and batches of 1 row at each of `also` (what a web page asks for first),
    two at a time; then compiles the row counts between (2, 4, ... max_batch /
    2) on a thread, each taken into use once all its lengths are compiled, so that a batch
    of a few texts stops paying for max_batch rows. Kept in the XLA cache, a restart
    loads them in seconds. Reads, too, what glossary terms agree by in its target
    languages (agreement.py: German's lexicon, 1.8 s), so that the first request with a
    glossary does not."""
    self.row_sizes = tuple(sorted({1, max_batch}))
    between = [1 << k for k in range(1, max_batch.bit_length()) if 1 << k < max_batch]
    # every batch shape the server may run stays compiled, and decode.programs more for
    # requests with their own search settings
    self.keep_programs((2 + len(between)) * len(self.buckets.boundaries)
                       + self.decode_cfg.programs)
    self._compile_rows(self.row_sizes, max_batch, longest)
    for settings in also:
      self._compile_rows((1,), max_batch, longest, settings)
    for settings in (None, *also):  # each run once: what a first call sets up beyond
      self.translate([WARM_UP], settings, batch_size=max_batch)  # compiling
    for _, target in self.directions:  # a glossary's first request does not read the
      piece = agreement.for_language(target)  # lexicon its terms agree by
      if piece is not None:
        piece.prepare()
    if between:
      threading.Thread(target=self._add_row_sizes, args=(between, max_batch, longest),
                       daemon=True, name="compile-rows").start()

  def _compile_rows(self, rows: Sequence[int], batch_size: int, longest: int,
                    settings: SearchSettings | None = None) -> None:
    """Compiles the searches of `rows`-row batches of every length bucket up to `longest`
    (at `settings`, default the translator's)."""
    pieces = self.encode_sources([WARM_UP])[0][:-1]
    sources = [np.append(np.resize(pieces, length - 1), EOS_ID).astype(np.int32)
               for length in self.buckets.boundaries if length <= longest]
    lowered = [lowered for src in sources for r in rows
               for lowered in self.lower_searches([src] * r, settings, batch_size=batch_size,
                                                  row_sizes=(r,))]
    with ThreadPoolExecutor(2) as pool:
      list(pool.map(lambda lower: lower.compile(), lowered))

  def _add_row_sizes(self, rows: Sequence[int], batch_size: int, longest: int) -> None:
    """Compiles each row count in turn and adds it to the row sizes."""
    started = time.perf_counter()
    for r in rows:
      self._compile_rows([r], batch_size, longest)
      self.row_sizes = tuple(sorted({*self.row_sizes, r}))
    log.info("compiled batches of %s rows too, in %.1f s", ", ".join(map(str, rows)),
             time.perf_counter() - started)

  def reload(self) -> int | None:
    """Swaps in the newest complete checkpoint of the kind loaded (a run that is training
    writes new ones): calls that started keep the parameters they started with, later
    ones get the new ones, and the compiled searches stay (the shapes are the same).
    Reads only: a checkpoint being written is not complete, and is not seen."""
    if self.followed is None:
      return None
    workdir, name, current = self.followed
    newest = checkpoint.checkpoint_path(workdir, name)
    if newest == current:
      return None
    self.params, _ = checkpoint.load_params(workdir, str(newest), self.model_cfg)
    self.followed = (workdir, name, newest)
    log.info("now serving the '%s' checkpoint of step %s", name, newest.name)
    return int(newest.name)

  # ------------------------------------------------------------------ the JAX engine's own

  def encode(self, texts: Sequence[str], line_numbers: Sequence[int] | None = None,
             target: bool = False) -> list[np.ndarray]:
    """Ids with EOS of texts as they are (`encode_sources` leads a source with its
    language token); `target`: segmented as targets."""
    return encode_sources(self.tokenizer, texts, self.model_cfg.max_len, line_numbers, target)

  def translate_batches(self, src_ids: Sequence[np.ndarray], settings: SearchSettings,
                        params=None, key_indices: Sequence[int] | None = None,
                        prefix_ids: Sequence[np.ndarray] | None = None
                        ) -> Iterator[dict[int, list[tuple[np.ndarray, float]]]]:
    """Searches the id sequences batch by batch (shortest first, the run's `workers`
    batches at once on threads); yields, in that order, per batch,
    {input index: the best `max(nbest, 1)` hypotheses (ids, score), best first; beam
    search stops as soon as these can no longer change}. With `settings.sampling`, draws
    one sample per input instead, input i with the key fold_in(seed key, key_indices[i])
    (default i). `prefix_ids[i]` (pieces, no EOS) forces the start of input i's output."""
    nbest = max(settings.nbest, 1)
    run = bound_search(self._search, self.all_params(params), settings, self.decode_cfg)

    def search(job):
      chunk, args = job
      key = (args["max_steps"], settings.beam_size, nbest, settings.sampling is None)
      with counting_programs(self):
        return (chunk, *self._shape_log.run(args["src_BS"].shape, key, lambda: run(**args)))

    jobs = search_jobs(src_ids, settings, self.decode_cfg, self.buckets,
                       self.model_cfg.max_len, key_indices, prefix_ids, self.row_sizes,
                       self.vocab_bias())
    for chunk, seqs, scores in ordered_map(search, jobs, self.decode_cfg.workers):
      yield {i: [(seqs[row, k], float(scores[row, k])) for k in range(min(nbest, seqs.shape[1]))]
             for row, i in enumerate(chunk)}

  def lower_searches(self, src_ids: Sequence[np.ndarray], settings: SearchSettings | None = None,
                     params=None, row_sizes: Sequence[int] | None = None, **changes
                     ) -> Iterator[jax.stages.Lowered]:
    """The searches `translate_batches` would run on these inputs (with `row_sizes` in
    place of the translator's), one per distinct batch shape, traced and lowered but not
    run: `.compile()` puts each in the cache that call uses, so it then compiles nothing
    (the trainer compiles the validation's searches this way before the first update)."""
    s = self.settings(settings, **changes)
    run = bound_search(self._search.lower, self.all_params(params), s, self.decode_cfg)
    seen = set()
    for _, args in search_jobs(src_ids, s, self.decode_cfg, self.buckets,
                               self.model_cfg.max_len, None, None,
                               self.row_sizes if row_sizes is None else row_sizes):
      shape = (args["src_BS"].shape, args["max_steps"])
      if shape not in seen:
        seen.add(shape)
        with counting_programs(self):
          lowered = run(**args)
        yield lowered

  def score_ids(self, src_ids: Sequence[np.ndarray], tgt_ids: Sequence[np.ndarray],
                batch_size: int | None = None) -> list[PairScore]:
    """Forced decoding: the model's log-probability of each target (ids ending in EOS)."""
    if len(src_ids) != len(tgt_ids):
      raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
    return forced_scores(lambda src, tgt: self._forced_logprob(self.all_params(), src, tgt),
                         src_ids, tgt_ids, batch_size or self.decode_cfg.batch_size,
                         self.buckets)

  def detokenize(self, seq: np.ndarray) -> str:
    """Text of an output id sequence (cut at its first EOS)."""
    return self.tokenizer.decode([seq])[0]

  def place_terms(self, texts: list[str], hyps: list[list[Hypothesis]], glossary: Glossary,
                  settings: SearchSettings, nonempty: list[int]) -> None:
    """Puts the glossary's terms into `hyps` (the plain search's, in place), each where the
    model translated its source term (`term_placement`), the words around it agreeing
    with it in the target language's grammar where it has a piece (`agreement`)."""
    placed = place_terms(self.align, lambda src, tgt: self.score(src, tgt, settings),
                         self.tokenizer.encode_target,
                         [texts[i] for i in nonempty], [hyps[i] for i in nonempty],
                         glossary, settings.alpha, agreement.for_language(self.languages[1]))
    for i, options in zip(nonempty, placed):
      hyps[i] = options

  def hypotheses(self, texts: list[str], settings: SearchSettings,
                 prefixes: Sequence[str] | None, owners: Sequence[tuple[int, int]]
                 ) -> list[list[Hypothesis]]:
    # A text with nothing to translate (blank, control characters such as NUL, or no pieces
    # once normalised) translates to "", as an empty line does.
    nonempty = [i for i, t in enumerate(texts) if has_text(t)]
    ids = self.encode_sources([texts[i] for i in nonempty],
                              [owners[i][0] + 1 for i in nonempty]) if nonempty else []
    kept = [k for k, x in enumerate(ids) if len(x) > 1 + len(self.source_token())]
    nonempty, ids = [nonempty[k] for k in kept], [ids[k] for k in kept]
    prefix_ids = (None if prefixes is None else
                  encode_prefixes(self.tokenizer, prefixes, nonempty, self.model_cfg.max_len,
                                  [owners[i][0] for i in nonempty]))
    needed = dataclasses.replace(settings, nbest=settings.hypotheses(self.decode_cfg),
                                 glossary=None)
    if settings.glossary is not None:  # a target that cannot fit is refused, naming its line
      check_terms(self.tokenizer, settings.glossary, [texts[i] for i in nonempty],
                  self.model_cfg.max_len, [owners[i][0] for i in nonempty])
    if settings.sampling is None:
      found = self.translate_ids(ids, needed, prefix_ids=prefix_ids)
    else:
      key_indices = [owners[i] for i in nonempty]
      draws = [self.translate_ids(
                   ids, dataclasses.replace(needed, nbest=0, sampling=dataclasses.replace(
                       settings.sampling, seed=settings.sampling.seed + n)),
                   key_indices=key_indices, prefix_ids=prefix_ids)
               for n in range(max(settings.nbest, 1))]
      found = [sorted((d[k][0] for d in draws), key=lambda h: -h[1]) for k in range(len(ids))]
    hyps: list[list[Hypothesis]] = [[Hypothesis("", 0.0, [])] for _ in texts]
    for i, options in zip(nonempty, found):
      hyps[i] = [Hypothesis(self.detokenize(seq), score, cut_at_eos(seq))
                 for seq, score in options]
    if settings.glossary is not None:
      self.place_terms(texts, hyps, settings.glossary, needed, nonempty)
    if len(texts) > settings.batch_size:  # a pass of several batches: worth a few ms (the
      give_back_freed_memory()  # server's single batches are not)
    return hyps
