"""The engine contract: what the layers above decoding (the server, documents, the command
line, evaluation) may ask of a translation engine, and nothing more.

    engine = load_engine("runs/multi30k")                  # engines.py: JAX or CTranslate2
    engine.translate(["A dog runs."], engine.defaults.changed(beam_size=5))
    engine.align(["A dog runs."], [hypothesis.ids])         # where each target piece looks

Two engines implement it: the JAX `Translator` (translator.py) and the CTranslate2 engine
(ct2_engine.py). A caller holds an `Engine`, never a model, its parameters or its
tokenizer; `tests/decoding/test_engine.py` fails on any other attribute used from above.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from seq2seq.decoding.decode import NEG_INF
from seq2seq.decoding.engine_io import (
  Hypothesis,
  PairScore,
  SearchSettings,
  check_prefixes,
  encode_sources,
  pick,
  source_limit,
)
from seq2seq.decoding.sentences import Plan, check_cuttable
from seq2seq.vocab import EOS_ID

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EngineLimits:
  """What an engine takes: the longest source, the batch rows it has compiled, and the
  settings it accepts beyond plain search."""

  max_source_pieces: int  # pieces of one source sentence, EOS included (longer: cut)
  max_prefix_pieces: int  # pieces of a forced prefix
  row_sizes: tuple[int, ...] = ()  # rows of the decoding batches compiled so far
  glossary: bool = False  # glossary terms placed (needs the attention)
  attention: bool = False  # `align` gives the model's own cross-attention
  # batches worth searching at once, each on a thread of the caller's (a server's
  # decoders): the JAX engine's decode.workers, CTranslate2's parallel workers
  parallel_batches: int = 1


@dataclasses.dataclass(frozen=True)
class Alignment:
  """How a translation lines up with its source sentence, for carrying styles across and
  placing glossary terms.

  `weights` is `[T + 1, S + 1]`: how much target piece t (and then EOS) attends to
  source piece s (and then the source's EOS) as the model predicts it (the decoder's
  cross-attention, mean over its layers and heads), or None where the engine has no attention
  (place by relative position). The spans are (start, end) character offsets of each
  piece (EOS left out) in the source and in the detokenized target; the pieces are
  their names, EOS included."""

  weights: np.ndarray | None
  source_spans: list[tuple[int, int]]
  target_spans: list[tuple[int, int]]
  source_pieces: list[str]
  target_pieces: list[str]


@runtime_checkable
class Engine(Protocol):
  """A translation engine: texts (or ids) in, translations out, with one settings value."""

  @property
  def directions(self) -> tuple[tuple[str, str], ...]:
    """The (source, target) language codes it was trained to translate between."""

  @property
  def languages(self) -> tuple[str, str]:
    """The (source, target) it translates now; `for_direction` gives another."""

  @property
  def zero_shot(self) -> bool:
    """Whether it translates now a direction it was never trained on."""

  def for_direction(self, src: str | None = None, tgt: str | None = None) -> "Engine":
    """The engine translating `src` -> `tgt` (a view sharing the model): one of
    `directions`, or between two of its languages (zero-shot); an unknown language is a
    ValueError listing the directions."""

  @property
  def defaults(self) -> SearchSettings:
    """The search settings of a call that gives none (the run's, or the flags')."""

  @property
  def limits(self) -> EngineLimits:
    """What it takes (`EngineLimits`)."""

  def describe(self) -> dict[str, Any]:
    """What it is, for /health and model cards: engine, languages, model size."""

  def settings(self, settings: SearchSettings | None = None, **changes) -> SearchSettings:
    """`settings` (default: `defaults`) with `changes`, checked once."""

  def plan(self, texts: Sequence[str], split_sentences: bool = True,
           first_index: int = 0) -> Plan:
    """The texts cut into the sentences it translates (and too-long ones into parts)."""

  def translate(self, texts, settings: SearchSettings | None = None, *,
                prefixes: Sequence[str] | None = None, first_index: int = 0,
                split_sentences: bool = True, src_lang: str | None = None,
                tgt_lang: str | None = None, **changes):
    """A text's translation (a list's, a list); with `nbest`, `Hypothesis` lists;
    `src_lang` / `tgt_lang`: another of its directions (`for_direction`)."""

  def translate_ids(self, src_ids: Sequence[np.ndarray],
                    settings: SearchSettings | None = None, **changes
                    ) -> list[list[tuple[np.ndarray, float]]]:
    """Each id sequence's best hypotheses (ids, score), best first."""

  def score(self, sources: Sequence[str], targets: Sequence[str],
            settings: SearchSettings | None = None) -> list[PairScore]:
    """Forced decoding: each target's log-probability given its source."""

  def align(self, sources: Sequence[str], target_ids: Sequence[Sequence[int]]
            ) -> list[Alignment]:
    """Each source sentence's alignment to its translation's pieces (no EOS), batched."""

  def check(self, texts: Sequence[str], prefixes: Sequence[str] | None = None) -> None:
    """Raises ValueError naming a text no cut brings within the limits, or a prefix too
    long: a request is refused before it joins a batch that it would fail."""

  def warm_up(self, max_batch: int, longest: int = 64,
              also: Sequence[SearchSettings] = ()) -> None:
    """Prepares what the first requests run, at the defaults and at each of `also` (the
    JAX engine compiles their searches)."""

  def reload(self) -> int | None:
    """Serves the newest complete checkpoint of the kind it was loaded from, if newer;
    returns its step (None: nothing to reload, or not a run that trains)."""


class SentenceEngine:
  """The half of an engine that both share: settings, sentences, request checks, and
  texts in and out around `hypotheses` (the engine's own search). A subclass sets
  `engine` (its name), `model_cfg`, `tokenizer`, `decode_cfg`, `languages` and `max_len`
  (the model's longest sequence)."""

  engine: str
  model_cfg: Any
  tokenizer: Any
  decode_cfg: Any
  languages: tuple[str, str]  # the direction it translates now (`for_direction`)
  max_len: int
  # A model of several directions: those it was trained on, and its languages' tokens
  # (`tokenizer.LANGUAGE_TOKEN`), one of which leads every source.
  trained: tuple[tuple[str, str], ...] = ()
  language_ids: dict[str, int] = {}
  # each target language's pieces (ids its training targets hold): what a zero-shot search
  # into it may write (decode.zero_shot_pieces)
  language_pieces: dict[str, np.ndarray] = {}

  @property
  def directions(self) -> tuple[tuple[str, str], ...]:
    return self.trained or (tuple(self.languages),)

  def set_directions(self, trained: Sequence[Sequence[str]],
                     pieces: dict[str, Sequence[int]] | None = None) -> None:
    """Makes this a model of several directions (a run with data.directions): the
    tokenizer's language tokens are looked up, and the first direction is translated
    until `for_direction` says otherwise. `pieces`: each target language's piece ids
    (the run's `language_pieces.json`), for zero-shot searches."""
    self.trained = tuple(tuple(d) for d in trained)
    self.language_pieces = {lang: np.asarray(ids, np.int64)
                            for lang, ids in (pieces or {}).items()}
    langs = dict.fromkeys(lang for d in self.trained for lang in d)
    # every language a target has a token; a language only read (an imported OPUS-MT
    # model's source) may have none
    tokens = {lang: self.tokenizer.language_token(lang) for lang in langs}
    self.language_ids = {lang: i for lang, i in tokens.items() if i is not None}
    if missing := list(dict.fromkeys(t for _, t in self.trained if tokens[t] is None)):
      raise ValueError(f"the tokenizer has no token for {', '.join(missing)}: it does not "
                       "belong to this run's directions")
    if tuple(self.languages) not in self.trained:
      self.languages = self.trained[0]

  def for_direction(self, src: str | None = None, tgt: str | None = None) -> "SentenceEngine":
    tgt = tgt or self.languages[1]
    if src is None:  # the trained direction into tgt (the first, if several)
      src = next((s for s, t in self.directions if t == tgt and s == self.languages[0]),
                 next((s for s, t in self.directions if t == tgt), self.languages[0]))
    if (src, tgt) == tuple(self.languages):
      return self
    known = (dict.fromkeys(lang for d in self.directions for lang in d) if self.language_ids
             else dict.fromkeys(self.languages))
    if src not in known or tgt not in (self.language_ids or known) or src == tgt:
      listed = ", ".join(f"{s}-{t}" for s, t in self.directions)
      raise ValueError(f"this model does not translate {src}-{tgt}: it was trained on "
                       f"{listed}" + (f" (any two of {', '.join(known)} zero-shot)"
                                      if self.language_ids else ""))
    if (src, tgt) not in self.directions:
      log.info("%s-%s was not trained (zero-shot): the model has seen %s into %s only",
               src, tgt, ", ".join(s for s, t in self.directions if t == tgt) or "nothing",
               tgt)
    view = copy.copy(self)
    view.languages = (src, tgt)
    return view

  @property
  def zero_shot(self) -> bool:
    """Whether the direction translated now was never trained."""
    return tuple(self.languages) not in self.directions

  def vocab_bias(self) -> np.ndarray | None:
    """What every search step adds to the logits: in a zero-shot direction (with
    decode.zero_shot_pieces), NEG_INF for each piece the target language's training text
    never held; else None (nothing)."""
    pieces = self.language_pieces.get(self.languages[1])
    if not (self.zero_shot and self.decode_cfg.zero_shot_pieces) or pieces is None:
      return None
    bias = np.full(self.model_cfg.vocab_size, NEG_INF, np.float32)
    bias[pieces] = 0.0
    bias[EOS_ID] = 0.0
    return bias

  def source_token(self) -> list[int]:
    """What leads every source: the target language's token (a model of several
    directions), else nothing."""
    return [self.language_ids[self.languages[1]]] if self.language_ids else []

  @property
  def defaults(self) -> SearchSettings:
    return SearchSettings.of(self.decode_cfg)

  def settings(self, settings: SearchSettings | None = None, **changes) -> SearchSettings:
    return (self.defaults if settings is None else settings).changed(**changes)

  def describe(self) -> dict[str, Any]:
    cfg = self.model_cfg
    return {"engine": self.engine,
            "languages": {"source": self.languages[0], "target": self.languages[1]},
            **({"directions": [f"{s}-{t}" for s, t in self.trained],
                "zero_shot": self.zero_shot} if self.trained else {}),
            "model": {"encoder_layers": cfg.encoder_layers,
                      "decoder_layers": cfg.decoder_layers, "d_model": cfg.d_model,
                      "vocab_size": cfg.vocab_size, "max_len": cfg.max_len},
            "search": self.search_description()}

  def search_description(self) -> dict[str, Any]:
    """The run's settings that no call changes: output limits, the beam's stop, MBR."""
    c = self.decode_cfg
    return {"beam_stop": c.beam_stop, "max_len_a": c.max_len_a, "max_len_b": c.max_len_b,
            "mbr": c.mbr, "mbr_weights": c.mbr_weights}

  def source_limit(self) -> int:
    """The most pieces (EOS included) a source sentence may have."""
    return source_limit(self.max_len, self.decode_cfg) - len(self.source_token())

  def count_pieces(self, texts: list[str]) -> list[int]:
    """The pieces of each text as a source, EOS included."""
    return [len(x) + self.tokenizer.source_eos for x in self.tokenizer.encode(texts)]

  def encode_sources(self, texts: Sequence[str], line_numbers: Sequence[int] | None = None
                     ) -> list[np.ndarray]:
    """Source ids with EOS (and the target language's token first, `source_token`),
    truncated to what the model takes with a warning naming the line."""
    lead = self.source_token()
    ids = encode_sources(self.tokenizer, texts, self.max_len - len(lead), line_numbers)
    if lead:
      ids = [np.concatenate([np.asarray(lead, np.int32), x]).astype(np.int32) for x in ids]
    return ids

  def plan(self, texts: Sequence[str], split_sentences: bool = True,
           first_index: int = 0) -> Plan:
    return Plan.of(list(texts), self.languages[0] if split_sentences else None,
                   self.count_pieces, self.source_limit(), first_index)

  def check(self, texts: Sequence[str], prefixes: Sequence[str] | None = None) -> None:
    check_cuttable(texts, self.count_pieces, self.source_limit())
    if prefixes:
      most = self.max_len - 2
      for i, ids in enumerate(self.tokenizer.encode_target(list(prefixes))):
        if len(ids) > most:
          raise ValueError(f"prefix {i} has {len(ids)} pieces; at most {most}")

  def translate(self, texts, settings: SearchSettings | None = None, *,
                prefixes: Sequence[str] | None = None, first_index: int = 0,
                split_sentences: bool = True, src_lang: str | None = None,
                tgt_lang: str | None = None, **changes):
    """Translates a text or a list of texts. Empty or whitespace-only texts give "".

    A model of several directions translates into `tgt_lang` (default: the direction it
    was loaded or viewed with, `for_direction`); `src_lang` names the texts' language
    where it matters (the sentence splitter's rules; default: the trained direction into
    `tgt_lang`), since the model reads any of its languages.

    Each text is cut into sentences in the source language (`split_sentences=False`: a
    text is one sentence, for sentence-per-line data), and a part longer than the model
    takes is cut at clause punctuation or white space (`sentences.Plan`); the sentences of
    all texts are searched together and each text's translations joined with its own
    spacing and line breaks. A part that cannot be cut to fit raises `TooLongError`.

    `settings` (default: the engine's `defaults`) with `changes` (`SearchSettings`
    fields: beam_size, alpha, nbest, batch_size, sampling, glossary) say how to search.
    With `sampling`, draws from the model instead; text i (counted from `first_index`,
    for a stream read in parts) has its own random key. With `glossary`, each term of a
    sentence in which its source term occurs takes the place of the model's word for it
    (`term_placement`).
    `prefixes[i]` (a string, "" for none) forces the start of text i's translation.

    Returns:
      For a string, its translation; for a list, a list of translations. With
      `nbest=N > 0`, N `Hypothesis` (text, score, ids) per input instead, best first.
    """
    if src_lang is not None or tgt_lang is not None:
      return self.for_direction(src_lang, tgt_lang).translate(
          texts, settings, prefixes=prefixes, first_index=first_index,
          split_sentences=split_sentences, **changes)
    if isinstance(texts, str):
      return self.translate([texts], settings, prefixes=None if prefixes is None else
                            [prefixes], first_index=first_index,
                            split_sentences=split_sentences, **changes)[0]
    texts = list(texts)
    s = self.settings(settings, **changes)
    check_prefixes(texts, prefixes)
    if s.glossary is not None and prefixes is not None:
      raise ValueError("a glossary goes with beam search: it does not combine with "
                       "prefixes")
    plan = self.plan(texts, split_sentences, first_index)
    hyps = self.hypotheses(plan.sentences, s, plan.prefixes(prefixes),
                           [(first_index + i, j) for i, j in plan.owners()])
    return pick(plan.join(hyps), s, self.decode_cfg)

  def hypotheses(self, texts: list[str], settings: SearchSettings,
                 prefixes: Sequence[str] | None, owners: Sequence[tuple[int, int]]
                 ) -> list[list[Hypothesis]]:
    """Each sentence's hypotheses, best first (one "" for empty ones). `owners[k]`:
    sentence k's text (0-based over the whole input: errors name it, sampling keys use
    it) and its place within that text."""
    raise NotImplementedError

  def source_pieces(self, source: str) -> tuple[list[tuple[int, int]], list[str]]:
    """(start, end) character offsets in `source` of each of its pieces, and the pieces."""
    proto = self.tokenizer.sp.encode(source, return_type="proto")
    byte_to_char, position = {}, 0
    for i, ch in enumerate(source):
      byte_to_char[position] = i
      position += len(ch.encode("utf-8"))
    byte_to_char[position] = len(source)
    spans = []
    for piece in proto.pieces:
      start = byte_to_char.get(piece.begin, 0)
      spans.append((start, byte_to_char.get(piece.end, start)))
    return spans, [piece.piece for piece in proto.pieces]

  def target_spans(self, ids: Sequence[int], pieces: Sequence[str]
                   ) -> list[tuple[int, int]]:
    """(start, end) character offsets of each piece of `ids` in its detokenized text: piece
    i ends where the text of pieces 0..i ends. Read off the pieces' own text where it
    spells the detokenized text (word pieces, "▁" a space, the first one dropped);
    otherwise (byte pieces, <unk>) from the text of each prefix."""
    text = "".join(pieces).replace("\u2581", " ")
    skip = 1 if text.startswith(" ") else 0
    if text[skip:] == self.tokenizer.decode([ids])[0]:
      ends, position = [], 0
      for piece in pieces:
        position += len(piece)
        ends.append(max(position - skip, 0))
    else:
      ends = [len(self.tokenizer.decode([list(ids[:i + 1])])[0]) for i in range(len(ids))]
    return [(ends[i - 1] if i else 0, end) for i, end in enumerate(ends)]

  def alignments(self, sources: Sequence[str], target_ids: Sequence[Sequence[int]],
                 weights: Sequence[np.ndarray | None]) -> list[Alignment]:
    """`Alignment`s of the pairs, with the engine's `weights` (None: none)."""
    out = []
    eos = self.tokenizer.pieces([EOS_ID])
    for source, ids, w in zip(sources, target_ids, weights):
      src_spans, src_pieces = self.source_pieces(source)
      tgt_pieces = self.tokenizer.pieces(ids)
      out.append(Alignment(w, src_spans, self.target_spans(ids, tgt_pieces),
                           src_pieces + eos, tgt_pieces + eos))
    return out
