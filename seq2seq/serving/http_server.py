"""HTTP server: seq2seq-serve --workdir RUN | --engine ctranslate2 --model EXPORT_DIR.

Starlette under uvicorn (`pip install 'seq2seq-haiku[serve]'`); docs/serving.md. This
module is the app: its state, its lifecycle and the native routes; LibreTranslate's routes
are `libretranslate.LibreTranslate`'s.

  GET  /               a page to try the model (n-best, cross-attention for JAX)
  POST /translate      {"text": "..."} -> {"translation": "..."}
                       {"texts": [...]} -> {"translations": [...]}; optional beam_size,
                       alpha, nbest, sampling {temperature, top_k, top_p, seed},
                       prefix / prefixes, attention, glossary (http_api.FIELDS);
                       a body with `q` is LibreTranslate's (libretranslate.py)
  GET  /health         200 {"status": "ready", ...} once loaded and compiled; 503 before
  GET  /metrics        Prometheus metrics (requests, texts, batch sizes, queue, latency)
  GET  /openapi.json   the API's OpenAPI 3.1 schema

The server holds an `Engine` (decoding/engine.py) and uses nothing else of it. Concurrent
requests are decoded in batches (dynamic_batching.py). Every bad request gets a 4xx JSON
{"error": "..."} naming the problem; a full queue gets 429 with Retry-After. Each answered
request is logged as one JSON line on stdout (logger seq2seq.serve.access); diagnostics
go to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from importlib import resources
from typing import Any, Callable, Sequence

from seq2seq.decoding.attention import attention
from seq2seq.decoding.engine import Engine
from seq2seq.decoding.glossary import Glossary
from seq2seq.serving.detection import LanguageDetector
from seq2seq.serving.dynamic_batching import Batcher, Metrics, engine_call
from seq2seq.serving.http_api import (
  Limits,
  RequestError,
  TranslateRequest,
  media_type,
  openapi,
  parse_request,
  read_json,
)
from seq2seq.serving.libretranslate import FORMS, LibreTranslate, check_key, is_libretranslate
from seq2seq.serving.models import Hop, Models, ServedModel, direct_model, served_models
from seq2seq.version import __version__

log = logging.getLogger("seq2seq.serve")
access_log = logging.getLogger("seq2seq.serve.access")


def follow_checkpoint(engine: Engine, every_s: float, info: dict, stop: threading.Event
                      ) -> threading.Thread:
  """Every `every_s` seconds, has `engine` serve the newest complete checkpoint of its
  kind (`Engine.reload`: a run that is training writes new ones); requests that started
  keep the parameters they started with. `info["step"]` says which is served. Any error
  keeps the checkpoint served, logged; the thread goes on until `stop` is set."""
  info["step"] = engine.describe().get("step")

  def follow():
    while not stop.wait(every_s):
      try:
        step = engine.reload()
      except Exception:  # noqa: BLE001 - a reload that fails must not end the reloading
        log.exception("--reload-every: keeping the checkpoint served")
        continue
      if step is not None:
        info["step"] = step

  thread = threading.Thread(target=follow, name="seq2seq-reload", daemon=True)
  thread.start()
  return thread


class Server:
  """The app's state: the models (once loaded: `models.Models`, each with its engine and
  batcher; `engine` and `batcher` are the first model's), the metrics, the language
  detector, and the native API's handlers."""

  def __init__(self, limits: Limits, info: dict[str, Any], workers: int | None,
               api_keys: frozenset[str] | None = None, require_key: bool = False,
               glossary: Glossary | None = None):
    # batches decoded at once per model; None: each engine's own `parallel_batches`
    self.limits, self.info, self.workers = limits, info, workers
    self.glossary = glossary  # --glossary: every request's terms, a request's added
    # None: open; else LibreTranslate's api_key or a Bearer token, one of these if given,
    # and given always if `require_key`
    self.api_keys, self.require_key = api_keys, require_key
    self.metrics = Metrics()
    self.models: Models | None = None
    self.detector: LanguageDetector | None = None
    self.engine: Engine | None = None
    self.batcher: Batcher | None = None
    self.failed: str | None = None

  def ready(self, engines: Engine | Sequence[tuple[str, Engine]]) -> None:
    """Serves one engine, or (name, engine) pairs (`models.Models`: each direction by the
    first that has it), each decoded by a batcher of its own."""
    if not isinstance(engines, (list, tuple)):
      engines = [(str(self.info.get("model") or "model"), engines)]
    models = Models(served_models(engines))
    for model in models.models:
      model.batcher = Batcher(engine_call(model.engine, self.limits.max_batch), self.limits,
                              self.metrics.for_model(model.name),
                              self.workers or model.engine.limits.parallel_batches)
      model.batcher.start()
    self.detector = LanguageDetector(models.sources())
    self.engine, self.batcher = models.first.engine, models.first.batcher
    source, target = self.engine.directions[0]
    self.info["languages"] = {"source": source, "target": target}
    self.info.setdefault("engine", self.engine.describe()["engine"])
    self.models = models

  def route(self, source: Any, target: Any, texts: Sequence[str]
            ) -> tuple[list[list[Hop]], list[tuple[str, float]] | None]:
    """(each text's hops (`Models.route`), each text's detected language and confidence
    where `source` is "auto", else None); a missing source or target is the first
    model's."""
    default_source, default_target = self.engine.directions[0]
    for name, value in (("source", source), ("target", target)):
      if value is not None and not (isinstance(value, str) and value.strip()):
        raise RequestError(400, f"{name} must be a language code")
    source = (source or default_source).strip().lower()
    target = (target or default_target).strip().lower()
    if source != "auto":
      return [self.models.route(source, target)] * len(texts), None
    detected = [self.detector.detect(text) for text in texts]
    return [self.models.route(code, target) for code, _ in detected], detected

  def check_ready(self) -> None:
    if self.batcher is None:
      raise RequestError(503, self.failed or "the model is loading", {"Retry-After": "5"})

  async def read_body(self, request) -> bytes:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > self.limits.max_body:
      raise RequestError(413, f"the body has {length} bytes; at most {self.limits.max_body}")
    body = bytearray()

    async def read():
      async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > self.limits.max_body:
          raise RequestError(413, f"the body exceeds {self.limits.max_body} bytes")
    try:  # a client that sends a byte now and then must not hold a connection for ever
      await asyncio.wait_for(read(), self.limits.read_timeout_s)
    except asyncio.TimeoutError:
      raise RequestError(408, f"the body did not arrive within {self.limits.read_timeout_s:g} s"
                         ) from None
    return bytes(body)

  def check_texts(self, texts: Sequence[str], prefixes: Sequence[str] | None = None,
                  engine: Engine | None = None) -> None:
    """A 422 for a text that no cut brings within the engine's limits (default: the first
    model's), or a prefix too long (checked here: it must not fail the batch it would
    join)."""
    try:
      (engine or self.engine).check(texts, prefixes)
    except ValueError as e:
      raise RequestError(422, str(e)) from None

  async def translate_routed(self, texts: Sequence[str], routes: Sequence[Sequence[Hop]],
                             settings) -> list:
    """Each text along its route (`route`): the texts of one route together, through each
    hop's model in turn (a pivot: the first model's best translation is the second's
    source), with `settings` (beam, alpha, n-best, sampling) on the last hop; the
    routes' groups at once. The hops before the last search with their model's defaults."""
    groups: dict[tuple, list[int]] = {}
    for i, hops in enumerate(routes):
      groups.setdefault(tuple((h.model.name, h.source, h.target) for h in hops), []).append(i)

    async def along(indices: list[int]) -> list:
      hops, current = routes[indices[0]], [texts[i] for i in indices]
      for k, hop in enumerate(hops):
        last = k == len(hops) - 1
        step = settings if last else hop.model.engine.defaults
        self.check_texts(current, None, hop.model.engine)
        current = await hop.model.batcher.submit(TranslateRequest(list(current), False, step))
      return current

    out: list = [None] * len(texts)
    results = await asyncio.gather(*(along(indices) for indices in groups.values()))
    for indices, found in zip(groups.values(), results):
      for i, value in zip(indices, found):
        out[i] = value
    return out

  async def translate(self, request, libretranslate: LibreTranslate) -> dict[str, Any]:
    """POST /translate: the native API, or LibreTranslate's when the request has `q`."""
    self.check_ready()
    body, content_type = await self.read_body(request), request.headers.get("content-type")
    query = dict(request.query_params)
    if "q" in query or media_type(content_type) in FORMS:
      return await libretranslate.translate(await libretranslate.params(request, body))
    value = read_json(body, content_type)
    if isinstance(value, dict) and is_libretranslate(value):
      return await libretranslate.translate({**query, **value})
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    check_key({"api_key": given}, self.api_keys, self.require_key)
    routes = None
    if isinstance(value, dict) and any(value.get(k) for k in ("source", "target", "tgt_lang")):
      if value.get("target") and value.get("tgt_lang"):
        raise RequestError(422, "give target or tgt_lang, not both")
      texts = value.get("texts", [value.get("text")])
      routes, _ = self.route(value.get("source"),
                             value.get("target") or value.get("tgt_lang"),
                             texts if isinstance(texts, list) else [texts])
    model = self.models.first if routes is None else direct_model(routes)
    defaults = (model or self.models.first).engine  # a pivot's: the first model's
    req = parse_request(value, self.limits, defaults.defaults, defaults.limits)
    if model is None:  # a pivot, or texts of several languages
      if req.prefixes is not None or req.attention or req.settings.glossary is not None:
        raise RequestError(422, "prefixes, attention and glossaries go with one model's "
                                "direction, not through a pivot or several models")
      out = await self.translate_routed(req.texts, routes, req.settings)
    else:
      if self.glossary is not None and not (req.settings.sampling or req.prefixes
                                            or req.attention):
        req.settings = req.settings.changed(
            glossary=self.glossary.merged(req.settings.glossary))
      self.check_texts(req.texts, req.prefixes, model.engine)
      if req.attention:
        return await self.attention(req, model)
      out = await model.batcher.submit(req)
    if req.settings.nbest:
      best = [alternatives[0]["text"] if alternatives else "" for alternatives in out]
      return ({"translation": best[0], "alternatives": out[0]} if req.single
              else {"translations": best, "alternatives": out})
    return {"translation": out[0]} if req.single else {"translations": out}

  async def attention(self, req: TranslateRequest, model: ServedModel) -> dict[str, Any]:
    """A native request with `attention`: the translation and its cross-attention."""
    text, source, target, weights = await model.batcher.run_alone(
        lambda: attention(model.engine, req.texts[0], req.settings.beam_size), 1)
    return {"translation": text, "attention": {
        "source": source, "target": target, "weights": weights.round(4).tolist()}}

  def health(self) -> tuple[int, dict[str, Any]]:
    status = "ready" if self.batcher else ("failed" if self.failed else "loading")
    stats = self.batcher.stats if self.batcher else {}
    rows = list(self.engine.limits.row_sizes) if self.engine is not None else []
    models = {"models": self.models.describe()} if self.models is not None else {}
    return (200 if self.batcher else 503), {"status": status, **self.info, **stats,
                                            "queue": len(self.batcher.pending)
                                            if self.batcher else 0, "batch_rows": rows,
                                            **models}

  async def answered(self, handler, request) -> tuple[dict, int, dict]:
    """(JSON answer, status, headers) of `await handler(request)`: a RequestError's own,
    and a bug's 500, logged, never a hang."""
    try:
      return await handler(request), 200, {}
    except RequestError as e:
      return {"error": str(e)}, e.status, e.headers
    except Exception as e:  # noqa: BLE001 - a bug, answered and logged, never a hang
      log.exception("%s failed", getattr(handler, "__name__", "a handler"))
      return {"error": f"internal error: {type(e).__name__}"}, 500, {}

  @contextlib.asynccontextmanager
  async def serving(self, engine: Engine | None, load: Callable[[], Engine] | None,
                    libretranslate: LibreTranslate):
    """The app's lifespan: serves `engine`, or the one `load()` returns (called on a
    thread; /health answers 503 until it has); at the end answers what was accepted."""
    loading = None
    if engine is not None:
      self.ready(engine)
    else:
      async def load_then_serve():
        try:
          self.ready(await asyncio.get_running_loop().run_in_executor(None, load))
          log.info("ready: %s", json.dumps(self.info))
        except Exception as e:  # noqa: BLE001 - reported by /health and every request
          # the log has the whole error; clients get its kind, not this machine's paths
          self.failed = f"the model failed to load ({type(e).__name__}; see the server's log)"
          log.exception("loading failed")
      loading = asyncio.get_running_loop().create_task(load_then_serve())
    yield
    if loading is not None:
      loading.cancel()
    for model in self.models.models if self.models is not None else []:
      await model.batcher.stop()
    libretranslate.files.close()


class AccessLog:
  """ASGI middleware: one JSON line per answered request, and the requests counter."""

  PATHS = ("/", "/translate", "/health", "/metrics", "/openapi.json", "/languages", "/detect",
           "/frontend/settings", "/translate_file")

  def __init__(self, app, server: Server):
    self.app, self.server = app, server

  async def __call__(self, scope, receive, send):
    if scope["type"] != "http":
      return await self.app(scope, receive, send)
    started, status = time.perf_counter(), [500]

    async def send_status(message):
      if message["type"] == "http.response.start":
        status[0] = message["status"]
      await send(message)

    try:
      await self.app(scope, receive, send_status)
    finally:
      path = scope["path"]
      self.server.metrics.requests.labels(path if path in self.PATHS else "other",
                                          str(status[0])).inc()
      client = scope.get("client") or ("", 0)
      access_log.info(json.dumps({
          "time": round(time.time(), 3), "client": client[0], "method": scope["method"],
          "path": path, "status": status[0],
          "ms": round(1000 * (time.perf_counter() - started), 1),
          "texts": scope.get("texts", 0)}))


class NativeRoutes:
  """The native API's endpoints over a `Server`."""

  def __init__(self, server: Server, libretranslate: LibreTranslate):
    self.server, self.libretranslate = server, libretranslate

  async def translate(self, request):
    from starlette.responses import JSONResponse
    started = time.perf_counter()
    answer, status, headers = await self.server.answered(
        lambda r: self.server.translate(r, self.libretranslate), request)
    self.server.metrics.latency.observe(time.perf_counter() - started)
    request.scope["texts"] = (len(answer["translations"]) if "translations" in answer
                              else int("translation" in answer))  # for the access log
    return JSONResponse(answer, status_code=status, headers=headers)

  async def health(self, request):
    from starlette.responses import JSONResponse
    status, body = self.server.health()
    return JSONResponse(body, status_code=status)

  async def metrics(self, request):
    from starlette.responses import Response
    body, content_type = self.server.metrics.exposition()
    return Response(body, media_type=content_type)

  async def schema(self, request):
    from starlette.responses import JSONResponse
    return JSONResponse(openapi(self.server.limits, self.server.info.get("engine", "jax"),
                                __version__, self.server.info.get("languages")))

  async def page(self, request):
    from starlette.responses import HTMLResponse
    html = resources.files("seq2seq.serving").joinpath("static/index.html").read_text("utf-8")
    return HTMLResponse(html)

  async def not_found(self, request, exc):
    from starlette.responses import JSONResponse
    return JSONResponse({"error": f"no route {request.method} {request.url.path}; see GET "
                                  "/openapi.json"}, status_code=exc.status_code)

  def routes(self) -> list:
    from starlette.routing import Route
    return [Route("/", self.page, methods=["GET"]),
            Route("/translate", self.translate, methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/openapi.json", self.schema, methods=["GET"])]


def create_app(engine: Engine | None = None, limits: Limits | None = None,
               info: dict | None = None, load: Callable[[], Engine] | None = None,
               workers: int | None = None, api_keys: frozenset[str] | None = None,
               require_key: bool = False, cors_origins: Sequence[str] = ("*",),
               glossary: Glossary | None = None):
  """The Starlette app serving `engine`, or the one `load()` returns (called on a thread
  at start-up; /health answers 503 until it has). `cors_origins`: the origins whose
  pages may call it (LibreTranslate's default: any); () for none."""
  from starlette.applications import Starlette

  server = Server(limits or Limits(), info if info is not None else {}, workers, api_keys,
                  require_key, glossary)
  libretranslate = LibreTranslate(server)
  native = NativeRoutes(server, libretranslate)
  app = Starlette(routes=native.routes() + libretranslate.routes(),
                  exception_handlers={404: native.not_found, 405: native.not_found},
                  lifespan=lambda app: server.serving(engine, load, libretranslate))
  app.add_middleware(AccessLog, server=server)
  if cors_origins:  # a browser page of another origin: preflights answered, answers shared
    from starlette.middleware.cors import CORSMiddleware
    app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins),
                       allow_methods=["GET", "POST", "OPTIONS"], allow_headers=["*"],
                       max_age=600)
  app.state.server = server
  return app
