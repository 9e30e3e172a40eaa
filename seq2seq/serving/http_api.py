"""The HTTP API of seq2seq-serve: limits, request bodies read and checked, the OpenAPI
schema. Every problem with a request is a `RequestError` with a 4xx status and a message
that names the field; nothing a client sends reaches the engine unchecked."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from seq2seq.decoding.engine import EngineLimits
from seq2seq.decoding.engine_io import Sampling, SearchSettings
from seq2seq.decoding.glossary import Glossary, GlossaryError

MAX_ALPHA = 10.0  # the largest length penalty exponent a request (or a default) may set


def check_defaults(beam_size: int, alpha: float, limits: "Limits", beam_from: str,
                   alpha_from: str) -> None:
  """Raises ValueError naming the flag or config field (`beam_from`, `alpha_from`) whose
  default a request could not set itself: every request without it would be refused, or
  LibreTranslate's, which takes the defaults, would run it unchecked."""
  if not 1 <= beam_size <= limits.max_beam:
    raise ValueError(f"{beam_from} is {beam_size}, beyond --max-beam {limits.max_beam}: "
                     "raise --max-beam or lower the default beam")
  if not (math.isfinite(alpha) and 0 <= alpha <= MAX_ALPHA):
    raise ValueError(f"{alpha_from} is {alpha}, outside 0 to {MAX_ALPHA:g}")


def _limit(default, unit: str):
  return dataclasses.field(default=default, metadata={"help": unit})


@dataclasses.dataclass(frozen=True)
class Limits:
  """What one server accepts; each field's help names its unit (seq2seq-serve --help)."""

  max_texts: int = _limit(64, "texts in one request")
  max_chars: int = _limit(2000, "characters in one text")
  max_beam: int = _limit(16, "beam size (and n-best) of a request")
  max_batch: int = _limit(64, "texts decoded together in one batch")
  max_wait_ms: float = _limit(5.0, "milliseconds a batch waits for company while the "
                              "decoders are busy, or while texts keep arriving after "
                              "batches of several")
  max_queue: int = _limit(1024, "texts waiting; past it, 429 with Retry-After")
  max_body: int = _limit(1_000_000, "bytes of a request body")
  timeout_s: float = _limit(60.0, "seconds after which an unanswered request gets 503")
  file_ttl_s: float = _limit(600.0, "seconds a translated file (/translate_file) stays to "
                             "be downloaded")
  max_connections: int = _limit(4096, "open connections (keep it above --max-queue, so "
                                "that an overload meets the queue's 429 first); past it, "
                                "503")
  read_timeout_s: float = _limit(10.0, "seconds a client may take to send a request body; "
                                 "past it, 408")


class RequestError(ValueError):
  def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
    super().__init__(message)
    self.status, self.headers = status, headers or {}


@dataclasses.dataclass
class TranslateRequest:
  texts: list[str]
  single: bool  # "text" was sent (answer "translation"), not "texts"
  settings: SearchSettings
  prefixes: list[str] | None = None
  attention: bool = False

  @property
  def batch_key(self) -> tuple[SearchSettings, bool]:
    """Requests of equal keys decode together: equal settings, prefixed or not."""
    return self.settings, self.prefixes is not None


GLOSSARY_SCHEMA = {"type": "object", "additionalProperties": {"type": "string"},
                   "maxProperties": 64}
GLOSSARY_HELP = ("terms the translation must use, {source term: target term} (alternatives "
                 "with |); in a text holding a source term (whole words, any case), the "
                 "target takes the place of the model's own word for it; added to the "
                 "server's --glossary, replacing its terms of the same source")
MAX_TERMS = 64  # and MAX_ALTERNATIVES each: the variants a sentence's scores choose among
MAX_ALTERNATIVES = 8


def parse_glossary(value: Any, limits: Limits, supported: bool, status: int = 422
                   ) -> Glossary:
  """A request's glossary field as a Glossary, or the RequestError naming what is wrong
  (`supported`: whether the engine can place terms)."""
  if not supported:
    raise RequestError(status, "a glossary needs the JAX engine (CTranslate2 gives no "
                               "attention to place terms by)")
  if isinstance(value, str):  # a form field: the object as JSON text
    try:
      value = json.loads(value)
    except ValueError:
      raise RequestError(status, "glossary must be a JSON object {source: target}") from None
  if not isinstance(value, dict):
    raise RequestError(status, "glossary must be an object {source term: target term}")
  if len(value) > MAX_TERMS:
    raise RequestError(413, f"{len(value)} glossary terms; at most {MAX_TERMS}")
  for source, target in value.items():
    if not isinstance(target, str):
      raise RequestError(status, f"glossary term {_show(source)}: the target must be a "
                                 f"string, got {_show(target)}")
    if len(source) > limits.max_chars or len(target) > limits.max_chars:
      raise RequestError(413, f"glossary term {_show(source[:40])}: longer than "
                              f"{limits.max_chars} characters")
    if target.count("|") >= MAX_ALTERNATIVES:
      raise RequestError(413, f"glossary term {_show(source[:40])}: more than "
                              f"{MAX_ALTERNATIVES} alternatives")
  try:
    return Glossary.of(value)
  except GlossaryError as e:
    raise RequestError(status, f"glossary: {e}") from None


# name: (JSON schema, description). The OpenAPI schema and the check of unknown fields
# are both made from this table.
FIELDS: dict[str, tuple[dict, str]] = {
    "text": ({"type": "string"}, "one text to translate (answer: translation)"),
    "texts": ({"type": "array", "items": {"type": "string"}},
              "several texts (answer: translations, in order)"),
    "beam_size": ({"type": "integer", "minimum": 1}, "beam size; 1 = greedy search"),
    "alpha": ({"type": "number", "minimum": 0, "maximum": 10},
              "length penalty exponent of beam search"),
    "nbest": ({"type": "integer", "minimum": 0},
              "also return this many alternatives per text, best first, with scores "
              "(at most beam_size; with sampling, this many samples)"),
    "sampling": ({"type": "object", "properties": {
        "temperature": {"type": "number", "minimum": 0, "maximum": 10},
        "top_k": {"type": "integer", "minimum": 0},
        "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "seed": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}},
        "additionalProperties": False},
        "draw from the model instead of searching; the same seed gives the same answer"),
    "prefix": ({"type": "string"}, "with text: the translation starts with this"),
    "prefixes": ({"type": "array", "items": {"type": "string"}},
                 "with texts: a forced start for each text (\"\" for none)"),
    "attention": ({"type": "boolean"},
                  "with text, JAX engine: also return the cross-attention weights"),
    "glossary": (GLOSSARY_SCHEMA, GLOSSARY_HELP),
    "source": ({"type": "string"}, "the texts' language (a code, or \"auto\" to detect "
               "each text's); default: the first model's source"),
    "target": ({"type": "string"}, "the language to translate into; default: the first "
               "model's target"),
    "tgt_lang": ({"type": "string"}, "the same as target (the Python API's name)"),
}
ROUTING = ("source", "target", "tgt_lang")  # the route's fields, read by the server before the rest


def media_type(content_type: str | None) -> str:
  """A Content-Type header's media type, without parameters, lowercase ("" if none)."""
  return (content_type or "").split(";")[0].strip().lower()


def read_json(body: bytes, content_type: str | None) -> Any:
  """The JSON value of a request body, or a RequestError saying what is wrong with it."""
  if content_type and media_type(content_type) != "application/json":
    raise RequestError(415, f"Content-Type {content_type!r}: send application/json "
                            "(curl: -H 'Content-Type: application/json')")
  try:
    text = body.decode("utf-8")
  except UnicodeDecodeError as e:
    raise RequestError(400, f"the body is not valid UTF-8 (byte {e.start})") from None

  def no_constant(name):
    raise ValueError(f"{name} is not a JSON number")

  try:
    return json.loads(text, parse_constant=no_constant)
  except RecursionError:
    raise RequestError(400, "the body is nested too deeply") from None
  except ValueError as e:  # JSONDecodeError, over-long integers, NaN / Infinity
    raise RequestError(400, f"the body is not valid JSON: {e}") from None


def _integer(body: dict, name: str, low: int, high: int, default: int) -> int:
  value = body.get(name, default)
  if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
    raise RequestError(422, f"{name} must be an integer from {low} to {high}, got "
                            f"{_show(value)}")
  return value


def _number(body: dict, name: str, low: float, high: float, default: float,
            open_low: bool = False) -> float:
  value = body.get(name, default)
  if (isinstance(value, bool) or not isinstance(value, (int, float))
      or not math.isfinite(value) or not (low < value if open_low else low <= value)
      or value > high):
    raise RequestError(422, f"{name} must be a number from {low} to {high}"
                            f"{' (excluded)' if open_low else ''}, got {_show(value)}")
  return float(value)


def _show(value: Any) -> str:
  text = json.dumps(value) if not isinstance(value, float) else repr(value)
  return text if len(text) <= 40 else text[:37] + "..."


def _strings(value: Any, name: str, limits: Limits, statuses: tuple[int, int] = (422, 413)
             ) -> list[str]:
  """`value` checked as texts to translate (every API's): a list of strings, each within
  `max_chars` and valid Unicode (a lone surrogate would fail the batch it joined).
  `statuses`: of a wrong value and of a text too long (LibreTranslate's API: 400, 400)."""
  wrong, too_long = statuses
  if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
    raise RequestError(wrong, f'"{name}" must be a list of strings')
  for i, t in enumerate(value):
    if len(t) > limits.max_chars:
      raise RequestError(too_long, f"{name} {i} has {len(t)} characters; at most "
                                   f"{limits.max_chars}")
    try:
      t.encode("utf-8")
    except UnicodeEncodeError as e:
      raise RequestError(wrong, f"{name} {i} is not valid Unicode: a lone surrogate "
                                f"{t[e.start]!a} at character {e.start}") from None
  return value


check_texts = _strings  # the shared check, by its public name


def parse_request(body: Any, limits: Limits, defaults: SearchSettings,
                  engine: EngineLimits) -> TranslateRequest:
  """A /translate body checked against the server's limits and what the engine takes,
  with the engine's search defaults: the request's one `SearchSettings`."""
  if not isinstance(body, dict):
    raise RequestError(400, "the body must be a JSON object")
  body = {k: v for k, v in body.items() if k not in ROUTING}
  unknown = sorted(set(body) - set(FIELDS))
  if unknown:
    raise RequestError(422, f"unknown field(s) {', '.join(map(_show, unknown))}; known: "
                            f"{', '.join(FIELDS)}")
  if ("text" in body) == ("texts" in body):
    raise RequestError(422, 'give exactly one of "text" (a string) or "texts" (a list)')
  single = "text" in body
  if single and not isinstance(body["text"], str):
    raise RequestError(422, '"text" must be a string')
  texts = _strings([body["text"]] if single else body["texts"], "text" if single else "texts",
                   limits)
  if not texts:
    raise RequestError(422, '"texts" is empty')
  if len(texts) > limits.max_texts:
    raise RequestError(413, f"{len(texts)} texts in one request; at most {limits.max_texts}")
  beam = _integer(body, "beam_size", 1, limits.max_beam, defaults.beam_size)
  alpha = _number(body, "alpha", 0, MAX_ALPHA, defaults.alpha)
  sampling = parse_sampling(body["sampling"]) if "sampling" in body else None
  most = limits.max_beam if sampling else beam
  nbest = _integer(body, "nbest", 0, most, 0)
  prefixes = None
  if "prefix" in body or "prefixes" in body:
    name = "prefix" if single else "prefixes"
    if name not in body:
      raise RequestError(422, 'use "prefix" with "text" and "prefixes" with "texts"')
    prefixes = _strings([body[name]] if single else body[name], name, limits)
    if len(prefixes) != len(texts):
      raise RequestError(422, f"{len(prefixes)} prefixes for {len(texts)} texts")
  attention = body.get("attention", False)
  if not isinstance(attention, bool):
    raise RequestError(422, f"attention must be true or false, got {_show(attention)}")
  if attention and (not single or not engine.attention or sampling or prefixes or nbest):
    raise RequestError(422, 'attention needs "text" (one), the JAX engine, and no '
                            "sampling, prefix or nbest")
  glossary = None
  if "glossary" in body:
    glossary = parse_glossary(body["glossary"], limits, engine.glossary)
    if sampling or prefixes is not None or attention:
      raise RequestError(422, "a glossary goes with beam search: it does not go with "
                              "sampling, prefixes or attention")
  try:
    settings = defaults.changed(beam_size=beam, alpha=alpha, nbest=nbest, sampling=sampling,
                                glossary=glossary)
  except ValueError as e:
    raise RequestError(422, str(e)) from None
  return TranslateRequest(texts, single, settings, prefixes, attention)


def parse_sampling(value: Any) -> Sampling:
  if not isinstance(value, dict):
    raise RequestError(422, "sampling must be an object: {temperature, top_k, top_p, seed}")
  unknown = sorted(set(value) - {"temperature", "top_k", "top_p", "seed"})
  if unknown:
    raise RequestError(422, f"unknown sampling field(s) {', '.join(map(_show, unknown))}")
  return Sampling(temperature=_number(value, "temperature", 0, 10, 1.0),
                  top_k=_integer(value, "top_k", 0, 1_000_000, 0),
                  top_p=_number(value, "top_p", 0, 1, 1.0, open_low=True),
                  seed=_integer(value, "seed", 0, 2**31 - 1, 0))


def openapi(limits: Limits, engine: str, version: str, languages: dict | None = None
            ) -> dict:
  """The OpenAPI 3.1 description of the server's API; `languages`: the model's
  {"source": CODE, "target": CODE} once it has loaded."""
  pair = f"from {languages['source']} to {languages['target']} " if languages else ""
  fields = {name: dict(schema, description=text) for name, (schema, text) in FIELDS.items()}
  fields["texts"]["maxItems"] = limits.max_texts
  fields["beam_size"]["maximum"] = limits.max_beam
  alternative = {"type": "object", "properties": {"text": {"type": "string"},
                                                   "score": {"type": "number"}}}
  error = {"description": "the problem, named", "content": {"application/json": {
      "schema": {"type": "object", "properties": {"error": {"type": "string"}}}}}}
  answer = {"type": "object", "properties": {
      "translation": {"type": "string"},
      "translations": {"type": "array", "items": {"type": "string"}},
      "alternatives": {"description": "with nbest: for text, a list; for texts, a list of "
                                      "lists", "type": "array",
                       "items": {"anyOf": [alternative, {"type": "array",
                                                         "items": alternative}]}},
      "attention": {"type": "object", "properties": {
          "source": {"type": "array", "items": {"type": "string"}},
          "target": {"type": "array", "items": {"type": "string"}},
          "weights": {"type": "array", "items": {"type": "array",
                                                 "items": {"type": "number"}}}}}}}
  json_answer = lambda schema, text: {"description": text, "content": {
      "application/json": {"schema": schema}}}
  lt_key = {"type": "object", "properties": {"api_key": {"type": "string"}}}
  lt_request = {"type": "object", "required": ["q", "source", "target"], "properties": {
      "q": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                           "maxItems": limits.max_texts}]},
      "source": {"type": "string"}, "target": {"type": "string"},
      "format": {"enum": ["text", "html"]}, "alternatives": {"type": "integer"},
      "api_key": {"type": "string"},
      "glossary": {**GLOSSARY_SCHEMA, "description": "this server's extension, not "
                   "LibreTranslate's: " + GLOSSARY_HELP + " (in a form, the object as JSON)"}}}
  lt_answer = {"type": "object", "required": ["translatedText"], "properties": {
      "translatedText": {"anyOf": [{"type": "string"},
                                   {"type": "array", "items": {"type": "string"}}]},
      "alternatives": {"type": "array"}, "detectedLanguage": {}}}
  lt_detect = {"type": "object", "required": ["q"], "properties": {
      "q": {"type": "string"}, "api_key": {"type": "string"}}}
  return {
      "openapi": "3.1.0",
      "info": {"title": "seq2seq-serve", "version": version,
               "description": f"Translation {pair}with a seq2seq model ({engine} engine)."},
      "paths": {
          "/translate": {"post": {
              "summary": "Translate one text or several (the native API); a body with `q` "
                         "is LibreTranslate's, as JSON or a form",
              "requestBody": {"required": True, "content": {
                  "application/json": {"schema": {
                      "type": "object", "properties": fields, "additionalProperties": False,
                      "oneOf": [{"required": ["text"]}, {"required": ["texts"]}]}},
                  "application/x-www-form-urlencoded": {"schema": lt_request}}},
              "responses": {
                  "200": json_answer({"anyOf": [answer, lt_answer]}, "the translations"),
                  **{str(code): error for code in (400, 403, 408, 413, 415, 422, 429, 503)}}}},
          "/languages": {method: {
              "summary": "LibreTranslate's: the languages the model translates between",
              **({"requestBody": {"content": {"application/json": {"schema": lt_key}}}}
                 if method == "post" else {}),
              "responses": {"200": json_answer({"type": "array", "items": {
                  "type": "object", "properties": {
                      "code": {"type": "string"}, "name": {"type": "string"},
                      "targets": {"type": "array", "items": {"type": "string"}}}}},
                  "the languages"), **{str(code): error for code in (400, 403, 408, 413, 503)}}}
              for method in ("get", "post")},
          "/detect": {"post": {
              "summary": "LibreTranslate's: the language of q (the model's source language)",
              "requestBody": {"required": True, "content": {
                  "application/json": {"schema": lt_detect},
                  "application/x-www-form-urlencoded": {"schema": lt_detect}}},
              "responses": {"200": json_answer({"type": "array", "items": {
                  "type": "object", "properties": {"language": {"type": "string"},
                                                   "confidence": {"type": "number"}}}},
                  "the language"), **{str(code): error for code in (400, 403, 408, 413, 503)}}}},
          "/frontend/settings": {"get": {
              "summary": "LibreTranslate's: what its web page needs to know",
              "responses": {"200": json_answer({"type": "object"}, "the settings"),
                            "503": error}}},
          "/health": {"get": {"summary": "Ready (200) once the model is loaded and compiled; "
                              "503 before", "responses": {
                                  "200": json_answer({"type": "object"}, "ready"),
                                  "503": json_answer({"type": "object"}, "starting")}}},
          "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
              "200": {"description": "text exposition format",
                      "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
          "/openapi.json": {"get": {"summary": "this document", "responses": {
              "200": json_answer({"type": "object"}, "OpenAPI 3.1")}}},
          "/": {"get": {"summary": "a page to try the model", "responses": {
              "200": {"description": "HTML", "content": {"text/html": {}}}}}},
          "/translate_file": {"post": {
              "summary": "Translate a document (LibreTranslate's API): .txt, .md, .html, "
                         ".htm, .srt, .vtt, .docx, .odt, .odp, .pptx or .epub",
              "requestBody": {"required": True, "content": {"multipart/form-data": {
                  "schema": {"type": "object", "required": ["file", "source", "target"],
                             "properties": {"file": {"type": "string", "format": "binary"},
                                            "source": {"type": "string"},
                                            "target": {"type": "string"},
                                            "api_key": {"type": "string"}}}}}},
              "responses": {
                  "200": json_answer({"type": "object", "properties": {
                      "translatedFileUrl": {"type": "string"}}}, "where to download it"),
                  **{str(code): error for code in (400, 403, 408, 413, 429, 503)}}}},
          "/download_file/{filename}": {"get": {
              "summary": f"A translated document, for {limits.file_ttl_s:g} seconds",
              "parameters": [{"name": "filename", "in": "path", "required": True,
                              "schema": {"type": "string"}}],
              "responses": {"200": {"description": "the file",
                                    "content": {"application/octet-stream": {}}},
                            "404": error}}},
      },
  }
