"""Checkpoints written atomically with orbax, and what a killed writer left recovered.

Orbax writes each step to a temporary directory and renames it when complete; a named
checkpoint ('best', 'averaged', 'ema') is written whole beside the one it replaces and
swapped in only then (`write_step`), and the 'latest' series drops its oldest step only
after the new one is complete (`writing`). Every checkpoint carries a CRC-32 of its
arrays in its meta (`crc32`, `check_crc`). `recover` finishes or undoes a swap a killed
process left half done; the partial steps it left are removed (`remove_partial`).
checkpoint.py is the API over these.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from seq2seq.rundir.run_files import CheckpointError

log = logging.getLogger(__name__)


def manager(workdir, kind: str, max_to_keep: int | None) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                         enable_async_checkpointing=False)
  return ocp.CheckpointManager(Path(workdir).absolute() / "checkpoints" / kind,
                               options=options, item_names=("params", "opt_state", "meta"))

def to_host(tree):
  return jax.tree_util.tree_map(np.asarray, jax.device_get(tree))

def crc32(tree) -> int:
  """CRC-32 of the arrays of `tree` (their bytes, shapes and dtypes, in tree order)."""
  crc = 0
  for leaf in jax.tree_util.tree_leaves(tree):
    a = np.ascontiguousarray(leaf)
    crc = zlib.crc32(f"{a.dtype}{a.shape}".encode(), crc)
    crc = zlib.crc32(a.reshape(-1).view(np.uint8), crc)
  return crc

def check_crc(where: Path | str, meta: dict[str, Any], **trees) -> None:
  """Checks each of `trees` (params=..., opt_state=...) against the CRC-32 in `meta`."""
  for name, tree in trees.items():
    if name in meta.get("crc32", {}) and crc32(tree) != meta["crc32"][name]:
      raise CheckpointError(f"{where}: the {name} read do not match the CRC-32 saved with "
                            "them (a damaged file)")

def first_line(e: BaseException) -> str:
  """The gist of an error, for a one-line message (tensorstore's are pages long)."""
  text = str(e).strip().splitlines()
  text = (text[0] if text else type(e).__name__).split(" [tensorstore_spec")[0]
  return text if len(text) <= 200 else text[:197] + "..."

def _ignore_closed_loop(unraisable, default=sys.unraisablehook) -> None:
  """After a failed read, tensorstore completes the reads still in flight on orbax's
  event loop, which is closed by then: each prints "Event loop is closed" (harmless)."""
  if not (isinstance(unraisable.exc_value, RuntimeError)
          and str(unraisable.exc_value) == "Event loop is closed"):
    default(unraisable)

def _not_a_failed_read(record: logging.LogRecord) -> bool:
  """The other reads of a failed restore end as tasks nobody awaits: asyncio logs each
  (a page of tensorstore spec); the restore's one-line error says it all."""
  message = record.getMessage()
  return not (message.startswith(("Task exception was never retrieved",
                                  "Future exception was never retrieved"))
              and ("orbax" in message or "tensorstore" in message))


sys.unraisablehook = _ignore_closed_loop

logging.getLogger("asyncio").addFilter(_not_a_failed_read)

def _reason(e: BaseException) -> str:
  """Why a write failed, in words: the errno of an OSError in its chain, else its text."""
  seen = e
  while seen is not None:
    if isinstance(seen, OSError) and seen.errno is not None:
      return os.strerror(seen.errno).lower()
    seen = seen.__cause__ or seen.__context__
  text = str(e)
  if "RESOURCE_EXHAUSTED" in text or "No space left" in text:
    return os.strerror(errno.ENOSPC).lower()
  if "Read-only file system" in text:
    return os.strerror(errno.EROFS).lower()
  if "Permission denied" in text:
    return os.strerror(errno.EACCES).lower()
  return first_line(e)

def _megabytes(n: float) -> str:
  return f"{n / 2**20:,.1f} MB" if n >= 2**20 else f"{n / 2**10:,.0f} KB"

def nbytes(*trees) -> int:
  return sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(trees))

def remove(path: Path) -> None:
  if path.is_dir() and not path.is_symlink():
    shutil.rmtree(path, ignore_errors=True)
  elif path.exists() or path.is_symlink():
    path.unlink(missing_ok=True)

def _discard(path: Path) -> None:
  """Removes a replaced step directory: renamed out of readers' sight first (one atomic
  rename to a dot name `steps_in` skips), then deleted. Deleted in place, a process killed
  midway left a partial step that readers took for the newest checkpoint whenever its
  number was the higher (`recover` deletes what a killed writer left)."""
  if path.is_dir():
    gone = path.with_name(f".{path.name}.gone")
    remove(gone)
    path.rename(gone)
    remove(gone)

def _remove_partial_settled(root: Path, checks: int = 3, pause: float = 0.1) -> None:
  """`remove_partial` after a failed save: orbax's writer threads of that save can still
  be finishing when its error reaches us (a full disk), and add files to a temporary
  directory just removed. Removes until `checks` looks in a row, `pause` seconds apart,
  find none (at most 30 looks)."""
  clean = 0
  for _ in range(30):
    remove_partial(root)
    clean = clean + 1 if not any(root.glob("*.orbax-checkpoint-tmp*")) else 0
    if clean == checks:
      return
    time.sleep(pause)

def remove_partial(root: Path) -> None:
  """Orbax's temporary directories of saves that did not complete."""
  if root.is_dir():
    for p in root.glob("*.orbax-checkpoint-tmp*"):
      remove(p)

@contextlib.contextmanager
def quiet():
  """Silences the error logs orbax, tensorstore and asyncio write for a failed read or
  write, which this module reports in one line instead."""
  loggers = [logging.getLogger(name) for name in ("absl", "orbax", "asyncio")]
  levels = [q.level for q in loggers]
  for q in loggers:
    q.setLevel(logging.CRITICAL)
  try:
    yield
  finally:
    for q, level in zip(loggers, levels):
      q.setLevel(level)

@contextlib.contextmanager
def writing(kind: str, step: int, root: Path, size: int, previous: Path | None):
  """Turns any failure of a save into one CheckpointError naming the path, the space
  needed and free, and the previous checkpoint (intact); orbax's own error logs of the
  failed save are silenced, the partial files removed."""
  probe = root if root.exists() else next(p for p in root.parents if p.exists())
  try:
    if shutil.disk_usage(probe).free < size:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with quiet():
      yield
  except Exception as e:
    _remove_partial_settled(root)
    kept = f"the previous one, {previous}, is intact" if previous else "there was none before"
    free = shutil.disk_usage(probe).free
    raise CheckpointError(
        f"could not write the {kind} checkpoint of step {step} to {root}: {_reason(e)} "
        f"(it needs about {_megabytes(size)}, {_megabytes(free)} free there); {kept}") from e

def steps_in(root: Path) -> list[int]:
  """The complete checkpoint steps in `root`, oldest first. Reads only: a swap that a
  killed writer left half done is finished by the next writer (`recover`), never here."""
  try:
    names = [p.name for p in root.iterdir()] if root.is_dir() else []
  except FileNotFoundError:  # removed while listed
    return []
  return sorted(int(n) for n in names if n.isdigit() and (root / n).is_dir())

def swapping(root: Path) -> bool:
  """Whether a writer is between the two renames of a swap (`write_step`)."""
  return root.is_dir() and (any(root.glob(".*.new")) or any(root.glob(".*.old")))

def _primary() -> bool:
  return jax.process_index() == 0

def recover(root: Path) -> None:
  """Finishes a swap (`write_step`) that a killed process left half done."""
  if not root.is_dir() or not _primary():
    return
  for new in root.glob(".*.new"):
    final = root / new.name[1:-len(".new")]
    if not final.exists():
      new.rename(final)  # written completely (orbax renames only a finished save)
  for old in root.glob(".*.old"):
    final = root / old.name[1:-len(".old")]
    if final.exists():
      remove(old)
    else:
      old.rename(final)
  for new in root.glob(".*.new"):
    remove(new)
  for gone in root.glob(".*.gone"):
    remove(gone)

def write_step(root: Path, kind: str, step: int, items: dict[str, Any], size: int) -> Path:
  """Writes the one checkpoint of `kind` at root/STEP: completely, beside the one it
  replaces (a step directory of the same or another number), then swapped in."""
  recover(root)  # the writer finishes what a killed writer left
  old_steps = steps_in(root)
  previous = root / str(old_steps[-1]) if old_steps else None
  final, staging, old = root / str(step), root / f".{step}.new", root / f".{step}.old"
  with writing(kind, step, root, size, previous):
    root.mkdir(parents=True, exist_ok=True)
    if _primary():
      remove(staging)
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckptr:
      ckptr.save(staging.absolute(), args=ocp.args.Composite(**items))
  if not _primary():  # process 0 swaps it in
    return final
  if final.exists():
    final.rename(old)
  staging.rename(final)
  for s in old_steps:
    if s != step:
      _discard(root / str(s))
  remove(old)
  return final
