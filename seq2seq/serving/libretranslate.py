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
query string, as LibreTranslate takes them. A request goes to the model that has its
direction, or through English with two (`models.Models`); a pair no route reaches is
LibreTranslate's 400 naming it and the pairs served, and "auto" detects each text's
language among the served sources (`detection.py`). With `format: "html"` the markup is kept and each run of text between tags
is translated (script and style left as they are). Errors are LibreTranslate's shape,
`{"error": "..."}`: 400 for a bad request, 403 for a missing or wrong API key.
"""

from __future__ import annotations

import contextlib
import functools
import re
import secrets
import shutil
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

from seq2seq.decoding.glossary import Glossary
from seq2seq.serving.http_api import (
  Limits,
  RequestError,
  TranslateRequest,
  check_texts,
  media_type,
  parse_glossary,
  read_json,
)
from seq2seq.serving.models import direct_model

# English names of the languages LibreTranslate offers (ISO 639-1); a code not here is its
# own name.
LANGUAGE_NAMES = {
    "ar": "Arabic", "az": "Azerbaijani", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan",
    "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "eo": "Esperanto", "es": "Spanish", "et": "Estonian", "fa": "Persian", "fi": "Finnish",
    "fr": "French", "ga": "Irish", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian",
    "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "lt": "Lithuanian", "lv": "Latvian", "ms": "Malay", "nb": "Norwegian Bokmål",
    "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian",
    "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sv": "Swedish", "th": "Thai",
    "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese",
    "zh": "Chinese",
}
FORMATS = ("text", "html")


def language_name(code: str) -> str:
  return LANGUAGE_NAMES.get(code, code)


def languages(models) -> list[dict[str, Any]]:
  """/languages: each language with the targets it translates to (`models.Models`),
  those through the pivot language included and, where there are some, also listed as
  `pivots` (our field: LibreTranslate has none)."""
  out = []
  for code in models.languages():
    direct, pivoted = models.targets(code)
    out.append({"code": code, "name": language_name(code), "targets": direct + pivoted})
    if pivoted:
      out[-1]["pivots"] = pivoted
  return out


# The file extensions /translate_file takes (seq2seq.documents.FORMATS, less .text).
FILE_FORMATS = (".txt", ".md", ".html", ".htm", ".srt", ".vtt", ".docx", ".odt", ".odp",
                ".pptx", ".epub")


def frontend_settings(source: str, target: str, limits: Limits, keys: bool,
                      required: bool = False) -> dict:
  return {"apiKeys": keys, "keyRequired": required, "charLimit": limits.max_chars,
          "frontendTimeout": int(limits.timeout_s * 1000), "suggestions": False,
          "filesTranslation": True, "supportedFilesFormat": list(FILE_FORMATS),
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


def check_key(params: dict, keys: frozenset[str] | None, required: bool = False) -> None:
  """LibreTranslate's rule: with keys, a key given must be one of them (403); none given
  is served unless keys are `required` (400, as LibreTranslate asks for one)."""
  key = params.get("api_key")
  if keys is None:
    return
  if key in (None, ""):
    if required:
      raise RequestError(400, "Please contact the server operator to get an API key")
    return
  if not (isinstance(key, str) and key in keys):
    raise RequestError(403, "Invalid API key")


# LibreTranslate's codes that name another one (its languages' aliases), lower-cased.
ALIASES = {"zh": "zh-hans", "zt": "zh-hant", "pb": "pt-br", "nb": "no"}


def same_language(given: Any, code: str) -> bool:
  """Whether a request's language code names `code`: compared as LibreTranslate does,
  case-insensitively and through its aliases."""
  if not isinstance(given, str):
    return False
  norm = lambda c: ALIASES.get(c.strip().lower(), c.strip().lower())  # noqa: E731
  return norm(given) == norm(code)


def parse(params: dict, limits: Limits) -> tuple[list[str], bool, str, int]:
  """(texts, whether q was one string, format, alternatives) of a /translate request;
  its languages are the server's to route (`http_server.Server.route`)."""
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
  if fmt not in FORMATS:
    raise RequestError(400, f"Invalid request: format {fmt!r}; expected text or html")
  alternatives = params.get("alternatives") or 0
  if isinstance(alternatives, str) and alternatives.strip().isdigit():
    alternatives = int(alternatives)
  if isinstance(alternatives, bool) or not isinstance(alternatives, int):
    raise RequestError(400, "Invalid request: alternatives must be an integer")
  if not 0 <= alternatives <= limits.max_beam - 1:
    raise RequestError(400, f"Invalid request: alternatives must be 0 to {limits.max_beam - 1}")
  return texts, single, fmt, alternatives


def answer(translations: list[str], single: bool, detected: list[dict] | None,
           alternatives: list[list[str]] | None = None, routes: list | None = None
           ) -> dict[str, Any]:
  """LibreTranslate's answer; `detected`: each text's {"language", "confidence"} where the
  source was "auto"; `routes`: each text's route, named in `route` (our field) where one
  went through a pivot."""
  out: dict[str, Any] = {"translatedText": translations[0] if single else translations}
  if alternatives is not None:  # each different from the translation and from the others
    alternatives = [list(dict.fromkeys(a for a in found if a != best))
                    for found, best in zip(alternatives, translations)]
    out["alternatives"] = alternatives[0] if single else alternatives
  if detected is not None:
    out["detectedLanguage"] = detected[0] if single else detected
  if routes is not None and any(len(r) > 1 for r in routes):
    names = ["→".join([r[0].source] + [h.target for h in r]) for r in routes]
    out["route"] = names[0] if single else names
  return out


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
  """LibreTranslate's routes over the server's state (`http_server.Server`: its engine,
  batcher, limits, keys and glossary)."""

  def __init__(self, server):
    self.server = server
    self.files = TranslatedFiles(server.limits.file_ttl_s)

  @property
  def pair(self) -> tuple[str, str]:
    return self.server.engine.directions[0]

  def check_key(self, params: dict) -> None:
    check_key(params, self.server.api_keys, self.server.require_key)

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
    (`Server.route`: "auto" detects each text's language; a pair no model has goes
    through the pivot)."""
    server = self.server
    self.check_key(params)
    texts, single, fmt, alternatives = parse(params, server.limits)
    routes, found = server.route(params["source"], params["target"], texts)
    detected = None if found is None else [{"language": code, "confidence": confidence}
                                           for code, confidence in found]
    direct = direct_model(routes) is not None
    model = routes[0][-1].model  # the last hop's: its search settings are the request's
    if fmt == "html":  # whole sentences, tags carried onto their words (no alternatives,
      # as LibreTranslate); one document at a time on a decoding thread
      if not direct:
        raise RequestError(400, "Invalid request: format html goes with one model's "
                                "direction, not through a pivot")
      from seq2seq.documents.blocks import BlockTranslator
      from seq2seq.documents.html import translate_html
      server.check_texts(texts, None, model.engine)
      defaults = model.engine.defaults.changed(batch_size=server.limits.max_batch)
      translate = BlockTranslator(model.engine, defaults, progress=False)
      out = [await model.batcher.run_alone(functools.partial(translate_html, t, translate))
             for t in texts]
      return answer(out, single, detected, None, routes)
    nbest = alternatives + 1 if alternatives else 0
    glossary = server.glossary if direct else None
    if params.get("glossary") not in (None, ""):  # ours, beside LibreTranslate's fields
      if not direct:
        raise RequestError(400, "Invalid request: a glossary goes with one model's direction, "
                                "not through a pivot")
      glossary = (server.glossary or Glossary(())).merged(
          parse_glossary(params["glossary"], server.limits, model.engine.limits.glossary,
                         status=400))
    settings = model.engine.defaults.changed(
        beam_size=max(model.engine.defaults.beam_size, nbest), nbest=nbest)
    if glossary is not None:
      settings = settings.changed(glossary=glossary)
    if not texts:
      out = []
    elif direct:
      server.check_texts(texts, None, model.engine)
      out = await model.batcher.submit(TranslateRequest(texts, False, settings))
    else:
      out = await server.translate_routed(texts, routes, settings)
    others = None
    if nbest:
      others = [[a["text"] for a in found[1:]] for found in out]
      out = [found[0]["text"] if found else "" for found in out]
    return answer(out, single, detected, others, routes)

  async def translate_file(self, request) -> dict[str, Any]:
    """POST /translate_file: a multipart form with `file`, `source`, `target` (and
    `api_key`); the translation is kept for `limits.file_ttl_s` seconds at the URL
    answered."""
    server = self.server
    server.check_ready()
    content_type = request.headers.get("content-type")
    if media_type(content_type) != "multipart/form-data":
      raise RequestError(400, "Invalid request: send the file as multipart/form-data")
    request._body = await server.read_body(request)  # size-checked; form() reads it
    try:
      form = await request.form(max_files=1, max_fields=16)
    except Exception as e:  # noqa: BLE001 - the multipart parser's errors have no common class
      raise RequestError(400, f"Invalid request: the form cannot be read ({e})") from None
    upload = form.get("file")
    params = {k: v for k, v in form.items() if isinstance(v, str)}
    self.check_key(params)
    parse({**params, "q": "-"}, server.limits)  # languages given
    source = params["source"]  # a document's language: "auto" is the first model's source
    if same_language(source, "auto"):
      source = server.engine.directions[0][0]
    hops = server.models.route(source.strip().lower(), params["target"].strip().lower())
    if len(hops) > 1:
      raise RequestError(400, "Invalid request: documents go with one model's direction, "
                              "not through a pivot")
    model = hops[0].model
    if upload is None or isinstance(upload, str) or not upload.filename:
      raise RequestError(400, "Invalid request: missing file parameter")
    name = Path(upload.filename).name
    suffix = Path(name).suffix.lower()
    if suffix not in FILE_FORMATS:
      from seq2seq.documents import CONVERT
      advice = f" ({CONVERT[suffix]})" if suffix in CONVERT else ""
      raise RequestError(400, f"Invalid request: {name}: {suffix or 'no extension'} files "
                         f"are not supported{advice} (supported: {', '.join(FILE_FORMATS)})")
    data = await upload.read()
    from seq2seq.documents import format_of, translate_bytes
    settings = model.engine.defaults.changed(batch_size=server.limits.max_batch)
    try:
      out = await model.batcher.run_alone(functools.partial(
          translate_bytes, model.engine, data, format_of(name), settings, False))
    except ValueError as e:
      raise RequestError(400, f"Invalid request: {name}: {e}") from None
    return {"translatedFileUrl": str(request.url_for("download_file",
                                                     filename=self.files.put(name, out)))}

  async def languages(self, params: dict) -> list:
    return languages(self.server.models)

  async def detect(self, params: dict) -> list:
    """/detect: the served source languages, most likely first, with confidences 0-100."""
    q = params.get("q")
    if not q or not isinstance(q, str):
      raise RequestError(400, "Invalid request: missing q parameter")
    return [{"language": code, "confidence": confidence}
            for code, confidence in self.server.detector.rank(q)]

  async def frontend_settings(self, params: dict) -> dict:
    return frontend_settings(*self.pair, self.server.limits, self.server.api_keys is not None,
                             self.server.require_key)

  def endpoint(self, answer_of):
    """A GET (or POST) route answering `answer_of(params)` once the engine is ready."""
    async def endpoint(request):
      from starlette.responses import JSONResponse
      try:
        self.server.check_ready()
        params = {}
        if request.method == "POST":
          params = await self.params(request, await self.server.read_body(request))
          self.check_key(params)
        return JSONResponse(await answer_of(params))
      except RequestError as e:
        return JSONResponse({"error": str(e)}, status_code=e.status, headers=e.headers)
    return endpoint

  async def file_endpoint(self, request):
    from starlette.responses import JSONResponse
    answer, status, headers = await self.server.answered(self.translate_file, request)
    return JSONResponse(answer, status_code=status, headers=headers)

  async def download_file(self, request):
    from starlette.responses import FileResponse, JSONResponse
    path = self.files.get(request.path_params["filename"])
    if path is None:
      return JSONResponse({"error": "no such file: translated files are kept for "
                                    f"{self.server.limits.file_ttl_s:g} seconds"},
                          status_code=404)
    return FileResponse(path, filename=path.name.split(".", 1)[1])

  def routes(self) -> list:
    from starlette.routing import Route
    return [Route("/languages", self.endpoint(self.languages), methods=["GET", "POST"]),
            Route("/detect", self.endpoint(self.detect), methods=["POST"]),
            Route("/frontend/settings", self.endpoint(self.frontend_settings),
                  methods=["GET"]),
            Route("/translate_file", self.file_endpoint, methods=["POST"]),
            Route("/download_file/{filename}", self.download_file, methods=["GET"],
                  name="download_file")]
