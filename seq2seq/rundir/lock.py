"""One writer per run directory: an operating-system lock on RUN/train.lock.

Training holds it from start to exit. The lock is `fcntl.flock`'s, held by the open file
and released by the kernel when the process ends in any way (kill -9 included), so a
dead trainer never leaves a stale lock; the file stays and says who held it last (host,
pid, start time). A second trainer on the same directory stops at once naming the
holder. Readers (evaluate, translate, serve, export) take no lock: they never write.
With several processes of one distributed run, process 0 holds it for all of them.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Iterator

LOCK_FILE = "train.lock"

_held: dict[Path, tuple[int, int]] = {}  # this process's locks: path -> (fd, depth)


class RunLocked(RuntimeError):
  """Another process is training in the run directory."""


def holder(workdir: str | os.PathLike) -> dict | None:
  """What the lock file says of its last holder (it may have ended), or None."""
  try:
    return json.loads((Path(workdir) / LOCK_FILE).read_text())
  except (OSError, ValueError):
    return None


@contextlib.contextmanager
def training_lock(workdir: str | os.PathLike) -> Iterator[None]:
  """Holds the run directory's writer lock (re-entrant within a process), or raises
  `RunLocked` naming the process that holds it."""
  path = (Path(workdir) / LOCK_FILE).absolute()
  if path in _held:
    fd, depth = _held[path]
    _held[path] = (fd, depth + 1)
    try:
      yield
    finally:
      fd, depth = _held[path]
      _held[path] = (fd, depth - 1)
    return
  path.parent.mkdir(parents=True, exist_ok=True)
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    os.close(fd)
    who = holder(workdir) or {}
    raise RunLocked(
        f"{Path(workdir)} is being trained by another process (pid {who.get('pid', '?')} "
        f"on {who.get('host', '?')}, started {who.get('started', '?')}); wait for it to "
        "finish or give another --workdir") from None
  except OSError as e:
    os.close(fd)
    if e.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
      raise RunLocked(f"{Path(workdir)}: this file system cannot lock files ({e.strerror}), "
                      "so two writers could not be kept apart: give a --workdir on a local "
                      "disk") from None
    raise
  info = {"host": socket.gethostname(), "pid": os.getpid(),
          "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
  os.ftruncate(fd, 0)
  os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
  _held[path] = (fd, 1)
  try:
    yield
  finally:
    fd, depth = _held.pop(path)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
