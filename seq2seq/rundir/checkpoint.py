"""Self-describing run directories and atomic checkpoints (orbax).

    RUN_DIR/config.json        resolved config (model, data, train, decode)
    RUN_DIR/spm.model          the SentencePiece model (spm.vocab, spm.json beside it)
    RUN_DIR/checkpoints/latest/STEP/   params, optimizer state, meta (every N steps, at exit)
    RUN_DIR/checkpoints/best/STEP/     params, meta of the best validation BLEU
    RUN_DIR/checkpoints/averaged/STEP/ params averaged over the last K latest checkpoints
    RUN_DIR/checkpoints/ema/STEP/      the moving average of the params (train.ema_decay)

Nothing that was there is lost. Orbax writes each step to a temporary directory and
renames it when complete; 'best', 'averaged' and 'ema' are written whole beside the
checkpoint they replace and swapped in only then (`_write_step`), and the 'latest' series
drops its oldest step only after the new one is complete. So a process killed at any
moment, a full disk or an unwritable directory leaves the previous checkpoint loadable.
Every checkpoint carries a CRC-32 of its arrays in its meta: a damaged or partial newest
'latest' checkpoint is reported and set aside, and the run resumes from the newest intact
one (`Checkpointer.restore_latest`); a damaged named checkpoint is a one-line error.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
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

from seq2seq.config import Config, ModelConfig
from seq2seq.data.tokenizer import MODEL_FILE, Tokenizer
from seq2seq.model.transformer import Model
from seq2seq.numerics import Numerics
from seq2seq.runtime import Progress, write_atomic

log = logging.getLogger(__name__)
logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every save at INFO

CONFIG_FILE = "config.json"
SWAP_WAITS, SWAP_WAIT_S = 50, 0.1  # how long a reader waits for a writer's swap: 5 s
READ_ATTEMPTS = 5  # reads of a named checkpoint replaced under its reader

KINDS = ("latest", "best", "averaged", "ema")
PUBLISHED_FILE = "published.json"  # a published model's one checkpoint (rundir/hub.py)


class CheckpointError(ValueError):
  """A run directory or checkpoint is missing, damaged, does not match the model, or
  could not be written."""


def save_config(workdir: str | os.PathLike, cfg: Config) -> None:
  write_atomic(Path(workdir) / CONFIG_FILE, json.dumps(cfg.to_dict(), indent=2) + "\n")


def load_config(workdir: str | os.PathLike) -> Config:
  path = Path(workdir) / CONFIG_FILE
  if not path.exists():
    raise CheckpointError(f"{path} not found: {workdir} is not a run directory written by "
                          "train.py")
  return Config.from_dict(json.loads(path.read_text()))


def load_tokenizer(workdir: str | os.PathLike) -> Tokenizer:
  path = Path(workdir) / MODEL_FILE
  if not path.exists():
    raise CheckpointError(f"{path} not found: the run directory has no tokenizer")
  return Tokenizer.load(path)


def _manager(workdir, kind: str, max_to_keep: int | None) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                         enable_async_checkpointing=False)
  return ocp.CheckpointManager(Path(workdir).absolute() / "checkpoints" / kind,
                               options=options, item_names=("params", "opt_state", "meta"))


def _to_host(tree):
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


def _nbytes(*trees) -> int:
  return sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(trees))


def _remove(path: Path) -> None:
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
    _remove(gone)
    path.rename(gone)
    _remove(gone)


def _remove_partial_settled(root: Path, checks: int = 3, pause: float = 0.1) -> None:
  """`_remove_partial` after a failed save: orbax's writer threads of that save can still
  be finishing when its error reaches us (a full disk), and add files to a temporary
  directory just removed. Removes until `checks` looks in a row, `pause` seconds apart,
  find none (at most 30 looks)."""
  clean = 0
  for _ in range(30):
    _remove_partial(root)
    clean = clean + 1 if not any(root.glob("*.orbax-checkpoint-tmp*")) else 0
    if clean == checks:
      return
    time.sleep(pause)


def _remove_partial(root: Path) -> None:
  """Orbax's temporary directories of saves that did not complete."""
  if root.is_dir():
    for p in root.glob("*.orbax-checkpoint-tmp*"):
      _remove(p)


@contextlib.contextmanager
def _quiet():
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
def _writing(kind: str, step: int, root: Path, size: int, previous: Path | None):
  """Turns any failure of a save into one CheckpointError naming the path, the space
  needed and free, and the previous checkpoint (intact); orbax's own error logs of the
  failed save are silenced, the partial files removed."""
  probe = root if root.exists() else next(p for p in root.parents if p.exists())
  try:
    if shutil.disk_usage(probe).free < size:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with _quiet():
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


def _swapping(root: Path) -> bool:
  """Whether a writer is between the two renames of a swap (`_write_step`)."""
  return root.is_dir() and (any(root.glob(".*.new")) or any(root.glob(".*.old")))


def _primary() -> bool:
  return jax.process_index() == 0


def recover(root: Path) -> None:
  """Finishes a swap (`_write_step`) that a killed process left half done."""
  if not root.is_dir() or not _primary():
    return
  for new in root.glob(".*.new"):
    final = root / new.name[1:-len(".new")]
    if not final.exists():
      new.rename(final)  # written completely (orbax renames only a finished save)
  for old in root.glob(".*.old"):
    final = root / old.name[1:-len(".old")]
    if final.exists():
      _remove(old)
    else:
      old.rename(final)
  for new in root.glob(".*.new"):
    _remove(new)
  for gone in root.glob(".*.gone"):
    _remove(gone)


def _write_step(root: Path, kind: str, step: int, items: dict[str, Any], size: int) -> Path:
  """Writes the one checkpoint of `kind` at root/STEP: completely, beside the one it
  replaces (a step directory of the same or another number), then swapped in."""
  recover(root)  # the writer finishes what a killed writer left
  old_steps = steps_in(root)
  previous = root / str(old_steps[-1]) if old_steps else None
  final, staging, old = root / str(step), root / f".{step}.new", root / f".{step}.old"
  with _writing(kind, step, root, size, previous):
    root.mkdir(parents=True, exist_ok=True)
    if _primary():
      _remove(staging)
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
  _remove(old)
  return final


class Checkpointer:
  """Saves and restores the training state of one run directory."""

  def __init__(self, workdir: str | os.PathLike, keep: int):
    self.workdir, self.keep = Path(workdir), keep
    recover(self.workdir / "checkpoints" / "latest")
    _remove_partial(self.workdir / "checkpoints" / "latest")
    self.latest = _manager(workdir, "latest", keep)

  def save_latest(self, step: int, params, opt_state, meta: dict[str, Any]) -> None:
    if self.latest.latest_step() == step:
      return
    params, opt_state = _to_host(params), _to_host(opt_state)
    root = Path(self.latest.directory)
    previous = self.latest.latest_step()
    with _writing("latest", step, root, _nbytes(params, opt_state),
                  None if previous is None else root / str(previous)):
      self.latest.save(step, args=ocp.args.Composite(
          params=ocp.args.StandardSave(params), opt_state=ocp.args.StandardSave(opt_state),
          meta=ocp.args.JsonSave(dict(meta, crc32={"params": crc32(params),
                                                   "opt_state": crc32(opt_state)}))))

  def save_best(self, step: int, params, meta: dict[str, Any]) -> None:
    save_params(self.workdir, "best", step, params, meta)

  def restore_latest(self, params_like, opt_state_like):
    """Returns (params, opt_state, meta) of the newest intact checkpoint, or None if
    there is none. Newer ones that cannot be read are reported, each in one line, and
    moved to checkpoints/damaged/ (a later save of the same step must not find them)."""
    steps = sorted(self.latest.all_steps(), reverse=True)
    abstract = lambda t: jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, t)
    failed: list[tuple[int, Exception]] = []
    for step in steps:
      try:
        with _quiet():
          restored = self.latest.restore(step, args=ocp.args.Composite(
              params=ocp.args.StandardRestore(abstract(params_like)),
              opt_state=ocp.args.StandardRestore(abstract(opt_state_like)),
              meta=ocp.args.JsonRestore()))
        check_crc(Path(self.latest.directory) / str(step), restored["meta"],
                  params=restored["params"], opt_state=restored["opt_state"])
      except Exception as e:  # damaged, partial, or another model: decided below
        failed.append((step, e))
        continue
      if failed:
        self._set_aside(failed, step)
      return restored["params"], restored["opt_state"], restored["meta"]
    if not failed:
      return None
    step, e = failed[0]
    raise CheckpointError(
        f"no checkpoint in {self.latest.directory} can be restored (steps "
        f"{', '.join(str(s) for s, _ in failed)}): either they are damaged, or they do not "
        "match this run's model or optimizer (train.optimizer, clip_norm, "
        "grad_accum_steps, and whether ema_decay is 0, must stay the same to resume; "
        f"else use a new --workdir). Step {step}: {first_line(e)}") from e

  def _set_aside(self, failed: list[tuple[int, Exception]], resumed: int) -> None:
    root = Path(self.latest.directory)
    aside = self.workdir / "checkpoints" / "damaged"
    aside.mkdir(parents=True, exist_ok=True)
    self.latest.close()
    for step, e in failed:
      target = aside / f"latest-{step}"
      _remove(target)
      (root / str(step)).rename(target)
      log.warning("checkpoint %s cannot be read (%s); moved to %s, resuming from step %d",
                  root / str(step), first_line(e), target, resumed)
    self.latest = _manager(self.workdir, "latest", self.keep)

  def close(self):
    self.latest.close()


def abstract_params(model_cfg: ModelConfig):
  """Shapes and dtypes of the model's parameters, without computing them: traced once per
  configuration in a process (a server reloading its checkpoint, each restore of a run),
  a tree of its own for each caller."""
  return jax.tree_util.tree_map(lambda x: x, _traced_param_shapes(model_cfg))


@functools.lru_cache(maxsize=16)
def _traced_param_shapes(model_cfg: ModelConfig):
  return Model(model_cfg, Numerics()).param_shapes()  # shapes: any numerics


def published_checkpoint(workdir: str | os.PathLike) -> str | None:
  """The one checkpoint kind a published model (seq2seq.rundir.hub) holds, or None for a
  run directory."""
  path = Path(workdir) / PUBLISHED_FILE
  return json.loads(path.read_text())["checkpoint"] if path.is_file() else None


def checkpoint_path(workdir: str | os.PathLike, name: str) -> Path:
  """The step directory for 'best', 'latest', 'averaged', 'ema', or a path given directly.

  'best' falls back to 'latest' when a run stopped before its first validation."""
  if name in KINDS:
    root = Path(workdir) / "checkpoints" / name
    steps = steps_in(root)
    for _ in range(SWAP_WAITS):  # a writer replacing the only step: between two renames
      if steps or not _swapping(root):
        break
      time.sleep(SWAP_WAIT_S)
      steps = steps_in(root)
    if not steps:
      kind = published_checkpoint(workdir) if name == "best" else None
      if kind and kind != "best":
        log.info("a published model: its '%s' checkpoint", kind)
        return checkpoint_path(workdir, kind)
      if name == "best":
        log.info("no 'best' checkpoint in %s yet; using 'latest'", root)
        return checkpoint_path(workdir, "latest")
      raise CheckpointError(f"no '{name}' checkpoint in {root}")
    return root / str(steps[-1])
  path = Path(name)
  if not (path / "params").exists():
    raise CheckpointError(f"{path} is not a checkpoint step directory (no params/ inside)")
  return path


def load_params(workdir: str | os.PathLike, name: str, model_cfg: ModelConfig):
  """Loads parameters (and meta) of a named or explicit checkpoint, as the model in
  `model_cfg` expects them; another architecture or vocabulary size is a CheckpointError.

  Reads only. A named checkpoint that a training beside it replaces while it is read
  (the step directory removed under the reader) is read again from the newest complete
  step; which step was loaded is logged."""
  for attempt in range(1, READ_ATTEMPTS + 1):
    path = checkpoint_path(workdir, name)
    try:
      params, meta = _load_step(path, model_cfg)
      break
    except CheckpointError:
      replaced = name in KINDS and (not path.is_dir() or
                                    steps_in(path.parent)[-1:] != [int(path.name)])
      if not replaced or attempt == READ_ATTEMPTS:
        raise
  if name in KINDS:
    log.info("loaded the '%s' checkpoint of step %s (%s)", name, path.name, path)
  return params, meta


def _load_step(path: Path, model_cfg: ModelConfig):
  """`load_params` of one step directory."""
  expected = abstract_params(model_cfg)
  items = {"params": ocp.args.StandardRestore(expected)}
  if (path / "meta").exists():
    items["meta"] = ocp.args.JsonRestore()
  mismatch = (f"{path}: parameters do not match the model in config.json (different "
              "architecture or vocabulary size)")
  shapes = lambda tree: jax.tree_util.tree_map(lambda x: tuple(x.shape), tree)
  damaged = lambda e: CheckpointError(f"{path} cannot be read (a damaged or partial "
                                      f"checkpoint): {first_line(e)}")
  try:  # the saved shapes first: another model is told apart from a damaged file
    with _quiet(), ocp.StandardCheckpointer() as ckptr:
      saved = ckptr.metadata((path / "params").absolute()).item_metadata
    saved = dict(getattr(saved, "tree", saved))
  except Exception as e:  # noqa: BLE001 - tensorstore and orbax raise many kinds
    raise damaged(e) from e
  if shapes(saved) != shapes(expected):
    raise CheckpointError(mismatch)
  try:
    with _quiet(), ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckptr:
      restored = ckptr.restore(path.absolute(), args=ocp.args.Composite(**items))
  except Exception as e:  # noqa: BLE001
    raise damaged(e) from e
  meta = dict(restored["meta"]) if "meta" in items else {}
  check_crc(path, meta, params=restored["params"])
  return restored["params"], meta


def average(workdir: str | os.PathLike, last: int, model_cfg: ModelConfig,
            upto: int | None = None) -> Path:
  """Averages the parameters of the last K 'latest' checkpoints (of those at or before
  step `upto`, if given) into 'averaged'."""
  root = Path(workdir) / "checkpoints" / "latest"
  steps = [s for s in steps_in(root) if upto is None or s <= upto][-last:]
  if not steps:
    raise CheckpointError(f"no checkpoints to average in {root}"
                          + (f" at or before step {upto}" if upto is not None else ""))
  trees = []
  with Progress(f"averaging {len(steps)} checkpoints", total=len(steps),
                unit="checkpoints") as progress:
    for s in steps:
      trees.append(load_params(workdir, str(root / str(s)), model_cfg)[0])
      progress.update()
  mean = jax.tree_util.tree_map(lambda *xs: np.mean(np.stack(xs), axis=0), *trees)
  path = save_params(workdir, "averaged", steps[-1], mean, {"averaged_steps": steps})
  log.info("averaged checkpoints %s into %s", steps, path.parent)
  return path


def save_params(workdir: str | os.PathLike, kind: str, step: int, params,
                meta: dict[str, Any]) -> Path:
  """Writes `params` as the one checkpoint of `kind` ('best', 'averaged', 'ema'),
  replacing the previous one only once it is complete; returns its step directory."""
  params = _to_host(params)
  items = {"params": ocp.args.StandardSave(params),
           "meta": ocp.args.JsonSave(dict(meta, crc32={"params": crc32(params)}))}
  return _write_step(Path(workdir).absolute() / "checkpoints" / kind, kind, step, items,
                     _nbytes(params))
