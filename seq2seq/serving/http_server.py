"""HTTP server: seq2seq-serve --workdir RUN | --engine ctranslate2 --model EXPORT_DIR.

Starlette under uvicorn (`pip install 'seq2seq-haiku[serve]'`); docs/serving.md.

  GET  /               a page to try the model (n-best, cross-attention for JAX)
  POST /translate      {"text": "..."} -> {"translation": "..."}
                       {"texts": [...]} -> {"translations": [...]}; optional beam_size,
                       alpha, nbest, sampling {temperature, top_k, top_p, seed},
                       prefix / prefixes, attention (http_api.FIELDS)
  POST /translate      LibreTranslate's: {"q", "source", "target", "format"} ->
                       {"translatedText": ...} (libretranslate.py), with
  GET  /languages, POST /detect, GET /frontend/settings   LibreTranslate's too
  GET  /health         200 {"status": "ready", ...} once loaded and compiled; 503 before
  GET  /metrics        Prometheus metrics (requests, texts, batch sizes, queue, latency)
  GET  /openapi.json   the API's OpenAPI 3.1 schema

Concurrent requests are decoded in batches (dynamic_batching.py). Every bad request gets a
4xx JSON {"error": "..."} naming the problem; a full queue gets 429 with Retry-After.
Each answered request is logged as one JSON line on stdout (logger seq2seq.serve.access);
diagnostics go to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import re
import secrets
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from seq2seq.decoding.engine_io import source_limit
from seq2seq.decoding.glossary import Glossary
from seq2seq.decoding.sentences import TooLongError, check_cuttable
from seq2seq.rundir import checkpoint
from seq2seq.serving import libretranslate as lt
from seq2seq.serving.dynamic_batching import Batcher, Metrics, engine_call
from seq2seq.serving.http_api import (
  Limits,
  RequestError,
  Search,
  TranslateRequest,
  media_type,
  openapi,
  parse_glossary,
  parse_request,
  read_json,
)
from seq2seq.version import __version__
from seq2seq.vocab import EOS_ID

log = logging.getLogger("seq2seq.serve")
access_log = logging.getLogger("seq2seq.serve.access")

WARM_UP = "A man in a blue shirt is standing on a ladder cleaning windows."


def warm_up(translator, limits: Limits, longest: int = 64) -> float:
  """Compiles, before /health says ready, the searches the server runs first: batches of
  1 or max_batch rows (`Translator.row_sizes`) of every length bucket up to `longest`
  pieces, at the default search settings, two at a time; then starts compiling the row
  counts between (2, 4, ... max_batch / 2) on a thread, each taken into use once all its
  lengths are compiled, so that a batch of a few texts stops paying for max_batch rows.
  Kept in the XLA cache, a restart loads them in seconds. Returns the seconds it took."""
  started = time.perf_counter()
  if not hasattr(translator, "lower_searches"):  # CTranslate2 compiles nothing
    translator.translate([WARM_UP])
    return time.perf_counter() - started
  translator.row_sizes = tuple(sorted({1, limits.max_batch}))
  between = [1 << k for k in range(1, limits.max_batch.bit_length())
             if 1 << k < limits.max_batch]  # 2, 4, ... below max_batch
  # every batch shape the server may run stays compiled, and decode.programs more for
  # requests with their own search settings
  translator.keep_programs((2 + len(between)) * len(translator.buckets.boundaries)
                           + translator.decode_cfg.programs)
  compile_rows(translator, translator.row_sizes, limits.max_batch, longest)
  translator.translate([WARM_UP], batch_size=limits.max_batch)
  if between:
    threading.Thread(target=add_row_sizes, args=(translator, between, limits.max_batch,
                                                 longest), daemon=True,
                     name="compile-rows").start()
  return time.perf_counter() - started


def compile_rows(translator, rows: Sequence[int], batch_size: int, longest: int) -> None:
  """Compiles the searches of `rows`-row batches of every length bucket up to `longest`."""
  pieces = translator.encode([WARM_UP])[0][:-1]
  sources = [np.append(np.resize(pieces, length - 1), EOS_ID).astype(np.int32)
             for length in translator.buckets.boundaries if length <= longest]
  lowered = [lowered for src in sources for r in rows
             for lowered in translator.lower_searches([src] * r, batch_size=batch_size,
                                                      row_sizes=(r,))]
  with ThreadPoolExecutor(2) as pool:
    list(pool.map(lambda lower: lower.compile(), lowered))


def add_row_sizes(translator, rows: Sequence[int], batch_size: int, longest: int) -> None:
  """Compiles each row count in turn and adds it to the translator's row sizes."""
  started = time.perf_counter()
  for r in rows:
    compile_rows(translator, [r], batch_size, longest)
    translator.row_sizes = tuple(sorted({*translator.row_sizes, r}))
  log.info("compiled batches of %s rows too, in %.1f s", ", ".join(map(str, rows)),
           time.perf_counter() - started)


def follow_checkpoint(translator, workdir, name: str, every_s: float, info: dict,
                      stop: threading.Event, loaded=None) -> threading.Thread:
  """Every `every_s` seconds, swaps the newest complete checkpoint of kind `name` (a run
  that is training writes new ones) into `translator`: requests that started keep the
  parameters they started with, later ones get the new ones; none is dropped, and the
  compiled searches stay (the shapes are the same). `info["step"]` says which is served.
  `loaded`: the checkpoint the translator was loaded from (one written since, during the
  warm-up, is loaded at the first look). Reads only: a checkpoint being written is not
  complete, and is not seen. Any error keeps the checkpoint served, logged; the thread
  goes on."""
  current = [loaded or checkpoint.checkpoint_path(workdir, name)]
  info["step"] = int(current[0].name) if current[0].name.isdigit() else None

  def follow():
    while not stop.wait(every_s):
      try:
        newest = checkpoint.checkpoint_path(workdir, name)
        if newest == current[0]:
          continue
        params, _ = checkpoint.load_params(workdir, str(newest), translator.model_cfg)
      except checkpoint.CheckpointError as e:
        log.warning("--reload-every: keeping the checkpoint served: %s", e)
        continue
      except Exception:  # noqa: BLE001 - a reload that fails must not end the reloading
        log.exception("--reload-every: keeping the checkpoint served")
        continue
      translator.params, current[0] = params, newest
      info["step"] = int(newest.name)
      log.info("now serving the '%s' checkpoint of step %s", name, newest.name)

  thread = threading.Thread(target=follow, name="seq2seq-reload", daemon=True)
  thread.start()
  return thread


class Server:
  """The app's state: the translator (once loaded), its batcher and metrics."""

  def __init__(self, limits: Limits, info: dict[str, Any], workers: int,
               api_keys: frozenset[str] | None = None, require_key: bool = False,
               glossary: Glossary | None = None):
    self.limits, self.info, self.workers = limits, info, workers
    self.glossary = glossary  # --glossary: every request's terms, a request's added
    # None: open; else LibreTranslate's api_key or a Bearer token, one of these if given,
    # and given always if `require_key`
    self.api_keys, self.require_key = api_keys, require_key
    self.metrics = Metrics()
    self.translator = None
    self.batcher: Batcher | None = None
    self.failed: str | None = None
    self.files = TranslatedFiles(limits.file_ttl_s)

  def ready(self, translator) -> None:
    self.translator = translator
    source, target = translator.languages
    self.info["languages"] = {"source": source, "target": target}
    self.batcher = Batcher(engine_call(translator, self.limits.max_batch), self.limits,
                           self.metrics, self.workers)
    self.batcher.start()

  @property
  def engine(self) -> str:
    return self.info.get("engine", "jax")

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

  async def translate(self, request) -> dict[str, Any]:
    """POST /translate: the native API, or LibreTranslate's when the request has `q`."""
    self.check_ready()
    body, content_type = await self.read_body(request), request.headers.get("content-type")
    query = dict(request.query_params)
    if "q" in query or media_type(content_type) in FORMS:
      return await self.libretranslate(await self.params(request, body))
    value = read_json(body, content_type)
    if isinstance(value, dict) and lt.is_libretranslate(value):
      return await self.libretranslate({**query, **value})
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    lt.check_key({"api_key": given}, self.api_keys, self.require_key)
    req = parse_request(value, self.limits, self.translator.decode_cfg, self.engine)
    if self.glossary is not None and not (req.search.sampling or req.prefixes or req.attention):
      req.search = dataclasses.replace(req.search,
                                       glossary=self.glossary.merged(req.search.glossary))
    self.check_cuttable(req.texts)
    if req.prefixes:  # checked here: a bad one must not fail the batch it would join
      most = self.translator.model_cfg.max_len - 2
      for i, ids in enumerate(self.translator.tokenizer.encode(req.prefixes)):
        if len(ids) > most:
          raise RequestError(422, f"prefix {i} has {len(ids)} pieces; at most {most}")
    if req.attention:
      from seq2seq.decoding.attention import attention
      text, source, target, weights = await self.batcher.run_alone(
          lambda: attention(self.translator, req.texts[0], req.search.beam_size), 1)
      return {"translation": text, "attention": {
          "source": source, "target": target, "weights": weights.round(4).tolist()}}
    out = await self.batcher.submit(req)
    if req.search.nbest:
      best = [alternatives[0]["text"] if alternatives else "" for alternatives in out]
      return ({"translation": best[0], "alternatives": out[0]} if req.single
              else {"translations": best, "alternatives": out})
    return {"translation": out[0]} if req.single else {"translations": out}

  def check_cuttable(self, texts: list[str]) -> None:
    """A 422 for a text that no cut brings within the model's length (checked here: it
    must not fail the batch it would join)."""
    limit = source_limit(self.translator.model_cfg.max_len, self.translator.decode_cfg)
    try:
      check_cuttable(texts, self.translator.count_pieces, limit)
    except TooLongError as e:
      raise RequestError(422, str(e)) from None

  async def libretranslate(self, params: dict) -> dict[str, Any]:
    """LibreTranslate's /translate: texts or HTML documents, with alternatives."""
    lt.check_key(params, self.api_keys, self.require_key)
    source, target = self.translator.languages
    texts, single, fmt, alternatives = lt.parse(params, source, target, self.limits)
    self.check_cuttable(texts)
    defaults = self.translator.decode_cfg
    if fmt == "html":  # whole sentences, tags carried onto their words (no alternatives,
      # as LibreTranslate); one document at a time on a decoding thread, as attention
      from seq2seq.documents.blocks import BlockTranslator
      from seq2seq.documents.html import translate_html
      translate = BlockTranslator(self.translator, progress=False,
                                  beam_size=defaults.beam_size, alpha=defaults.alpha,
                                  batch_size=self.limits.max_batch)
      out = [await self.batcher.run_alone(functools.partial(translate_html, t, translate))
             for t in texts]
      return lt.answer(out, single, params, source, None)
    nbest = alternatives + 1 if alternatives else 0
    glossary = self.glossary
    if params.get("glossary") not in (None, ""):  # ours, beside LibreTranslate's fields
      glossary = (self.glossary or Glossary(())).merged(
          parse_glossary(params["glossary"], self.limits, self.engine, status=400))
    search = Search(max(defaults.beam_size, nbest), defaults.alpha, nbest, glossary=glossary)
    out = await self.batcher.submit(TranslateRequest(texts, False, search)) if texts else []
    others = None
    if nbest:
      others = [[a["text"] for a in found[1:]] for found in out]
      out = [found[0]["text"] if found else "" for found in out]
    return lt.answer(out, single, params, source, others)

  async def params(self, request, body: bytes) -> dict:
    """A LibreTranslate request's parameters: the query's, then the body's (JSON, a form,
    or a multipart form as LibreTranslate's page sends it)."""
    content_type = request.headers.get("content-type")
    if media_type(content_type) != "multipart/form-data":
      return lt.read_params(body, content_type, dict(request.query_params))
    request._body = body  # size-checked; form() reads it from here
    try:
      form = await request.form(max_files=0, max_fields=64)
    except Exception as e:  # noqa: BLE001 - the multipart parser's errors have no common class
      raise RequestError(400, f"Invalid request: the form cannot be read ({e})") from None
    return {**request.query_params, **{k: v for k, v in form.items() if isinstance(v, str)}}

  async def translate_file(self, request) -> dict[str, Any]:
    """LibreTranslate's POST /translate_file: a multipart form with `file`, `source`,
    `target` (and `api_key`); the translation is kept for `limits.file_ttl_s` seconds at
    the URL answered."""
    self.check_ready()
    content_type = request.headers.get("content-type")
    if media_type(content_type) != "multipart/form-data":
      raise RequestError(400, "Invalid request: send the file as multipart/form-data")
    request._body = await self.read_body(request)  # size-checked; form() reads it
    try:
      form = await request.form(max_files=1, max_fields=16)
    except Exception as e:  # noqa: BLE001 - the multipart parser's errors have no common class
      raise RequestError(400, f"Invalid request: the form cannot be read ({e})") from None
    upload = form.get("file")
    params = {k: v for k, v in form.items() if isinstance(v, str)}
    lt.check_key(params, self.api_keys, self.require_key)
    source, target = self.translator.languages
    lt.parse({**params, "q": "-"}, source, target, self.limits)  # languages checked
    if upload is None or isinstance(upload, str) or not upload.filename:
      raise RequestError(400, "Invalid request: missing file parameter")
    name = Path(upload.filename).name
    suffix = Path(name).suffix.lower()
    if suffix not in lt.FILE_FORMATS:
      raise RequestError(400, f"Invalid request: {suffix or 'no extension'} files are not "
                         f"supported (supported: {', '.join(lt.FILE_FORMATS)})")
    data = await upload.read()
    from seq2seq.documents import format_of, translate_bytes
    defaults = self.translator.decode_cfg
    try:
      out = await self.batcher.run_alone(functools.partial(
          translate_bytes, self.translator, data, format_of(name), False,
          beam_size=defaults.beam_size, alpha=defaults.alpha, batch_size=self.limits.max_batch))
    except ValueError as e:
      raise RequestError(400, f"Invalid request: {name}: {e}") from None
    return {"translatedFileUrl": str(request.url_for("download_file",
                                                     filename=self.files.put(name, out)))}

  def health(self) -> tuple[int, dict[str, Any]]:
    status = "ready" if self.batcher else ("failed" if self.failed else "loading")
    stats = self.batcher.stats if self.batcher else {}
    rows = list(getattr(self.translator, "row_sizes", ()))  # JAX: the compiled batch rows
    return (200 if self.batcher else 503), {"status": status, **self.info, **stats,
                                            "queue": len(self.batcher.pending)
                                            if self.batcher else 0, "batch_rows": rows}


_STORED_NAME = re.compile(r"[0-9a-f]{32}\.[^/\\\x00]+")


FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")  # LibreTranslate's


class TranslatedFiles:
  """Translated files kept for download in a temporary folder, each under a random name
  ending in its own, removed `ttl` seconds after it was written (at the next put or get)."""

  def __init__(self, ttl: float):
    self.ttl, self.folder = ttl, Path(tempfile.mkdtemp(prefix="seq2seq-files-"))

  def put(self, name: str, data: bytes) -> str:
    self.expire()
    filename = f"{secrets.token_hex(16)}.{name[-100:]}"  # a name the file system takes
    (self.folder / filename).write_bytes(data)
    return filename

  def get(self, filename: str) -> Path | None:
    """The file named `filename` (as `put` named it), or None."""
    self.expire()
    if not _STORED_NAME.fullmatch(filename) or len(filename.encode()) > 255:
      return None
    path = self.folder / filename
    try:
      return path if path.is_file() else None
    except OSError:  # a name the file system refuses
      return None

  def expire(self) -> None:
    now = time.time()
    for path in self.folder.iterdir():
      with contextlib.suppress(OSError):
        if now - path.stat().st_mtime > self.ttl:
          path.unlink()

  def close(self) -> None:
    shutil.rmtree(self.folder, ignore_errors=True)


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


def create_app(translator=None, limits: Limits | None = None, info: dict | None = None,
               load: Callable[[], Any] | None = None, workers: int = 2,
               api_keys: frozenset[str] | None = None, require_key: bool = False,
               cors_origins: Sequence[str] = ("*",), glossary: Glossary | None = None):
  """The Starlette app serving `translator`, or the one `load()` returns (called on a
  thread at start-up; /health answers 503 until it has). `cors_origins`: the origins
  whose pages may call it (LibreTranslate's default: any); () for none."""
  from starlette.applications import Starlette
  from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
  from starlette.routing import Route

  limits = limits or Limits()
  server = Server(limits, info if info is not None else {}, workers, api_keys,
                  require_key, glossary)  # shared: --reload-every

  async def answered(handler, request) -> tuple[dict, int, dict]:
    """(JSON answer, status, headers) of `handler(request)`: a RequestError's own, and a
    bug's 500, logged, never a hang."""
    try:
      return await handler(request), 200, {}
    except RequestError as e:
      return {"error": str(e)}, e.status, e.headers
    except Exception as e:  # noqa: BLE001 - a bug, answered and logged, never a hang
      log.exception("%s failed", handler.__name__)
      return {"error": f"internal error: {type(e).__name__}"}, 500, {}

  async def translate(request):
    started = time.perf_counter()
    answer, status, headers = await answered(server.translate, request)
    server.metrics.latency.observe(time.perf_counter() - started)
    request.scope["texts"] = (len(answer["translations"]) if "translations" in answer
                              else int("translation" in answer))  # for the access log
    return JSONResponse(answer, status_code=status, headers=headers)

  async def health(request):
    status, body = server.health()
    return JSONResponse(body, status_code=status)

  async def translate_file(request):
    answer, status, headers = await answered(server.translate_file, request)
    return JSONResponse(answer, status_code=status, headers=headers)

  async def download_file(request):
    path = server.files.get(request.path_params["filename"])
    if path is None:
      return JSONResponse({"error": "no such file: translated files are kept for "
                                    f"{limits.file_ttl_s:g} seconds"}, status_code=404)
    return FileResponse(path, filename=path.name.split(".", 1)[1])

  def libretranslate_get(answer):
    """A LibreTranslate GET or /detect: the model's languages, once it has loaded."""
    async def endpoint(request):
      try:
        server.check_ready()
        params = {}
        if request.method == "POST":
          params = await server.params(request, await server.read_body(request))
          lt.check_key(params, server.api_keys, server.require_key)
        return JSONResponse(answer(params, *server.translator.languages))
      except RequestError as e:
        return JSONResponse({"error": str(e)}, status_code=e.status, headers=e.headers)
    return endpoint

  def detect(params, source, target):
    if not params.get("q"):
      raise RequestError(400, "Invalid request: missing q parameter")
    return [{"language": source, "confidence": 100.0}]  # a model of one source language

  async def metrics(request):
    body, content_type = server.metrics.exposition()
    return Response(body, media_type=content_type)

  async def schema(request):
    return JSONResponse(openapi(limits, server.engine, __version__,
                                server.info.get("languages")))

  async def page(request):
    html = resources.files("seq2seq.serving").joinpath("static/index.html").read_text("utf-8")
    return HTMLResponse(html)

  async def not_found(request, exc):
    return JSONResponse({"error": f"no route {request.method} {request.url.path}; see GET "
                                  "/openapi.json"}, status_code=exc.status_code)

  @contextlib.asynccontextmanager
  async def lifespan(app):
    loading = None
    if translator is not None:
      server.ready(translator)
    else:
      async def load_then_serve():
        try:
          server.ready(await asyncio.get_running_loop().run_in_executor(None, load))
          log.info("ready: %s", json.dumps(server.info))
        except Exception as e:  # noqa: BLE001 - reported by /health and every request
          # the log has the whole error; clients get its kind, not this machine's paths
          server.failed = f"the model failed to load ({type(e).__name__}; see the server's log)"
          log.exception("loading failed")
      loading = asyncio.get_running_loop().create_task(load_then_serve())
    yield
    if loading is not None:
      loading.cancel()
    if server.batcher is not None:
      await server.batcher.stop()
    server.files.close()

  app = Starlette(routes=[Route("/", page, methods=["GET"]),
                          Route("/translate", translate, methods=["POST"]),
                          Route("/health", health, methods=["GET"]),
                          Route("/translate_file", translate_file, methods=["POST"]),
                          Route("/download_file/{filename}", download_file, methods=["GET"],
                                name="download_file"),
                          Route("/metrics", metrics, methods=["GET"]),
                          Route("/openapi.json", schema, methods=["GET"]),
                          Route("/languages", libretranslate_get(
                              lambda _, source, target: lt.languages(source, target)),
                                methods=["GET", "POST"]),
                          Route("/detect", libretranslate_get(detect), methods=["POST"]),
                          Route("/frontend/settings", libretranslate_get(
                              lambda _, source, target: lt.frontend_settings(
                                  source, target, limits, server.api_keys is not None,
                                  server.require_key)),
                                methods=["GET"])],
                  exception_handlers={404: not_found, 405: not_found}, lifespan=lifespan)

  app.add_middleware(AccessLog, server=server)
  if cors_origins:  # a browser page of another origin: preflights answered, answers shared
    from starlette.middleware.cors import CORSMiddleware
    app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins),
                       allow_methods=["GET", "POST", "OPTIONS"], allow_headers=["*"],
                       max_age=600)
  app.state.server = server
  return app
