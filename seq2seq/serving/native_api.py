"""The native API of seq2seq-serve: POST /translate's JSON, read into the service's
terms and its answer written back.

    {"text": "..."} -> {"translation": "..."}
    {"texts": [...]} -> {"translations": [...]}; optional beam_size, alpha, nbest,
    sampling {temperature, top_k, top_p, seed}, prefix / prefixes, attention, glossary,
    source (or "auto"), target / tgt_lang (`FIELDS`)

A bad body is a 4xx naming the field (422 for a value, 413 for too much, 400 for what is
not a request); the key is the Authorization header's Bearer token (`http_api.ApiKeys`).
`NativeAPI` is the adapter: it parses, calls the `TranslationService`, renders.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from seq2seq.decoding.engine import EngineLimits
from seq2seq.decoding.engine_io import Sampling, SearchSettings
from seq2seq.serving.http_api import (
  GLOSSARY_HELP,
  GLOSSARY_SCHEMA,
  MAX_ALPHA,
  ApiKeys,
  Limits,
  RequestError,
  check_texts,
  parse_glossary,
  show,
)
from seq2seq.serving.service import OneDirectionOnly, Translation, TranslationService

# What the page at / (static/index.html) asks for first: its beam and alternatives, the
# searches the server compiles before it says ready (`TranslationService.warm_up`).
PAGE = {"beam_size": 5, "nbest": 3}


@dataclasses.dataclass(frozen=True)
class TranslateRequest:
  """A native /translate body, read and checked."""

  texts: list[str]
  single: bool  # "text" was sent (answer "translation"), not "texts"
  settings: SearchSettings
  prefixes: list[str] | None = None
  attention: bool = False


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


def _integer(body: dict, name: str, low: int, high: int, default: int) -> int:
  value = body.get(name, default)
  if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
    raise RequestError(422, f"{name} must be an integer from {low} to {high}, got "
                            f"{show(value)}")
  return value


def _number(body: dict, name: str, low: float, high: float, default: float,
            open_low: bool = False) -> float:
  value = body.get(name, default)
  if (isinstance(value, bool) or not isinstance(value, (int, float))
      or not math.isfinite(value) or not (low < value if open_low else low <= value)
      or value > high):
    raise RequestError(422, f"{name} must be a number from {low} to {high}"
                            f"{' (excluded)' if open_low else ''}, got {show(value)}")
  return float(value)


def parse_request(body: Any, limits: Limits, defaults: SearchSettings,
                  engine: EngineLimits) -> TranslateRequest:
  """A /translate body checked against the server's limits and what the engine takes,
  with the engine's search defaults: the request's one `SearchSettings`."""
  if not isinstance(body, dict):
    raise RequestError(400, "the body must be a JSON object")
  body = {k: v for k, v in body.items() if k not in ROUTING}
  unknown = sorted(set(body) - set(FIELDS))
  if unknown:
    raise RequestError(422, f"unknown field(s) {', '.join(map(show, unknown))}; known: "
                            f"{', '.join(FIELDS)}")
  if ("text" in body) == ("texts" in body):
    raise RequestError(422, 'give exactly one of "text" (a string) or "texts" (a list)')
  single = "text" in body
  if single and not isinstance(body["text"], str):
    raise RequestError(422, '"text" must be a string')
  texts = check_texts([body["text"]] if single else body["texts"], "text" if single else "texts",
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
    prefixes = check_texts([body[name]] if single else body[name], name, limits)
    if len(prefixes) != len(texts):
      raise RequestError(422, f"{len(prefixes)} prefixes for {len(texts)} texts")
  attention = body.get("attention", False)
  if not isinstance(attention, bool):
    raise RequestError(422, f"attention must be true or false, got {show(attention)}")
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
    raise RequestError(422, f"unknown sampling field(s) {', '.join(map(show, unknown))}")
  return Sampling(temperature=_number(value, "temperature", 0, 10, 1.0),
                  top_k=_integer(value, "top_k", 0, 1_000_000, 0),
                  top_p=_number(value, "top_p", 0, 1, 1.0, open_low=True),
                  seed=_integer(value, "seed", 0, 2**31 - 1, 0))


class NativeAPI:
  """The native dialect over a `TranslationService`: parse, call, render."""

  def __init__(self, service: TranslationService, limits: Limits, keys: ApiKeys):
    self.service, self.limits, self.keys = service, limits, keys

  async def translate(self, body: Any, authorization: str) -> dict[str, Any]:
    """POST /translate's answer to a JSON `body` (any value: it is checked here)."""
    self.keys.check(authorization.removeprefix("Bearer ").strip())
    fields = body if isinstance(body, dict) else {}
    if fields.get("target") and fields.get("tgt_lang"):
      raise RequestError(422, "give target or tgt_lang, not both")
    source = target = None
    if any(fields.get(k) for k in ROUTING):  # else the first model's direction
      source, target = fields.get("source"), fields.get("target") or fields.get("tgt_lang")
    texts = fields.get("texts", [fields.get("text")])
    routing = self.service.routing(source, target, texts if isinstance(texts, list) else [texts])
    engine = routing.engine
    req = parse_request(body, self.limits, engine.defaults, engine.limits)
    try:
      if req.attention:
        found = await self.service.attention(req.texts[0], routing, req.settings.beam_size)
        return {"translation": found.translation, "attention": {
            "source": found.source, "target": found.target,
            "weights": found.weights.round(4).tolist()}}
      return render(req, await self.service.translate(req.texts, routing, req.settings,
                                                      req.prefixes))
    except OneDirectionOnly:
      raise RequestError(422, "prefixes, attention and glossaries go with one model's "
                              "direction, not through a pivot or several models") from None


def render(req: TranslateRequest, found: Translation) -> dict[str, Any]:
  """The native answer: translation(s), and with nbest each text's alternatives as
  {"text", "score"}, best first."""
  if found.alternatives is None:
    return ({"translation": found.translations[0]} if req.single
            else {"translations": found.translations})
  alternatives = [[{"text": h.text, "score": round(float(h.score), 4)} for h in hyps]
                  for hyps in found.alternatives]
  return ({"translation": found.translations[0], "alternatives": alternatives[0]}
          if req.single else {"translations": found.translations, "alternatives": alternatives})


def page_settings(defaults: SearchSettings) -> SearchSettings:
  """The search settings of the page's first request (`PAGE`), as `parse_request` makes
  them."""
  return defaults.changed(**PAGE)
