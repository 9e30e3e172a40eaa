"""What both HTTP APIs of seq2seq-serve share: the server's limits, the API keys, a
request body read as JSON, and the checks of the values both take (texts, a glossary).
Every problem with a request is a `RequestError` with a 4xx status and a message that
names the field; nothing a client sends reaches the engine unchecked. Each dialect's own
fields are its module's (`native_api.py`, `libretranslate.py`)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

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


@dataclasses.dataclass(frozen=True)
class ApiKeys:
  """`seq2seq-serve --api-keys`: None keys, open; else LibreTranslate's rule for both APIs
  (its `api_key`, the native API's Bearer token): a key given must be one of them (403),
  none given is served unless `required` (400, as LibreTranslate asks for one)."""

  keys: frozenset[str] | None = None
  required: bool = False

  def check(self, key: Any) -> None:
    if self.keys is None:
      return
    if key in (None, ""):
      if self.required:
        raise RequestError(400, "Please contact the server operator to get an API key")
      return
    if not (isinstance(key, str) and key in self.keys):
      raise RequestError(403, "Invalid API key")


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
      raise RequestError(status, f"glossary term {show(source)}: the target must be a "
                                 f"string, got {show(target)}")
    if len(source) > limits.max_chars or len(target) > limits.max_chars:
      raise RequestError(413, f"glossary term {show(source[:40])}: longer than "
                              f"{limits.max_chars} characters")
    if target.count("|") >= MAX_ALTERNATIVES:
      raise RequestError(413, f"glossary term {show(source[:40])}: more than "
                              f"{MAX_ALTERNATIVES} alternatives")
  try:
    return Glossary.of(value)
  except GlossaryError as e:
    raise RequestError(status, f"glossary: {e}") from None


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


def show(value: Any) -> str:
  text = json.dumps(value) if not isinstance(value, float) else repr(value)
  return text if len(text) <= 40 else text[:37] + "..."


def check_texts(value: Any, name: str, limits: Limits, statuses: tuple[int, int] = (422, 413)
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



