"""The translation service behind both HTTP APIs: given texts, a source (or "auto"), a
target and one `SearchSettings`, it routes each text (one model, or two through the pivot
language: `models.Models`), detects where asked, checks every limit once, submits the
texts to their model's batcher and returns a typed `Translation`.

    routing = service.routing("auto", "fr", texts)      # each text's hops, detected codes
    found = await service.translate(texts, routing, routing.engine.defaults)
    found.translations, found.alternatives, found.detected, found.routes

It owns the models, their batchers (`dynamic_batching.Batcher`), the language detector and
the server's glossary (`seq2seq-serve --glossary`, every direct request's terms). It speaks
no dialect: the native API (`native_api.py`) and LibreTranslate's (`libretranslate.py`)
parse their requests, call it and render its answers; its refusals are `RequestError`s,
and one that the dialects word each in their own way, `OneDirectionOnly`, is typed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from typing import Any, Callable, Sequence

from seq2seq.decoding.engine import Engine
from seq2seq.decoding.engine_io import Hypothesis, SearchSettings
from seq2seq.decoding.glossary import Glossary
from seq2seq.serving.detection import LanguageDetector
from seq2seq.serving.dynamic_batching import Batcher, Metrics, engine_call
from seq2seq.serving.http_api import Limits, RequestError
from seq2seq.serving.models import Hop, Models, ServedModel, served_models

log = logging.getLogger("seq2seq.serve")


class OneDirectionOnly(RequestError):
  """What goes only with one model's direction (a glossary, prefixes, attention, HTML, a
  document) asked of texts that go through a pivot or to several models; `what` names it
  as the subject of "... with one model's direction" ("a glossary goes")."""

  def __init__(self, what: str):
    super().__init__(422, f"{what} with one model's direction, not through a pivot")
    self.what = what


@dataclasses.dataclass(frozen=True)
class Routing:
  """Where a request's texts go: each text's hops, and each text's detected language and
  confidence (0-100) where the source was "auto"."""

  routes: list[list[Hop]]
  # the engine of the first text's last hop (of the first model's direction where there
  # is no text): its defaults and limits are the request's search settings'; the hops
  # before a pivot's last search with their own model's defaults
  engine: Engine
  detected: list[tuple[str, float]] | None = None

  @property
  def model(self) -> ServedModel | None:
    """The one model that translates every text directly, or None (a pivot, or texts
    that go to several models)."""
    first = self.routes[0][0].model if self.routes else None
    return first if all(len(r) == 1 and r[0].model is first for r in self.routes) else None

  def require_one_model(self, what: str) -> ServedModel:
    model = self.model
    if model is None:
      raise OneDirectionOnly(what)
    return model

  def names(self) -> list[str] | None:
    """Each text's route as "de→en→fr" where some text went through a pivot, else None."""
    if not any(len(r) > 1 for r in self.routes):
      return None
    return ["→".join([r[0].source] + [h.target for h in r]) for r in self.routes]


@dataclasses.dataclass(frozen=True)
class Translation:
  """The service's answer: each text's translation; with n-best or sampling, each text's
  hypotheses, best first (`alternatives`); and where the texts went (`routing`)."""

  translations: list[str]
  alternatives: list[list[Hypothesis]] | None
  routing: Routing


@dataclasses.dataclass(frozen=True)
class Attention:
  """A translation with its cross-attention: `weights[t][s]`, target piece by source
  piece."""

  translation: str
  source: list[str]
  target: list[str]
  weights: Any  # numpy [T, S]


class TranslationService:
  """The models served and what is asked of them (module docstring). `ready` starts it;
  until then `check_ready` refuses with 503."""

  def __init__(self, limits: Limits, metrics: Metrics, workers: int | None = None,
               glossary: Glossary | None = None):
    # batches decoded at once per model; None: each engine's own `parallel_batches`
    self.limits, self.metrics, self.workers = limits, metrics, workers
    self.glossary = glossary  # every direct request's terms; a request's are added
    self.models: Models | None = None
    self.detector: LanguageDetector | None = None
    self.warm: list[dict[str, Any]] = []  # the searches compiled before ready (`health`)
    self.failed: str | None = None

  # ---------------------------------------------------------------- lifecycle

  def ready(self, engines: Sequence[tuple[str, Engine]]) -> None:
    """Serves the (name, engine) pairs (`models.Models`: each direction by the first that
    has it), each decoded by a batcher of its own."""
    models = Models(served_models(engines))
    for model in models.models:
      model.batcher = Batcher(engine_call(model.engine, self.limits.max_batch),
                              self.limits, self.metrics.for_model(model.name),
                              self.workers or model.engine.limits.parallel_batches)
      model.batcher.start()
    self.detector = LanguageDetector(models.sources())
    self.models = models

  def check_ready(self) -> None:
    if self.models is None:
      raise RequestError(503, self.failed or "the model is loading", {"Retry-After": "5"})

  async def stop(self) -> None:
    """Answers what was accepted (within `timeout_s`), then stops the batchers."""
    for model in self.models.models if self.models is not None else []:
      await model.batcher.stop()

  @property
  def pair(self) -> tuple[str, str]:
    """The first model's direction: a request's source and target where it names none
    (503 before the models are ready)."""
    self.check_ready()
    return self.models.first.engine.directions[0]

  # ---------------------------------------------------------------- routing

  def routing(self, source: Any, target: Any, texts: Sequence[str]) -> Routing:
    """Where `texts` go from `source` (a code, "auto" to detect each text's, or None for
    the first model's) into `target` (None: the first model's); a 400 naming a code
    that is not one, or a pair no route reaches (`Models.route`)."""
    self.check_ready()
    default_source, default_target = self.pair
    for name, value in (("source", source), ("target", target)):
      if value is not None and not (isinstance(value, str) and value.strip()):
        raise RequestError(400, f"{name} must be a language code")
    source = (source or default_source).strip().lower()
    target = (target or default_target).strip().lower()
    if source != "auto":
      hops = self.models.route(source, target)
      return Routing([hops] * len(texts), hops[-1].model.engine)
    # a text that is no string is refused by the parsing after this
    detected = [self.detector.detect(text if isinstance(text, str) else "") for text in texts]
    routes = [self.models.route(code, target) for code, _ in detected]
    return Routing(routes, (routes[0] if routes else self.models.route(*self.pair))[-1]
                   .model.engine, detected)

  def document_routing(self, source: str, target: str) -> Routing:
    """A document's one route: "auto" is the first model's source (a document is in one
    language); a pivot is refused."""
    self.check_ready()
    if source.strip().lower() == "auto":
      source = self.pair[0]
    hops = self.models.route(source.strip().lower(), target.strip().lower())
    routing = Routing([hops], hops[-1].model.engine)
    routing.require_one_model("documents go")
    return routing

  # ---------------------------------------------------------------- translating

  def check(self, engine: Engine, texts: Sequence[str],
            prefixes: Sequence[str] | None = None) -> None:
    """A 422 for a text that no cut brings within `engine`'s limits, or a prefix too
    long (checked before the texts join a batch, which they must not fail)."""
    try:
      engine.check(texts, prefixes)
    except ValueError as e:
      raise RequestError(422, str(e)) from None

  async def translate(self, texts: Sequence[str], routing: Routing, settings: SearchSettings,
                      prefixes: Sequence[str] | None = None) -> Translation:
    """`texts` along `routing`, searched with `settings` (on the last hop of a pivot),
    with the server's glossary under the request's where the texts go to one model and
    search by beam; `prefixes` go with one model only, and so does a request's glossary."""
    model = routing.model
    if model is None:
      if prefixes is not None or settings.glossary is not None:
        raise OneDirectionOnly("prefixes and glossaries go" if prefixes is not None
                               else "a glossary goes")
      out = await self._along_routes(texts, routing.routes, settings)
    else:
      if self.glossary is not None and not (settings.sampling or prefixes):
        settings = settings.changed(glossary=self.glossary.merged(settings.glossary))
      self.check(model.engine, texts, prefixes)
      out = await model.batcher.submit(list(texts), settings, prefixes)
    if not settings.nbest:
      return Translation(list(out), None, routing)
    return Translation([found[0].text if found else "" for found in out], list(out), routing)

  async def _along_routes(self, texts: Sequence[str], routes: Sequence[Sequence[Hop]],
                          settings: SearchSettings) -> list:
    """Each text along its route: the texts of one route together, through each hop's
    model in turn (a pivot: the first model's best translation is the second's source),
    `settings` on the last hop, the hops before with their model's defaults; the routes'
    groups at once."""
    groups: dict[tuple, list[int]] = {}
    for i, hops in enumerate(routes):
      groups.setdefault(tuple((h.model.name, h.source, h.target) for h in hops), []).append(i)

    async def along(indices: list[int]) -> list:
      hops, current = routes[indices[0]], [texts[i] for i in indices]
      for k, hop in enumerate(hops):
        step = settings if k == len(hops) - 1 else hop.model.engine.defaults
        self.check(hop.model.engine, current)
        current = await hop.model.batcher.submit(list(current), step)
      return current

    out: list = [None] * len(texts)
    if len(groups) == 1:  # one route: awaited here (gather would make it a task of its own)
      results = [await along(next(iter(groups.values())))]
    else:
      results = await asyncio.gather(*(along(indices) for indices in groups.values()))
    for indices, found in zip(groups.values(), results):
      for i, value in zip(indices, found):
        out[i] = value
    return out

  async def attention(self, text: str, routing: Routing, beam_size: int) -> Attention:
    """One text's translation and its cross-attention (JAX engine), on a decoding thread."""
    from seq2seq.decoding.attention import attention
    model = routing.require_one_model("attention goes")
    self.check(model.engine, [text])
    found = await model.batcher.run_alone(
        lambda: attention(model.engine, text, beam_size), 1)
    return Attention(*found)

  async def translate_html(self, texts: Sequence[str], routing: Routing) -> list[str]:
    """HTML documents, their markup kept and the text between tags translated whole
    sentence by sentence, with the model's defaults, one at a time on a decoding thread."""
    from seq2seq.documents.blocks import BlockTranslator
    from seq2seq.documents.html import translate_html
    model = routing.require_one_model("format html goes")
    self.check(model.engine, texts)
    defaults = model.engine.defaults.changed(batch_size=self.limits.max_batch)
    translate = BlockTranslator(model.engine, defaults, progress=False)
    return [await model.batcher.run_alone(functools.partial(translate_html, t, translate))
            for t in texts]

  async def translate_document(self, data: bytes, fmt: str, routing: Routing) -> bytes:
    """A document's bytes translated whole (`documents.translate_bytes`) on a decoding
    thread; ValueError naming what is wrong with a malformed one."""
    from seq2seq.documents import translate_bytes
    model = routing.require_one_model("documents go")
    settings = model.engine.defaults.changed(batch_size=self.limits.max_batch)
    return await model.batcher.run_alone(functools.partial(
        translate_bytes, model.engine, data, fmt, settings, False))

  # ---------------------------------------------------------------- languages

  def detect(self, text: str) -> list[tuple[str, float]]:
    """(language, confidence 0-100) of each served source language, most likely first."""
    self.check_ready()
    return self.detector.rank(text)

  def languages(self) -> list[tuple[str, list[str], list[str]]]:
    """(code, the targets a model has for it, those reached through the pivot) of each
    language served."""
    self.check_ready()
    return [(code, *self.models.targets(code)) for code in self.models.languages()]

  # ---------------------------------------------------------------- warming and health

  def warm_up(self, engines: Sequence[tuple[str, Engine]],
              asked: Sequence[tuple[str, Callable[[SearchSettings], SearchSettings]]]
              ) -> None:
    """Compiles, before the server says ready, each engine's searches at its defaults
    (`Engine.warm_up`) and at the settings its web clients ask for first (`asked`: who
    asks, and their settings from the engine's defaults; the page's beam 5 with 3
    alternatives, say), so that the first click is as fast as the second. `health` lists
    them."""
    for name, engine in engines:
      started, defaults = time.perf_counter(), engine.defaults
      also = {who: settings(defaults) for who, settings in asked}
      engine.warm_up(self.limits.max_batch,
                     also=list(dict.fromkeys(s for s in also.values() if s != defaults)))
      log.info("%s: compiled the batch shapes in %.1f s", name, time.perf_counter() - started)
      for who, settings in {"defaults": defaults, **also}.items():
        self.warm.append({"model": name, "for": who, "beam_size": settings.beam_size,
                          "alpha": settings.alpha, "nbest": settings.nbest})

  def health(self) -> tuple[int, dict[str, Any]]:
    """(status, body) of /health: 200 once ready, each model's state and the batches
    decoded so far, the searches warm; 503 while loading or after a failed load."""
    if self.models is None:
      return 503, {"status": "failed" if self.failed else "loading"}
    first = self.models.first
    return 200, {"status": "ready", **first.batcher.stats, "queue": len(first.batcher.pending),
                 "batch_rows": list(first.engine.limits.row_sizes),
                 "models": self.models.describe(), "warm": self.warm}

