"""LibreTranslate's API, served beside the native one, so that the clients that speak it
(libretranslatepy, deep-translator, browser extensions, editors) can use a model trained
here: its routes (`LibreTranslate`), its parameters read and checked, its answers.

    POST /translate    q (a string or a list), source (a code or "auto"), target,
                       format ("text" or "html"), api_key, alternatives
                       -> {"translatedText": ...} (a string or a list, as q was),
                       detectedLanguage for "auto", route where a pivot was taken
    GET  /languages    [{"code", "name", "targets", "pivots"}] of the models served
    POST /detect       q -> [{"language", "confidence"}]: the served sources, ranked
    GET  /frontend/settings   what LibreTranslate's web clients read first
    POST /translate_file      a document (multipart: file, source, target)
                              -> {"translatedFileUrl": ...}, kept for `file_ttl_s`
    GET  /download_file/NAME  that document

The parameters come as JSON, as a form (application/x-www-form-urlencoded) or in the
query string, as LibreTranslate takes them. The `TranslationService` (service.py)
routes them: to the model that has the direction, or through English with two; a pair no
route reaches is LibreTranslate's 400 naming it and the pairs served, and "auto" detects
each text's language among the served sources. With `format: "html"` the markup is kept
and each run of text between tags is translated (script and style left as they are).
Errors are LibreTranslate's shape, `{"error": "..."}`: 400 for a bad request, 403 for a
missing or wrong API key. `LibreTranslate` is the adapter: it parses, calls the service,
renders; it holds neither the app nor the native API.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shutil
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

from seq2seq.decoding.engine_io import SearchSettings
from seq2seq.documents.formats import EXTENSIONS, NOT_TRANSLATED, for_extension
from seq2seq.rundir.languages import language_name
from seq2seq.serving.http_api import (
  ApiKeys,
  Limits,
  RequestError,
  check_texts,
  media_type,
  parse_glossary,
  read_json,
)
from seq2seq.serving.service import OneDirectionOnly, Routing, Translation, TranslationService

TEXT_FORMATS = ("text", "html")  # its `format` field's values
# The alternatives LibreTranslate's web UI asks for (its app.js sends `alternatives: 3`):
# the server compiles that search before it says ready (`TranslationService.warm_up`).
WEB_UI_ALTERNATIVES = 3


def languages(served: list[tuple[str, list[str], list[str]]]) -> list[dict[str, Any]]:
  """/languages: each language with the targets it translates to
  (`TranslationService.languages`), those through the pivot language included and, where
  there are some, also listed as `pivots` (our field: LibreTranslate has none)."""
  out = []
  for code, direct, pivoted in served:
    out.append({"code": code, "name": language_name(code), "targets": direct + pivoted})
    if pivoted:
      out[-1]["pivots"] = pivoted
  return out


def frontend_settings(source: str, target: str, limits: Limits, keys: bool,
                      required: bool = False) -> dict:
  return {"apiKeys": keys, "keyRequired": required, "charLimit": limits.max_chars,
          "frontendTimeout": int(limits.timeout_s * 1000), "suggestions": False,
          "filesTranslation": True, "supportedFilesFormat": list(EXTENSIONS),
          "language": {"source": {"code": source, "name": language_name(source)},
                       "target": {"code": target, "name": language_name(target)}}}


def read_params(body: bytes, content_type: str | None, query: dict[str, str]) -> dict:
  """The request's parameters: the query string's, then a JSON or form body's over them."""
  params: dict[str, Any] = dict(query)
  kind = media_type(content_type)
  if not body.strip():
    return params
  try:
    text = body.decode("utf-8")
  except UnicodeDecodeError as e:
    raise RequestError(400, f"Invalid request: the body is not valid UTF-8 (byte {e.start})"
                       ) from None
  if kind == "application/x-www-form-urlencoded":
    form = urllib.parse.parse_qs(text, keep_blank_values=True)
    params.update({k: v if k == "q" and len(v) > 1 else v[-1] for k, v in form.items()})
  elif kind in ("application/json", ""):
    try:
      value = read_json(body, None)
    except RequestError as e:
      raise RequestError(400, f"Invalid request: {e}") from None
    if not isinstance(value, dict):
      raise RequestError(400, "Invalid request: the body must be a JSON object")
    params.update(value)
  else:
    raise RequestError(400, f"Invalid request: Content-Type {kind!r}; send JSON or a form "
                            "(application/x-www-form-urlencoded)")
  return params


def is_libretranslate(params: dict) -> bool:
  """A /translate request in LibreTranslate's terms (q), not the native API's (text)."""
  return "q" in params


def parse(params: dict, limits: Limits) -> tuple[list[str], bool, str, int]:
  """(texts, whether q was one string, format, alternatives) of a /translate request;
  its languages are the service's to route (`TranslationService.routing`)."""
  q = params.get("q")
  if q is None or q == "" or q == []:
    raise RequestError(400, "Invalid request: missing q parameter")
  single = isinstance(q, str)
  texts = [q] if single else q
  if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
    raise RequestError(400, "Invalid request: q must be a string or a list of strings")
  if len(texts) > limits.max_texts:
    raise RequestError(400, f"Invalid request: {len(texts)} texts; at most {limits.max_texts}")
  try:
    check_texts(texts, "q", limits, (400, 400))
  except RequestError as e:
    raise RequestError(400, f"Invalid request: {e} (char limit {limits.max_chars})") from None
  for name in ("source", "target"):
    if not params.get(name) or not isinstance(params[name], str):
      raise RequestError(400, f"Invalid request: missing {name} parameter")
  fmt = params.get("format") or "text"
  if fmt not in TEXT_FORMATS:
    raise RequestError(400, f"Invalid request: format {fmt!r}; expected text or html")
  alternatives = params.get("alternatives") or 0
  if isinstance(alternatives, str) and alternatives.strip().isdigit():
    alternatives = int(alternatives)
  if isinstance(alternatives, bool) or not isinstance(alternatives, int):
    raise RequestError(400, "Invalid request: alternatives must be an integer")
  if not 0 <= alternatives <= limits.max_beam - 1:
    raise RequestError(400, f"Invalid request: alternatives must be 0 to {limits.max_beam - 1}")
  return texts, single, fmt, alternatives


def answer(found: Translation | list[str], single: bool, routing: Routing) -> dict[str, Any]:
  """LibreTranslate's answer: translatedText (a string or a list, as q was); the other
  hypotheses where alternatives were asked for, each different from the translation and
  from the others; detectedLanguage where the source was "auto"; and `route` (our field)
  naming each text's route where one went through a pivot."""
  translations = found if isinstance(found, list) else found.translations
  out: dict[str, Any] = {"translatedText": translations[0] if single else translations}
  if not isinstance(found, list) and found.alternatives is not None:
    alternatives = [list(dict.fromkeys(h.text for h in hyps[1:] if h.text != best))
                    for hyps, best in zip(found.alternatives, translations)]
    out["alternatives"] = alternatives[0] if single else alternatives
  if routing.detected is not None:
    detected = [{"language": code, "confidence": confidence}
                for code, confidence in routing.detected]
    out["detectedLanguage"] = detected[0] if single else detected
  names = routing.names()
  if names is not None:
    out["route"] = names[0] if single else names
  return out


def search_settings(defaults: SearchSettings, alternatives: int) -> SearchSettings:
  """A request's search: the model's defaults, with a beam wide enough for the
  translation and `alternatives` others."""
  nbest = alternatives + 1 if alternatives else 0
  return defaults.changed(beam_size=max(defaults.beam_size, nbest), nbest=nbest)


def web_ui_settings(defaults: SearchSettings) -> SearchSettings:
  """The search of LibreTranslate's web UI's first request (`WEB_UI_ALTERNATIVES`)."""
  return search_settings(defaults, WEB_UI_ALTERNATIVES)


FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")  # LibreTranslate's
_STORED_NAME = re.compile(r"[0-9a-f]{32}\.[^/\\\x00]+")


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


class LibreTranslate:
  """LibreTranslate's dialect over a `TranslationService`: each route's parameters read
  and checked, the service called, the answer rendered. Translated files are kept in
  `files` for their download."""

  def __init__(self, service: TranslationService, limits: Limits, keys: ApiKeys):
    self.service, self.limits, self.keys = service, limits, keys
    self.files = TranslatedFiles(limits.file_ttl_s)

  async def params(self, request, body: bytes) -> dict:
    """A request's parameters: the query's, then the body's (JSON, a form, or a multipart
    form as LibreTranslate's page sends it)."""
    content_type = request.headers.get("content-type")
    if media_type(content_type) != "multipart/form-data":
      return read_params(body, content_type, dict(request.query_params))
    request._body = body  # size-checked; form() reads it from here
    try:
      form = await request.form(max_files=0, max_fields=64)
    except Exception as e:  # noqa: BLE001 - the multipart parser's errors have no common class
      raise RequestError(400, f"Invalid request: the form cannot be read ({e})") from None
    return {**request.query_params, **{k: v for k, v in form.items() if isinstance(v, str)}}

  async def translate(self, params: dict) -> dict[str, Any]:
    """/translate: texts or HTML documents, with alternatives, routed by source and target
    ("auto" detects each text's language; a pair no model has goes through the pivot)."""
    self.keys.check(params.get("api_key"))
    texts, single, fmt, alternatives = parse(params, self.limits)
    routing = self.service.routing(params["source"], params["target"], texts)
    try:
      if fmt == "html":  # whole sentences, tags carried onto their words (no alternatives,
        # as LibreTranslate)
        return answer(await self.service.translate_html(texts, routing), single, routing)
      settings = search_settings(routing.engine.defaults, alternatives)
      if params.get("glossary") not in (None, ""):  # ours, beside LibreTranslate's fields
        routing.require_one_model("a glossary goes")
        settings = settings.changed(glossary=parse_glossary(
            params["glossary"], self.limits, routing.engine.limits.glossary, status=400))
      return answer(await self.service.translate(texts, routing, settings), single, routing)
    except OneDirectionOnly as e:
      raise RequestError(400, f"Invalid request: {e}") from None

  async def translate_file(self, request, body: bytes) -> dict[str, Any]:
    """POST /translate_file: a multipart form with `file`, `source`, `target` (and
    `api_key`); the translation is kept for `limits.file_ttl_s` seconds at the URL
    answered."""
    if media_type(request.headers.get("content-type")) != "multipart/form-data":
      raise RequestError(400, "Invalid request: send the file as multipart/form-data")
    request._body = body  # size-checked; form() reads it
    try:
      form = await request.form(max_files=1, max_fields=16)
    except Exception as e:  # noqa: BLE001 - the multipart parser's errors have no common class
      raise RequestError(400, f"Invalid request: the form cannot be read ({e})") from None
    upload = form.get("file")
    params = {k: v for k, v in form.items() if isinstance(v, str)}
    self.keys.check(params.get("api_key"))
    parse({**params, "q": "-"}, self.limits)  # languages given
    try:
      routing = self.service.document_routing(params["source"], params["target"])
    except OneDirectionOnly as e:
      raise RequestError(400, f"Invalid request: {e}") from None
    if upload is None or isinstance(upload, str) or not upload.filename:
      raise RequestError(400, "Invalid request: missing file parameter")
    name = Path(upload.filename).name
    suffix = Path(name).suffix.lower()
    document = for_extension(suffix)
    if document is None:
      advice = f" ({NOT_TRANSLATED[suffix]})" if NOT_TRANSLATED.get(suffix) else ""
      raise RequestError(400, f"Invalid request: {name}: {suffix or 'no extension'} files "
                         f"are not supported{advice} (supported: {', '.join(EXTENSIONS)})")
    data = await upload.read()
    try:
      out = await self.service.translate_document(data, document.name, routing)
    except RequestError:
      raise  # the queue's 429 or 503
    except ValueError as e:
      raise RequestError(400, f"Invalid request: {name}: {e}") from None
    return {"translatedFileUrl": str(request.url_for("download_file",
                                                     filename=self.files.put(name, out)))}

  async def languages(self, request, body: bytes) -> list:
    await self.checked_params(request, body)
    return languages(self.service.languages())

  async def detect(self, request, body: bytes) -> list:
    """/detect: the served source languages, most likely first, with confidences 0-100."""
    q = (await self.checked_params(request, body)).get("q")
    if not q or not isinstance(q, str):
      raise RequestError(400, "Invalid request: missing q parameter")
    return [{"language": code, "confidence": confidence}
            for code, confidence in self.service.detect(q)]

  async def frontend_settings(self, request, body: bytes) -> dict:
    return frontend_settings(*self.service.pair, self.limits, self.keys.keys is not None,
                             self.keys.required)

  async def checked_params(self, request, body: bytes) -> dict:
    """A POST's parameters, its key checked; a GET's are none."""
    if request.method != "POST":
      return {}
    params = await self.params(request, body)
    self.keys.check(params.get("api_key"))
    return params

  def download_file(self, filename: str) -> Path | None:
    """A translated file kept (`TranslatedFiles.get`), or None."""
    return self.files.get(filename)
