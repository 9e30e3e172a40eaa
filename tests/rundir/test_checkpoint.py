"""Checkpoints: named lookup, fallback, shape checks, atomic run-directory files."""

import shutil

import jax
import numpy as np
import pytest

from seq2seq.config import PRESETS
from seq2seq.rundir import checkpoint, run_files


def test_best_falls_back_to_latest_when_missing(trained_run, tmp_path):
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  shutil.rmtree(run / "checkpoints" / "best")
  cfg = run_files.load_config(run)
  assert checkpoint.checkpoint_path(run, "best") == checkpoint.checkpoint_path(run, "latest")
  best, _ = checkpoint.load_params(run, "best", cfg.model)
  latest, meta = checkpoint.load_params(run, "latest", cfg.model)
  assert meta["step"] == 300
  for x, y in zip(jax.tree_util.tree_leaves(best), jax.tree_util.tree_leaves(latest)):
    np.testing.assert_array_equal(x, y)
  with pytest.raises(checkpoint.CheckpointError, match="no 'averaged' checkpoint"):
    checkpoint.checkpoint_path(run, "averaged")


def test_parameters_of_another_architecture_are_refused(trained_run):
  cfg = run_files.load_config(trained_run)
  import dataclasses
  wider = dataclasses.replace(cfg.model, d_ff=cfg.model.d_ff * 2)
  with pytest.raises(checkpoint.CheckpointError, match="do not match the model"):
    checkpoint.load_params(trained_run, "latest", wider)
  with pytest.raises(checkpoint.CheckpointError, match="not a checkpoint step directory"):
    checkpoint.load_params(trained_run, str(trained_run), PRESETS["tiny"])
