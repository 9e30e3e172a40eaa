"""seq2seq-serve on 127.0.0.1 with the tiny run: answers equal Translator's for every
per-request setting, concurrent requests are batched and each gets its own lines in order,
no request body gets a 5xx (fuzzed), /health, /metrics and the OpenAPI schema."""

import io
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from seq2seq import Translator
from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.engine_io import Sampling
from seq2seq.numerics import speed_probe
from seq2seq.serving import native_api

from helpers import ROOT, SAMPLE
from serve_helpers import get, post, start_server, stop_server

SOURCES = read_lines(SAMPLE / "test.en")[:64]


@pytest.fixture(scope="module")
def server(trained_run):
  proc, url = start_server("--workdir", trained_run, "--max-texts", "8", "--max-chars", "300",
                           "--max-body", "20000")
  yield url
  stop_server(proc)


@pytest.fixture(scope="module")
def translator(trained_run):
  return Translator.load(trained_run)


def test_translations_equal_the_translators(server, translator):
  assert post(server, {"text": SOURCES[0]}) == (200, {"translation":
                                                      translator.translate(SOURCES[0])})
  status, body = post(server, {"texts": SOURCES[:5], "beam_size": 3, "alpha": 0.6})
  assert status == 200
  assert body["translations"] == translator.translate(SOURCES[:5], beam_size=3, alpha=0.6)


def test_every_search_setting_per_request_equals_the_translators(server, translator):
  texts = SOURCES[5:8]
  status, body = post(server, {"texts": texts, "beam_size": 4, "nbest": 3})
  expected = translator.translate(texts, beam_size=4, nbest=3)
  assert status == 200 and body["translations"] == [hyps[0].text for hyps in expected]
  assert [[a["text"] for a in alternatives] for alternatives in body["alternatives"]] == [
      [h.text for h in hyps] for hyps in expected]
  assert body["alternatives"][0][0]["score"] == pytest.approx(expected[0][0].score, abs=1e-3)

  sampling = {"temperature": 0.8, "top_k": 20, "seed": 7}
  first = post(server, {"texts": texts, "sampling": sampling})
  assert first == post(server, {"texts": texts, "sampling": sampling})  # the seed decides
  assert first[1]["translations"] == translator.translate(
      texts, sampling=Sampling(temperature=0.8, top_k=20, seed=7))

  status, body = post(server, {"text": texts[0], "prefix": "Ein"})
  assert status == 200 and body["translation"] == translator.translate(texts[0],
                                                                       prefixes="Ein")
  status, body = post(server, {"texts": texts[:2], "prefixes": ["Ein", ""]})
  assert body["translations"] == translator.translate(texts[:2], prefixes=["Ein", ""])


def test_attention_weights_of_one_text(server, translator):
  status, body = post(server, {"text": SOURCES[0], "attention": True})
  att = body["attention"]
  assert status == 200 and body["translation"] == translator.translate(SOURCES[0])
  assert att["source"] == translator.tokenizer.pieces(translator.encode([SOURCES[0]])[0])
  assert len(att["weights"]) == len(att["target"]) and att["target"][-1] == "</s>"
  for row in att["weights"]:  # a distribution over the source pieces
    assert len(row) == len(att["source"]) and sum(row) == pytest.approx(1.0, abs=2e-3)


def test_64_concurrent_requests_each_get_their_own_lines_in_order(server, translator):
  expected = translator.translate(SOURCES)
  requests = [SOURCES[i:i + 1 + i % 3] for i in range(64)]  # 1-3 lines each, overlapping
  before = get(server + "/health")[1]
  with ThreadPoolExecutor(64) as pool:
    answers = list(pool.map(lambda texts: post(server, {"texts": texts}), requests))
  after = get(server + "/health")[1]
  assert after["requests"] - before["requests"] == 64
  assert after["batches"] - before["batches"] < 32  # requests were decoded together
  for i, (status, body) in enumerate(answers):
    assert status == 200
    assert body["translations"] == expected[i:i + len(requests[i])]


def test_a_text_alone_gets_what_it_gets_among_64_concurrent_requests(server):
  # Concurrent requests share a batch: a text's answer must not depend on what other
  # clients sent (bit-identical searches), greedy and beam, on whatever CPU runs this.
  for beam in (1, 3):
    alone = [post(server, {"text": text, "beam_size": beam}) for text in SOURCES]
    with ThreadPoolExecutor(64) as pool:
      together = list(pool.map(post, [server] * len(SOURCES),
                               [{"text": text, "beam_size": beam} for text in SOURCES]))
    differ = [i for i, (a, b) in enumerate(zip(alone, together)) if a != b]
    assert not differ, f"beam {beam}: lines {differ} differ on {speed_probe.cpu_class()}"


NESTED = b"[" * 9_000 + b"]" * 9_000  # within --max-body, far beyond any parser's depth


@pytest.mark.parametrize("raw, body, status, message", [
    (b"{not json", None, 400, "not valid JSON"),
    (NESTED, None, 400, "nested too deeply"),
    (b'{"text": "A \xff dog."}', None, 400, "not valid UTF-8 (byte 12)"),
    (b'{"text": "A dog.", "alpha": NaN}', None, 400, "NaN is not a JSON number"),
    (b'{"text": "A dog.", "beam_size": 1' + b"0" * 5000 + b"}", None, 400, "not valid JSON"),
    (b'{"text": "A \\ud800 b"}', None, 422, "text 0 is not valid Unicode: a lone surrogate"),
    (None, ["a list"], 400, "must be a JSON object"),
    (None, {"txt": "A dog."}, 422, 'unknown field(s) "txt"'),
    (None, {"texts": "A dog."}, 422, '"texts" must be a list of strings'),
    (None, {"texts": []}, 422, '"texts" is empty'),
    (None, {"texts": ["a", 3]}, 422, "a list of strings"),
    (None, {"text": "a" * 301}, 413, "text 0 has 301 characters; at most 300"),
    (None, {"texts": ["a"] * 9}, 413, "9 texts in one request; at most 8"),
    (b'{"text": "' + b"a" * 25_000 + b'"}', None, 413, "the body has 25012 bytes; at most 20000"),
    (None, {"text": "A dog.", "prefix": " ".join("abcdefghij"[i % 10] for i in range(145))},
     422, "pieces; at most 126"),
    (None, {"text": "A dog.", "beam_size": 0}, 422, "beam_size must be an integer from 1"),
    (None, {"text": "A dog.", "beam_size": 1e300}, 422, "beam_size must be an integer"),
    (None, {"text": "A dog.", "alpha": "high"}, 422, "alpha must be a number"),
    (None, {"text": "A dog.", "alpha": 1e308 * 10}, 400, "Infinity is not a JSON number"),
    (None, {"text": "A dog.", "beam_size": 2, "nbest": 3}, 422, "nbest must be an integer "
     "from 0 to 2"),
    (None, {"text": "A dog.", "sampling": {"temp": 1}}, 422, 'unknown sampling field(s) "temp"'),
    (None, {"text": "A dog.", "sampling": {"top_p": 0}}, 422, "top_p must be a number from 0"),
    (None, {"text": "A dog.", "prefixes": ["Ein"]}, 422, 'use "prefix" with "text"'),
    (None, {"texts": ["A dog."], "prefixes": ["Ein", "Der"]}, 422, "2 prefixes for 1 texts"),
    (None, {"texts": ["A dog."], "attention": True}, 422, 'attention needs "text"'),
    (None, {"text": "A dog.", "attention": "yes"}, 422, "attention must be true or false"),
])
def test_bad_requests_get_4xx_and_the_server_keeps_serving(server, raw, body, status, message):
  got_status, got = post(server, body, raw)
  assert got_status == status and message in got["error"], got
  health_status, health = get(server + "/health")
  assert health_status == 200 and health["status"] == "ready" and health["checkpoint"] == "best"
  assert post(server, {"text": "A dog."})[0] == 200


def send_raw(url: str, data: bytes) -> bytes:
  """What the server answers to `data` sent on a connection of its own (read until it
  closes, or 2 s pass)."""
  host, port = url.removeprefix("http://").split(":")
  with socket.create_connection((host, int(port)), timeout=30) as s:
    s.sendall(data)
    s.settimeout(2)
    answer = b""
    try:
      while chunk := s.recv(65536):
        answer += chunk
    except TimeoutError:
      pass
    return answer


def test_wrong_content_type_and_a_body_too_large_are_refused_before_reading(server):
  status, got = post(server, {"text": "A dog."}, content_type="text/plain")
  assert status == 415 and "send application/json" in got["error"]
  head = (b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
  # 10 MB announced, 1 KB sent: refused at once, without waiting for the rest
  answer = send_raw(server, head + b"Content-Length: 10000000\r\n\r\n" + b"[" * 1000)
  assert answer.startswith(b"HTTP/1.1 413") and b"at most 20000" in answer
  # chunked, no length announced: refused once 20,000 bytes have arrived
  chunk = b"%x\r\n%s\r\n" % (4000, b" " * 4000)
  answer = send_raw(server, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 6)
  assert answer.startswith(b"HTTP/1.1 413") and b"exceeds 20000 bytes" in answer
  assert get(server + "/health")[0] == 200


def test_fuzzed_bodies_never_get_a_5xx(server):
  """Hypothesis draws JSON bodies, most of them near valid ones (known fields, values of
  any type), some arbitrary bytes; every answer is 200 or a 4xx naming the problem."""
  from hypothesis import HealthCheck, given, settings
  from hypothesis import strategies as st

  scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
  values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
      st.text(max_size=8), inner, max_size=4), max_leaves=12)
  near_valid = st.fixed_dictionaries(
      {"texts": st.lists(st.text(max_size=40), min_size=1, max_size=4)},
      optional={k: values for k in native_api.FIELDS if k != "texts"})
  bodies = near_valid.map(lambda b: json.dumps(b).encode()) | values.map(
      lambda v: json.dumps(v).encode()) | st.binary(max_size=200)

  statuses = []

  @settings(max_examples=150, deadline=None, derandomize=True,
            suppress_health_check=list(HealthCheck))
  @given(bodies)
  def check(raw):
    status, answer = post(server, None, raw)
    statuses.append(status)
    assert status == 200 or (400 <= status < 500 and answer["error"]), (raw, status, answer)

  check()
  assert statuses.count(200) > 0 and len(set(statuses)) > 2
  assert get(server + "/health")[0] == 200


def test_metrics_count_requests_texts_batches_and_latency(server):
  from prometheus_client.parser import text_string_to_metric_families

  def scrape():
    with urllib.request.urlopen(server + "/metrics", timeout=30) as r:
      assert r.headers["Content-Type"].startswith("text/plain")
      return {s.name + json.dumps(s.labels, sort_keys=True): s.value
              for family in text_string_to_metric_families(r.read().decode())
              for s in family.samples}

  before = scrape()
  assert post(server, {"texts": SOURCES[:3]})[0] == 200
  assert post(server, {"text": "A dog.", "beam_size": 0})[0] == 422
  after = scrape()
  ok = 'seq2seq_requests_total{"path": "/translate", "status": "200"}'
  bad = 'seq2seq_requests_total{"path": "/translate", "status": "422"}'
  assert after[ok] - before.get(ok, 0) == 1 and after[bad] - before.get(bad, 0) == 1
  model = '{"model": "tiny"}'  # the batches' metrics are labelled by model
  assert after["seq2seq_texts_total" + model] - before["seq2seq_texts_total" + model] == 3
  assert after["seq2seq_batch_texts_count" + model] > before["seq2seq_batch_texts_count" + model]
  assert after["seq2seq_request_seconds_count{}"] - before["seq2seq_request_seconds_count{}"] == 2
  assert "seq2seq_queue_texts" + model in after


def test_openapi_schema_describes_what_the_server_accepts(server):
  status, schema = get(server + "/openapi.json")
  assert status == 200 and schema["openapi"].startswith("3.1")
  assert set(schema["paths"]) == {"/", "/translate", "/health", "/metrics", "/openapi.json",
                                  "/translate_file", "/download_file/{filename}",
                                  "/languages", "/detect", "/frontend/settings"}
  request = schema["paths"]["/translate"]["post"]["requestBody"]["content"][
      "application/json"]["schema"]
  assert set(request["properties"]) == set(native_api.FIELDS)
  assert request["properties"]["texts"]["maxItems"] == 8
  # a body of every field the schema lists, each at a valid value, is accepted
  body = {"text": "A dog.", "beam_size": 2, "alpha": 0.5, "nbest": 2, "prefix": "Ein"}
  assert set(body) <= set(request["properties"]) and post(server, body)[0] == 200
  responses = schema["paths"]["/translate"]["post"]["responses"]
  assert {"200", "400", "413", "415", "422", "429", "503"} <= set(responses)


def test_access_log_is_one_json_line_per_request(trained_run):
  proc, url = start_server("--workdir", trained_run)
  post(url, {"texts": ["A dog.", "A cat."]})
  post(url, {"text": "A dog.", "beam_size": 0})
  out = stop_server(proc)
  lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
  translate = [line for line in lines if line["path"] == "/translate"]
  assert [(line["status"], line["texts"]) for line in translate] == [(200, 2), (422, 0)]
  assert all(line["method"] == "POST" and line["ms"] >= 0 for line in translate)


def test_health_is_503_until_the_model_is_loaded_and_compiled(trained_run):
  import threading

  from starlette.testclient import TestClient

  from seq2seq.serving.http_server import create_app

  release = threading.Event()

  def load():
    release.wait(60)
    return Translator.load(trained_run)

  with TestClient(create_app(load=load, info={"engine": "jax"})) as client:
    response = client.get("/health")
    assert response.status_code == 503 and response.json()["status"] == "loading"
    response = client.post("/translate", json={"text": "A dog."})
    assert response.status_code == 503 and "loading" in response.json()["error"]
    assert response.headers["Retry-After"] == "5"
    release.set()
    for _ in range(600):
      if client.get("/health").status_code == 200:
        break
      threading.Event().wait(0.1)
    assert client.post("/translate", json={"text": "A dog."}).status_code == 200


def test_health_the_openapi_document_and_the_page_name_the_run_s_languages(trained_run):
  from starlette.testclient import TestClient

  from seq2seq.serving.http_server import create_app

  translator = Translator.load(trained_run)
  assert translator.languages == ("en", "de")  # the run's data.src_lang, data.tgt_lang
  translator.languages = ("fr", "en")  # as a French-English run would load
  with TestClient(create_app(translator, info={"engine": "jax"})) as client:
    assert client.get("/health").json()["languages"] == {"source": "fr", "target": "en"}
    assert "from fr to en" in client.get("/openapi.json").json()["info"]["description"]
    assert "English" not in client.get("/").text  # the page asks /health for the names


def test_bad_model_directory_is_one_line(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "seq2seq.cli.serve", "--workdir", str(tmp_path)],
                        cwd=ROOT, capture_output=True, timeout=120)
  assert proc.returncode == 1 and b"is not a run directory" in proc.stderr
  assert len(proc.stderr.decode().strip().splitlines()) == 1


def test_reload_every_serves_a_newer_checkpoint_without_dropping_requests(trained_run,
                                                                         tmp_path):
  """A run that trains beside the server: each new complete 'latest' checkpoint is
  swapped in (--reload-every); requests before, during and after the swap all succeed."""
  import shutil

  import jax

  from seq2seq.rundir import checkpoint, run_files

  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  cfg = run_files.load_config(run)
  proc, url = start_server("--workdir", run, "--checkpoint", "latest", "--reload-every", "0.5")
  try:
    step = get(url + "/health")[1]["step"]
    before = post(url, {"texts": SOURCES[:4]})
    assert before == (200, {"translations": Translator.load(run, "latest").translate(
        SOURCES[:4])})
    params, meta = checkpoint.load_params(run, "latest", cfg.model)
    scaled = jax.tree_util.tree_map(lambda x: x * 0.7, params)  # other translations
    checkpoint.save_params(run, "latest", step + 1, scaled, {"step": step + 1})
    deadline = time.time() + 60
    while get(url + "/health")[1]["step"] != step + 1:
      assert post(url, {"texts": SOURCES[:4]})[0] == 200  # served throughout
      assert time.time() < deadline, "the newer checkpoint was not swapped in"
    after = post(url, {"texts": SOURCES[:4]})
    want = Translator.load(run, "latest").translate(SOURCES[:4])
    assert after == (200, {"translations": want}) and want != before[1]["translations"]
  finally:
    log = stop_server(proc)
  assert f"now serving the 'latest' checkpoint of step {step + 1}" in log


GLOSSARY = {"dog": "Hund", "man": "Herr|Herrn"}


def test_a_request_s_glossary_gives_what_the_translator_gives_with_it(server, translator):
  texts = [s for s in SOURCES if " dog" in s or " man " in s][:4] + [SOURCES[1]]
  status, body = post(server, {"texts": texts, "beam_size": 2, "glossary": GLOSSARY})
  assert status == 200, body
  assert body["translations"] == translator.translate(texts, beam_size=2, glossary=GLOSSARY)


@pytest.mark.parametrize("glossary, status, words", [
    (["dog", "Hund"], 422, "glossary must be an object"),
    ({"dog": 3}, 422, "the target must be a string"),
    ({"dog": " | "}, 422, "the target of 'dog' is empty"),
    ({f"w{i}": "x" for i in range(65)}, 413, "65 glossary terms; at most 64"),
    ({"dog": "|".join("abcdefghi")}, 413, "more than 8 alternatives"),
])
def test_a_bad_glossary_field_is_a_4xx_naming_it(server, glossary, status, words):
  got, body = post(server, {"text": "A dog.", "glossary": glossary})
  assert got == status and words in body["error"], body


def test_a_glossary_does_not_go_with_sampling(server):
  got, body = post(server, {"text": "A dog.", "glossary": GLOSSARY, "sampling": {"seed": 1}})
  assert got == 422 and "goes with beam search" in body["error"]


def test_the_server_s_glossary_applies_to_every_request_and_a_request_s_adds_to_it(
    trained_run, translator, tmp_path):
  path = tmp_path / "terms.tsv"
  path.write_text("dog\tHund\nstreet\tStraße\n", "utf-8")
  proc, url = start_server("--workdir", trained_run, "--glossary", path)
  try:
    text = "A dog runs on the street with a man."
    status, body = post(url, {"text": text, "beam_size": 2})
    assert body["translation"] == translator.translate(
        text, beam_size=2, glossary={"dog": "Hund", "street": "Straße"})
    status, body = post(url, {"text": text, "beam_size": 2, "glossary": {"Dog": "Köter"}})
    assert body["translation"] == translator.translate(
        text, beam_size=2, glossary={"street": "Straße", "Dog": "Köter"})
    lt = json.loads(urllib.request.urlopen(urllib.request.Request(
        url + "/translate", data=json.dumps({"q": text, "source": "en", "target": "de",
                                              "glossary": {"man": "Herr"}}).encode(),
        headers={"Content-Type": "application/json"})).read())
    assert lt["translatedText"] == translator.translate(
        text, glossary={"dog": "Hund", "street": "Straße", "man": "Herr"})
  finally:
    stop_server(proc)


def test_a_malformed_file_is_a_4xx_naming_it_and_the_server_goes_on(trained_run, tmp_path):
  import zipfile

  from starlette.testclient import TestClient

  from seq2seq.serving.http_server import create_app
  entity = io.BytesIO()
  with zipfile.ZipFile(entity, "w") as z:  # a zip whose XML declares an entity
    z.writestr("[Content_Types].xml", '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aa">]>'
               "<Types>&a;</Types>")
  broken = {"a.srt": b"1\n00:00:01,000 --> garbage\nHello.\n", "b.vtt": b"no vtt here\n",
            "c.docx": b"not a zip", "d.docx": entity.getvalue(),
            "e.docx": b"PK\x03\x04" + bytes(40), "f.txt": bytes(range(256)) * 8,
            "g.md": b"\xef\xbb\xbfok \xff\xfe", "h.odt": b"PK\x03\x04" + bytes(40),
            "i.pptx": b"not a zip", "j.epub": entity.getvalue(), "k.pdf": b"%PDF-1.7"}
  bomb = io.BytesIO()  # a small upload that unpacks to 600 MB
  with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
    for k in range(6):
      z.writestr(f"part{k}.xml", b"\0" * (100 << 20))
  broken["l.odt"] = broken["m.docx"] = bomb.getvalue()
  pandoc = shutil.which("pandoc")
  if pandoc:  # real documents of each zipped format, cut short
    source = tmp_path / "a.md"
    source.write_text("# A dog\n\nA man is **running** in the park.\n")
    for fmt in ("docx", "odt", "pptx", "epub"):
      subprocess.run([pandoc, source, "-o", tmp_path / f"whole.{fmt}"], check=True)
      whole = (tmp_path / f"whole.{fmt}").read_bytes()
      broken[f"cut.{fmt}"] = whole[:len(whole) // 2]
  with TestClient(create_app(Translator.load(trained_run), info={"engine": "jax"})) as client:
    for name, data in broken.items():
      got = client.post("/translate_file", data={"source": "en", "target": "de"},
                        files={"file": (name, data)})
      assert got.status_code == 400 and name in got.json()["error"], (name, got.text)
    got = client.post("/translate_file", data={"source": "en", "target": "de"},
                      files={"file": ("ok.srt", "1\n00:00:01,000 --> 00:00:02,000\n"
                                      "Two dogs are playing.\n".encode("cp1252"))})
    assert got.status_code == 200, got.text
    assert client.get("/health").json()["status"] == "ready"
