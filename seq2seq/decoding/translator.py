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

import collections
import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from seq2seq.config import ENGINES, Config, DecodeConfig, ModelConfig
from seq2seq.data.input_pipeline import LengthBuckets, pad_batch
from seq2seq.data.textfiles import one_line  # noqa: F401 (part of this module's API)
from seq2seq.data.tokenizer import Tokenizer
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
from seq2seq.decoding.model_search import forced_logprob, max_steps_for, search
from seq2seq.decoding.program_store import StoredPrograms, store_folder
from seq2seq.decoding.sentences import Plan, TooLongError  # noqa: F401 (TooLongError: API)
from seq2seq.model.ensemble import Ensemble
from seq2seq.model.transformer import Model
from seq2seq.numerics import LEAST_ROWS, resolve
from seq2seq.rundir import checkpoint
from seq2seq.runtime import give_back_freed_memory
from seq2seq.vocab import EOS_ID, PAD_ID, cut_at_eos

log = logging.getLogger(__name__)


def batch_rows(sentences: int, batch_size: int, row_sizes: Sequence[int] = ()) -> int:
  """Rows of a decoding batch of `sentences` inputs: the next power of two, at most
  `batch_size`. A lone sentence (translate.py on one line) then runs a small search
  (`search_jobs` pads it to 2 rows) instead of a `batch_size`-row one, at the cost of a
  few more compiled shapes (at most log2(batch_size) + 1 per length bucket). With
  `row_sizes`, the smallest that holds the batch (the server's (1, max_batch))."""
  if row_sizes:
    return min([r for r in row_sizes if r >= sentences] or [batch_size])
  return min(batch_size, 1 << max(sentences - 1, 0).bit_length())


def ordered_map(fn, jobs: Iterator, workers: int) -> Iterator:
  """fn(job) for every job, up to `workers` of them running at once on threads; results
  in the order of the jobs. The next job starts before a finished one is handed over, so
  `workers` run while the caller uses a result. A lone job (a server's batch) runs on the
  calling thread: no pool is started for it."""
  jobs = iter(jobs)
  first = next(jobs, None)
  second = next(jobs, None) if first is not None else None
  if second is None:
    if first is not None:
      yield fn(first)
    return
  jobs = itertools.chain((first, second), jobs)
  if workers == 1:
    yield from map(fn, jobs)
    return
  with ThreadPoolExecutor(workers, thread_name_prefix="seq2seq-search") as pool:
    running = collections.deque()
    try:
      for job in jobs:
        running.append(pool.submit(fn, job))
        if len(running) == workers:
          yield running.popleft().result()
      while running:
        yield running.popleft().result()
    finally:  # the caller stopped early, or a search failed: start nothing more
      for future in running:
        future.cancel()




class ShapeCompileLog:
  """Runs searches, saying when one runs a batch shape for the first time: it compiles
  then (or loads from the compilation cache), which can take a while."""

  def __init__(self):
    self.seen: set[tuple] = set()
    self.lock = threading.Lock()

  def run(self, shape: tuple[int, int], key: tuple, call) -> tuple[np.ndarray, np.ndarray]:
    with self.lock:
      first = (shape, key) not in self.seen
      self.seen.add((shape, key))
    if first:
      log.info("first batch of %d x %d pieces: compiling its search", *shape)
    start = time.perf_counter()
    seqs, scores = (np.asarray(x) for x in call())
    if first and time.perf_counter() - start > 2:
      log.info("search for %d x %d pieces ready in %.0f s", *shape, time.perf_counter() - start)
    return seqs, scores


_building = threading.local()  # .translator: the Translator whose call is on this thread


@contextlib.contextmanager
def counting_programs(translator: Translator):
  """Counts in `translator.search_programs` the searches built on this thread meanwhile."""
  outer = getattr(_building, "translator", None)
  _building.translator = translator
  try:
    yield
  finally:
    _building.translator = outer


def _count_program() -> None:
  translator = getattr(_building, "translator", None)
  if translator is not None:
    translator.search_programs += 1


SEARCH_STATIC = ("beam_size", "alpha", "max_len_a", "max_len_b", "max_steps", "sampling",
                 "nbest", "min_rows", "beam_stop")


@functools.lru_cache(maxsize=16)
def compiled_functions(models: Model | Ensemble) -> tuple[StoredPrograms, StoredPrograms]:
  """The search and forced decoding of `models`, jitted and kept in the program store
  (`program_store`): one pair per process for equal models (`Model.__eq__`), so that a
  run loaded again, or the trainer's validation translator made anew, runs what an
  earlier translator built; a later process loads them instead of tracing them."""
  folder = store_folder()
  return (StoredPrograms(functools.partial(search, models), repr(models), SEARCH_STATIC,
                         folder, on_build=_count_program),
          StoredPrograms(functools.partial(forced_logprob, models), repr(models), (), folder))


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
    """`load_run`: a run directory, a list of them (an ensemble), or an export."""
    return load_run(workdir, checkpoint_name, engine, **decode_overrides)

  @classmethod
  def from_pretrained(cls, name_or_path: str | os.PathLike, checkpoint_name: str = "best",
                      engine: str = "jax", revision: str | None = None, **decode_overrides):
    """`load`, by the name Hugging Face users know, for a run directory, an export or a
    model on the Hugging Face Hub (`"org/name"`, at `revision`): downloaded once into
    huggingface_hub's cache, read from there offline (HF_HUB_OFFLINE=1), with the token
    of `hf auth login` for a private one."""
    from seq2seq.rundir import hub
    return load_run(hub.resolve(name_or_path, revision), checkpoint_name, engine,
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
                        prefix_ids: Sequence[np.ndarray] | None = None, nbest: int = 1
                        ) -> Iterator[dict[int, list[tuple[np.ndarray, float]]]]:
    """Searches the id sequences batch by batch (shortest first, the settings' `workers`
    batches at once on threads); yields, in that order, per batch,
    {input index: the best `nbest` hypotheses (ids, score), best first; beam search
    stops as soon as these can no longer change}. With `sampling`, draws one
    sample per input instead, input i with the key fold_in(seed key, key_indices[i])
    (default i). `prefix_ids[i]` (pieces, no EOS) forces the start of input i's output."""
    c = self.settings(beam_size, alpha, batch_size)
    run = bound_search(self._search, self.all_params(params), c, sampling, nbest)

    def search(job):
      chunk, args = job
      key = (args["max_steps"], c.beam_size, nbest, sampling is None)
      with counting_programs(self):
        return (chunk, *self._shape_log.run(args["src_BS"].shape, key, lambda: run(**args)))

    jobs = search_jobs(src_ids, c, self.buckets, self.model_cfg.max_len, sampling,
                       key_indices, prefix_ids, self.row_sizes)
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
                    prefix_ids: Sequence[np.ndarray] | None = None, nbest: int = 1
                    ) -> list[list[tuple[np.ndarray, float]]]:
    """Searches each id sequence; returns, per input, the best `nbest` hypotheses (ids,
    score), best first."""
    results: list = [None] * len(src_ids)
    for found in self.translate_batches(src_ids, params, beam_size, alpha, batch_size,
                                        sampling, key_indices, prefix_ids, nbest):
      for i, hyps in found.items():
        results[i] = hyps
    return results

  def translate(self, texts: str | Sequence[str], beam_size: int | None = None,
                alpha: float | None = None, nbest: int = 0, batch_size: int | None = None,
                sampling: Sampling | None = None, first_index: int = 0,
                prefixes: Sequence[str] | None = None, split_sentences: bool = True):
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
    """
    if isinstance(texts, str):
      return self.translate([texts], beam_size, alpha, nbest, batch_size, sampling,
                            first_index, None if prefixes is None else [prefixes],
                            split_sentences)[0]
    texts = list(texts)
    c = self.settings(beam_size, alpha, batch_size)
    check_request(texts, prefixes, c, nbest, sampling)
    plan = Plan.of(texts, self.languages[0] if split_sentences else None, self.count_pieces,
                   source_limit(self.model_cfg.max_len, c), first_index)
    hyps = self.hypotheses(plan.sentences, c, nbest, sampling, plan.prefixes(prefixes),
                           [(first_index + i, j) for i, j in plan.owners()])
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

  def count_pieces(self, texts: list[str]) -> list[int]:
    """The pieces of each text as a source, EOS included."""
    return [len(x) + 1 for x in self.tokenizer.encode(texts)]

  def hypotheses(self, texts: list[str], c: DecodeConfig, nbest: int,
                 sampling: Sampling | None, prefixes: Sequence[str] | None,
                 owners: Sequence[tuple[int, int]]) -> list[list[Hypothesis]]:
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
    if sampling is None:
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


def load_run(workdir: str | os.PathLike | Sequence[str | os.PathLike],
         checkpoint_name: str = "best", engine: str = "jax", **decode_overrides):
  """Loads a run directory written by train.py (config, tokenizer, parameters), or a
  list of run directories as an ensemble (the first run's search settings are used;
  all must share its SentencePiece model).

  `engine="ctranslate2"` loads a directory written by `seq2seq-export` instead and
  returns a `ct2_engine.CTranslate2Translator` (same translate/score API)."""
  workdirs = [workdir] if isinstance(workdir, (str, os.PathLike)) else list(workdir)
  if not workdirs:
    raise ValueError("no run directory given")
  if engine not in ENGINES:
    raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
  if engine == "ctranslate2":
    from seq2seq.decoding.ct2_engine import CTranslate2Translator
    if len(workdirs) > 1:
      raise ValueError("ensembles need the JAX engine (--engine jax)")
    if checkpoint_name != "best":
      raise ValueError("an exported model holds one checkpoint, chosen at export "
                       "(seq2seq-export --checkpoint); --checkpoint is for the JAX engine")
    return CTranslate2Translator.load(workdirs[0], **decode_overrides)
  cfg: Config = checkpoint.load_config(workdirs[0])
  tok = checkpoint.load_tokenizer(workdirs[0])
  params, _ = checkpoint.load_params(workdirs[0], checkpoint_name, cfg.model)
  ensemble = []
  for other in workdirs[1:]:
    other_tok = checkpoint.load_tokenizer(other)
    if other_tok.fingerprint() != tok.fingerprint():
      raise checkpoint.CheckpointError(
          f"{other} and {workdirs[0]} have different SentencePiece models (fingerprints "
          f"{other_tok.fingerprint()} and {tok.fingerprint()}): an ensemble needs one "
          "shared vocabulary (train with --config.data.spm_model=FIRST_RUN/spm.model)")
    other_cfg = checkpoint.load_config(other)
    ensemble.append((other_cfg.model,
                     checkpoint.load_params(other, checkpoint_name, other_cfg.model)[0]))
  decode_cfg = dataclasses.replace(cfg.decode, **decode_overrides)
  return Translator(cfg.model, params, tok, decode_cfg, None, ensemble,
                    numerics_use="decoding", languages=(cfg.data.src_lang, cfg.data.tgt_lang))


def encode_prefixes(tokenizer: Tokenizer, prefixes: Sequence[str], rows: Sequence[int],
                    max_len: int, numbers: Sequence[int] | None = None) -> list[np.ndarray]:
  """Pieces (no EOS) of the forced prefixes of texts `rows`; a prefix must leave room.
  `numbers[k]`: the 0-based line of `rows[k]` that an error names (default: `rows[k]`)."""
  pieces = tokenizer.encode([prefixes[i] for i in rows])
  for k, (i, ids) in enumerate(zip(rows, pieces)):
    if len(ids) >= max_len - 1:
      line = (i if numbers is None else numbers[k]) + 1
      raise ValueError(f"line {line}: the prefix has {len(ids)} pieces; the model's "
                       f"outputs are at most {max_len - 1}")
  return [np.asarray(ids, np.int32) for ids in pieces]


def search_jobs(src_ids: Sequence[np.ndarray], c: DecodeConfig, buckets: LengthBuckets,
                model_max_len: int,
                 sampling: Sampling | None, key_indices: Sequence[int] | None,
                 prefix_ids: Sequence[np.ndarray] | None, row_sizes: Sequence[int] = ()
                 ) -> Iterator[tuple[list[int], dict]]:
  """(input indices, the search's array arguments) of each batch, shortest first:
  sources padded to their length bucket in `batch_rows` rows, with the batch's step
  limit, sampling keys and forced prefixes."""
  if sampling is not None and len(src_ids):
    base = jax.random.PRNGKey(sampling.seed)
    keys = sampling_keys(base, np.arange(len(src_ids)) if key_indices is None
                         else np.asarray(key_indices))
  order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
  for start in range(0, len(order), c.batch_size):
    chunk = order[start:start + c.batch_size]
    length = buckets.length_for(max(len(src_ids[i]) for i in chunk))
    rows = max(LEAST_ROWS, batch_rows(len(chunk), c.batch_size, row_sizes))
    src = np.full((rows, length), PAD_ID, np.int32)
    src[:, 0] = EOS_ID  # filler rows: a one-token source, discarded below
    for row, i in enumerate(chunk):
      src[row, :] = PAD_ID
      src[row, :len(src_ids[i])] = src_ids[i]
    max_steps = max_steps_for(length, c.max_len_a, c.max_len_b, model_max_len)
    prefix = None
    if prefix_ids is not None:
      width = buckets.length_for(max(max(len(prefix_ids[i]) for i in chunk), 1))
      prefix = np.full((rows, width), PAD_ID, np.int32)
      for row, i in enumerate(chunk):
        prefix[row, :len(prefix_ids[i])] = prefix_ids[i]
      max_steps = max(max_steps, min(model_max_len, width + c.max_len_b))
    keys_B = None
    if sampling is not None:
      key_rows = np.zeros(rows, np.int32)  # filler rows reuse a key; discarded
      key_rows[:len(chunk)] = chunk
      keys_B = keys[key_rows]
    yield chunk, dict(src_BS=src, max_steps=max_steps, keys_B=keys_B, prefix_BP=prefix)


def sampling_keys(base: jax.Array, index: np.ndarray) -> jax.Array:
  """One key per input: fold_in(base, i) for an index i; for a pair (i, j), sentence j of
  text i, the same for j = 0 and fold_in(fold_in(base, i), j) for the text's later ones."""
  index = jnp.asarray(index, jnp.int32).reshape(len(index), -1)

  def key(ij):
    k = jax.random.fold_in(base, ij[0])
    if ij.shape[0] == 1:
      return k
    return jnp.where(ij[1] > 0, jax.random.fold_in(k, ij[1]), k)
  return jax.vmap(key)(index)


def forced_scores(logprob_fn, src_ids: Sequence[np.ndarray], tgt_ids: Sequence[np.ndarray],
                  rows: int, buckets: LengthBuckets) -> list[PairScore]:
  """`logprob_fn(src, tgt)` over padded batches of `rows` pairs, shortest targets first."""
  order = sorted(range(len(src_ids)), key=lambda i: (len(tgt_ids[i]), len(src_ids[i])))
  results: list = [None] * len(src_ids)
  for start in range(0, len(order), rows):
    chunk = order[start:start + rows]
    batch = pad_batch([src_ids[i] for i in chunk], [tgt_ids[i] for i in chunk], rows,
                      buckets.length_for(max(len(src_ids[i]) for i in chunk)),
                      buckets.length_for(max(len(tgt_ids[i]) for i in chunk)))
    logprob = np.asarray(logprob_fn(batch.src, batch.tgt))
    for row, i in enumerate(chunk):
      results[i] = PairScore(float(logprob[row]), len(tgt_ids[i]))
  return results


def bound_search(search_fn, params, c: DecodeConfig, sampling: Sampling | None, nbest: int):
  """The jitted search (or its `.lower`) with the static settings of `c` bound: call it
  with one job's arguments (`search_jobs`)."""
  # The seed is in the keys; a compiled search serves every seed.
  unseeded = None if sampling is None else dataclasses.replace(sampling, seed=0)
  return functools.partial(search_fn, params, beam_size=c.beam_size, alpha=c.alpha,
                           max_len_a=c.max_len_a, max_len_b=c.max_len_b, sampling=unseeded,
                           nbest=min(nbest, c.beam_size), min_rows=c.min_rows,
                           beam_stop=c.beam_stop)
