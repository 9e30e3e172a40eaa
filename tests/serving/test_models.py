"""Several models in one server (seq2seq/serving/models.py, detection.py): each direction
served by the first model that has it, pairs no model has through English, languages
detected among the served sources; and seq2seq-serve with three tiny runs (en→de, de→en
and en→xx, a made-up language) through both APIs."""

import json
import logging
import shutil
import urllib.request

import pytest

from seq2seq import Translator
from seq2seq.data.textfiles import read_lines
from seq2seq.serving.http_api import RequestError
from seq2seq.serving.models import Models, ServedModel, model_folders

from conftest import run_cli
from helpers import SAMPLE
from serve_helpers import get, post, sample_with, start_server, stop_server, train_direction

EN = read_lines(SAMPLE / "test.en")
DE = read_lines(SAMPLE / "test.de")


class Directions:
  """What Models reads of an engine: its directions and its description."""

  def __init__(self, *pairs):
    self.directions = tuple(tuple(p.split("-")) for p in pairs)

  def describe(self):
    return {"engine": "test"}


def models(*specs):
  return Models([ServedModel(name, Directions(*pairs)) for name, pairs in specs])


def test_a_direction_goes_to_its_model_and_a_missing_pair_through_english():
  m = models(("en-de", ["en-de"]), ("de-en", ["de-en"]), ("multi", ["en-fr", "fr-en"]))
  assert [(h.model.name, h.source, h.target) for h in m.route("en", "de")] == [
      ("en-de", "en", "de")]
  assert [(h.model.name, h.source, h.target) for h in m.route("de", "fr")] == [
      ("de-en", "de", "en"), ("multi", "en", "fr")]
  with pytest.raises(RequestError, match="cs is not supported .*served: en→de, de→en, "
                                         "en→fr, fr→en") as e:
    m.route("de", "cs")
  assert e.value.status == 400
  with pytest.raises(RequestError, match="de is not available as a target language from de"):
    m.route("de", "de")  # no route to itself through English
  with pytest.raises(RequestError, match="fr is not available as a target language from en"):
    models(("a", ["en-de"]), ("b", ["fr-en"])).route("en", "fr")


def test_languages_list_every_source_s_targets_and_its_pivots():
  m = models(("a", ["en-de", "de-en"]), ("b", ["en-fr"]))
  assert m.languages() == ["en", "de", "fr"]
  assert m.targets("en") == (["de", "fr"], [])
  assert m.targets("de") == (["en"], ["fr"])  # de→en→fr
  assert m.targets("fr") == ([], [])  # no fr→en: fr is only a target


def test_two_models_with_one_direction_the_first_given_serves_it(caplog):
  with caplog.at_level(logging.WARNING, logger="seq2seq.serve"):
    m = models(("first", ["en-de"]), ("second", ["en-de", "de-en"]))
  assert m.route("en", "de")[0].model.name == "first"
  assert m.route("de", "en")[0].model.name == "second"
  assert "en→de: served by first, given first; second has it too" in caplog.text
  assert [x["serves"] for x in m.describe()] == [["en-de"], ["de-en"]]
  with pytest.raises(ValueError, match="two models have one name"):
    models(("a", ["en-de"]), ("a", ["de-en"]))


def test_a_models_folder_holds_runs_and_exports(tmp_path, trained_run):
  shutil.copytree(trained_run, tmp_path / "en-de", ignore=shutil.ignore_patterns("cache"))
  (tmp_path / "notes").mkdir()
  (tmp_path / "export").mkdir()
  (tmp_path / "export" / "model.bin").write_bytes(b"")
  assert [p.name for p in model_folders(tmp_path)] == ["en-de", "export"]
  with pytest.raises(ValueError, match="holds no run"):
    model_folders(tmp_path / "notes")


@pytest.fixture(scope="module")
def runs(trained_run, tmp_path_factory):
  """(en→de, de→en, en→xx) runs; xx is a made-up language whose text is the sample's
  German under another code, so that de→xx has a route through English only."""
  root = tmp_path_factory.mktemp("directions")
  data = sample_with(root / "data", "xx")
  train_direction(root / "de-en", data, "de", "en")
  train_direction(root / "en-xx", data, "en", "xx")
  return trained_run, root / "de-en", root / "en-xx"


@pytest.fixture(scope="module")
def server(runs):
  proc, url = start_server(*(x for run in runs for x in ("--workdir", run)))
  yield url
  stop_server(proc)


def test_one_server_serves_every_direction_of_its_models(server, runs):
  status, languages = get(server + "/languages")
  assert status == 200
  by_code = {x["code"]: x for x in languages}
  assert by_code["en"]["targets"] == ["de", "xx"] and "pivots" not in by_code["en"]
  assert by_code["de"]["targets"] == ["en", "xx"] and by_code["de"]["pivots"] == ["xx"]
  status, health = get(server + "/health")
  assert [m["directions"] for m in health["models"]] == [["en-de"], ["de-en"], ["en-xx"]]
  assert all(m["state"] == "ready" for m in health["models"])


def test_each_direction_translates_as_its_own_model_through_both_apis(server, runs):
  en_de, de_en = Translator.load(runs[0]), Translator.load(runs[1])
  status, body = post(server, {"q": DE[:3], "source": "de", "target": "en"})
  assert status == 200 and body["translatedText"] == de_en.translate(DE[:3])
  status, body = post(server, {"q": EN[0], "source": "en", "target": "de"})
  assert status == 200 and body["translatedText"] == en_de.translate(EN[0])
  status, body = post(server, {"texts": DE[:2], "source": "de", "target": "en"})
  assert status == 200 and body["translations"] == de_en.translate(DE[:2])
  status, body = post(server, {"text": DE[2], "source": "auto", "tgt_lang": "en"})
  assert status == 200 and body["translation"] == de_en.translate(DE[2])


def test_libretranslate_s_python_client_works_across_the_models(server, runs):
  from libretranslatepy import LibreTranslateAPI
  de_en = Translator.load(runs[1])
  client = LibreTranslateAPI(server + "/")
  assert client.translate(DE[0], "de", "en") == de_en.translate(DE[0])
  assert client.translate(DE[1], "auto", "en") == de_en.translate(DE[1])
  assert {x["code"] for x in client.languages()} == {"en", "de", "xx"}
  assert client.detect(EN[0])[0]["language"] == "en"


def test_auto_detects_each_text_s_language_and_says_so(server, runs):
  en_de, de_en = Translator.load(runs[0]), Translator.load(runs[1])
  status, body = post(server, {"q": [DE[5], EN[5]], "source": "auto", "target": "en"})
  assert status == 400  # en→en is no route: the English text has none
  status, body = post(server, {"q": [DE[5], DE[6]], "source": "auto", "target": "en"})
  assert status == 200 and body["translatedText"] == de_en.translate(DE[5:7])
  assert [d["language"] for d in body["detectedLanguage"]] == ["de", "de"]
  assert all(50 < d["confidence"] <= 100 for d in body["detectedLanguage"])
  status, body = post(server, {"q": EN[7], "source": "auto", "target": "de"})
  assert body["detectedLanguage"]["language"] == "en"
  assert body["translatedText"] == en_de.translate(EN[7])
  request = urllib.request.Request(server + "/detect", data=json.dumps({"q": DE[8]}).encode(),
                                   headers={"Content-Type": "application/json"})
  with urllib.request.urlopen(request, timeout=60) as r:
    ranked = json.loads(r.read())
  assert ranked[0]["language"] == "de"
  assert {x["language"] for x in ranked} == {"en", "de"}  # the served sources only


def test_a_pair_without_a_model_goes_through_english_and_says_so(server, runs):
  de_en, en_xx = Translator.load(runs[1]), Translator.load(runs[2])
  status, body = post(server, {"q": DE[:2], "source": "de", "target": "xx",
                               "alternatives": 2})
  assert status == 200 and body["route"] == ["de→en→xx", "de→en→xx"]
  found = en_xx.translate(de_en.translate(DE[:2]), nbest=3, beam_size=3)
  assert body["translatedText"] == [hyps[0].text for hyps in found]
  assert len(body["alternatives"]) == 2  # the last hop's n-best, as LibreTranslate's
  status, body = post(server, {"q": DE[0], "source": "de", "target": "fr"})
  assert status == 400 and "fr is not supported" in body["error"]
  assert "en→de, de→en, en→xx" in body["error"]


def test_metrics_count_each_model_s_texts(server):
  post(server, {"q": EN[9], "source": "en", "target": "xx"})
  with urllib.request.urlopen(server + "/metrics", timeout=60) as r:
    text = r.read().decode()
  assert 'seq2seq_texts_total{model="en-xx"}' in text
  assert 'seq2seq_batch_texts_count{model="de-en"}' in text


def test_a_run_that_cannot_be_read_stops_the_server_unless_skipped(runs, tmp_path):
  broken = tmp_path / "broken"
  broken.mkdir()
  out = run_cli("-m", "seq2seq.cli.serve", "--workdir", runs[0], "--workdir", broken,
                check=False)
  assert out.returncode != 0 and b"broken" in out.stderr


def test_the_page_chooses_languages_detects_and_swaps_in_a_headless_browser(server, runs):
  from serve_helpers import browser_page
  de_en, en_de = Translator.load(runs[1]), Translator.load(runs[0])
  with browser_page() as page:
    page.goto(server + "/")
    page.wait_for_function("document.querySelectorAll('#from option').length > 2",
                           timeout=60_000)
    assert page.eval_on_selector_all("#from option", "os => os.map(o => o.value)") == [
        "auto", "en", "de"]
    page.select_option("#from", "de")
    assert page.eval_on_selector_all("#to option", "os => os.map(o => o.value)") == [
        "en", "xx"]  # de→xx through English
    page.select_option("#to", "en")
    page.fill("#beam", "1")
    page.fill("#nbest", "0")
    page.fill("#source", DE[3])
    page.click("#go")
    page.wait_for_function("document.querySelector('#output').textContent.length > 0",
                           timeout=120_000)
    assert page.inner_text("#output") == de_en.translate(DE[3], beam_size=1)
    page.click("#swap")  # en→de now, the translation the text to translate
    assert (page.input_value("#from"), page.input_value("#to")) == ("en", "de")
    assert page.input_value("#source") == de_en.translate(DE[3], beam_size=1)
    page.select_option("#from", "auto")
    page.select_option("#to", "de")
    page.fill("#source", EN[4])
    page.click("#go")
    page.wait_for_function("document.querySelector('#detected').textContent.length > 0",
                           timeout=120_000)
    assert page.inner_text("#detected").startswith("detected: English")
    assert page.inner_text("#output") == en_de.translate(EN[4], beam_size=1)
    assert page.inner_text("#error") == ""
