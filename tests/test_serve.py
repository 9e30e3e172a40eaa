"""seq2seq-serve on 127.0.0.1 with the tiny run: answers equal Translator's, concurrent
requests are batched and each gets its own lines in order, bad requests get a 4xx."""

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from seq2seq import Translator
from seq2seq.corpus import read_lines

from helpers import ROOT, SAMPLE


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(trained_run):
  port = _free_port()
  proc = subprocess.Popen([sys.executable, "-m", "seq2seq.serve", "--workdir", str(trained_run),
                           "--port", str(port), "--max-texts", "8", "--max-chars", "300"],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  url = f"http://127.0.0.1:{port}"
  deadline = time.time() + 300
  while True:
    try:
      if get(url + "/health")[0] == 200:
        break
    except OSError:
      pass
    if proc.poll() is not None or time.time() > deadline:
      proc.kill()
      raise AssertionError("server did not start:\n" + proc.stdout.read().decode()[-3000:])
    time.sleep(0.5)
  yield url
  proc.terminate()
  proc.wait(30)


def get(url):
  with urllib.request.urlopen(url, timeout=60) as r:
    return r.status, json.loads(r.read())


def post(url, body, raw: bytes | None = None):
  data = raw if raw is not None else json.dumps(body).encode()
  request = urllib.request.Request(url + "/translate", data=data,
                                   headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(request, timeout=300) as r:
      return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read())


SOURCES = read_lines(SAMPLE / "test.en")[:64]


def test_translations_equal_the_translators(server, trained_run):
  t = Translator.load(trained_run)
  assert post(server, {"text": SOURCES[0]}) == (200, {"translation": t.translate(SOURCES[0])})
  status, body = post(server, {"texts": SOURCES[:5], "beam_size": 3, "alpha": 0.6})
  assert status == 200
  assert body["translations"] == t.translate(SOURCES[:5], beam_size=3, alpha=0.6)


def test_64_concurrent_requests_each_get_their_own_lines_in_order(server, trained_run):
  expected = Translator.load(trained_run).translate(SOURCES)
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


@pytest.mark.parametrize("raw, body, status, message", [
    (b"{not json", None, 400, "not valid JSON"),
    (None, ["a list"], 400, "must be a JSON object"),
    (None, {"txt": "A dog."}, 422, 'exactly one of "text"'),
    (None, {"texts": []}, 422, '"texts" is empty'),
    (None, {"texts": ["a", 3]}, 422, "a list of strings"),
    (None, {"text": "a" * 301}, 413, "text 0 has 301 characters; at most 300"),
    (None, {"texts": ["a"] * 9}, 413, "9 texts in one request; at most 8"),
    (None, {"text": "A dog.", "beam_size": 0}, 422, "beam_size must be an integer from 1"),
    (None, {"text": "A dog.", "alpha": "high"}, 422, "alpha must be a number"),
])
def test_bad_requests_get_4xx_and_the_server_keeps_serving(server, raw, body, status, message):
  got_status, got = post(server, body, raw)
  assert got_status == status and message in got["error"], got
  health_status, health = get(server + "/health")
  assert health_status == 200 and health["status"] == "ok" and health["checkpoint"] == "best"
  assert post(server, {"text": "A dog."})[0] == 200
