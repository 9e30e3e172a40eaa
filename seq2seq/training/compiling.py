"""Compiling a run's programs (one update per batch shape, the validation's) on worker
threads, ahead of the loop or while it runs.

On 2 CPU cores a run's ~30 programs take minutes to compile from an empty cache. The
trainer does not wait for them: `BackgroundCompiler` lowers them on a thread of its own
(in the order the batches need them) and compiles them on a pool of workers, logging each as
it is done, while updates start as soon as the first batch's program is ready. Before an
update of a new shape, the loop `wait`s for that shape's program, so no shape is ever
compiled twice (once by the pool, once by `jit` on the call); before a validation it
waits for all. The executables land in `jit`'s own cache, so each first call runs at
once.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from typing import Iterable

import jax

log = logging.getLogger("seq2seq.train")


class BackgroundCompiler:
  """Lowers `programs` ((name, lowered program) pairs, made lazily) on a thread and
  compiles them on `workers` threads (default: one per core)."""

  def __init__(self, programs: Iterable[tuple[str, jax.stages.Lowered]],
               workers: int | None = None):
    self.t0 = time.time()
    self.futures: dict[str, concurrent.futures.Future] = {}  # by name: the last of a name
    self.all: list[concurrent.futures.Future] = []
    self.done, self.submitted, self.error = 0, False, None
    self.cond = threading.Condition()
    self.pool = concurrent.futures.ThreadPoolExecutor(max(1, workers or os.cpu_count() or 1))
    self.thread = threading.Thread(target=self._submit, args=(programs,), daemon=True,
                                   name="compile-ahead")
    self.thread.start()

  def _submit(self, programs) -> None:
    try:
      for name, lowered in programs:
        future = self.pool.submit(lowered.compile)
        future.add_done_callback(lambda f, name=name: self._done(f, name))
        with self.cond:
          self.futures[name] = future
          self.all.append(future)
          self.cond.notify_all()
    except BaseException as e:  # noqa: BLE001 (raised again by wait / wait_all)
      self.error = e
    finally:
      with self.cond:
        self.submitted = True
        self.cond.notify_all()
        log.info("compiling %d programs for this run's shapes (%d done, %.0fs)",
                 len(self.all), self.done, time.time() - self.t0)

  def _done(self, future: concurrent.futures.Future, name: str) -> None:
    if future.cancelled() or future.exception() is not None:
      return
    with self.cond:
      self.done += 1
      total = f" of {len(self.all)}" if self.submitted else ""
      log.info("compiled %s (%d%s, %.0fs)", name, self.done, total, time.time() - self.t0)
      if self.submitted and self.done == len(self.all):
        log.info("compiled all %d programs of the run in %.1fs", self.done,
                 time.time() - self.t0)

  def wait(self, name: str) -> None:
    """Returns once the program `name` is compiled (at once if no program has that name)."""
    with self.cond:
      pending = self.futures.get(name)
      if (pending is None and not self.submitted) or (pending is not None and not pending.done()):
        # Minutes for the first shape on a new machine: say what the wait is for.
        log.info("waiting for %s to compile (%.0fs since compiling began)", name,
                 time.time() - self.t0)
      self.cond.wait_for(lambda: name in self.futures or self.submitted)
      future = self.futures.get(name)
    if self.error is not None:
      raise self.error
    if future is not None:
      future.result()

  def wait_all(self) -> float:
    """Returns once every program is compiled: the seconds since the start."""
    self.thread.join()
    if self.error is not None:
      raise self.error
    for future in list(self.all):
      future.result()
    return time.time() - self.t0

  def stop(self) -> None:
    """Drops the programs not yet compiling (a run that ends early need not wait)."""
    self.pool.shutdown(wait=False, cancel_futures=True)


def compile_ahead(programs: Iterable[tuple[str, jax.stages.Lowered]],
                  workers: int | None = None) -> float:
  """Compiles every program now (see `BackgroundCompiler`); returns the seconds it took."""
  compiler = BackgroundCompiler(programs, workers)
  try:
    return compiler.wait_all()
  finally:
    compiler.stop()
