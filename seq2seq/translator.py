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
import dataclasses
import functools
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from seq2seq import checkpoint, decode, mbr
from seq2seq.config import (
  BEAM_STOP_CT2_ERROR,
  BEAM_STOPS,
  Config,
  DataConfig,
  DecodeConfig,
  ModelConfig,
)
from seq2seq.input_pipeline import LengthBuckets, decode_line, encode_texts, pad_batch, split_lines
from seq2seq.model import Model, shift_right
from seq2seq.outputs import (
  Hypothesis,
  PairScore,
  Sampling,
  check_request,
  hypotheses_needed,
  pick,
  resolve_settings,
)
from seq2seq.tokenizer import Tokenizer
from seq2seq.vocab import BOS_ID, EOS_ID, PAD_ID, cut_at_eos, truncate_keeping_eos

log = logging.getLogger(__name__)


def output_limits(src_BS: jnp.ndarray, max_len_a: float, max_len_b: int, max_steps: int
                  ) -> jnp.ndarray:
  """Per-sentence output length limit a * source_length + b (EOS included), capped."""
  src_len_B = jnp.sum(src_BS != PAD_ID, axis=1) - 1  # without the source EOS
  limit = jnp.floor(max_len_a * src_len_B + max_len_b).astype(jnp.int32)
  return jnp.clip(limit, 1, max_steps)


def batch_rows(sentences: int, batch_size: int) -> int:
  """Rows of a decoding batch of `sentences` inputs: the next power of two, at most
  `batch_size`. A lone sentence (translate.py on one line, the HTTP server) then runs a
  1-row search instead of a `batch_size`-row one, at the cost of a few more compiled
  shapes (at most log2(batch_size) + 1 per length bucket)."""
  return min(batch_size, 1 << max(sentences - 1, 0).bit_length())


def in_order(fn, jobs: Iterator, workers: int) -> Iterator:
  """fn(job) for every job, up to `workers` of them running at once on threads; results
  in the order of the jobs. The next job starts before a finished one is handed over, so
  `workers` run while the caller uses a result."""
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


def max_steps_for(src_len: int, max_len_a: float, max_len_b: int, model_max_len: int) -> int:
  """Static step count for a batch padded to `src_len` (so one compile per bucket)."""
  return int(min(model_max_len, max(1, int(max_len_a * src_len + max_len_b))))


def ensemble_step(models: Sequence[Model], params: Sequence):
  """One decoding step of several models sharing a vocabulary: the mean of their
  log-probabilities (each member keeps its own cache and source)."""
  def step(ids_B, caches, sources):
    outputs = [m.decode_step(p, ids_B, c, src)
               for m, p, c, src in zip(models, params, caches, sources)]
    logp = [jax.nn.log_softmax(logits.astype(jnp.float32)) for logits, _ in outputs]
    return sum(logp) / len(logp), tuple(c for _, c in outputs)
  return step


def search(model: Model | tuple[Model, ...], params, src_BS: jnp.ndarray, *,
           beam_size: int, alpha: float,
           max_len_a: float, max_len_b: int, max_steps: int,
           sampling: Sampling | None = None, keys_B: jax.Array | None = None,
           prefix_BP: jnp.ndarray | None = None, nbest: int | None = None,
           min_rows: int = 0, beam_stop: str = "exact") -> tuple[jnp.ndarray, jnp.ndarray]:
  """Encodes once, then searches with the KV cache.

  The encoder's keys/values are the search's `source` (one row per sentence, never
  reordered by beams); the batch shrinks to `min_rows` sentences as they finish
  (`decode`'s module docstring). With a tuple of models (and a tuple of their
  parameters), searches their ensemble (`ensemble_step`).

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
  if isinstance(model, tuple):
    caches, sources = zip(*(m.init_cache(p, m.encode(p, src_BS), src_BS, max_steps, width)
                            for m, p in zip(model, params)))
    cache, source, step = tuple(caches), tuple(sources), ensemble_step(model, params)
    reorder = lambda c, parents: tuple(m.reorder_cache(ci, parents) for m, ci in zip(model, c))
  else:
    memory_BSD = model.encode(params, src_BS)
    cache, source = model.init_cache(params, memory_BSD, src_BS, max_steps, width)
    step = lambda ids, c, src: model.decode_step(params, ids, c, src)
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


def forced_logprob(model: Model | tuple[Model, ...], params, src_BS: jnp.ndarray,
                   tgt_out_BT: jnp.ndarray) -> jnp.ndarray:
  """Sum over each row of log p(target piece | source, previous pieces), padding excluded
  (for an ensemble, p renormalised from the mean of the members' log-probabilities, as
  the search uses it)."""
  members = zip(model, params) if isinstance(model, tuple) else [(model, params)]
  logp = [jax.nn.log_softmax(m.apply(p, src_BS, shift_right(tgt_out_BT), is_training=False
                                     ).astype(jnp.float32)) for m, p in members]
  logp_BTV = jax.nn.log_softmax(sum(logp) / len(logp))
  picked_BT = jnp.take_along_axis(logp_BTV, tgt_out_BT[..., None], axis=-1)[..., 0]
  return jnp.sum(jnp.where(tgt_out_BT != PAD_ID, picked_BT, 0.0), axis=1)


ENGINES = ("jax", "ctranslate2")


class Translator:
  """A model, its parameters and tokenizer, with compiled search functions reused across calls."""

  def __init__(self, model_cfg: ModelConfig, params, tokenizer: Tokenizer,
               decode_cfg: DecodeConfig | None = None,
               buckets: LengthBuckets | None = None,
               ensemble: Sequence[tuple[ModelConfig, Any]] = ()):
    """`ensemble`: further (model config, parameters) members with the same vocabulary;
    search and scoring then use the mean of all members' log-probabilities."""
    if tokenizer.vocab_size != model_cfg.vocab_size:
      raise checkpoint.CheckpointError(
          f"tokenizer has {tokenizer.vocab_size} pieces but the model's embedding has "
          f"{model_cfg.vocab_size} rows: the tokenizer does not belong to this checkpoint")
    self.model_cfg, self.params, self.tokenizer = model_cfg, params, tokenizer
    self.decode_cfg = decode_cfg or DecodeConfig()
    self.buckets = buckets or LengthBuckets.from_config(DataConfig(), model_cfg.max_len)
    self.model = Model(model_cfg)
    for member_cfg, _ in ensemble:
      if member_cfg.vocab_size != model_cfg.vocab_size:
        raise checkpoint.CheckpointError(
            f"ensemble members have {model_cfg.vocab_size} and {member_cfg.vocab_size} "
            "pieces: they must share one vocabulary")
    self.ensemble_params = tuple(p for _, p in ensemble)
    models = (self.model, *(Model(c) for c, _ in ensemble)) if ensemble else self.model
    self._search = jax.jit(
        functools.partial(search, models),
        static_argnames=("beam_size", "alpha", "max_len_a", "max_len_b", "max_steps",
                         "sampling", "nbest", "min_rows", "beam_stop"))
    self._forced_logprob = jax.jit(functools.partial(forced_logprob, models))

  def all_params(self, params=None):
    """The parameters the compiled functions take: one tree, or a tuple for an ensemble."""
    params = self.params if params is None else params
    return (params, *self.ensemble_params) if self.ensemble_params else params

  @classmethod
  def load(cls, workdir: str | os.PathLike | Sequence[str | os.PathLike],
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
      from seq2seq.ct2_engine import CTranslate2Translator
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
    return cls(cfg.model, params, tok, decode_cfg,
               LengthBuckets.from_config(cfg.data, cfg.model.max_len), ensemble)

  @classmethod
  def from_pretrained(cls, path: str | os.PathLike, checkpoint_name: str = "best",
                      **decode_overrides) -> "Translator":
    """Loads a trained model from its run directory (the same as `Translator.load`)."""
    return cls.load(path, checkpoint_name, **decode_overrides)

  def settings(self, beam_size: int | None = None, alpha: float | None = None,
               batch_size: int | None = None) -> DecodeConfig:
    """The run's decoding settings with the given ones in their place (None keeps the
    run's)."""
    return resolve_settings(self.decode_cfg, beam_size, alpha, batch_size)

  def encode(self, texts: Sequence[str], line_numbers: Sequence[int] | None = None
             ) -> list[np.ndarray]:
    """Source ids with EOS; lines longer than the model's maximum are truncated, with a
    warning that names the line (1-based, `line_numbers[i]` for `texts[i]` if given)."""
    ids = encode_texts(self.tokenizer, texts)
    limit = self.model_cfg.max_len
    for i, x in enumerate(ids):
      if len(x) > limit:
        number = line_numbers[i] if line_numbers is not None else i + 1
        log.warning("line %d: %d pieces exceed the model's maximum of %d; translating "
                    "only the first %d", number, len(x), limit, limit - 1)
        ids[i] = np.asarray(truncate_keeping_eos(x, limit), np.int32)
    return ids

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
    run = self._search_runner(c, params, sampling, nbest)

    def search(job):
      chunk, args = job
      seqs, scores = run(**args)
      return chunk, np.asarray(seqs), np.asarray(scores)

    jobs = self._search_jobs(src_ids, c, sampling, key_indices, prefix_ids)
    for chunk, seqs, scores in in_order(search, jobs, c.workers):
      yield {i: [(seqs[row, k], float(scores[row, k])) for k in range(min(nbest, seqs.shape[1]))]
             for row, i in enumerate(chunk)}

  def lower_searches(self, src_ids: Sequence[np.ndarray], params=None,
                     beam_size: int | None = None, alpha: float | None = None,
                     batch_size: int | None = None) -> Iterator[jax.stages.Lowered]:
    """The searches `translate_batches` would run on these inputs, one per distinct
    batch shape, traced and lowered but not run: `.compile()` puts each in the cache
    that call uses, so it then compiles nothing (the trainer compiles the validation's
    searches this way before the first update)."""
    c = self.settings(beam_size, alpha, batch_size)
    run = self._search_runner(c, params, None, 1, lower=True)
    seen = set()
    for _, args in self._search_jobs(src_ids, c, None, None, None):
      shape = (args["src_BS"].shape, args["max_steps"])
      if shape not in seen:
        seen.add(shape)
        yield run(**args)

  def _search_runner(self, c: DecodeConfig, params, sampling: Sampling | None, nbest: int,
                     lower: bool = False):
    """The jitted search with the static settings of `c` bound: call it with one job's
    arguments (or, `lower=True`, lower it for them)."""
    params = self.all_params(params)
    # The seed is in the keys; a compiled search serves every seed.
    unseeded = None if sampling is None else dataclasses.replace(sampling, seed=0)
    search_fn = self._search.lower if lower else self._search
    return functools.partial(search_fn, params, beam_size=c.beam_size, alpha=c.alpha,
                             max_len_a=c.max_len_a, max_len_b=c.max_len_b, sampling=unseeded,
                             nbest=min(nbest, c.beam_size), min_rows=c.min_rows,
                             beam_stop=c.beam_stop)

  def _search_jobs(self, src_ids: Sequence[np.ndarray], c: DecodeConfig,
                   sampling: Sampling | None, key_indices: Sequence[int] | None,
                   prefix_ids: Sequence[np.ndarray] | None) -> Iterator[tuple[list[int], dict]]:
    """(input indices, the search's array arguments) of each batch, shortest first:
    sources padded to their length bucket in `batch_rows` rows, with the batch's step
    limit, sampling keys and forced prefixes."""
    if sampling is not None and len(src_ids):
      base = jax.random.PRNGKey(sampling.seed)
      index = np.arange(len(src_ids)) if key_indices is None else np.asarray(key_indices)
      keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(index, jnp.int32))
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    for start in range(0, len(order), c.batch_size):
      chunk = order[start:start + c.batch_size]
      length = self.buckets.length_for(max(len(src_ids[i]) for i in chunk))
      rows = batch_rows(len(chunk), c.batch_size)
      src = np.full((rows, length), PAD_ID, np.int32)
      src[:, 0] = EOS_ID  # filler rows: a one-token source, discarded below
      for row, i in enumerate(chunk):
        src[row, :] = PAD_ID
        src[row, :len(src_ids[i])] = src_ids[i]
      max_steps = max_steps_for(length, c.max_len_a, c.max_len_b, self.model_cfg.max_len)
      prefix = None
      if prefix_ids is not None:
        width = self.buckets.length_for(max(max(len(prefix_ids[i]) for i in chunk), 1))
        prefix = np.full((rows, width), PAD_ID, np.int32)
        for row, i in enumerate(chunk):
          prefix[row, :len(prefix_ids[i])] = prefix_ids[i]
        max_steps = max(max_steps, min(self.model_cfg.max_len, width + c.max_len_b))
      keys_B = None
      if sampling is not None:
        key_rows = np.zeros(rows, np.int32)  # filler rows reuse a key; discarded
        key_rows[:len(chunk)] = chunk
        keys_B = keys[key_rows]
      yield chunk, dict(src_BS=src, max_steps=max_steps, keys_B=keys_B, prefix_BP=prefix)

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
                prefixes: Sequence[str] | None = None):
    """Translates a text or a list of texts. Empty or whitespace-only texts give "".

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
                            first_index, None if prefixes is None else [prefixes])[0]
    texts = list(texts)
    c = self.settings(beam_size, alpha, batch_size)
    check_request(texts, prefixes, c, nbest, sampling)
    nonempty = [i for i, t in enumerate(texts) if t.strip()]
    ids = self.encode([texts[i] for i in nonempty], [i + 1 for i in nonempty]) if nonempty else []
    prefix_ids = None if prefixes is None else self.encode_prefixes(prefixes, nonempty)
    if sampling is None:
      found = self.translate_ids(ids, beam_size=c.beam_size, alpha=c.alpha,
                                 batch_size=c.batch_size, prefix_ids=prefix_ids,
                                 nbest=hypotheses_needed(c, nbest, sampling))
    else:
      key_indices = [first_index + i for i in nonempty]
      draws = [self.translate_ids(ids, batch_size=c.batch_size, key_indices=key_indices,
                                  sampling=dataclasses.replace(sampling, seed=sampling.seed + n),
                                  prefix_ids=prefix_ids)
               for n in range(max(nbest, 1))]
      found = [sorted((d[k][0] for d in draws), key=lambda h: -h[1]) for k in range(len(ids))]
    hyps: list[list[Hypothesis]] = [[Hypothesis("", 0.0, [])] for _ in texts]
    for i, options in zip(nonempty, found):
      hyps[i] = [Hypothesis(self.detokenize(seq), score, cut_at_eos(seq))
                 for seq, score in options]
    return pick(hyps, nbest, c)

  def encode_prefixes(self, prefixes: Sequence[str], rows: Sequence[int]) -> list[np.ndarray]:
    """Pieces (no EOS) of the forced prefixes of texts `rows`; a prefix must leave room."""
    pieces = self.tokenizer.encode([prefixes[i] for i in rows])
    for i, ids in zip(rows, pieces):
      if len(ids) >= self.model_cfg.max_len - 1:
        raise ValueError(f"line {i + 1}: the prefix has {len(ids)} pieces; the model's "
                         f"outputs are at most {self.model_cfg.max_len - 1}")
    return [np.asarray(ids, np.int32) for ids in pieces]

  def score_ids(self, src_ids: Sequence[np.ndarray], tgt_ids: Sequence[np.ndarray],
                batch_size: int | None = None) -> list[PairScore]:
    """Forced decoding: the model's log-probability of each target (ids ending in EOS)."""
    if len(src_ids) != len(tgt_ids):
      raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
    rows = self.settings(batch_size=batch_size).batch_size
    order = sorted(range(len(src_ids)), key=lambda i: (len(tgt_ids[i]), len(src_ids[i])))
    results: list = [None] * len(src_ids)
    for start in range(0, len(order), rows):
      chunk = order[start:start + rows]
      batch = pad_batch([src_ids[i] for i in chunk], [tgt_ids[i] for i in chunk], rows,
                        self.buckets.length_for(max(len(src_ids[i]) for i in chunk)),
                        self.buckets.length_for(max(len(tgt_ids[i]) for i in chunk)))
      logprob = np.asarray(self._forced_logprob(self.all_params(), batch.src, batch.tgt))
      for row, i in enumerate(chunk):
        results[i] = PairScore(float(logprob[row]), len(tgt_ids[i]))
    return results

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


# --------------------------------------------------------------------- attention plot


def plot_attention(translator: Translator, text: str, path: str | os.PathLike,
                   beam_size: int = 1) -> str:
  """Translates one sentence and writes a heatmap of its cross-attention (last decoder
  layer, mean over heads; source pieces x target pieces), like Joey NMT's plots."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  src = translator.encode([text])[0]
  hyp = translator.translate_ids([src], beam_size=beam_size, batch_size=1)[0][0][0]
  out = cut_at_eos(hyp) + [EOS_ID]
  tgt_in = np.array([[BOS_ID] + out[:-1]], np.int32)
  probs = translator.model.cross_attention(translator.params, src[None], tgt_in)
  weights = np.asarray(probs[-1, 0].mean(axis=0))  # [T, S]
  src_pieces, tgt_pieces = translator.tokenizer.pieces(src), translator.tokenizer.pieces(out)
  fig, ax = plt.subplots(figsize=(max(4, 0.45 * len(src_pieces)), max(3, 0.4 * len(tgt_pieces))))
  ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
  ax.set_xticks(range(len(src_pieces)), src_pieces, rotation=90)
  ax.set_yticks(range(len(tgt_pieces)), tgt_pieces)
  ax.set_xlabel("source")
  ax.set_ylabel("translation")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return translator.detokenize(hyp)


# ------------------------------------------------------------------------------ CLI


def one_line(text: str) -> str:
  """The text on one line: byte fallback can decode a newline piece, and an output file
  must keep one line per input line."""
  return " ".join(text.splitlines())


def read_input(stream, strict: bool) -> Iterator[str]:
  """Lines of a byte stream as they arrive; only '\\n' ends a line, so the output count
  always matches. With `strict`, the whole input is read and checked first, so an
  invalid line rejects the input before anything is written."""
  if strict:
    yield from split_lines(stream.read(), "input", strict=True)
    return
  for number, raw in enumerate(stream, start=1):
    yield decode_line(raw.removesuffix(b"\n"), "input", number, strict=False)


def chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
  chunk: list[str] = []
  for line in lines:
    chunk.append(line)
    if len(chunk) == size:
      yield chunk
      chunk = []
  if chunk:
    yield chunk


def tab_pairs(lines: Iterator[str], second: str, alternative: str = ""
              ) -> Iterator[tuple[str, str]]:
  """(source, second) pairs of SOURCE<TAB>SECOND lines; a line without one tab is an error."""
  for number, line in enumerate(lines, 1):
    if line.count("\t") != 1:
      raise ValueError(f"line {number}: expected SOURCE<TAB>{second} (one tab), got "
                       f"{line.count(chr(9))} tabs{alternative}")
    source, other = line.split("\t")
    yield source, other


def score_pairs(lines: Iterator[str], references: str | None) -> Iterator[tuple[str, str]]:
  """(source, target) pairs for --score: from TAB-separated lines, or lines + a file."""
  if references is None:
    yield from tab_pairs(lines, "TARGET", "; or give the targets with --references")
    return
  with open(references, "rb") as f:
    targets, number = read_input(f, strict=False), 0
    for number, source in enumerate(lines, 1):
      target = next(targets, None)
      if target is None:
        raise ValueError(f"{references} ends at line {number - 1}, before the input does")
      yield source, target
    if next(targets, None) is not None:
      raise ValueError(f"{references} has more lines than the input ({number})")


def main(argv=None) -> None:
  import argparse
  import sys
  import time

  from tqdm import tqdm

  from seq2seq.runtime import setup_cli_logging

  d = DecodeConfig()
  parser = argparse.ArgumentParser(
      description="Translate lines (stdin -> stdout by default) with a trained run. "
      "Search settings default to those saved in the run's config.json.",
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  parser.add_argument("--workdir", required=True, action="append",
                      help="run directory written by train.py; give it several times for an "
                      "ensemble (runs sharing one SentencePiece model: mean log-probabilities)")
  parser.add_argument("--checkpoint", default="best",
                      help="best, latest, averaged, ema, or a checkpoint step directory")
  parser.add_argument("--engine", default="jax", choices=ENGINES,
                      help="jax: a run directory; ctranslate2: a directory written by "
                      "seq2seq-export (CTranslate2's length penalty is length ** alpha)")
  parser.add_argument("--beam", type=int, default=None,
                      help=f"beam size; 1 = greedy search (run's default, else {d.beam_size})")
  parser.add_argument("--alpha", type=float, default=None,
                      help="GNMT length penalty exponent for beam search; 0 ranks by "
                      f"log-probability (run's default, else {d.alpha})")
  parser.add_argument("--beam-stop", default=None, choices=BEAM_STOPS,
                      help="when beam search ends a sentence: exact (results of a search to "
                      "the length limit), current (live beams bounded at the current "
                      "length) or count (once beam-size hypotheses have ended, as fairseq "
                      "and CTranslate2); the last two are faster, results may differ; "
                      f"run's default, else {d.beam_stop}. JAX engine only")
  mbr.add_arguments(parser)
  parser.add_argument("--nbest", type=int, default=0,
                      help="write N hypotheses per line as 'LINE ||| text ||| score' "
                      "(needs --beam >= N)")
  parser.add_argument("--batch-size", type=int, default=None,
                      help=f"sentences decoded together (run's default, else {d.batch_size})")
  parser.add_argument("--workers", type=int, default=None,
                      help=f"batches decoded at once, each on a thread (default {d.workers})")
  parser.add_argument("--buffer", type=int, default=16,
                      help="batches read ahead and sorted by length before decoding; "
                      "their lines are written as soon as they are translated")
  parser.add_argument("--input", default="-", help="input file; - = stdin")
  parser.add_argument("--output", default="-", help="output file; - = stdout")
  parser.add_argument("--strict", action="store_true",
                      help="reject invalid UTF-8 (whole input checked before any output) "
                      "instead of replacing it with U+FFFD")
  parser.add_argument("--interactive", action="store_true",
                      help="translate each line as soon as it is typed")
  parser.add_argument("--attention-plot", default=None, metavar="FILE.png",
                      help="translate one sentence and plot its cross-attention")
  parser.add_argument("--score", action="store_true",
                      help="forced decoding instead of search: score given translations, "
                      "read as SOURCE<TAB>TARGET lines or from --references; writes "
                      "'LOGPROB<TAB>LOGPROB_PER_TOKEN<TAB>TOKENS' per line (tokens = target "
                      "pieces + EOS; per token = LOGPROB / TOKENS)")
  parser.add_argument("--references", default=None, metavar="FILE",
                      help="with --score: the targets, aligned with --input's lines")
  parser.add_argument("--prefix", action="store_true",
                      help="read SOURCE<TAB>PREFIX lines: each translation starts with its "
                      "PREFIX (target text) and the search continues from it")
  parser.add_argument("--sample", action="store_true",
                      help="draw translations at random from the model instead of searching "
                      "(back-translation, data augmentation); with --nbest N, N samples")
  parser.add_argument("--temperature", type=float, default=1.0,
                      help="with --sample: divides the log-probabilities; 0 = greedy")
  parser.add_argument("--top-k", type=int, default=0,
                      help="with --sample: only the K most likely pieces (0 = all)")
  parser.add_argument("--top-p", type=float, default=1.0,
                      help="with --sample: only the most likely pieces whose probability "
                      "sums to P (nucleus sampling; 1 = all)")
  parser.add_argument("--seed", type=int, default=0,
                      help="with --sample: random seed; line N uses its own key, so the output "
                      "does not depend on --batch-size")
  args = parser.parse_args(argv)
  sampling = None
  if args.sample:
    if args.temperature < 0 or args.top_k < 0 or not 0 < args.top_p <= 1:
      parser.error(f"--sample needs --temperature >= 0, --top-k >= 0 and 0 < --top-p <= 1; "
                   f"got {args.temperature}, {args.top_k}, {args.top_p}")
    if args.score or args.attention_plot:
      parser.error("--sample does not go with --score or --attention-plot")
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
  elif (args.temperature, args.top_k, args.top_p, args.seed) != (1.0, 0, 1.0, 0):
    parser.error("--temperature, --top-k, --top-p and --seed are for --sample")
  if args.references and not args.score:
    parser.error("--references is for --score")
  if args.prefix and (args.score or args.interactive or args.attention_plot):
    parser.error("--prefix does not go with --score, --interactive or --attention-plot")
  if args.score and (args.nbest or args.interactive or args.attention_plot):
    parser.error("--score scores given translations; it takes no --nbest, --interactive "
                 "or --attention-plot")
  if args.beam is not None and args.beam < 1:
    parser.error(f"--beam must be at least 1 (1 = greedy search), got {args.beam}")
  if args.batch_size is not None and args.batch_size < 1:
    parser.error(f"--batch-size must be at least 1, got {args.batch_size}")
  if args.workers is not None and args.workers < 1:
    parser.error(f"--workers must be at least 1, got {args.workers}")
  if args.nbest < 0:
    parser.error(f"--nbest must be 0 (off) or more, got {args.nbest}")
  if args.engine == "ctranslate2" and args.attention_plot:
    parser.error("--attention-plot needs the JAX engine")
  if args.engine == "ctranslate2" and args.beam_stop:
    parser.error(BEAM_STOP_CT2_ERROR)
  setup_cli_logging()
  try:
    overrides = {k: v for k, v in (("workers", args.workers), ("beam_stop", args.beam_stop))
                 if v is not None}
    translator = Translator.load(args.workdir, args.checkpoint, engine=args.engine,
                                 **overrides, **mbr.overrides(args))
    c = translator.settings(args.beam, args.alpha, args.batch_size)
  except (checkpoint.CheckpointError, ValueError) as e:
    sys.exit(f"error: {e}")
  if args.nbest > c.beam_size and sampling is None:
    parser.error(f"--nbest {args.nbest} needs a beam of at least {args.nbest} hypotheses, "
                 f"but the beam size is {c.beam_size}: add --beam {args.nbest} or more")
  opts = dict(beam_size=c.beam_size, alpha=c.alpha, batch_size=c.batch_size, sampling=sampling)

  if args.interactive:
    for line in sys.stdin:
      print(one_line(translator.translate(line.rstrip("\n"), **opts)), flush=True)
    return
  src = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
  lines = read_input(src, args.strict)
  if args.attention_plot:
    lines = list(lines)
    if len(lines) != 1:
      sys.exit(f"error: --attention-plot takes exactly one input line, got {len(lines)}")
    print(one_line(plot_attention(translator, lines[0], args.attention_plot, c.beam_size)))
    log.info("wrote %s", args.attention_plot)
    return
  out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
  progress = tqdm(unit=" sentences", disable=not sys.stderr.isatty(), file=sys.stderr)
  start, count = time.perf_counter(), 0
  if args.score:
    lines = score_pairs(lines, args.references)
  elif args.prefix:
    lines = tab_pairs(lines, "PREFIX")
  try:
    for chunk in chunks(lines, c.batch_size * max(args.buffer, 1)):
      if args.prefix:
        opts["prefixes"] = [b for _, b in chunk]
        chunk = [a for a, _ in chunk]
      if args.score:
        scores = translator.score([a for a, _ in chunk], [b for _, b in chunk], c.batch_size)
        out.write("".join(f"{x.logprob:.4f}\t{x.per_token:.4f}\t{x.tokens}\n" for x in scores))
      elif args.nbest:
        for number, hyps in enumerate(translator.translate(chunk, nbest=args.nbest,
                                                           first_index=count, **opts), count + 1):
          out.write("".join(f"{number - 1} ||| {one_line(h.text)} ||| {h.score:.4f}\n"
                            for h in hyps))
      else:
        out.write("".join(one_line(t) + "\n"
                          for t in translator.translate(chunk, first_index=count, **opts)))
      out.flush()
      count += len(chunk)
      progress.update(len(chunk))
  except ValueError as e:  # DataError: invalid UTF-8 with --strict; --score input
    sys.exit(f"error: {args.input if args.input != '-' else 'stdin'}: {e}")
  progress.close()
  seconds = time.perf_counter() - start
  log.info("%s %d sentences in %.1f s (%.1f sentences/s)",
           "scored" if args.score else "translated", count, seconds,
           count / max(seconds, 1e-9))
