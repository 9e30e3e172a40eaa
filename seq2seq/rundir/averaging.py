"""Checkpoint averaging: the mean of the last K 'latest' checkpoints' parameters, written
as the 'averaged' checkpoint (seq2seq-average, and train.py at the end of a run)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import jax
import numpy as np

from seq2seq.config import ModelConfig
from seq2seq.rundir.atomic_checkpoints import steps_in
from seq2seq.rundir.checkpoint import load_params, save_params
from seq2seq.rundir.run_files import CheckpointError
from seq2seq.runtime import Progress

log = logging.getLogger(__name__)


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
