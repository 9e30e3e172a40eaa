"""HTTP server: seq2seq-serve --workdir RUN | --engine ctranslate2 --model EXPORT_DIR.

Starlette under uvicorn (`pip install 'seq2seq-haiku[serve]'`); docs/serving.md. This
module is the app: its route table, its lifespan (loading, warming, stopping) and its
access log. What a request asks is answered by the `TranslationService` (service.py)
through one of two dialects, each a thin adapter: the native API (native_api.py) and
LibreTranslate's (libretranslate.py). The route table (`create_app`) says which answers
where; POST /translate is LibreTranslate's when the request has `q` or is a form, else
the native API's.

  GET  /               a page to try the model (n-best, cross-attention for JAX)
  POST /translate      the native API or LibreTranslate's, by the body
  GET  /health         200 {"status": "ready", ...} once loaded and compiled (what is warm
                       in "warm"); 503 before
  GET  /metrics        Prometheus metrics (requests, texts, batch sizes, queue, latency)
  GET  /openapi.json   both APIs' OpenAPI 3.1 schema (openapi.py)
  GET|POST /languages, POST /detect, GET /frontend/settings, POST /translate_file,
  GET /download_file/NAME: LibreTranslate's

The server holds `Engine`s (decoding/engine.py) and uses nothing else of them. Concurrent
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

from seq2seq.decoding.engine import Engine
from seq2seq.decoding.glossary import Glossary
from seq2seq.serving.dynamic_batching import Metrics
from seq2seq.serving.http_api import ApiKeys, Limits, RequestError, media_type, read_json
from seq2seq.serving.libretranslate import FORMS, LibreTranslate, web_ui_settings
from seq2seq.serving.native_api import NativeAPI, page_settings
from seq2seq.serving.openapi import openapi
from seq2seq.serving.service import TranslationService
from seq2seq.version import __version__

log = logging.getLogger("seq2seq.serve")
access_log = logging.getLogger("seq2seq.serve.access")

# Who asks for which search first, compiled before the server says ready.
FIRST_ASKED = (("the page", page_settings), ("LibreTranslate's web UI", web_ui_settings))


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
  """The app's state: the translation service, the two dialects over it, the metrics and
  what /health says of the server (`info`)."""

  def __init__(self, limits: Limits, info: dict[str, Any], workers: int | None,
               keys: ApiKeys, glossary: Glossary | None = None):
    self.limits, self.info = limits, info
    self.metrics = Metrics()
    self.service = TranslationService(limits, self.metrics, workers, glossary)
    self.native = NativeAPI(self.service, limits, keys)
    self.libretranslate = LibreTranslate(self.service, limits, keys)

  def named(self, engines: Engine | Sequence[tuple[str, Engine]]
            ) -> list[tuple[str, Engine]]:
    if isinstance(engines, (list, tuple)):
      return list(engines)
    return [(str(self.info.get("model") or "model"), engines)]

  def ready(self, engines: Engine | Sequence[tuple[str, Engine]]) -> None:
    self.service.ready(self.named(engines))
    source, target = self.service.pair
    self.info["languages"] = {"source": source, "target": target}
    self.info.setdefault("engine", self.service.models.first.engine.describe()["engine"])

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

  async def translate(self, request, body: bytes) -> dict[str, Any]:
    """POST /translate: LibreTranslate's API when the request has `q` or is a form, else
    the native API's."""
    query, content_type = dict(request.query_params), request.headers.get("content-type")
    if "q" in query or media_type(content_type) in FORMS:  # the native API takes JSON only
      return await self.libretranslate.translate(
          await self.libretranslate.params(request, body))
    value = read_json(body, content_type)
    if isinstance(value, dict) and "q" in value:
      return await self.libretranslate.translate({**query, **value})
    return await self.native.translate(value, request.headers.get("authorization", ""))

  def health(self) -> tuple[int, dict[str, Any]]:
    status, body = self.service.health()
    return status, {"status": body.pop("status"), **self.info, **body}

  async def answered(self, handler, request) -> tuple[Any, int, dict]:
    """(JSON answer, status, headers) of `await handler(request, body)` (a POST's body read
    within the limits): a RequestError's own (the service's 503 while it loads), and a
    bug's 500, logged, never a hang."""
    try:  # the service refuses with 503 until it is ready
      body = await self.read_body(request) if request.method == "POST" else b""
      return await handler(request, body), 200, {}
    except RequestError as e:
      return {"error": str(e)}, e.status, e.headers
    except Exception as e:  # noqa: BLE001 - a bug, answered and logged, never a hang
      log.exception("%s failed", getattr(handler, "__name__", "a handler"))
      return {"error": f"internal error: {type(e).__name__}"}, 500, {}

  @contextlib.asynccontextmanager
  async def serving(self, engine: Engine | None, load: Callable[[], Any] | None):
    """The app's lifespan: serves `engine`, or those `load()` returns (called on a thread,
    then warmed for what the web clients ask first: `FIRST_ASKED`; /health answers 503
    until then); at the end answers what was accepted."""
    loading = None
    if engine is not None:
      self.ready(engine)
    else:
      async def load_then_serve():
        loop = asyncio.get_running_loop()
        try:
          engines = self.named(await loop.run_in_executor(None, load))
          await loop.run_in_executor(None, self.service.warm_up, engines, FIRST_ASKED)
          self.ready(engines)
          log.info("ready: %s", json.dumps(self.info))
        except Exception as e:  # noqa: BLE001 - reported by /health and every request
          # the log has the whole error; clients get its kind, not this machine's paths
          self.service.failed = (f"the model failed to load ({type(e).__name__}; see the "
                                 "server's log)")
          log.exception("loading failed")
      loading = asyncio.get_running_loop().create_task(load_then_serve())
    yield
    if loading is not None:
      loading.cancel()
    await self.service.stop()
    self.libretranslate.files.close()


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


class Routes:
  """The app's own endpoints, and the JSON endpoint of a dialect's handler."""

  def __init__(self, server: Server):
    self.server = server

  def json(self, handler):
    """The route answering `handler(request, body)`'s JSON (`Server.answered`)."""
    async def endpoint(request):
      from starlette.responses import JSONResponse
      answer, status, headers = await self.server.answered(handler, request)
      return JSONResponse(answer, status_code=status, headers=headers)
    endpoint.__name__ = getattr(handler, "__name__", "endpoint")
    return endpoint

  async def translate(self, request):
    from starlette.responses import JSONResponse
    started = time.perf_counter()
    answer, status, headers = await self.server.answered(self.server.translate, request)
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

  async def download_file(self, request):
    from starlette.responses import FileResponse, JSONResponse
    path = self.server.libretranslate.download_file(request.path_params["filename"])
    if path is None:
      return JSONResponse({"error": "no such file: translated files are kept for "
                                    f"{self.server.limits.file_ttl_s:g} seconds"},
                          status_code=404)
    return FileResponse(path, filename=path.name.split(".", 1)[1])

  async def not_found(self, request, exc):
    from starlette.responses import JSONResponse
    return JSONResponse({"error": f"no route {request.method} {request.url.path}; see GET "
                                  "/openapi.json"}, status_code=exc.status_code)


def create_app(engine: Engine | None = None, limits: Limits | None = None,
               info: dict | None = None, load: Callable[[], Any] | None = None,
               workers: int | None = None, api_keys: frozenset[str] | None = None,
               require_key: bool = False, cors_origins: Sequence[str] = ("*",),
               glossary: Glossary | None = None):
  """The Starlette app serving `engine`, or the engines `load()` returns (an engine, or
  (name, engine) pairs; called on a thread at start-up, then warmed; /health answers 503
  until they are). `cors_origins`: the origins whose pages may call it (LibreTranslate's
  default: any); () for none."""
  from starlette.applications import Starlette
  from starlette.routing import Route

  server = Server(limits or Limits(), info if info is not None else {}, workers,
                  ApiKeys(api_keys, require_key), glossary)
  app_routes, lt = Routes(server), server.libretranslate
  # path, methods, handler: which dialect answers where
  table = [
      ("/", ["GET"], app_routes.page),
      ("/translate", ["POST"], app_routes.translate),  # either dialect, by the body
      ("/health", ["GET"], app_routes.health),
      ("/metrics", ["GET"], app_routes.metrics),
      ("/openapi.json", ["GET"], app_routes.schema),
      ("/languages", ["GET", "POST"], app_routes.json(lt.languages)),  # LibreTranslate's
      ("/detect", ["POST"], app_routes.json(lt.detect)),
      ("/frontend/settings", ["GET"], app_routes.json(lt.frontend_settings)),
      ("/translate_file", ["POST"], app_routes.json(lt.translate_file)),
      ("/download_file/{filename}", ["GET"], app_routes.download_file),
  ]
  app = Starlette(routes=[Route(path, handler, methods=methods,
                                name="download_file" if path.startswith("/download_file")
                                else None) for path, methods, handler in table],
                  exception_handlers={404: app_routes.not_found, 405: app_routes.not_found},
                  lifespan=lambda app: server.serving(engine, load))
  app.add_middleware(AccessLog, server=server)
  if cors_origins:  # a browser page of another origin: preflights answered, answers shared
    from starlette.middleware.cors import CORSMiddleware
    app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins),
                       allow_methods=["GET", "POST", "OPTIONS"], allow_headers=["*"],
                       max_age=600)
  app.state.server = server
  return app
