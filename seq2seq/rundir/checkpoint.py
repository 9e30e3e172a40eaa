"""Self-describing run directories and atomic checkpoints (orbax).

    RUN_DIR/config.json        resolved config (model, data, train, decode)
    RUN_DIR/spm.model          the SentencePiece model (spm.vocab, spm.json beside it)
    RUN_DIR/checkpoints/latest/STEP/   params, optimizer state, meta (every N steps, at exit)
    RUN_DIR/checkpoints/best/STEP/     params, meta of the best validation BLEU
    RUN_DIR/checkpoints/averaged/STEP/ params averaged over the last K latest checkpoints
    RUN_DIR/checkpoints/ema/STEP/      the moving average of the params (train.ema_decay)

Nothing that was there is lost: each checkpoint is written atomically
(atomic_checkpoints.py), so a process killed at any moment, a full disk or an unwritable
directory leaves the previous checkpoint loadable. A damaged or partial newest 'latest'
checkpoint is reported and set aside, and the run resumes from the newest intact one
(`Checkpointer.restore_latest`); a damaged named checkpoint is a one-line error. The run
directory's config and tokenizer are run_files.py's; averaging is averaging.py's.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from seq2seq.config import ModelConfig
from seq2seq.model.transformer import Model
from seq2seq.numerics import Numerics
from seq2seq.rundir.atomic_checkpoints import (
  check_crc,
  crc32,
  first_line,
  manager,
  nbytes,
  quiet,
  recover,
  remove,
  remove_partial,
  steps_in,
  swapping,
  to_host,
  write_step,
  writing,
)
from seq2seq.rundir.run_files import CheckpointError

log = logging.getLogger(__name__)
logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every save at INFO

SWAP_WAITS, SWAP_WAIT_S = 50, 0.1  # how long a reader waits for a writer's swap: 5 s
READ_ATTEMPTS = 5  # reads of a named checkpoint replaced under its reader

KINDS = ("latest", "best", "averaged", "ema")

PUBLISHED_FILE = "published.json"  # a published model's one checkpoint (rundir/hub.py)

class Checkpointer:
  """Saves and restores the training state of one run directory."""

  def __init__(self, workdir: str | os.PathLike, keep: int):
    self.workdir, self.keep = Path(workdir), keep
    recover(self.workdir / "checkpoints" / "latest")
    remove_partial(self.workdir / "checkpoints" / "latest")
    self.latest = manager(workdir, "latest", keep)

  def save_latest(self, step: int, params, opt_state, meta: dict[str, Any]) -> None:
    if self.latest.latest_step() == step:
      return
    params, opt_state = to_host(params), to_host(opt_state)
    root = Path(self.latest.directory)
    previous = self.latest.latest_step()
    with writing("latest", step, root, nbytes(params, opt_state),
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
        with quiet():
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
      remove(target)
      (root / str(step)).rename(target)
      log.warning("checkpoint %s cannot be read (%s); moved to %s, resuming from step %d",
                  root / str(step), first_line(e), target, resumed)
    self.latest = manager(self.workdir, "latest", self.keep)

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
      if steps or not swapping(root):
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
    with quiet(), ocp.StandardCheckpointer() as ckptr:
      saved = ckptr.metadata((path / "params").absolute()).item_metadata
    saved = dict(getattr(saved, "tree", saved))
  except Exception as e:  # noqa: BLE001 - tensorstore and orbax raise many kinds
    raise damaged(e) from e
  if shapes(saved) != shapes(expected):
    raise CheckpointError(mismatch)
  try:
    with quiet(), ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckptr:
      restored = ckptr.restore(path.absolute(), args=ocp.args.Composite(**items))
  except Exception as e:  # noqa: BLE001
    raise damaged(e) from e
  meta = dict(restored["meta"]) if "meta" in items else {}
  check_crc(path, meta, params=restored["params"])
  return restored["params"], meta

def save_params(workdir: str | os.PathLike, kind: str, step: int, params,
                meta: dict[str, Any]) -> Path:
  """Writes `params` as the one checkpoint of `kind` ('best', 'averaged', 'ema'),
  replacing the previous one only once it is complete; returns its step directory."""
  params = to_host(params)
  items = {"params": ocp.args.StandardSave(params),
           "meta": ocp.args.JsonSave(dict(meta, crc32={"params": crc32(params)}))}
  return write_step(Path(workdir).absolute() / "checkpoints" / kind, kind, step, items,
                     nbytes(params))
