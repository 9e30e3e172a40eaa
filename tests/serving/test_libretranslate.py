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
  assert body["alternatives"] == [[h.text for h in hyps[1:]] for hyps in best]
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
    ({"q": "A dog.", "source": "en", "target": "de"}, 403, "API key"),
    ({"q": "A dog.", "source": "en", "target": "de", "api_key": "wrong"}, 403,
     "Invalid API key"),
])
def test_libretranslate_errors_have_its_status_and_shape(server, params, status, error):
  url, _ = server
  got, body = call(url, "/translate", params)
  assert got == status and set(body) == {"error"} and error in body["error"]


def test_the_native_api_takes_the_key_as_a_bearer_token(server):
  url, translator = server
  assert call(url, "/translate", {"text": SOURCES[0]})[0] == 403
  status, body = call(url, "/translate", {"text": SOURCES[0]},
                      headers={"Authorization": f"Bearer {KEY}"})
  assert status == 200 and body == {"translation": translator.translate(SOURCES[0])}


