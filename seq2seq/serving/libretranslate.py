"""LibreTranslate's API, served beside the native one, so that the clients that speak it
(libretranslatepy, deep-translator, browser extensions, editors) can use a model trained
here.

    POST /translate    q (a string or a list), source (a code or "auto"), target,
                       format ("text" or "html"), api_key, alternatives
                       -> {"translatedText": ...} (a string or a list, as q was)
    GET  /languages    [{"code", "name", "targets"}] of the model's one pair
    POST /detect       q -> [{"language", "confidence"}]: the model's source language
    GET  /frontend/settings   what LibreTranslate's web clients read first

The parameters come as JSON, as a form (application/x-www-form-urlencoded) or in the
query string, as LibreTranslate takes them. A model translates one pair: another source or
target is LibreTranslate's 400 naming it, and "auto" is the model's source language (it
has only one). With `format: "html"` the markup is kept and each run of text between tags
is translated (script and style left as they are). Errors are LibreTranslate's shape,
`{"error": "..."}`: 400 for a bad request, 403 for a missing or wrong API key.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from seq2seq.serving.http_api import Limits, RequestError, check_texts, media_type, read_json

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


def languages(source: str, target: str) -> list[dict[str, Any]]:
  """/languages: each language with the targets it translates to."""
  return [{"code": source, "name": language_name(source), "targets": [target]},
          {"code": target, "name": language_name(target), "targets": []}]


# The file extensions /translate_file takes (seq2seq.documents.FORMATS, less .text).
FILE_FORMATS = (".txt", ".md", ".html", ".htm", ".srt", ".vtt", ".docx")


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


def parse(params: dict, source: str, target: str, limits: Limits
          ) -> tuple[list[str], bool, str, int]:
  """(texts, whether q was one string, format, alternatives) of a /translate request."""
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
    if not params.get(name):
      raise RequestError(400, f"Invalid request: missing {name} parameter")
  if not (same_language(params["source"], source) or same_language(params["source"], "auto")):
    raise RequestError(400, f"{params['source']} is not supported")
  if not same_language(params["target"], target):
    raise RequestError(400, f"{params['target']} is not supported")
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


def answer(translations: list[str], single: bool, params: dict, source: str,
           alternatives: list[list[str]] | None = None) -> dict[str, Any]:
  out: dict[str, Any] = {"translatedText": translations[0] if single else translations}
  if alternatives is not None:  # each different from the translation and from the others
    alternatives = [list(dict.fromkeys(a for a in found if a != best))
                    for found, best in zip(alternatives, translations)]
    out["alternatives"] = alternatives[0] if single else alternatives
  if same_language(params.get("source"), "auto"):
    detected = {"language": source, "confidence": 100.0}
    out["detectedLanguage"] = detected if single else [detected] * len(translations)
  return out
