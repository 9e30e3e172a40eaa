"""HTTP server: seq2seq-serve --workdir RUN [--host 127.0.0.1] [--port 8080].

Starlette under uvicorn (`pip install 'seq2seq-haiku[serve]'`).

  POST /translate  {"text": "..."} -> {"translation": "..."}
                   {"texts": ["...", ...]} -> {"translations": [...]}
                   optional "beam_size" and "alpha"; the run's settings otherwise
  GET  /health     {"status": "ok", "workdir": ..., "checkpoint": ..., and counts of the
                   requests, texts and batches decoded so far}

Dynamic batching: texts of requests that arrive together (within --max-wait-ms of the
first, up to --max-batch texts) are translated in one call, grouped by search settings,
so throughput under concurrent requests approaches batch decoding speed. Decoding runs
in one worker thread; translations do not depend on the batch they are decoded in.
Bad requests get a 4xx JSON error {"error": "..."} that names the problem.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from seq2seq import checkpoint, cli
from seq2seq.translator import Translator

log = logging.getLogger("seq2seq.serve")


@dataclasses.dataclass(frozen=True)
class Limits:
  max_texts: int = 64  # texts in one request
  max_chars: int = 2000  # characters in one text
  max_beam: int = 16
  max_batch: int = 64  # texts decoded together
  max_wait_ms: float = 10.0  # how long the first text of a batch waits for company


class RequestError(ValueError):
  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status


def parse_request(body: Any, limits: Limits, default_beam: int) -> tuple[list[str], bool, dict]:
  """(texts, whether one text was sent, search settings) of a /translate body."""
  if not isinstance(body, dict):
    raise RequestError(400, "the body must be a JSON object")
  if ("text" in body) == ("texts" in body):
    raise RequestError(422, 'give exactly one of "text" (a string) or "texts" (a list)')
  single = "text" in body
  texts = [body["text"]] if single else body["texts"]
  if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
    raise RequestError(422, '"text" must be a string and "texts" a list of strings')
  if not texts:
    raise RequestError(422, '"texts" is empty')
  if len(texts) > limits.max_texts:
    raise RequestError(413, f"{len(texts)} texts in one request; at most {limits.max_texts}")
  for i, t in enumerate(texts):
    if len(t) > limits.max_chars:
      raise RequestError(413, f"text {i} has {len(t)} characters; at most {limits.max_chars}")
  unknown = sorted(set(body) - {"text", "texts", "beam_size", "alpha"})
  if unknown:
    raise RequestError(422, f"unknown field(s) {', '.join(unknown)}; known: text, texts, "
                            "beam_size, alpha")
  beam = body.get("beam_size", default_beam)
  if isinstance(beam, bool) or not isinstance(beam, int) or not 1 <= beam <= limits.max_beam:
    raise RequestError(422, f"beam_size must be an integer from 1 to {limits.max_beam}, "
                            f"got {beam!r}")
  settings = {"beam_size": beam}
  if "alpha" in body:
    alpha = body["alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 10:
      raise RequestError(422, f"alpha must be a number from 0 to 10, got {alpha!r}")
    settings["alpha"] = float(alpha)
  return texts, single, settings


class Batcher:
  """Collects texts from concurrent requests and translates them together."""

  def __init__(self, translator: Translator, limits: Limits):
    self.translator, self.limits = translator, limits
    self.queue: asyncio.Queue = asyncio.Queue()
    self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode")
    self.task: asyncio.Task | None = None
    self.stats = {"requests": 0, "texts": 0, "batches": 0}  # decoded so far

  def start(self) -> None:
    self.task = asyncio.get_running_loop().create_task(self.run())

  async def stop(self) -> None:
    if self.task is not None:
      self.task.cancel()
    self.executor.shutdown(wait=False)

  async def translate(self, texts: list[str], settings: dict) -> list[str]:
    future = asyncio.get_running_loop().create_future()
    await self.queue.put((texts, settings, future))
    return await future

  async def run(self) -> None:
    loop = asyncio.get_running_loop()
    while True:
      pending = [await self.queue.get()]
      size = len(pending[0][0])
      deadline = loop.time() + self.limits.max_wait_ms / 1000
      while size < self.limits.max_batch:
        timeout = deadline - loop.time()
        if timeout <= 0:
          break
        try:
          item = await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
          break
        pending.append(item)
        size += len(item[0])
      groups: dict[tuple, list] = {}
      for item in pending:
        groups.setdefault(tuple(sorted(item[1].items())), []).append(item)
      for key, items in groups.items():
        texts = [t for item in items for t in item[0]]
        self.stats["requests"] += len(items)
        self.stats["texts"] += len(texts)
        self.stats["batches"] += 1
        try:
          out = await loop.run_in_executor(
              self.executor, functools.partial(self.translator.translate, texts, **dict(key)))
        except Exception as e:  # a failed batch fails its requests, not the server
          log.exception("decoding failed")
          for _, _, future in items:
            if not future.done():
              future.set_exception(e)
          continue
        start = 0
        for request_texts, _, future in items:
          if not future.done():
            future.set_result(out[start:start + len(request_texts)])
          start += len(request_texts)


def create_app(translator: Translator, limits: Limits = Limits(), info: dict | None = None):
  from starlette.applications import Starlette
  from starlette.responses import JSONResponse
  from starlette.routing import Route

  batcher = Batcher(translator, limits)
  default_beam = translator.decode_cfg.beam_size

  async def translate(request):
    try:
      try:
        body = await request.json()
      except ValueError:
        raise RequestError(400, "the body is not valid JSON") from None
      texts, single, settings = parse_request(body, limits, default_beam)
    except RequestError as e:
      return JSONResponse({"error": str(e)}, status_code=e.status)
    t0 = time.perf_counter()
    out = await batcher.translate(texts, settings)
    log.debug("%d texts in %.3f s", len(texts), time.perf_counter() - t0)
    return JSONResponse({"translation": out[0]} if single else {"translations": out})

  async def health(request):
    return JSONResponse({"status": "ok", **(info or {}), **batcher.stats})

  async def not_found(request, exc):
    return JSONResponse({"error": f"no route {request.method} {request.url.path}; "
                                  "use POST /translate or GET /health"},
                        status_code=exc.status_code)

  @contextlib.asynccontextmanager
  async def lifespan(app):
    batcher.start()
    yield
    await batcher.stop()

  return Starlette(routes=[Route("/translate", translate, methods=["POST"]),
                           Route("/health", health, methods=["GET"])],
                   exception_handlers={404: not_found, 405: not_found}, lifespan=lifespan)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  cli.add_model_flags(p)
  cli.add_search_flags(p)
  p.add_argument("--host", default="127.0.0.1", help="address to listen on")
  p.add_argument("--port", type=int, default=8080, help="port to listen on")
  for f in dataclasses.fields(Limits):
    p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default,
                   help=f"limit: {f.name.replace('_', ' ')}")
  args = p.parse_args(argv)
  cli.check_search_flags(p, args)
  limits = Limits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Limits)})
  if limits.max_batch < 1 or limits.max_texts < 1 or limits.max_beam < 1:
    p.error("--max-batch, --max-texts and --max-beam must be at least 1")
  try:
    import uvicorn
  except ImportError:
    sys.exit("error: seq2seq-serve needs starlette and uvicorn: "
             "pip install 'seq2seq-haiku[serve]'")
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
  try:
    translator, settings = cli.load_translator(args)
    translator.decode_cfg = settings  # the flags are the default of every request
  except (checkpoint.CheckpointError, ValueError, OSError) as e:
    sys.exit(f"error: {e}")
  translator.translate(["Warm-up."])  # compile before the first request
  info = {"workdir": args.workdir, "checkpoint": args.checkpoint}
  uvicorn.run(create_app(translator, limits, info), host=args.host, port=args.port,
              log_level="warning")


if __name__ == "__main__":
  main()
