"""The compiled searches of a model in this process: built once per equal model and kept
with an LRU limit (`program_store.StoredPrograms`, which also keeps them on disk for later
processes), counted per translator, and a log line when a batch shape compiles.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time

import numpy as np

from seq2seq.decoding.model_search import cross_attention, forced_logprob, search
from seq2seq.decoding.program_store import StoredPrograms, store_folder
from seq2seq.model.ensemble import Ensemble
from seq2seq.model.transformer import Model

log = logging.getLogger(__name__)


class ShapeCompileLog:
  """Runs searches, saying when one runs a batch shape for the first time: it compiles
  then (or loads from the compilation cache), which can take a while."""

  def __init__(self):
    self.seen: set[tuple] = set()
    self.lock = threading.Lock()

  def run(self, shape: tuple[int, int], key: tuple, call) -> tuple[np.ndarray, np.ndarray]:
    with self.lock:
      first = (shape, key) not in self.seen
      self.seen.add((shape, key))
    if first:
      log.info("first batch of %d x %d pieces: compiling its search", *shape)
    start = time.perf_counter()
    seqs, scores = (np.asarray(x) for x in call())
    if first and time.perf_counter() - start > 2:
      log.info("search for %d x %d pieces ready in %.0f s", *shape, time.perf_counter() - start)
    return seqs, scores


_building = threading.local()  # .translator: the Translator whose call is on this thread


@contextlib.contextmanager
def counting_programs(translator):
  """Counts in `translator.search_programs` the searches built on this thread meanwhile."""
  outer = getattr(_building, "translator", None)
  _building.translator = translator
  try:
    yield
  finally:
    _building.translator = outer


def _count_program() -> None:
  translator = getattr(_building, "translator", None)
  if translator is not None:
    translator.search_programs += 1


SEARCH_STATIC = ("beam_size", "alpha", "max_len_a", "max_len_b", "max_steps", "sampling",
                 "nbest", "min_rows", "beam_stop")


@functools.lru_cache(maxsize=16)
def compiled_functions(models: Model | Ensemble
                       ) -> tuple[StoredPrograms, StoredPrograms, StoredPrograms]:
  """The search, forced decoding and cross-attention (of the first model) of `models`,
  jitted and kept in the program store
  (`program_store`): one pair per process for equal models (`Model.__eq__`), so that a
  run loaded again, or the trainer's validation translator made anew, runs what an
  earlier translator built; a later process loads them instead of tracing them."""
  folder = store_folder()
  first = models.models[0] if isinstance(models, Ensemble) else models
  return (StoredPrograms(functools.partial(search, models), repr(models), SEARCH_STATIC,
                         folder, on_build=_count_program),
          StoredPrograms(functools.partial(forced_logprob, models), repr(models), (), folder),
          StoredPrograms(functools.partial(cross_attention, first), f"cross_attention {first!r}",
                         (), folder))
