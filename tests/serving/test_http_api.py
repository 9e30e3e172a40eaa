"""The server's request bodies (seq2seq/serving/http_api.py), read and checked without a
server: JSON and its errors, the fields of /translate with their limits and defaults, and
the OpenAPI document describing them."""

import json

import pytest

from seq2seq.decoding.engine import EngineLimits
from seq2seq.decoding.engine_io import SearchSettings
from seq2seq.serving.http_api import (
  Limits,
  RequestError,
  check_defaults,
  media_type,
  openapi,
  parse_request,
  read_json,
)

LIMITS = Limits(max_texts=3, max_chars=20, max_beam=4)
DEFAULTS = SearchSettings(beam_size=2, alpha=0.6)
JAX = EngineLimits(100, 100, glossary=True, attention=True)
CT2 = EngineLimits(100, 100)


def refused(body, status, words):
  with pytest.raises(RequestError) as e:
    parse_request(body, LIMITS, DEFAULTS, JAX)
  assert e.value.status == status and words in str(e.value), str(e.value)


def test_media_type_drops_parameters_and_case():
  assert media_type("Application/JSON; charset=utf-8") == "application/json"
  assert media_type(None) == ""


@pytest.mark.parametrize("body, content_type, status, words", [
    (b'{"text": "a"}', "text/plain", 415, "send application/json"),
    (b"\xff{}", None, 400, "not valid UTF-8 (byte 0)"),
    (b'{"text": NaN}', None, 400, "NaN is not a JSON number"),
    (b"[" * 100_000, None, 400, "nested too deeply"),
    (b'{"text": ', None, 400, "not valid JSON"),
])
def test_a_body_that_is_not_json_says_why(body, content_type, status, words):
  with pytest.raises(RequestError) as e:
    read_json(body, content_type)
  assert e.value.status == status and words in str(e.value)


def test_json_with_parameters_in_its_content_type_is_read():
  assert read_json(b'{"text": "a"}', "application/json; charset=utf-8") == {"text": "a"}


def test_a_request_takes_the_run_s_defaults_and_its_own_settings():
  got = parse_request({"text": "A dog."}, LIMITS, DEFAULTS, JAX)
  assert got.texts == ["A dog."] and got.single
  assert got.settings == SearchSettings(beam_size=2, alpha=0.6) and got.prefixes is None
  got = parse_request({"texts": ["a", "b"], "beam_size": 4, "alpha": 1, "nbest": 2,
                       "prefixes": ["x", ""]}, LIMITS, DEFAULTS, JAX)
  assert got.settings == SearchSettings(4, 1.0, 2) and got.prefixes == ["x", ""]
  assert got.batch_key == (got.settings, True)


@pytest.mark.parametrize("body, status, words", [
    ([], 400, "a JSON object"),
    ({"text": "a", "colour": 1}, 422, 'unknown field(s) "colour"'),
    ({"text": "a", "texts": ["b"]}, 422, "exactly one of"),
    ({"text": 3}, 422, '"text" must be a string'),
    ({"texts": []}, 422, '"texts" is empty'),
    ({"texts": ["a"] * 4}, 413, "4 texts in one request; at most 3"),
    ({"text": "x" * 21}, 413, "20"),
    ({"text": "a", "beam_size": 5}, 422, "beam_size"),
    ({"text": "a", "beam_size": True}, 422, "beam_size"),
    ({"text": "a", "nbest": 3}, 422, "nbest"),
    ({"texts": ["a"], "prefix": "x"}, 422, 'use "prefix" with "text"'),
    ({"texts": ["a", "b"], "prefixes": ["x"]}, 422, "1 prefixes for 2 texts"),
    ({"text": "a", "attention": "yes"}, 422, "attention must be true or false"),
    ({"texts": ["a"], "attention": True}, 422, "attention needs"),
    ({"text": "a", "sampling": {"temperature": 1, "colour": 2}}, 422, "unknown sampling"),
    ({"text": "a", "sampling": 1}, 422, "sampling must be an object"),
])
def test_a_bad_request_gets_its_status_and_names_the_field(body, status, words):
  refused(body, status, words)


def test_sampling_allows_an_n_best_up_to_the_beam_limit():
  got = parse_request({"text": "a", "sampling": {"seed": 3}, "nbest": 4}, LIMITS, DEFAULTS, JAX)
  assert got.settings.sampling.seed == 3 and got.settings.nbest == 4


def test_the_server_s_own_defaults_must_be_within_its_limits():
  check_defaults(2, 0.6, LIMITS, "--beam", "--alpha")
  with pytest.raises(ValueError, match="--beam is 8, beyond --max-beam 4"):
    check_defaults(8, 0.6, LIMITS, "--beam", "--alpha")
  with pytest.raises(ValueError, match="--alpha is nan"):
    check_defaults(2, float("nan"), LIMITS, "--beam", "--alpha")


def test_openapi_describes_the_translate_body_with_the_limits():
  doc = openapi(LIMITS, "jax", "0.0", {"source": "en", "target": "de"})
  assert doc["openapi"].startswith("3.")
  text = json.dumps(doc)
  for route in ("/translate", "/languages", "/health", "/translate_file"):
    assert route in doc["paths"], route
  body = doc["paths"]["/translate"]["post"]["requestBody"]["content"]["application/json"]
  fields = body["schema"]["properties"]
  assert fields["texts"]["maxItems"] == 3 and fields["beam_size"]["maximum"] == 4
  assert fields["sampling"]["additionalProperties"] is False and "Translation from en" in text


def test_a_glossary_field_becomes_the_request_s_glossary_or_a_4xx():
  got = parse_request({"text": "A dog.", "glossary": {"dog": "Hund|Hunde"}}, LIMITS, DEFAULTS, JAX)
  assert [(t.source, t.targets) for t in got.settings.glossary.terms] == [("dog", ("Hund", "Hunde"))]
  refused({"text": "a", "glossary": {"dog": "Hund"}, "prefix": "Ein"}, 422,
          "goes with beam search")
  with pytest.raises(RequestError) as e:
    parse_request({"text": "A dog.", "glossary": {"dog": "Hund"}}, LIMITS, DEFAULTS, CT2)
  assert e.value.status == 422 and "needs the JAX engine" in str(e.value)


def test_a_form_s_glossary_is_json_text():
  from seq2seq.serving.http_api import parse_glossary
  assert parse_glossary('{"dog": "Hund"}', LIMITS, True).terms[0].targets == ("Hund",)
  with pytest.raises(RequestError, match="a JSON object"):
    parse_glossary("dog=Hund", LIMITS, True, status=400)
