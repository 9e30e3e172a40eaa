"""What both APIs share (seq2seq/serving/http_api.py), without a server: JSON and its
errors, the server's defaults against its limits, a glossary field, the API keys."""

import pytest

from seq2seq.serving.http_api import (
  ApiKeys,
  Limits,
  RequestError,
  check_defaults,
  media_type,
  parse_glossary,
  read_json,
)

LIMITS = Limits(max_texts=3, max_chars=20, max_beam=4)


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


def test_the_server_s_own_defaults_must_be_within_its_limits():
  check_defaults(2, 0.6, LIMITS, "--beam", "--alpha")
  with pytest.raises(ValueError, match="--beam is 8, beyond --max-beam 4"):
    check_defaults(8, 0.6, LIMITS, "--beam", "--alpha")
  with pytest.raises(ValueError, match="--alpha is nan"):
    check_defaults(2, float("nan"), LIMITS, "--beam", "--alpha")


def test_a_form_s_glossary_is_json_text():
  assert parse_glossary('{"dog": "Hund"}', LIMITS, True).terms[0].targets == ("Hund",)
  with pytest.raises(RequestError, match="a JSON object"):
    parse_glossary("dog=Hund", LIMITS, True, status=400)


def test_api_keys_follow_libretranslate_s_rule():
  ApiKeys().check("anything")  # open
  keys = ApiKeys(frozenset({"k-1"}))
  keys.check("k-1")
  keys.check(None)  # a key is optional unless required
  for wrong in ("k-2", [], {"a": 1}):
    with pytest.raises(RequestError) as e:
      keys.check(wrong)
    assert e.value.status == 403 and str(e.value) == "Invalid API key"
  with pytest.raises(RequestError) as e:
    ApiKeys(frozenset({"k-1"}), required=True).check("")
  assert e.value.status == 400 and "get an API key" in str(e.value)
