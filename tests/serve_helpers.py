"""Helpers of the server tests: start seq2seq-serve on a free loopback port, talk to it."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from helpers import ROOT


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


# The suite's servers batch up to 8 texts unless a test says otherwise: a JAX server
# compiles its searches for every power of two of rows up to --max-batch (1 and the
# largest before it says ready, the rest on a thread while it serves), and a cold start on
# the tiny run took 16 s of CPU at 64 rows against 7 s at 8. The batching is the same code.
MAX_BATCH = 8


def start_server(*args, timeout: float = 300):
  """(process, url) of a server started with `args` (and --max-batch MAX_BATCH unless they
  give one), once /health says ready. Its output goes to a file (a pipe nobody reads would
  fill and stop it); `stop_server` returns it."""
  args = tuple(map(str, args))
  if "--max-batch" not in args:
    args += ("--max-batch", str(MAX_BATCH))
  port = free_port()
  log = tempfile.TemporaryFile()
  proc = subprocess.Popen([sys.executable, "-m", "seq2seq.cli.serve", *args,
                           "--port", str(port)], cwd=ROOT, stdout=log,
                          stderr=subprocess.STDOUT)
  proc.log = log
  url = f"http://127.0.0.1:{port}"
  deadline = time.time() + timeout
  while True:
    try:
      if get(url + "/health")[0] == 200:
        return proc, url
    except OSError:
      pass
    if proc.poll() is not None or time.time() > deadline:
      proc.kill()
      proc.wait()
      log.seek(0)
      raise AssertionError("server did not start:\n" + log.read().decode()[-3000:])
    time.sleep(0.3)


def wait_for_all_batch_rows(url, max_batch: int = MAX_BATCH, timeout: float = 600) -> None:
  """Waits until a JAX server has compiled its batches of every row count (1, 2, 4, ...
  max_batch), which it does on a thread after it says ready."""
  want = [1 << k for k in range(max_batch.bit_length())]
  deadline = time.time() + timeout
  while get(url + "/health")[1]["batch_rows"] != want:
    assert time.time() < deadline, get(url + "/health")[1]
    time.sleep(0.5)


def stop_server(proc) -> str:
  """Stops the server with SIGTERM (as a service manager does); returns its log."""
  proc.send_signal(signal.SIGTERM)
  proc.wait(timeout=120)
  proc.log.seek(0)
  return proc.log.read().decode()


def get(url):
  try:
    with urllib.request.urlopen(url, timeout=60) as r:
      return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read())


def post(url, body, raw: bytes | None = None, content_type="application/json",
         timeout: float = 300, headers: dict | None = None):
  """(status, JSON answer) of POST /translate; with `headers`, the answer's go there
  (names in lower case)."""
  data = raw if raw is not None else json.dumps(body).encode()
  request = urllib.request.Request(url + "/translate", data=data,
                                   headers={"Content-Type": content_type})
  try:
    with urllib.request.urlopen(request, timeout=timeout) as r:
      if headers is not None:
        headers.update((k.lower(), v) for k, v in r.headers.items())
      return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e:
    if headers is not None:
      headers.update((k.lower(), v) for k, v in e.headers.items())
    return e.code, json.loads(e.read())


@contextlib.contextmanager
def browser_page():
  """A page of headless Chromium, driven through playwright (skips where either is
  missing)."""
  playwright = pytest.importorskip("playwright.sync_api", reason="playwright is a test extra")
  with playwright.sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium(), headless=True,
                                args=["--no-sandbox"])
    try:
      yield browser.new_page()
    finally:
      browser.close()


def chromium() -> str:
  path = os.environ.get("SEQ2SEQ_CHROMIUM") or shutil.which("chromium") or shutil.which(
      "chromium-browser")
  if not path:
    pytest.skip("no chromium to drive (Debian: apt-get install chromium; .ci/run does)")
  return path


def sample_with(folder, code: str):
  """The sample (data/sample) in `folder`, with its German also under the language code
  `code`: a third language for routes and pivots, whose words do not matter."""
  import shutil

  from helpers import SAMPLE
  folder.mkdir(parents=True, exist_ok=True)
  for split in ("train", "val", "test"):
    for lang in ("en", "de"):
      shutil.copy(SAMPLE / f"{split}.{lang}", folder / f"{split}.{lang}")
    shutil.copy(SAMPLE / f"{split}.de", folder / f"{split}.{code}")
  return folder


def train_direction(folder, data, src: str, tgt: str) -> None:
  """A tiny run (one layer per stack, 200 updates) of `src`→`tgt` on the files in `data`."""
  from conftest import run_cli
  run_cli("train.py", "--config", "configs/tiny.py", "--workdir", folder,
          f"--config.data.dir={data}", f"--config.data.src_lang={src}",
          f"--config.data.tgt_lang={tgt}", "--config.model.encoder_layers=1",
          "--config.model.decoder_layers=1", "--config.train.max_steps=200",
          "--config.train.eval_every=200", "--config.train.checkpoint_every=200")
