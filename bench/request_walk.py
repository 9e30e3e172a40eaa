"""The walk of one request through the serving modules, followed by the interpreter's own
profiler: which module calls which, in order, from the route to the batcher.

  python bench/request_walk.py

Serves a stand-in engine (it answers at once) in process and sends the requests of
`REQUESTS` (the native API, LibreTranslate's JSON, a pivot): for each it prints the
serving modules on the stack when the texts reach a batcher (the way down: each module
should be there once) and every call from one serving module into another while the
request is answered (the stays: how often the request enters each module, side calls to
shared helpers included; a coroutine resumed after an await is no new entry). The last
line is the JSON of all of it.
"""

import argparse
import inspect
import sys
import threading
import time

from common import add_results_flag, report

MODULE = "seq2seq.serving."
REQUESTS = {
    "native": {"texts": ["A dog runs.", "A cat sleeps."], "beam_size": 2, "nbest": 2},
    "libretranslate": {"q": "A dog runs.", "source": "en", "target": "de", "alternatives": 1},
    "pivot": {"q": "Ein Hund läuft.", "source": "de", "target": "fr"},
}


class Instant:
  """A stand-in engine of one direction: "<" + the text, at once."""

  def __init__(self, source: str, target: str):
    from seq2seq.decoding.engine import EngineLimits
    from seq2seq.decoding.engine_io import SearchSettings
    self.directions = ((source, target),)
    self.defaults, self.limits = SearchSettings(beam_size=2), EngineLimits(128, 126)

  def describe(self):
    return {"engine": "instant"}

  def check(self, texts, prefixes=None):
    pass

  def warm_up(self, max_batch, longest=64, also=()):
    pass

  def translate(self, texts, settings=None, **_):
    from seq2seq.decoding.engine_io import Hypothesis
    if settings is not None and settings.nbest:
      return [[Hypothesis("<" + t, 0.0, [])] * settings.nbest for t in texts]
    return ["<" + t for t in texts]


def short(module: str) -> str:
  return module[len(MODULE):] if module.startswith(MODULE) else module


def walk(body: dict) -> dict:
  """{"down": the serving modules on the stack at the batcher, outermost first,
  "stays": the serving modules the request was in, in order, each run of calls in one
  module counted once}."""
  from starlette.testclient import TestClient

  from seq2seq.serving import dynamic_batching
  from seq2seq.serving.http_server import create_app

  down: list[list[str]] = []
  submit = dynamic_batching.Batcher.submit

  async def watched(self, *args, **kwargs):
    frame, chain = sys._getframe(0), []
    while frame is not None:
      module = frame.f_globals.get("__name__", "")
      if module.startswith(MODULE) and (not chain or chain[-1] != short(module)):
        chain.append(short(module))
      frame = frame.f_back
    down.append(chain[::-1])
    return await submit(self, *args, **kwargs)

  stays: list[str] = []
  answering = threading.Event()

  # A coroutine that awaits returns to the event loop and is called again when it resumes:
  # its frame is held here (so that no new frame takes its id) and its resumption is no
  # new entry.
  suspended: dict[int, object] = {}
  resumable = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR

  def profile(frame, event, arg):
    if not answering.is_set():
      return
    if event == "return" and frame.f_code.co_flags & resumable:
      suspended[id(frame)] = frame
      return
    if event != "call" or suspended.pop(id(frame), None) is frame:
      return
    module = frame.f_globals.get("__name__", "")
    caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
    if module.startswith(MODULE) and module != caller and (not stays or stays[-1] != short(module)):
      stays.append(short(module))

  engines = [(f"{s}-{t}", Instant(s, t)) for s, t in (("en", "de"), ("de", "en"), ("en", "fr"))]
  dynamic_batching.Batcher.submit = watched
  threading.setprofile(profile)  # the app's threads, started below
  try:
    with TestClient(create_app(load=lambda: engines, info={"engine": "instant"})) as client:
      while client.get("/health").status_code != 200:
        time.sleep(0.05)
      answering.set()
      answer = client.post("/translate", json=body)
      answering.clear()
  finally:
    threading.setprofile(None)
    dynamic_batching.Batcher.submit = submit
  assert answer.status_code == 200, answer.text
  return {"down": down, "stays": stays,
          "entered": {m: stays.count(m) for m in dict.fromkeys(stays)}}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  add_results_flag(p)
  args = p.parse_args()
  result = {}
  for name, body in REQUESTS.items():
    result[name] = found = walk(body)
    print(f"{name}: down {' → '.join(found['down'][0])}")
    print(f"  {len(found['stays'])} stays in {len(found['entered'])} modules: "
          + ", ".join(f"{m} {n}" for m, n in found["entered"].items()))
  report(args.results, result)


if __name__ == "__main__":
  main()
