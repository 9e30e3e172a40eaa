"""LibreTranslate itself (PyPI `libretranslate`, in `.venv-libretranslate`, which `make
test` installs from requirements-libretranslate.lock) serving the Argos package that
`seq2seq-export --format argos` writes, on the loopback and with no download: the
package folder unzipped where LibreTranslate loads packages (ARGOS_PACKAGES_DIR), its
model index a local empty file, and every proxy pointed at a closed port so that any
download it tried would fail the request. Its web UI is driven in headless Chromium,
once against LibreTranslate and once, from LibreTranslate's origin, against seq2seq-serve.
"""

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from seq2seq import load_engine

from helpers import ROOT, SAMPLE
from serve_helpers import (
  browser_page,
  free_port,
  get,
  post,
  sample_with,
  start_server,
  stop_server,
  train_direction,
)

pytestmark = pytest.mark.slow  # trains, exports and starts two servers

LIBRETRANSLATE = Path(os.environ.get("SEQ2SEQ_LIBRETRANSLATE",
                                     ROOT / ".venv-libretranslate" / "bin" / "libretranslate"))
SOURCES = (SAMPLE / "test.en").read_text().splitlines()[:6]
TWO_SENTENCES = f"{SOURCES[0]} {SOURCES[1]}"
# Longer than the tiny model's max_len (128 pieces): Argos hands it to CTranslate2 whole.
LONG = "A man in a red shirt and a woman in a blue dress walk with their dog, " * 12 + "and smile."


@contextlib.contextmanager
def libretranslate_serving(packages, home: Path, languages: str):
  """The url of LibreTranslate serving `packages` (unzipped into `home`), loading only
  `languages`, with every download refused."""
  if not LIBRETRANSLATE.exists():
    pytest.skip(f"LibreTranslate is not installed at {LIBRETRANSLATE} (make libretranslate)")
  for package in packages:
    with zipfile.ZipFile(package) as z:
      z.extractall(home / "packages")
  (home / "index").mkdir()
  (home / "index" / "index.json").write_text("[]")
  closed = f"http://127.0.0.1:{free_port()}"
  env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "ARGOS_PACKAGES_DIR": str(home / "packages"),
         "ARGOS_PACKAGE_INDEX": (home / "index").as_uri() + "/",
         "http_proxy": closed, "https_proxy": closed, "HTTP_PROXY": closed, "HTTPS_PROXY": closed}
  port = free_port()
  with tempfile.TemporaryFile() as log:
    proc = subprocess.Popen([LIBRETRANSLATE, "--host", "127.0.0.1", "--port", str(port),
                             "--load-only", languages], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
      wait_until_up(url + "/languages", proc, log)
      yield url
    finally:
      proc.terminate()
      proc.wait(timeout=60)


@pytest.fixture(scope="module")
def libretranslate(argos_package, tmp_path_factory):
  """(url, home) of LibreTranslate serving the package."""
  home = tmp_path_factory.mktemp("libretranslate")
  with libretranslate_serving([argos_package], home, "en,de") as url:
    yield url, home


def wait_until_up(url, proc, log, timeout=120):
  deadline = time.time() + timeout
  while True:
    with contextlib.suppress(OSError):
      if get(url)[0] == 200:
        return
    if proc.poll() is not None or time.time() > deadline:
      log.seek(0)
      raise AssertionError("LibreTranslate did not start:\n" + log.read().decode()[-3000:])
    time.sleep(0.5)


@pytest.fixture(scope="module")
def ct2(trained_run, tmp_path_factory):
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  out = tmp_path_factory.mktemp("ct2") / "model"
  return export_ctranslate2(trained_run, out, "best", "int8")


def test_libretranslate_lists_the_package_s_pair_and_downloaded_nothing(libretranslate):
  url, home = libretranslate
  status, languages = get(url + "/languages")
  assert status == 200
  assert {"code": "en", "name": "English", "targets": ["de", "en"]} in languages
  # MiniSBD keeps what it downloads under Argos's data folder: the package's splitter ran
  post(url, {"q": TWO_SENTENCES, "source": "en", "target": "de"})
  assert not (home / ".local" / "share" / "argos-translate" / "minisbd").exists() or not any(
      (home / ".local" / "share" / "argos-translate" / "minisbd").iterdir())


def test_libretranslate_translates_as_our_ctranslate2_engine_with_argos_settings(
    libretranslate, ct2):
  url, _ = libretranslate
  texts = SOURCES + [TWO_SENTENCES]
  status, body = post(url, {"q": texts, "source": "en", "target": "de"})
  assert status == 200, body
  # Argos: beam 4, length penalty 0.2, the package's sentences translated in one batch
  ours = load_engine(ct2, "ctranslate2").translate(texts, beam_size=4, alpha=0.2)
  assert body["translatedText"] == ours


def test_a_sentence_longer_than_the_model_s_maximum_is_translated_not_a_500(
    libretranslate, ct2):
  import ctranslate2
  import sentencepiece as spm
  url, _ = libretranslate
  status, body = post(url, {"q": LONG, "source": "en", "target": "de"})
  assert status == 200, body
  # what Argos asks of CTranslate2 for it: the whole sentence, beam 4, length penalty 0.2
  sp = spm.SentencePieceProcessor(model_file=str(ct2 / "spm.model"))
  pieces = sp.encode(LONG, out_type=str)
  assert len(pieces) > 128
  result = ctranslate2.Translator(str(ct2)).translate_batch(
      [pieces], beam_size=4, length_penalty=0.2, replace_unknowns=True)
  assert body["translatedText"] == sp.decode(result[0].hypotheses[0]).lstrip(" ")


def web_ui_translates(page, url, text, source="en", target="de") -> str:
  """Types `text` into LibreTranslate's web UI at `url`, `source` (or "auto") to
  `target`, and returns what it shows as the translation."""
  page.goto(url + "/", wait_until="domcontentloaded")
  page.wait_for_function("document.querySelectorAll('select.browser-default option')"
                         ".length > 2", timeout=60_000)
  selects = page.locator("select.browser-default")
  selects.nth(0).select_option(source)
  selects.nth(1).select_option(target)
  page.fill("#textarea1", text)
  page.wait_for_function("document.querySelector('#textarea2').value.length > 0",
                         timeout=120_000)
  return page.input_value("#textarea2")


def only_loopback(page):
  """Fonts and pictures the page links from the web are refused, not waited for."""
  page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(
      "http://127.0.0.1") else route.abort())


def screenshot(page, tmp_path, name) -> Path:
  """A PNG of the page, also copied to $SEQ2SEQ_SCREENSHOTS when set (docs/images holds
  the ones docs/sharing.md shows: SEQ2SEQ_SCREENSHOTS=docs/images)."""
  path = tmp_path / name
  page.screenshot(path=str(path), full_page=False)
  if os.environ.get("SEQ2SEQ_SCREENSHOTS"):
    shutil.copy(path, Path(os.environ["SEQ2SEQ_SCREENSHOTS"]) / name)
  return path


def test_libretranslate_s_web_ui_translates_with_the_package(libretranslate, tmp_path):
  url, _ = libretranslate
  with browser_page() as page:
    only_loopback(page)
    shown = web_ui_translates(page, url, TWO_SENTENCES)
    png = screenshot(page, tmp_path, "libretranslate-web-ui.png")
  status, body = post(url, {"q": TWO_SENTENCES, "source": "en", "target": "de"})
  assert shown == body["translatedText"]
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def point_at(page, our_url):
  """LibreTranslate's page, its script's API address replaced by `our_url`; nothing but
  the loopback reached."""
  def our_api(route):
    script = route.fetch().text()
    start = script.index("var BaseUrl")
    end = script.index(";", start)
    route.fulfill(body=script[:start] + f"var BaseUrl = {json.dumps(our_url)}"
                  + script[end:], content_type="application/javascript")

  only_loopback(page)
  page.route(lambda u: "/js/app.js" in u, our_api)  # LibreTranslate adds ?v=VERSION


def test_libretranslate_s_web_ui_from_its_own_origin_works_against_our_server(
    libretranslate, trained_run, tmp_path):
  """LibreTranslate's own page and script, served by LibreTranslate, with its API address
  pointed at seq2seq-serve (another origin): it reads /frontend/settings and /languages
  and posts its FormData (q, source, target, format, alternatives, api_key) to us."""
  lt_url, _ = libretranslate
  proc, our_url = start_server("--workdir", trained_run)
  try:
    with browser_page() as page:
      sent = []
      page.on("request", lambda r: sent.append((r.method, r.url, r.headers.get("origin"))))
      point_at(page, our_url)
      shown = web_ui_translates(page, lt_url, TWO_SENTENCES)
      screenshot(page, tmp_path, "libretranslate-web-ui-on-seq2seq-serve.png")
    status, body = post(our_url, {"q": TWO_SENTENCES, "source": "en",
                                                 "target": "de", "alternatives": 3})
    assert status == 200 and shown == body["translatedText"]
    posts = [(url, origin) for method, url, origin in sent if method == "POST"]
    assert (our_url + "/translate", lt_url) in posts  # cross-origin, with its Origin
  finally:
    stop_server(proc)


@pytest.fixture(scope="module")
def three_runs(trained_run, tmp_path_factory):
  """Runs of en→de (the tiny run), de→en and en→fr; "French" is the sample's German under
  fr's code (the sample has two languages): what LibreTranslate does with three packages,
  its pivot de→en→fr, does not depend on the words."""
  root = tmp_path_factory.mktemp("three")
  data = sample_with(root / "data", "fr")
  for src, tgt in (("de", "en"), ("en", "fr")):
    train_direction(root / f"{src}-{tgt}", data, src, tgt)
  return [trained_run, root / "de-en", root / "en-fr"]


@pytest.fixture(scope="module")
def three_packages(three_runs, argos_package):
  """The three runs' Argos packages."""
  from conftest import run_cli
  packages = [argos_package]
  for run in three_runs[1:]:
    out = run.parent / f"{run.name.replace('-', '_')}.argosmodel"
    run_cli("-m", "seq2seq.cli.export", "--workdir", run, "--format", "argos", "--output", out)
    packages.append(out)
  return packages


@pytest.fixture(scope="module")
def libretranslate_of_three(three_packages, tmp_path_factory):
  """The url of LibreTranslate serving the three packages."""
  with libretranslate_serving(three_packages, tmp_path_factory.mktemp("lt-three"),
                              "en,de,fr") as url:
    yield url


GERMAN = (SAMPLE / "test.de").read_text().splitlines()[:3]


def test_libretranslate_serves_three_of_our_packages_and_pivots_through_english(
    libretranslate_of_three):
  url = libretranslate_of_three
  status, languages = get(url + "/languages")
  targets = {x["code"]: set(x["targets"]) for x in languages}
  assert {"de", "fr"} <= targets["en"] and {"en", "fr"} <= targets["de"]
  answers = {}
  for src, tgt, texts in (("en", "de", SOURCES[:3]), ("de", "en", GERMAN),
                          ("en", "fr", SOURCES[:3]), ("de", "fr", GERMAN)):
    status, body = post(url, {"q": texts, "source": src, "target": tgt})
    assert status == 200 and all(body["translatedText"]), (src, tgt, body)
    answers[src, tgt] = body["translatedText"]
  # the pivot: its English is what the de→en package says, its French the en→fr's of that
  status, body = post(url, {"q": answers["de", "en"], "source": "en", "target": "fr"})
  assert body["translatedText"] == answers["de", "fr"]
  assert answers["de", "en"] != GERMAN


def test_libretranslate_s_web_ui_shows_the_language_it_detected(libretranslate_of_three):
  url = libretranslate_of_three
  with browser_page() as page:
    only_loopback(page)
    shown = web_ui_translates(page, url, GERMAN[0], "auto", "en")
    page.wait_for_function("document.querySelector('#sourceLangLabel').parentElement"
                           ".innerText.includes('%')", timeout=60_000)
    label = page.locator("#sourceLangLabel").locator("xpath=..").inner_text()
  assert "German" in label, label
  status, body = post(url, {"q": GERMAN[0], "source": "de", "target": "en"})
  assert shown == body["translatedText"]


def test_libretranslate_s_web_ui_works_across_the_models_of_our_server(
    libretranslate_of_three, three_runs):
  """LibreTranslate's page pointed at one seq2seq-serve of the three runs: it lists their
  languages, and with Auto Detect it shows the language our server detected."""
  proc, our_url = start_server(*(x for run in three_runs for x in ("--workdir", run)))
  try:
    with browser_page() as page:
      point_at(page, our_url)
      shown = web_ui_translates(page, libretranslate_of_three, GERMAN[1], "auto", "en")
      page.wait_for_function("document.querySelector('#sourceLangLabel').parentElement"
                             ".innerText.includes('%')", timeout=60_000)
      label = page.locator("#sourceLangLabel").locator("xpath=..").inner_text()
      targets = page.eval_on_selector_all("select.browser-default:nth-of-type(1) option",
                                          "os => os.map(o => o.value)")
    status, body = post(our_url, {"q": GERMAN[1], "source": "de", "target": "en"})
    assert status == 200 and shown == body["translatedText"]
    assert "German" in label, label
    assert {"en", "de"} <= set(targets)
  finally:
    stop_server(proc)


@pytest.fixture(scope="module")
def fine_tuned_import(argos_package, tmp_path_factory):
  """(run, Argos package) of an Argos package (the tiny run's) imported, fine-tuned on
  the sample with the automatic recipe and exported for Argos again."""
  from seq2seq.rundir import importing

  from conftest import run_cli
  tmp = tmp_path_factory.mktemp("imported")
  run = importing.import_model(argos_package, tmp / "imported")
  tuned, package = tmp / "tuned", tmp / "en_de_tuned.argosmodel"
  run_cli("train.py", "--config", "auto", "--workdir", tuned, f"--config.train.init_from={run}",
          f"--config.data.dir={SAMPLE.parent / 'sample'}", "--config.train.max_steps=12",
          "--config.train.eval_every=6", "--config.train.checkpoint_every=6",
          "--config.train.eval_max_sentences=20")
  run_cli("-m", "seq2seq.cli.export", "--workdir", tuned, "--format", "argos",
          "--output", package)
  return tuned, package


def test_libretranslate_serves_an_imported_then_fine_tuned_model(fine_tuned_import, tmp_path):
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  run, package = fine_tuned_import
  with libretranslate_serving([package], tmp_path / "home", "en,de") as url:
    status, body = post(url, {"q": SOURCES, "source": "en", "target": "de"})
  assert status == 200, body
  ours = load_engine(export_ctranslate2(run, tmp_path / "ct2", "best", "int8"), "ctranslate2")
  assert body["translatedText"] == ours.translate(SOURCES, beam_size=4, alpha=0.2)
