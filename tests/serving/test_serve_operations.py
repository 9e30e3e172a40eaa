"""seq2seq-serve as it is deployed: the CTranslate2 engine behind it, overload (429 with
Retry-After, memory flat, healthy after), a graceful shutdown that answers what it
accepted, and the page, driven in a real headless browser."""

import signal
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from seq2seq import Translator, load_engine
from seq2seq.data.textfiles import read_lines
from seq2seq.documents import translate_document

from helpers import SAMPLE
from serve_helpers import (
  browser_page,
  get,
  post,
  start_server,
  stop_server,
  wait_for_all_batch_rows,
)

pytestmark = pytest.mark.slow  # each test trains, kills or restarts processes

SOURCES = read_lines(SAMPLE / "test.en")[:64]


def rss_mb(pid: int) -> float:
  for line in Path(f"/proc/{pid}/status").read_text().splitlines():
    if line.startswith("VmRSS:"):
      return int(line.split()[1]) / 1024
  raise AssertionError("no VmRSS")


def test_overload_gets_429_with_retry_after_never_a_5xx_and_memory_stays_flat(trained_run):
  """Counted and timed, on the loopback: the sustainable rate measured with 4 clients,
  then 16x as many clients sending requests as fast as they are answered for 4 s."""
  proc, url = start_server("--workdir", trained_run, "--max-queue", "32", "--decoders", "1")
  try:
    texts = SOURCES[:4]

    def client(stop_at: float, outcomes: list):
      while time.time() < stop_at:
        headers: dict = {}
        try:
          status, _ = post(url, {"texts": texts}, headers=headers, timeout=60)
        except OSError as e:  # a dropped connection: never expected
          outcomes.append(("dropped", repr(e)))
          continue
        outcomes.append((status, headers.get("retry-after")))
        if status == 429:
          time.sleep(0.05)

    def load(clients: int, seconds: float) -> list:
      outcomes: list = []
      stop_at = time.time() + seconds
      threads = [threading.Thread(target=client, args=(stop_at, outcomes))
                 for _ in range(clients)]
      for t in threads:
        t.start()
      for t in threads:
        t.join()
      return outcomes

    wait_for_all_batch_rows(url)  # compiling them grows the memory; the queue must not
    sustainable = load(4, 2.0)
    assert {s for s, _ in sustainable} == {200}
    before = rss_mb(proc.pid)
    overload = load(64, 4.0)
    statuses = [s for s, _ in overload]
    assert set(statuses) <= {200, 429}, [o for o in overload if o[0] not in (200, 429)][:3]
    assert statuses.count(429) > 0 and statuses.count(200) > 0
    assert all(retry and int(retry) >= 1 for s, retry in overload if s == 429)
    assert rss_mb(proc.pid) - before < 100  # the queue is bounded: no growth with the load
    status, health = get(url + "/health")
    assert status == 200 and health["queue"] == 0
    assert post(url, {"text": SOURCES[0]})[0] == 200
  finally:
    stop_server(proc)


def test_sigterm_answers_every_accepted_request_then_exits(trained_run):
  proc, url = start_server("--workdir", trained_run, "--decoders", "1")
  with ThreadPoolExecutor(16) as pool:
    answers = [pool.submit(post, url, {"texts": SOURCES[i:i + 4]}) for i in range(16)]
    time.sleep(0.3)  # accepted, most still waiting in the queue
    proc.send_signal(signal.SIGTERM)
    results = [a.result() for a in answers]
  assert [status for status, _ in results] == [200] * 16
  proc.wait(timeout=120)
  # uvicorn shuts down gracefully, then re-raises the signal for the default exit status
  assert proc.returncode in (0, -signal.SIGTERM)
  proc.log.seek(0)
  assert b"Traceback" not in proc.log.read()


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
  pytest.importorskip("ctranslate2", reason="CTranslate2 is the optional [ctranslate2] extra")
  from seq2seq.rundir import ctranslate2_model
  return ctranslate2_model.export_ctranslate2(trained_run, tmp_path_factory.mktemp("ct2") / "model")


def test_the_ctranslate2_engine_serves_what_its_translator_gives(exported):
  proc, url = start_server("--engine", "ctranslate2", "--model", exported)
  try:
    t = load_engine(exported, "ctranslate2")
    status, body = post(url, {"texts": SOURCES[:6], "beam_size": 4, "nbest": 2})
    expected = t.translate(SOURCES[:6], beam_size=4, nbest=2)
    assert status == 200 and body["translations"] == [h[0].text for h in expected]
    assert [[a["text"] for a in alts] for alts in body["alternatives"]] == [
        [h.text for h in hyps] for hyps in expected]
    assert post(url, {"text": SOURCES[0]}) == (200, {"translation": t.translate(SOURCES[0])})
    status, body = post(url, {"text": SOURCES[0], "attention": True})
    assert status == 422 and "the JAX engine" in body["error"]
    assert get(url + "/health")[1]["engine"] == "ctranslate2"
  finally:
    stop_server(proc)


def test_the_ctranslate2_server_translates_batches_at_once_as_configured(exported, trained_run,
                                                                         tmp_path):
  """/health says CTranslate2's threads and the batches decoded at once: by default one
  batch per core, one thread each (throughput); --ct2-threads and --decoders change them,
  and the answers stay those of the engine alone. A run directory is served by
  CTranslate2 too (its checkpoint exported once into RUN/exports)."""
  import shutil

  from seq2seq.decoding.ct2_engine import usable_cores
  cores = usable_cores()
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  for model, flags, threads, decoders in (
      (("--model", exported), (),
       {"mode": "throughput", "inter_threads": cores, "intra_threads": 1}, cores),
      (("--model", exported), ("--ct2-threads", "latency", "--decoders", "3"),
       {"mode": "latency", "inter_threads": 1, "intra_threads": cores}, 3),
      (("--workdir", run), (),
       {"mode": "throughput", "inter_threads": cores, "intra_threads": 1}, cores)):
    proc, url = start_server("--engine", "ctranslate2", *model, *flags)
    try:
      model = get(url + "/health")[1]["models"][0]
      assert model["threads"] == threads and model["decoders"] == decoders
      status, body = post(url, {"texts": SOURCES[:8]})
      assert status == 200 and body["translations"] == load_engine(
          exported, "ctranslate2").translate(SOURCES[:8])
    finally:
      stop_server(proc)


def test_the_page_translates_in_a_headless_browser_as_the_api_does(server_for_page):
  url, translator = server_for_page
  lines = [SOURCES[0], SOURCES[1]]
  with browser_page() as page:
    page.goto(url + "/")
    page.fill("#source", "\n".join(lines))
    page.fill("#beam", "4")
    page.fill("#nbest", "3")
    page.check("#attention")
    page.click("#go")
    page.wait_for_selector("table.attention", timeout=120_000)
    shown = page.inner_text("#output").split("\n")
    header = page.inner_text("#model")
    alternatives = page.locator("li.alternative").count()
    rows = page.locator("table.attention tbody tr").count()
    assert page.inner_text("#error") == ""
  status, body = post(url, {"texts": lines, "beam_size": 4, "nbest": 3})
  assert shown == body["translations"] == translator.translate(lines, beam_size=4)
  assert alternatives == 6
  assert header.startswith("English → German · jax engine")  # from the run's en, de
  status, body = post(url, {"text": lines[0], "beam_size": 4, "attention": True})
  assert rows == len(body["attention"]["target"])


def test_the_page_translates_a_file_in_a_headless_browser(server_for_page, tmp_path):
  url, translator = server_for_page
  source = tmp_path / "captions.srt"
  source.write_text("1\n00:00:01,000 --> 00:00:02,000\nA dog runs.\n\n"
                    "2\n00:00:03,000 --> 00:00:04,000\nTwo cats sleep.\n", "utf-8")
  with browser_page() as page:
    page.goto(url + "/")
    page.set_input_files("#file", str(source))
    page.click("#go-file")
    page.wait_for_selector("#download:not([hidden])", timeout=120_000)
    href = page.get_attribute("#download", "href")
    assert page.inner_text("#error") == ""
  with urllib.request.urlopen(href) as answer:
    got = answer.read().decode("utf-8")
  assert got == translate_document(translator, source, progress=False)


def test_translate_file_and_download_file_as_libretranslate(server_for_page, tmp_path):
  import requests
  url, translator = server_for_page
  document = "<p>A dog <b>runs</b> in the park.</p>"
  answer = requests.post(url + "/translate_file", files={"file": ("page.html", document)},
                         data={"source": "en", "target": "de"}, timeout=120)
  assert answer.status_code == 200, answer.text
  download = answer.json()["translatedFileUrl"]
  assert download.startswith(url + "/download_file/") and download.endswith(".page.html")
  (tmp_path / "page.html").write_text(document, "utf-8")
  got = requests.get(download, timeout=60)
  assert got.status_code == 200 and got.text == translate_document(
      translator, tmp_path / "page.html", progress=False)
  assert 'filename="page.html"' in got.headers["content-disposition"]
  for files, data, status, error in [
      ({"file": ("a.pdf", b"%PDF")}, {"source": "en", "target": "de"}, 400, ".pdf files"),
      ({"source": (None, "en"), "target": (None, "de")}, None, 400, "missing file"),
      (None, {"source": "en", "target": "de"}, 400, "multipart/form-data"),
      ({"file": ("a.txt", "A dog.")}, {"source": "fr", "target": "de"}, 400, "fr"),
      ({"file": ("a.txt", bytes(range(256)) * 8)}, {"source": "en", "target": "de"}, 400,
       "must be text")]:
    answer = requests.post(url + "/translate_file", files=files, data=data, timeout=60)
    assert answer.status_code == status and error in answer.json()["error"], answer.text
  assert requests.get(url + "/download_file/nothing.txt", timeout=60).status_code == 404
  settings = requests.get(url + "/frontend/settings", timeout=60).json()
  assert settings["filesTranslation"] and ".docx" in settings["supportedFilesFormat"]


@pytest.fixture(scope="module")
def server_for_page(trained_run):
  proc, url = start_server("--workdir", trained_run)
  yield url, Translator.load(trained_run)
  stop_server(proc)


def test_reload_loads_what_landed_during_warm_up_and_survives_any_error(trained_run,
                                                                        monkeypatch):
  import threading

  from seq2seq.rundir import checkpoint
  from seq2seq.serving import http_server
  latest = trained_run / "checkpoints" / "latest"
  older = latest / "200"
  assert older.is_dir() and checkpoint.checkpoint_path(trained_run, "latest").name == "300"
  translator = Translator.load(trained_run, "latest")
  translator.followed = (trained_run, "latest", older)  # as loaded before step 300 landed
  served = translator.params
  failures = iter([RuntimeError("a disk hiccup")])
  load = checkpoint.load_params

  def flaky(*args, **kwargs):
    failure = next(failures, None)
    if failure is not None:
      raise failure
    return load(*args, **kwargs)
  monkeypatch.setattr(checkpoint, "load_params", flaky)
  info, stop = {}, threading.Event()
  # loaded from step 200 before the warm-up; step 300 landed meanwhile
  thread = http_server.follow_checkpoint(translator, 0.05, info, stop)
  try:
    assert info["step"] == 200
    deadline = time.time() + 60
    while info["step"] != 300 and time.time() < deadline:
      time.sleep(0.05)
    assert info["step"] == 300 and translator.params is not served  # after the failure
    assert thread.is_alive()
  finally:
    stop.set()


def test_the_page_sends_the_key_it_is_given(trained_run, tmp_path):
  keys = tmp_path / "keys.txt"
  keys.write_text("k-page\n")
  proc, url = start_server("--workdir", trained_run, "--api-keys", keys, "--require-api-key")
  try:
    with browser_page() as page:
      page.goto(url + "/")
      page.fill("#source", SOURCES[0])
      page.click("#go")
      page.wait_for_function("document.getElementById('error').textContent !== ''",
                             timeout=120_000)
      refused = page.inner_text("#error")
      page.fill("#key", "k-page")
      page.click("#go")
      page.wait_for_function("document.getElementById('output').textContent !== ''",
                             timeout=120_000)
      shown = page.inner_text("#output")
  finally:
    stop_server(proc)
  assert "API key" in refused
  assert shown == Translator.load(trained_run).translate(SOURCES[0], beam_size=5)
