"""Dynamic batching for seq2seq-serve: the texts of concurrent requests decoded together.

Every text waits in one bounded queue (`Limits.max_queue` texts; past it a request gets
429 with a Retry-After from the measured decoding rate). A batch takes the texts that wait
with the same search settings, oldest first, up to `Limits.max_batch`, the engine sorts
them by length, and `workers` batches decode at once on threads (XLA:CPU and CTranslate2
run one batch mostly on one core), while the event loop keeps reading requests. The texts
that wait when several decoders are free are shared out among them (64 texts and 2 free
decoders: two batches of 32 at once, not one of 64 that leaves a core idle). When the
decoders are idle a lone text goes at once; while one is busy, a batch waits up to
`Limits.max_wait_ms` for company, and so it does while texts keep arriving when recent
batches held several (many clients, each sending its next text as its answer comes). A
request unanswered after `Limits.timeout_s` gets 503 and its texts leave the queue.
Translations do not depend on the batch they are in; samples do not either (a sampled
request is decoded on its own, its seed its own).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import math
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from seq2seq.decoding.engine_io import SearchSettings
from seq2seq.serving.http_api import Limits, RequestError

# While the decoders are idle after batches of several texts, a batch goes once no text has
# arrived for this long (or after Limits.max_wait_ms, or full).
QUIET_MS = 2.0


class Metrics:
  """The server's Prometheus metrics, in a registry of its own; those of the batches are
  labelled by model (`for_model`)."""

  def __init__(self):
    import prometheus_client as prom
    self.registry = prom.CollectorRegistry()
    kw = {"registry": self.registry}
    self.requests = prom.Counter("seq2seq_requests", "HTTP requests answered, by path and "
                                 "status", ["path", "status"], **kw)
    self.texts = prom.Counter("seq2seq_texts", "texts translated", ["model"], **kw)
    self.batch = prom.Histogram("seq2seq_batch_texts", "texts per decoded batch", ["model"],
                                buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), **kw)
    self.queue = prom.Gauge("seq2seq_queue_texts", "texts waiting to be decoded", ["model"],
                            **kw)
    self.latency = prom.Histogram("seq2seq_request_seconds", "time to answer a /translate "
                                  "request", buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5,
                                                      10, 30, 60), **kw)
    self.decode = prom.Histogram("seq2seq_batch_seconds", "time to decode one batch",
                                 ["model"], buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5,
                                                     10), **kw)

  def for_model(self, name: str) -> types.SimpleNamespace:
    """The batch metrics of one model, as a `Batcher` records them."""
    return types.SimpleNamespace(texts=self.texts.labels(name), batch=self.batch.labels(name),
                                 queue=self.queue.labels(name), decode=self.decode.labels(name))

  def exposition(self) -> tuple[bytes, str]:
    import prometheus_client as prom
    return prom.generate_latest(self.registry), prom.CONTENT_TYPE_LATEST


@dataclasses.dataclass(eq=False)
class Job:
  """One request's texts, decoded with its search settings (and prefixes, one per text)."""

  texts: list[str]
  settings: SearchSettings
  prefixes: list[str] | None
  future: asyncio.Future
  results: list[Any]
  remaining: int
  number: int  # arrival order; a sampled request is batched alone
  cancelled: bool = False

  @property
  def batch_key(self) -> tuple[SearchSettings, bool]:
    """Jobs of equal keys decode together: equal settings, prefixed or not."""
    return self.settings, self.prefixes is not None


class Batcher:
  """Queues the texts of requests and decodes them in batches on `workers` threads."""

  def __init__(self, translate: Callable[..., list], limits: Limits, metrics: Any,
               workers: int = 2, quiet_ms: float = QUIET_MS):
    self.translate_fn, self.limits, self.metrics = translate, limits, metrics
    self.alone = 0  # texts of run_alone requests waiting or running
    self.pending: collections.deque[tuple[Job, int]] = collections.deque()
    self.workers, self.busy = workers, 0
    self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decode")
    self.numbers = itertools.count()
    self.rate = 0.0  # texts/s of recent batches, for Retry-After
    self.recent = 1.0  # texts per batch of recent batches
    self.quiet_ms = quiet_ms
    self.closing = False
    self.task: asyncio.Task | None = None
    self.wakeup: asyncio.Event | None = None
    self.stats = {"requests": 0, "texts": 0, "batches": 0}  # decoded so far

  def start(self) -> None:
    self.wakeup = asyncio.Event()
    self.task = asyncio.get_running_loop().create_task(self.run())

  async def stop(self) -> None:
    """Answers what was accepted (within timeout_s), then stops."""
    self.closing = True
    deadline = time.monotonic() + self.limits.timeout_s
    while (self.pending or self.busy) and time.monotonic() < deadline:
      await asyncio.sleep(0.05)
    if self.task is not None:
      self.task.cancel()
    self.executor.shutdown(wait=False, cancel_futures=True)

  def retry_after(self) -> int:
    return max(1, math.ceil(len(self.pending) / max(self.rate, 1.0)))

  async def submit(self, texts: list[str], settings: SearchSettings,
                   prefixes: list[str] | None = None) -> list[Any]:
    """`translate(texts, settings, prefixes, first_index)`'s result per text (a str, or a
    list of hypotheses), the texts decoded in batches with others of equal settings; or
    a RequestError (429: the queue is full; 503: not answered in time)."""
    if self.closing:
      raise RequestError(503, "the server is shutting down", {"Retry-After": "5"})
    if len(self.pending) + len(texts) > self.limits.max_queue:
      raise RequestError(429, f"{len(self.pending)} texts are waiting, at most "
                              f"{self.limits.max_queue}: try again later",
                         {"Retry-After": str(self.retry_after())})
    job = Job(texts, settings, prefixes, asyncio.get_running_loop().create_future(),
              [None] * len(texts), len(texts), next(self.numbers))
    self.pending.extend((job, i) for i in range(len(texts)))
    self.metrics.queue.set(len(self.pending))
    self.wakeup.set()
    try:
      return await asyncio.wait_for(asyncio.shield(job.future), self.limits.timeout_s)
    except asyncio.TimeoutError:
      job.cancelled = True
      self.pending = collections.deque(e for e in self.pending if e[0] is not job)
      self.metrics.queue.set(len(self.pending))
      raise RequestError(503, f"not answered within {self.limits.timeout_s:g} s (the server "
                              "is busy): try again later",
                         {"Retry-After": str(self.retry_after())}) from None

  def take(self, limit: int) -> list[tuple[Job, int]]:
    """The next batch: the oldest text's search settings, up to `limit` (and max_batch)
    texts."""
    while self.pending and self.pending[0][0].cancelled:
      self.pending.popleft()
    if not self.pending:
      return []
    first = self.pending[0][0]
    alone = first.settings.sampling is not None
    limit = min(limit, self.limits.max_batch)
    batch, rest = [], collections.deque()
    for entry in self.pending:
      job = entry[0]
      fits = job is first if alone else (job.batch_key == first.batch_key
                                         and not job.cancelled)
      if fits and len(batch) < limit:
        batch.append(entry)
      elif not job.cancelled:
        rest.append(entry)
    self.pending = rest
    self.metrics.queue.set(len(self.pending))
    return batch

  async def run(self) -> None:
    loop = asyncio.get_running_loop()
    while True:
      while not self.pending or self.busy >= self.workers:
        self.wakeup.clear()
        await self.wakeup.wait()
      if len(self.pending) < self.limits.max_batch and (self.busy or self.recent >= 1.5):
        # Another batch is decoding: wait a little for this one to fill. Or the decoders
        # are idle but recent batches held several texts: clients whose answers just went
        # out are sending their next ones, so wait while they keep coming (up to `quiet_ms`
        # apart), rather than send the first alone and the rest after it.
        deadline = loop.time() + self.limits.max_wait_ms / 1000
        while len(self.pending) < self.limits.max_batch and loop.time() < deadline:
          self.wakeup.clear()
          pause = deadline - loop.time() if self.busy else min(self.quiet_ms / 1000,
                                                               deadline - loop.time())
          try:
            await asyncio.wait_for(self.wakeup.wait(), pause)
          except asyncio.TimeoutError:
            break
      # One batch per free decoder, the waiting texts shared out evenly.
      free = self.workers - self.busy
      share = -(-len(self.pending) // free)
      for _ in range(free):
        batch = self.take(share)
        if not batch:
          break
        self.busy += 1
        loop.create_task(self.decode(batch))

  async def decode(self, batch: list[tuple[Job, int]]) -> None:
    loop = asyncio.get_running_loop()
    first = batch[0][0]
    texts = [job.texts[i] for job, i in batch]
    prefixes = [job.prefixes[i] for job, i in batch] if first.prefixes is not None else None
    first_index = batch[0][1]  # a sampled batch holds one request's texts, in order
    started = time.perf_counter()
    try:
      out = await loop.run_in_executor(self.executor, lambda: self.translate_fn(
          texts, first.settings, prefixes, first_index))
    except Exception as e:  # a failed batch fails its requests, not the server
      for job, _ in batch:
        if not job.future.done():
          job.future.set_exception(e)
      return
    finally:
      self.busy -= 1
      self.wakeup.set()
    seconds = time.perf_counter() - started
    rate = len(texts) / max(seconds, 1e-6)
    self.rate = 0.8 * self.rate + 0.2 * rate if self.rate else rate
    self.recent = 0.8 * self.recent + 0.2 * len(texts)
    self.metrics.batch.observe(len(texts))
    self.metrics.decode.observe(seconds)
    self.metrics.texts.inc(len(texts))
    self.stats["texts"] += len(texts)
    self.stats["batches"] += 1
    for (job, i), result in zip(batch, out):
      job.results[i] = result
      job.remaining -= 1
      if job.remaining == 0 and not job.future.done():
        self.stats["requests"] += 1
        job.future.set_result(job.results)

  async def run_alone(self, fn: Callable[[], Any], texts: int = 1) -> Any:
    """Runs `fn` (an attention request, an HTML document, a file) on a decoding thread,
    within the queue's limit (`texts` count against `max_queue`: past it, 429) and its
    timeout (503)."""
    if self.closing:
      raise RequestError(503, "the server is shutting down", {"Retry-After": "5"})
    if len(self.pending) + self.alone + texts > self.limits.max_queue:
      raise RequestError(429, f"{len(self.pending) + self.alone} texts are waiting, at most "
                              f"{self.limits.max_queue}: try again later",
                         {"Retry-After": str(self.retry_after())})
    self.alone += texts
    try:
      return await asyncio.wait_for(
          asyncio.get_running_loop().run_in_executor(self.executor, fn), self.limits.timeout_s)
    except asyncio.TimeoutError:
      raise RequestError(503, f"not answered within {self.limits.timeout_s:g} s (the server "
                              "is busy): try again later",
                         {"Retry-After": str(self.retry_after())}) from None
    finally:
      self.alone -= texts


def engine_call(engine, batch_size: int
                ) -> Callable[[list[str], SearchSettings, list[str] | None, int], list]:
  """translate(texts, settings, prefixes, first_index) on an `Engine`: a str per text, or
  with nbest a list of hypotheses. `batch_size` bounds the rows of one decoding batch
  (its rows are the next power of two of the texts: few compiled shapes)."""

  def translate(texts, settings: SearchSettings, prefixes, first_index):
    return engine.translate(texts, settings.changed(batch_size=batch_size), prefixes=prefixes,
                            first_index=first_index)

  return translate
