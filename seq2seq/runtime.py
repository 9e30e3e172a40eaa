"""Process-wide setup shared by training, evaluation and translation.

Logging, progress of long jobs, the persistent XLA compilation cache, quieting chatty
libraries, giving freed memory back to the system, atomic file writes, and SIGTERM handling for training. Nothing here imports training code, so every entry point (train, evaluate,
translate, average) may import it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import jax

log = logging.getLogger(__name__)


def quiet_libraries() -> None:
  """Orbax and JAX log every checkpoint step and backend probe at INFO through absl."""
  from absl import logging as absl_logging
  absl_logging.set_verbosity(absl_logging.WARNING)
  for name in ("absl", "jax", "orbax", "matplotlib"):
    logging.getLogger(name).setLevel(logging.WARNING)


def enable_compilation_cache() -> None:
  """Persists compiled XLA programs across processes (resumes, translate, tests).

  Each padded shape costs seconds of XLA compilation on a 2-core CPU; the cache
  directory is $SEQ2SEQ_XLA_CACHE or ~/.cache/seq2seq/xla ("" turns it off). Programs
  that compile in under $SEQ2SEQ_XLA_CACHE_MIN_SECONDS (0.5) are not stored.
  """
  path = os.environ.get("SEQ2SEQ_XLA_CACHE", str(Path.home() / ".cache" / "seq2seq" / "xla"))
  if path:
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ.get("SEQ2SEQ_XLA_CACHE_MIN_SECONDS", "0.5")))


@functools.cache
def _libc_malloc_trim():
  """glibc's malloc_trim, or None (another C library)."""
  try:
    return ctypes.CDLL(None).malloc_trim  # the process's own symbols, its C library's among them
  except (OSError, AttributeError):
    return None


def give_back_freed_memory() -> None:
  """Returns the memory that the process freed but glibc's malloc keeps to the system
  (`malloc_trim`, milliseconds). After a decoding pass, malloc holds on to freed search
  buffers and compile-time memory, which later peaks stack on (docs/experiments.md,
  "Decoding's memory")."""
  trim = _libc_malloc_trim()
  if trim is not None:
    trim(0)


def progress_seconds() -> float:
  """Seconds between two progress log lines: $SEQ2SEQ_PROGRESS_SECONDS, or 30."""
  return float(os.environ.get("SEQ2SEQ_PROGRESS_SECONDS", "30"))


class Progress:
  """Progress of a job that takes more than a few seconds: tqdm's bar where `stream`
  (stderr) is a terminal; otherwise (a log file, a pipe, CI) a log line at the first
  update and then every `progress_seconds()`, with the count, the rate and the time left.
  Either way one line at the end says how many in how long.

      with Progress("cleaning", total=len(ds), unit="pairs") as p:
        for batch in batches:
          ...
          p.update(len(batch))
  """

  def __init__(self, what: str, total: int | None = None, unit: str = "items",
               logger: logging.Logger | None = None, stream=None):
    self.what, self.total, self.unit = what, total, unit
    self.log = logger or log
    self.count, self.start = 0, time.perf_counter()
    self.last_line: float | None = None
    stream = stream or sys.stderr
    self.bar = None
    if getattr(stream, "isatty", lambda: False)():
      from tqdm import tqdm
      self.bar = tqdm(total=total, desc=what, unit=f" {unit}", file=stream, leave=False,
                      dynamic_ncols=True)

  def update(self, n: int = 1) -> None:
    self.count += n
    if self.bar is not None:
      self.bar.update(n)
      return
    now = time.perf_counter()
    if self.last_line is None or now - self.last_line >= progress_seconds():
      self.last_line = now
      self.log.info("%s: %s", self.what, self.status(now))

  def status(self, now: float) -> str:
    seconds = max(now - self.start, 1e-9)
    rate = self.count / seconds
    done = f"{self.count:,}" + (f" of {self.total:,} {self.unit} ({100 * self.count / self.total:.0f} %)"
                                if self.total else f" {self.unit}")
    left = ""
    if self.total and rate > 0 and self.count < self.total:
      left = f", {format_seconds((self.total - self.count) / rate)} left"
    return f"{done}, {rate:,.1f} {self.unit}/s{left}"

  def close(self) -> None:
    if self.bar is not None:
      self.bar.close()
      self.bar = None
    seconds = time.perf_counter() - self.start
    self.log.info("%s: %s %s in %s (%s %s/s)", self.what, f"{self.count:,}", self.unit,
                  format_seconds(seconds), f"{self.count / max(seconds, 1e-9):,.1f}",
                  self.unit)

  def __enter__(self) -> "Progress":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def format_seconds(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds} s"
  if seconds < 3600:
    return f"{seconds // 60} min {seconds % 60:02d} s"
  return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def setup_cli_logging() -> None:
  """Log records on stderr (stdout is for results), libraries quieted, XLA cache on."""
  logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr,
                      force=True)  # a library may have configured logging first
  quiet_libraries()
  enable_compilation_cache()


def setup_run_logging(workdir: Path, to_file: bool = True) -> None:
  """Log records with timestamps on stderr and (`to_file`) in WORKDIR/train.log."""
  fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
  from absl import logging as absl_logging
  root = logging.getLogger()
  root.setLevel(logging.INFO)
  root.removeHandler(absl_logging.get_absl_handler())  # ours print the same records
  for h in list(root.handlers):
    # Ours from an earlier run in this process, or a plain stderr handler that a
    # library's logging.basicConfig() left (it would print every record twice).
    plain_stderr = type(h) is logging.StreamHandler and h.stream is sys.stderr
    if getattr(h, "_seq2seq", False) or plain_stderr:
      root.removeHandler(h)
      if getattr(h, "_seq2seq", False):
        h.close()
  handlers = [logging.StreamHandler(sys.stderr)]
  if to_file:
    handlers.append(logging.FileHandler(workdir / "train.log"))
  for h in handlers:
    h.setFormatter(fmt)
    h._seq2seq = True
    root.addHandler(h)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
  """Writes a file through a temporary sibling and a rename: readers never see half of it,
  and writers of the same file (processes, threads) each write their own sibling."""
  path = Path(path)
  tmp = path.with_name(f"{path.name}.tmp{os.getpid()}-{threading.get_ident()}")
  if isinstance(data, bytes):
    tmp.write_bytes(data)
  else:
    tmp.write_text(data, encoding="utf-8")
  os.replace(tmp, path)


@contextlib.contextmanager
def sigterm_stops_the_loop():
  """SIGTERM (`kill`, a scheduler's notice) stops training the way the time limit does:
  after the update under way, with a checkpoint, the averaged model and the model card,
  so the run resumes exactly. A second SIGTERM kills at once. Yields the list the
  handler appends to. (Ctrl-C does the same through KeyboardInterrupt; a job started in
  the background with `&` ignores SIGINT, so `kill` is how such a run is stopped.)"""
  received: list[int] = []
  if threading.current_thread() is not threading.main_thread():
    yield received  # signal handlers belong to the main thread
    return

  def handler(signum, frame):
    if received:
      signal.signal(signal.SIGTERM, signal.SIG_DFL)
      os.kill(os.getpid(), signal.SIGTERM)
      return
    received.append(signum)
    logging.getLogger("seq2seq.train").warning("SIGTERM: stopping after this update, with a checkpoint "
                "(a second SIGTERM kills at once)")

  previous = signal.signal(signal.SIGTERM, handler)
  try:
    yield received
  finally:
    signal.signal(signal.SIGTERM, previous)
