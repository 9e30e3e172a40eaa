"""A model of several directions served: seq2seq-serve (each direction a batcher of its
own, the untrained pairs through English), and one package per direction that
argostranslate and LibreTranslate itself install and translate with."""

import importlib.util
import json
import subprocess
import sys

import pytest
from test_libretranslate_itself import libretranslate_serving

from seq2seq import Translator, load_engine
from seq2seq.data.textfiles import read_lines
from seq2seq.rundir.ctranslate2_model import export_ctranslate2

from conftest import run_cli
from helpers import SAMPLE
from serve_helpers import get, post, start_server, stop_server

pytestmark = pytest.mark.slow  # trains, exports and starts servers

EN, DE = read_lines(SAMPLE / "test.en")[:4], read_lines(SAMPLE / "test.de")[:4]


@pytest.fixture(scope="module")
def server(trained_multilingual):
  proc, url = start_server("--workdir", trained_multilingual)
  yield url
  stop_server(proc)


def test_one_server_serves_each_direction_of_the_model_and_pivots_the_rest(
    server, trained_multilingual):
  engine = Translator.load(trained_multilingual)
  status, languages = get(server + "/languages")
  by_code = {x["code"]: x for x in languages}
  assert by_code["en"]["targets"] == ["de", "fr"]
  assert by_code["de"]["targets"] == ["en", "fr"] and by_code["de"]["pivots"] == ["fr"]
  status, health = get(server + "/health")
  assert [m["directions"] for m in health["models"]] == [["en-de"], ["de-en"], ["en-fr"],
                                                         ["fr-en"]]
  status, body = post(server, {"q": EN, "source": "en", "target": "fr"})
  assert status == 200 and body["translatedText"] == engine.translate(EN, tgt_lang="fr")
  status, body = post(server, {"texts": DE, "source": "de", "target": "en"})
  assert status == 200 and body["translations"] == engine.translate(DE, src_lang="de",
                                                                     tgt_lang="en")
  # de→fr was not trained: through English, as a pair of two models would be
  status, body = post(server, {"q": DE[0], "source": "de", "target": "fr"})
  english = engine.translate(DE[0], src_lang="de", tgt_lang="en")
  assert status == 200 and body["translatedText"] == engine.translate(english, tgt_lang="fr")


@pytest.fixture(scope="module")
def packages(trained_multilingual, tmp_path_factory):
  """Argos packages of two directions of the one run."""
  out = tmp_path_factory.mktemp("argos-directions")
  paths = []
  for src, tgt in (("en", "fr"), ("de", "en")):
    path = out / f"{src}_{tgt}.argosmodel"
    run_cli("-m", "seq2seq.cli.export", "--workdir", trained_multilingual, "--format", "argos",
            "--src-lang", src, "--tgt-lang", tgt, "--output", path)
    paths.append(path)
  return paths


def test_a_package_needs_its_direction(trained_multilingual, tmp_path):
  out = run_cli("-m", "seq2seq.cli.export", "--workdir", trained_multilingual, "--format",
                "argos", "--output", tmp_path / "x.argosmodel", check=False)
  assert out.returncode == 1
  assert b"an Argos package holds one direction; choose it with --src-lang" in out.stderr


ARGOS = """
import json, sys, types
sys.modules.setdefault("stanza", types.ModuleType("stanza"))  # test_argos_package.py
import argostranslate.package, argostranslate.translate as translate
for path in sys.argv[1:-1]:
  argostranslate.package.install_from_path(path)
texts = json.loads(sys.argv[-1])
print(json.dumps({"installed": sorted((p.from_code, p.to_code)
                                      for p in argostranslate.package.get_installed_packages()),
                  "en-fr": [translate.translate(t, "en", "fr") for t in texts["en"]],
                  "de-en": [translate.translate(t, "de", "en") for t in texts["de"]]}))
"""


def ct2_engine(run, direction, folder):
  return load_engine(export_ctranslate2(run, folder, "best", "int8", direction=direction),
                     "ctranslate2")


def test_argostranslate_translates_both_directions_of_the_one_model(
    packages, trained_multilingual, tmp_path):
  if importlib.util.find_spec("argostranslate") is None:
    pytest.skip("argostranslate is not installed (make install)")
  closed = "http://127.0.0.1:9"
  env = {"HOME": str(tmp_path), "ARGOS_PACKAGES_DIR": str(tmp_path / "packages"),
         "PATH": "/usr/bin:/bin", "http_proxy": closed, "https_proxy": closed}
  proc = subprocess.run([sys.executable, "-c", ARGOS, *map(str, packages),
                         json.dumps({"en": EN, "de": DE})],
                        env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  answer = json.loads(proc.stdout.splitlines()[-1])
  assert answer["installed"] == [["de", "en"], ["en", "fr"]]
  # Argos: CTranslate2, beam 4, length penalty 0.2, the int8 model of each direction
  en_fr = ct2_engine(trained_multilingual, ("en", "fr"), tmp_path / "en-fr")
  de_en = ct2_engine(trained_multilingual, ("de", "en"), tmp_path / "de-en")
  assert answer["en-fr"] == en_fr.translate(EN, beam_size=4, alpha=0.2)
  assert answer["de-en"] == de_en.translate(DE, beam_size=4, alpha=0.2)


def test_libretranslate_itself_serves_both_directions_of_the_one_model(
    packages, trained_multilingual, tmp_path_factory):
  with libretranslate_serving(packages, tmp_path_factory.mktemp("lt-directions"),
                              "en,de,fr") as url:
    status, languages = get(url + "/languages")
    targets = {x["code"]: set(x["targets"]) for x in languages}
    assert "fr" in targets["en"] and "en" in targets["de"]
    tmp = tmp_path_factory.mktemp("ct2-directions")
    for src, tgt, texts in (("en", "fr", EN), ("de", "en", DE)):
      status, body = post(url, {"q": texts, "source": src, "target": tgt})
      ours = ct2_engine(trained_multilingual, (src, tgt), tmp / f"{src}-{tgt}")
      assert status == 200 and body["translatedText"] == ours.translate(
          texts, beam_size=4, alpha=0.2), (src, tgt)
