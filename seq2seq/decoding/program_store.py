"""Searches kept across processes: each search program, once traced, is saved as a
`jax.export`ed program beside the XLA compilation cache, and the next process that runs
the same search loads it instead of tracing it again.

XLA's persistent cache (`runtime.enable_compilation_cache`) keeps compiled programs, but
its key is the lowered program: each process still traces and lowers every search shape
before it can look one up, a second or so per program on 2 CPU cores, paid by every
`translate.py`, `evaluate.py` and server start (a server runs dozens of programs). An
exported program is the lowered StableHLO; deserializing it and lowering its call takes
a fraction of tracing it (docs/experiments.md, "Figures behind the code").

Every program runs through its exported form, the first process's included, so that a
search computes the same whether this process traced it or loaded it.

In memory, each compiled program costs far more than its code: XLA:CPU keeps the
optimized HLO module, a protobuf copy of it and of its buffer assignment, and the
buffer assignment's alias analysis (heaptrack, on the recipe's beam 5 search: tens of MB
a program, the code itself a small part; docs/experiments.md, `decode_memory.py`). So a
`StoredPrograms` keeps at most `limit` programs compiled: the least recently used beyond
it is dropped and, when needed again, loaded from the store and XLA's cache.

A program's file is named by a hash of everything that decides what it computes:
`code_fingerprint()` (the package's source, the JAX and jaxlib versions, the backend and
the JAX settings that change a trace), the model's identity (its config and numerics),
the static settings and the tree, shapes, dtypes and device counts of the array
arguments. Changed code gets new files; files of other versions are never read again.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import logging
import threading
from pathlib import Path
from typing import Callable, Sequence

import jax
import numpy as np
from jax import export

from seq2seq.runtime import write_atomic

log = logging.getLogger(__name__)

# JAX settings that change what a function traces to. (`jax_numpy_rank_promotion` is not
# one: it only decides whether implicit broadcasting raises while tracing.)
TRACE_SETTINGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_threefry_partitionable",
                  "jax_default_prng_impl")
SUFFIX = ".jaxexport"


@functools.cache
def code_fingerprint() -> str:
  """What a program's file name must change with, besides the program's own arguments:
  the package's source files, the JAX and jaxlib versions, the backend, TRACE_SETTINGS."""
  import jaxlib

  package = Path(__file__).resolve().parents[1]
  h = hashlib.sha256()
  for path in sorted(package.rglob("*.py")):
    h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
  settings = {name: getattr(jax.config, name) for name in TRACE_SETTINGS}
  h.update(repr((jax.__version__, jaxlib.__version__, jax.default_backend(), settings)).encode())
  return h.hexdigest()


def store_folder() -> Path | None:
  """`seq2seq-programs` in the process's XLA compilation cache directory, or None (no
  store) when the process has none: the store follows the cache, which the command lines
  turn on (`runtime.enable_compilation_cache`; $SEQ2SEQ_XLA_CACHE="" turns both off)."""
  cache = jax.config.jax_compilation_cache_dir
  return Path(cache) / "seq2seq-programs" if cache else None


def devices(x) -> int:
  """How many devices an argument is laid out on: a program exported for arguments on two
  devices (a run trained data-parallel, validating) cannot run on one."""
  sharding = getattr(x, "sharding", None)
  return len(sharding.device_set) if sharding is not None else 1


class _Entry:
  """One program of a `StoredPrograms`, built once by the first thread that needs it."""

  def __init__(self):
    self.lock = threading.Lock()
    self.program: Callable | None = None


class StoredPrograms:
  """`jax.jit(fn, static_argnames=static)`, each of whose programs is exported to
  `folder` and loaded from there by later processes; call it (or its `.lower`) as the
  jitted function. `identity` is the repr of what `fn` closes over (the model): two
  functions of equal identity must compute the same.

  `on_build` is called on the calling thread whenever a program is new to this object,
  whether traced or loaded, a program dropped for `limit` and built again included.
  `traced` and `loaded` count the two, `dropped` the programs let go.

  `limit`: the most programs kept compiled at once (0: all); the least recently used
  beyond it are dropped, never one that is running."""

  def __init__(self, fn: Callable, identity: str, static_argnames: Sequence[str] = (),
               folder: Path | None = None, on_build: Callable[[], None] | None = None,
               limit: int = 0):
    self.jitted = jax.jit(fn, static_argnames=tuple(static_argnames))
    self.static = frozenset(static_argnames)
    self.identity, self.folder, self.on_build = identity, folder, on_build
    self.limit = limit
    self.entries: collections.OrderedDict[tuple, _Entry] = collections.OrderedDict()
    self.lock = threading.Lock()
    self.traced = self.loaded = self.dropped = 0

  def __call__(self, *args, **kwargs):
    program, dynamic = self.program(args, kwargs)
    return program(*args, **dynamic)

  def lower(self, *args, **kwargs) -> jax.stages.Lowered:
    program, dynamic = self.program(args, kwargs)
    return program.lower(*args, **dynamic)

  def program(self, args: tuple, kwargs: dict) -> tuple[Callable, dict]:
    """The jitted call of the exported program for these arguments, and the arguments
    it takes (the static ones are part of the program)."""
    static = {k: v for k, v in kwargs.items() if k in self.static}
    dynamic = {k: v for k, v in kwargs.items() if k not in self.static}
    leaves, tree = jax.tree.flatten((args, dynamic))
    key = (tree, tuple((np.shape(x), str(x.dtype if hasattr(x, "dtype") else np.result_type(x)),
                        devices(x))
                       for x in leaves),
           tuple(sorted(static.items())))
    with self.lock:
      entry = self.entries.setdefault(key, _Entry())
      self.entries.move_to_end(key)  # the most recently used last
    with entry.lock:
      program = entry.program
      if program is None:
        program = entry.program = jax.jit(self.exported(key, args, dynamic, static).call)
        if self.on_build is not None:
          self.on_build()
        self.drop_beyond_limit()
    return program, dynamic

  def drop_beyond_limit(self) -> None:
    """Lets go of the least recently used compiled programs beyond `limit`. A program
    running on another thread stays alive until it returns: its caller holds it."""
    if not self.limit:
      return
    with self.lock:
      built = [e for e in self.entries.values() if e.program is not None]
      for entry in built[:max(len(built) - self.limit, 0)]:
        entry.program = None
        self.dropped += 1

  def file(self, key: tuple) -> Path | None:
    if self.folder is None:
      return None
    name = hashlib.sha256(repr((code_fingerprint(), self.identity, key)).encode()).hexdigest()
    return self.folder / f"{name}{SUFFIX}"

  def exported(self, key: tuple, args: tuple, dynamic: dict, static: dict) -> export.Exported:
    """The program from the store, or traced, lowered and saved there."""
    path = self.file(key)
    if path is not None and path.exists():
      try:
        found = export.deserialize(bytearray(path.read_bytes()))
        self.loaded += 1
        return found
      except Exception as e:  # noqa: BLE001 - a damaged file: trace it again
        log.warning("%s could not be read (%s); tracing the program again", path, e)
    program = export.export(self.jitted)(*args, **dynamic, **static)
    self.traced += 1
    if path is not None:
      try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, bytes(program.serialize()))
      except OSError as e:  # a read-only cache: the program still runs
        log.warning("could not save the program to %s: %s", path, e)
    return program

