"""An imported model served beside a model trained here: its direction through both
APIs, detection of its language, and a pair through English (fr→en→de)."""

import foreign_models
import pytest

from seq2seq import Translator

from helpers import SAMPLE
from serve_helpers import get, post, start_server, stop_server

pytestmark = pytest.mark.slow  # starts a server over a trained run

FR = (SAMPLE / "test.fr").read_text().splitlines()


@pytest.fixture(scope="module")
def fr_en(tmp_path_factory):
  """An OPUS-MT-style fr-en release (random weights), imported."""
  pytest.importorskip("ctranslate2")
  from seq2seq.rundir.importing import import_model
  root = tmp_path_factory.mktemp("fr-en")
  release = foreign_models.small_marian(root / "release", langs=("fr", "en"))
  return import_model(release, root / "run")


@pytest.fixture(scope="module")
def server(trained_run, fr_en):
  proc, url = start_server("--workdir", trained_run, "--workdir", fr_en)
  yield url
  stop_server(proc)


def test_the_imported_direction_serves_through_both_apis(server, fr_en):
  ours = Translator.load(fr_en)
  status, languages = get(server + "/languages")
  by_code = {x["code"]: x for x in languages}
  assert status == 200 and set(by_code["fr"]["targets"]) == {"de", "en"}
  status, body = post(server, {"q": FR[:2], "source": "fr", "target": "en"})
  assert status == 200 and body["translatedText"] == ours.translate(FR[:2])
  status, body = post(server, {"text": FR[2], "source": "fr", "tgt_lang": "en"})
  assert status == 200 and body["translation"] == ours.translate(FR[2])
  status, body = post(server, {"q": FR[3], "source": "auto", "target": "en"})
  assert status == 200 and body["detectedLanguage"]["language"] == "fr"
  assert body["translatedText"] == ours.translate(FR[3])


def test_a_pair_goes_through_english_from_the_imported_model(server, fr_en, trained_run):
  fr_en_t, en_de = Translator.load(fr_en), Translator.load(trained_run)
  status, body = post(server, {"q": FR[:2], "source": "fr", "target": "de"})
  assert status == 200 and body["route"] == ["fr→en→de", "fr→en→de"]
  assert body["translatedText"] == en_de.translate(fr_en_t.translate(FR[:2]))
