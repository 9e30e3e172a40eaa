"""Every route against hostile input: one client's bad text never fails another's, bad
values get a 4xx in JSON (never a 500 or plain text), run-alone requests count against
the queue, a slow client gets a 408, the defaults are checked against the limits at
start, and /health names no path of this machine."""

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

from helpers import ROOT, SAMPLE
from serve_helpers import get, start_server, stop_server

SOURCES = (SAMPLE / "test.en").read_text().splitlines()[:40]
KEY = "k-1"


@pytest.fixture(scope="module")
def server(trained_run, tmp_path_factory):
  keys = tmp_path_factory.mktemp("keys") / "keys.txt"
  keys.write_text(f"  # a note, indented\n{KEY}\n")
  proc, url = start_server("--workdir", trained_run, "--api-keys", keys, "--max-queue", "40",
                           "--read-timeout-s", "2")
  yield url, Translator.load(trained_run)
  stop_server(proc)


def raw(url, path, body: bytes, content_type="application/json"):
  """(status, content type, body) of a POST, whatever it answers."""
  request = urllib.request.Request(url + path, data=body, headers={"Content-Type": content_type})
  try:
    with urllib.request.urlopen(request, timeout=300) as r:
      return r.status, r.headers.get("content-type"), r.read()
  except urllib.error.HTTPError as e:
    return e.code, e.headers.get("content-type"), e.read()


def lt(url, params):
  status, kind, body = raw(url, "/translate", json.dumps(params).encode())
  return status, json.loads(body)


def test_a_lone_surrogate_fails_its_own_request_only(server):
  url, translator = server
  ordinary = [{"q": text, "source": "en", "target": "de", "api_key": KEY} for text in SOURCES]
  bad = {"q": "A dog \ud800 runs.", "source": "en", "target": "de", "api_key": KEY}
  with ThreadPoolExecutor(41) as pool:
    answers = list(pool.map(lambda p: lt(url, p), ordinary + [bad]))
  assert answers[-1][0] == 400 and "lone surrogate" in answers[-1][1]["error"]
  assert [a[0] for a in answers[:-1]] == [200] * len(SOURCES)
  assert [a[1]["translatedText"] for a in answers[:-1]] == translator.translate(SOURCES)


@pytest.mark.parametrize("path, body, status", [
    ("/translate", {"q": "A dog.", "source": "en", "target": "de", "api_key": []}, 403),
    ("/translate", {"q": "A dog.", "source": "en", "target": "de", "api_key": {"a": 1}}, 403),
    ("/translate", b'{"q": "A dog.", "source": "en", "target": "de", "api_key": "k-1", '
                   b'"alternatives": 1e400}', 400),
    ("/translate", {"q": "A dog.", "source": "en", "target": "de", "api_key": KEY,
                    "alternatives": True}, 400),
    ("/detect", b"[" * 200_000, 400),
    ("/languages", b"[" * 200_000, 400),
    ("/detect", b'{"q": NaN}', 400),
])
def test_bad_values_get_a_4xx_in_json(server, path, body, status):
  url, _ = server
  data = body if isinstance(body, bytes) else json.dumps(body).encode()
  got, kind, answer = raw(url, path, data)
  assert got == status and kind == "application/json", answer[:200]
  assert set(json.loads(answer)) == {"error"}


def test_a_note_in_the_keys_file_is_not_a_key(server):
  url, _ = server
  for key in ("# a note, indented", "  # a note, indented"):
    assert lt(url, {"q": "A dog.", "source": "en", "target": "de", "api_key": key})[0] == 403


def test_attention_requests_count_against_the_queue(server):
  url, _ = server
  body = json.dumps({"text": SOURCES[0], "attention": True}).encode()
  headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}

  def attention(_):
    request = urllib.request.Request(url + "/translate", data=body, headers=headers)
    try:
      with urllib.request.urlopen(request, timeout=300) as r:
        return r.status
    except urllib.error.HTTPError as e:
      return e.code
  with ThreadPoolExecutor(80) as pool:
    statuses = list(pool.map(attention, range(80)))
  assert set(statuses) <= {200, 429} and 429 in statuses and 200 in statuses


def test_a_slow_client_gets_a_408_and_the_server_keeps_serving(server):
  url, translator = server
  host, port = url.removeprefix("http://").split(":")
  with socket.create_connection((host, int(port)), timeout=30) as s:
    s.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n{")
    started = time.time()
    answer = b""
    while b"\r\n\r\n" not in answer and time.time() - started < 20:
      try:
        s.sendall(b" ")
      except OSError:
        break
      time.sleep(0.5)
      s.settimeout(0.1)
      try:
        answer += s.recv(4096)
      except socket.timeout:
        pass
  assert answer.startswith(b"HTTP/1.1 408") and time.time() - started < 10
  status, body = lt(url, {"q": SOURCES[0], "source": "en", "target": "de", "api_key": KEY})
  assert status == 200 and body["translatedText"] == translator.translate(SOURCES[0])


def test_health_names_no_path_of_this_machine(server, trained_run):
  url, _ = server
  status, health = get(url + "/health")
  assert status == 200 and health["model"] == trained_run.name
  assert str(trained_run.parent) not in json.dumps(health)


def test_a_default_beam_beyond_the_limit_refuses_to_start(trained_run):
  command = [sys.executable, "-m", "seq2seq.cli.serve", "--workdir", str(trained_run)]
  done = subprocess.run(command + ["--beam", "32", "--max-beam", "16"], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode != 0 and "--beam is 32, beyond --max-beam 16" in done.stderr
  done = subprocess.run(command + ["--alpha", "50"], cwd=ROOT, capture_output=True, text=True,
                        timeout=300)
  assert done.returncode != 0 and "--alpha is 50.0, outside 0 to 10" in done.stderr
  config = json.loads((trained_run / "config.json").read_text())
  done = subprocess.run(command + ["--max-beam", str(config["decode"]["beam_size"] - 1)],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
  if config["decode"]["beam_size"] > 1:
    assert done.returncode != 0 and "the run's decode.beam_size" in done.stderr
