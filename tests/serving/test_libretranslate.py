"""LibreTranslate's API on seq2seq-serve, driven by the real clients (libretranslatepy,
deep-translator) on the loopback; each must get what `Translator` gives."""

import json
import urllib.error
import urllib.request

import pytest
from bs4 import BeautifulSoup

from seq2seq import Translator

from helpers import SAMPLE
from serve_helpers import start_server, stop_server

SOURCES = (SAMPLE / "test.en").read_text().splitlines()[:6]
KEY = "k-123"


@pytest.fixture(scope="module")
def server(trained_run, tmp_path_factory):
  keys = tmp_path_factory.mktemp("keys") / "api_keys.txt"
  keys.write_text(f"# one key per line\n{KEY}\n")
  proc, url = start_server("--workdir", trained_run, "--api-keys", keys)
  yield url, Translator.load(trained_run)
  stop_server(proc)


def call(url, path, params=None, form=False, headers=None):
  """(status, JSON answer) of a LibreTranslate request as JSON or as a form."""
  if params is None:
    request = urllib.request.Request(url + path)
  elif form:
    request = urllib.request.Request(url + path, data=urllib.parse.urlencode(params).encode())
  else:
    request = urllib.request.Request(url + path, data=json.dumps(params).encode(),
                                     headers={"Content-Type": "application/json"})
  for name, value in (headers or {}).items():
    request.add_header(name, value)
  try:
    with urllib.request.urlopen(request, timeout=300) as r:
      return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read())


def test_libretranslatepy_translates_lists_languages_and_detects(server):
  from libretranslatepy import LibreTranslateAPI
  url, translator = server
  client = LibreTranslateAPI(url + "/", api_key=KEY)
  assert client.translate(SOURCES[0], "en", "de") == translator.translate(SOURCES[0])
  assert client.translate(SOURCES[1], "auto", "de") == translator.translate(SOURCES[1])
  assert client.languages() == [{"code": "en", "name": "English", "targets": ["de"]},
                                {"code": "de", "name": "German", "targets": []}]
  assert client.detect(SOURCES[0]) == [{"language": "en", "confidence": 100.0}]


def test_deep_translator_translates_one_text_and_a_batch(server):
  from deep_translator import LibreTranslator
  url, translator = server
  client = LibreTranslator(source="en", target="de", api_key=KEY, custom_url=url + "/")
  assert client.translate(SOURCES[2]) == translator.translate(SOURCES[2])
  assert client.translate_batch(SOURCES[:4]) == translator.translate(SOURCES[:4])


def test_a_list_alternatives_and_auto_as_libretranslate_answers_them(server):
  url, translator = server
  status, body = call(url, "/translate", {"q": SOURCES, "source": "auto", "target": "de",
                                          "api_key": KEY, "alternatives": 2})
  best = translator.translate(SOURCES, beam_size=max(3, translator.decode_cfg.beam_size),
                              nbest=3)
  assert status == 200
  assert body["translatedText"] == [h[0].text for h in best]
  # each alternative differs from the translation and from the others
  assert body["alternatives"] == [list(dict.fromkeys(h.text for h in hyps[1:]
                                                     if h.text != hyps[0].text))
                                  for hyps in best]
  assert body["detectedLanguage"] == [{"language": "en", "confidence": 100.0}] * len(SOURCES)


def test_html_keeps_the_markup_and_translates_whole_sentences(server):
  url, translator = server
  document = ('<p class="x">A dog runs &amp; jumps.</p>\n<p>A <b>young</b> man is riding a '
              '<a href="y">red bike</a>.</p><script>var a = \'A dog\';</script>')
  status, body = call(url, "/translate", {"q": document, "source": "en", "target": "de",
                                          "format": "html", "api_key": KEY}, form=True)
  assert status == 200
  out = BeautifulSoup(body["translatedText"], "html.parser")
  first, second = out.find_all("p")
  assert first["class"] == ["x"] and first.get_text() == translator.translate(
      "A dog runs & jumps.")
  # the sentence is translated whole: its text is the untagged sentence's translation
  assert second.get_text() == translator.translate("A young man is riding a red bike.")
  assert second.find("b") is not None and second.find("a")["href"] == "y"
  assert "<script>var a = 'A dog';</script>" in body["translatedText"]


@pytest.mark.parametrize("params, status, error", [
    ({"q": "A dog.", "source": "fr", "target": "de", "api_key": KEY}, 400, "fr is not supported"),
    ({"q": "A dog.", "source": "en", "target": "fr", "api_key": KEY}, 400, "fr is not supported"),
    ({"source": "en", "target": "de", "api_key": KEY, "q": ""}, 400, "missing q parameter"),
    ({"q": "A dog.", "source": "en", "target": "de", "format": "pdf", "api_key": KEY}, 400,
     "format"),
    ({"q": "A dog.", "source": "en", "target": "de", "api_key": "wrong"}, 403,
     "Invalid API key"),
    ({"q": "A dog.", "source": "EN", "target": "fr", "api_key": KEY}, 400, "fr is not"),
])
def test_libretranslate_errors_have_its_status_and_shape(server, params, status, error):
  url, _ = server
  got, body = call(url, "/translate", params)
  assert got == status and set(body) == {"error"} and error in body["error"]


def test_the_native_api_takes_the_key_as_a_bearer_token(server):
  url, translator = server
  assert call(url, "/translate", {"text": SOURCES[0]},
              headers={"Authorization": "Bearer wrong"})[0] == 403
  for headers in ({"Authorization": f"Bearer {KEY}"}, {}):  # a key is optional, as there
    status, body = call(url, "/translate", {"text": SOURCES[0]}, headers=headers)
    assert status == 200 and body == {"translation": translator.translate(SOURCES[0])}


def test_keys_are_optional_unless_required_as_in_libretranslate(server, trained_run,
                                                                 tmp_path):
  url, translator = server
  status, body = call(url, "/translate", {"q": SOURCES[0], "source": "En", "target": "DE"})
  assert status == 200 and body["translatedText"] == translator.translate(SOURCES[0])
  keys = tmp_path / "keys.txt"
  keys.write_text(f"{KEY}\n")
  proc, strict = start_server("--workdir", trained_run, "--api-keys", keys,
                              "--require-api-key")
  try:
    assert call(strict, "/translate", {"q": "A dog.", "source": "en", "target": "de"}) == (
        400, {"error": "Please contact the server operator to get an API key"})
    assert call(strict, "/translate", {"text": "A dog."})[0] == 400
    assert call(strict, "/translate", {"q": "A dog.", "source": "en", "target": "de",
                                       "api_key": KEY})[0] == 200
    assert call(strict, "/frontend/settings")[1]["keyRequired"] is True
  finally:
    stop_server(proc)


def test_a_page_of_another_origin_may_call_it_with_libretranslate_s_form(server):
  import requests
  url, translator = server
  preflight = requests.options(url + "/translate", timeout=60, headers={
      "Origin": "http://elsewhere.example", "Access-Control-Request-Method": "POST",
      "Access-Control-Request-Headers": "content-type"})
  assert preflight.status_code == 200
  assert preflight.headers["access-control-allow-origin"] in ("*", "http://elsewhere.example")
  # what LibreTranslate's web page sends: a FormData body (multipart)
  answer = requests.post(url + "/translate", timeout=120,
                         headers={"Origin": "http://elsewhere.example"},
                         files={k: (None, v) for k, v in {
                             "q": SOURCES[1], "source": "en", "target": "de",
                             "format": "text", "alternatives": "0", "api_key": KEY}.items()})
  assert answer.status_code == 200, answer.text
  assert answer.json()["translatedText"] == translator.translate(SOURCES[1])
  assert answer.headers["access-control-allow-origin"] in ("*", "http://elsewhere.example")


