"""Self-describing run directories and atomic checkpoints (orbax).

    RUN_DIR/config.json        resolved config (model, data, train, decode)
    RUN_DIR/spm.model          the SentencePiece model (spm.vocab, spm.json beside it)
    RUN_DIR/checkpoints/latest/STEP/   params, optimizer state, meta (every N steps, at exit)
    RUN_DIR/checkpoints/best/STEP/     params, meta of the best validation BLEU
    RUN_DIR/checkpoints/averaged/STEP/ params averaged over the last K latest checkpoints
    RUN_DIR/checkpoints/ema/STEP/      the moving average of the params (train.ema_decay)

Orbax writes each step to a temporary directory and renames it when complete, so a
process killed at any moment leaves the previous checkpoint loadable.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from seq2seq.config import Config, ModelConfig
from seq2seq.model import Model
from seq2seq.runtime import write_atomic
from seq2seq.tokenizer import MODEL_FILE, Tokenizer

log = logging.getLogger(__name__)
logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every save at INFO

CONFIG_FILE = "config.json"
KINDS = ("latest", "best", "averaged", "ema")


class CheckpointError(ValueError):
  """A run directory or checkpoint is missing, incomplete or does not match the model."""


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


class Checkpointer:
  """Saves and restores the training state of one run directory."""

  def __init__(self, workdir: str | os.PathLike, keep: int):
    self.workdir = Path(workdir)
    self.latest = _manager(workdir, "latest", keep)
    self.best = _manager(workdir, "best", 1)

  def save_latest(self, step: int, params, opt_state, meta: dict[str, Any]) -> None:
    if self.latest.latest_step() == step:
      return
    self.latest.save(step, args=ocp.args.Composite(
        params=ocp.args.StandardSave(_to_host(params)),
        opt_state=ocp.args.StandardSave(_to_host(opt_state)),
        meta=ocp.args.JsonSave(meta)))

  def save_best(self, step: int, params, meta: dict[str, Any]) -> None:
    for old in self.best.all_steps():
      self.best.delete(old)
    self.best.save(step, args=ocp.args.Composite(
        params=ocp.args.StandardSave(_to_host(params)), meta=ocp.args.JsonSave(meta)))

  def restore_latest(self, params_like, opt_state_like):
    """Returns (params, opt_state, meta) of the newest checkpoint, or None if there is none."""
    step = self.latest.latest_step()
    if step is None:
      return None
    abstract = lambda t: jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, t)
    try:
      restored = self.latest.restore(step, args=ocp.args.Composite(
          params=ocp.args.StandardRestore(abstract(params_like)),
          opt_state=ocp.args.StandardRestore(abstract(opt_state_like)),
          meta=ocp.args.JsonRestore()))
    except ValueError as e:
      raise CheckpointError(
          f"checkpoint {step} in {self.latest.directory} does not match this run's model or "
          "optimizer (train.optimizer, clip_norm, grad_accum_steps, and whether ema_decay is "
          f"0, must stay the same to resume); use a new --workdir. Details: {str(e).splitlines()[0]}") from e
    return restored["params"], restored["opt_state"], restored["meta"]

  def close(self):
    self.latest.close()
    self.best.close()


def abstract_params(model_cfg: ModelConfig):
  """Shapes and dtypes of the model's parameters, without computing them."""
  return Model(model_cfg).param_shapes()


def checkpoint_path(workdir: str | os.PathLike, name: str) -> Path:
  """The step directory for 'best', 'latest', 'averaged', 'ema', or a path given directly.

  'best' falls back to 'latest' when a run stopped before its first validation."""
  if name in KINDS:
    root = Path(workdir) / "checkpoints" / name
    steps = sorted(int(p.name) for p in root.glob("[0-9]*") if p.is_dir() and
                   p.name.isdigit()) if root.exists() else []
    if not steps:
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
  `model_cfg` expects them; another architecture or vocabulary size is a CheckpointError."""
  path = checkpoint_path(workdir, name)
  expected = abstract_params(model_cfg)
  items = {"params": ocp.args.StandardRestore(expected)}
  if (path / "meta").exists():
    items["meta"] = ocp.args.JsonRestore()
  mismatch = (f"{path}: parameters do not match the model in config.json (different "
              "architecture or vocabulary size)")
  try:
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckptr:
      restored = ckptr.restore(path.absolute(), args=ocp.args.Composite(**items))
  except (ValueError, KeyError) as e:
    raise CheckpointError(f"{mismatch}: {str(e).splitlines()[0]}") from e
  shapes = lambda tree: jax.tree_util.tree_map(lambda x: tuple(x.shape), tree)
  if shapes(restored["params"]) != shapes(expected):
    raise CheckpointError(mismatch)
  return restored["params"], dict(restored["meta"]) if "meta" in items else {}


def average(workdir: str | os.PathLike, last: int, model_cfg: ModelConfig,
            upto: int | None = None) -> Path:
  """Averages the parameters of the last K 'latest' checkpoints (of those at or before
  step `upto`, if given) into 'averaged'."""
  root = Path(workdir) / "checkpoints" / "latest"
  steps = sorted(int(p.name) for p in root.glob("[0-9]*") if p.name.isdigit())
  steps = [s for s in steps if upto is None or s <= upto][-last:]
  if not steps:
    raise CheckpointError(f"no checkpoints to average in {root}"
                          + (f" at or before step {upto}" if upto is not None else ""))
  trees = [load_params(workdir, str(root / str(s)), model_cfg)[0] for s in steps]
  mean = jax.tree_util.tree_map(lambda *xs: np.mean(np.stack(xs), axis=0), *trees)
  path = save_params(workdir, "averaged", steps[-1], mean, {"averaged_steps": steps})
  log.info("averaged checkpoints %s into %s", steps, path.parent)
  return path


def save_params(workdir: str | os.PathLike, kind: str, step: int, params,
                meta: dict[str, Any]) -> Path:
  """Writes `params` as the one checkpoint of `kind` ('averaged', 'ema'), replacing the
  previous one; returns its step directory."""
  mngr = _manager(workdir, kind, 1)
  for old in mngr.all_steps():
    mngr.delete(old)
  mngr.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(_to_host(params)),
                                          meta=ocp.args.JsonSave(meta)))
  mngr.close()
  return Path(mngr.directory) / str(step)
