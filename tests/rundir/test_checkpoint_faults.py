"""Fault injection: damaged files, a process killed while saving, a full disk and a
read-only directory never lose a checkpoint that was there, and each is one clear error."""

import contextlib
import dataclasses
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from seq2seq.config import PRESETS
from seq2seq.rundir import checkpoint

pytestmark = pytest.mark.slow  # each test trains, kills or restarts processes

MODEL = dataclasses.replace(PRESETS["tiny"], vocab_size=64, d_model=16, d_ff=32,
                            encoder_layers=1, decoder_layers=1, max_len=16)


def params_like(scale: float):
  shapes = checkpoint.abstract_params(MODEL)
  leaves, tree = jax.tree_util.tree_flatten(shapes)
  rng = np.random.default_rng(int(scale))
  return jax.tree_util.tree_unflatten(
      tree, [scale + rng.standard_normal(x.shape).astype(x.dtype) for x in leaves])


def opt_like(scale: float):
  return {"mu": np.full(7, scale, np.float32), "count": np.asarray(int(scale), np.int32)}


def assert_tree_equal(a, b):
  assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def saved_run(root: Path) -> Path:
  ckpt = checkpoint.Checkpointer(root, keep=3)
  for step in (1, 2):
    ckpt.save_latest(step, params_like(step), opt_like(step), {"step": step})
    ckpt.save_best(step, params_like(step), {"step": step})
  ckpt.close()
  return root


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
  return saved_run(tmp_path_factory.mktemp("pristine") / "run")


def damages(step_dir: Path):
  """(description, function that damages a copy) for every file of a step directory."""
  for f in sorted(p for p in step_dir.rglob("*") if p.is_file()):
    rel = f.relative_to(step_dir)
    yield f"delete {rel}", lambda d, rel=rel: (d / rel).unlink()
    if f.stat().st_size > 1:
      yield f"truncate {rel}", lambda d, rel=rel: os.truncate(d / rel, (d / rel).stat().st_size // 2)
      yield f"flip a byte of {rel}", lambda d, rel=rel: flip_last_byte(d / rel)


def flip_last_byte(path: Path) -> None:
  data = bytearray(path.read_bytes())
  data[-1] ^= 0xFF
  path.write_bytes(bytes(data))


def test_a_damaged_newest_checkpoint_is_set_aside_and_the_run_resumes_from_an_intact_one(
    pristine, tmp_path, caplog):
  cases = list(damages(pristine / "checkpoints" / "latest" / "2"))
  assert len(cases) > 20
  for what, damage in cases:
    run = tmp_path / "run"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(pristine, run)
    damage(run / "checkpoints" / "latest" / "2")
    caplog.clear()
    with caplog.at_level(logging.WARNING, "seq2seq.rundir.checkpoint"):
      ckpt = checkpoint.Checkpointer(run, keep=3)
      params, opt_state, meta = ckpt.restore_latest(params_like(0), opt_like(0))
    step = meta["step"]
    assert step in (1, 2), what
    assert_tree_equal(params, params_like(step))  # never silently wrong values
    assert_tree_equal(opt_state, opt_like(step))
    if step == 1:  # reported in one line, set aside; the same step can be saved again
      [record] = [r for r in caplog.records if "cannot be read" in r.message]
      assert "resuming from step 1" in record.message and "\n" not in record.message, what
      assert (run / "checkpoints" / "damaged" / "latest-2").is_dir()
      ckpt.save_latest(2, params_like(5), opt_like(5), {"step": 2})
      assert_tree_equal(ckpt.restore_latest(params_like(0), opt_like(0))[0], params_like(5))
    ckpt.close()


def test_a_damaged_named_checkpoint_is_a_one_line_error_never_wrong_values(pristine, tmp_path):
  cases = list(damages(pristine / "checkpoints" / "best" / "2"))
  errors = []
  for what, damage in cases:
    run = tmp_path / "run"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(pristine, run)
    damage(run / "checkpoints" / "best" / "2")
    try:
      params, meta = checkpoint.load_params(run, "best", MODEL)
    except checkpoint.CheckpointError as e:
      errors.append(what)
      assert "\n" not in str(e) and "best" in str(e), what
      continue
    assert_tree_equal(params, params_like(2))
  # Files orbax does not need may go; damage to the arrays themselves is always detected.
  assert {w for w, _ in cases if w.split()[-1].startswith("params/d/")} <= set(errors)


def test_no_checkpoint_that_can_be_restored_is_one_error_naming_the_steps(pristine, tmp_path):
  run = tmp_path / "run"
  shutil.copytree(pristine, run)
  for step in (1, 2):
    flip_last_byte(next((run / "checkpoints" / "latest" / str(step) / "params" / "d").iterdir()))
  with pytest.raises(checkpoint.CheckpointError, match=r"steps 2, 1\)"):
    checkpoint.Checkpointer(run, keep=3).restore_latest(params_like(0), opt_like(0))


SAVER = """
import sys, numpy as np
sys.path[:0] = [{tests!r}, {tests!r} + "/.."]
from test_checkpoint_faults import params_like, opt_like
from seq2seq.rundir import checkpoint
ckpt = checkpoint.Checkpointer({run!r}, keep=2)
step = 2 + {seed}
print("ready", flush=True)
while True:  # saves until killed
  step += 1
  ckpt.save_latest(step, params_like(step), opt_like(step), {{"step": step}})
  ckpt.save_best(step, params_like(step), {{"step": step}})
  checkpoint.save_params({run!r}, "averaged", step % 2, params_like(step), {{"step": step}})
"""


@pytest.mark.parametrize("seed", range(6))
def test_a_process_killed_while_saving_leaves_every_kind_loadable(pristine, tmp_path, seed):
  run = tmp_path / "run"
  shutil.copytree(pristine, run)
  checkpoint.save_params(run, "averaged", 1, params_like(1), {"step": 1})
  code = SAVER.format(tests=str(Path(__file__).parent), run=str(run), seed=seed)
  proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                          env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.stdout.readline().strip() == b"ready"
  time.sleep(random.Random(seed).uniform(0.05, 1.5))
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  params, opt_state, meta = checkpoint.Checkpointer(run, keep=2).restore_latest(
      params_like(0), opt_like(0))
  assert_tree_equal(params, params_like(meta["step"]))
  assert_tree_equal(opt_state, opt_like(meta["step"]))
  for kind in ("best", "averaged"):
    params, meta = checkpoint.load_params(run, kind, MODEL)
    assert_tree_equal(params, params_like(meta["step"]))


def test_a_writer_killed_while_deleting_the_step_it_replaced_leaves_the_new_one_read(
    pristine, tmp_path, monkeypatch):
  """'averaged' of step 1 replaced by one of step 0 (as when a run resumed from an earlier
  checkpoint saves again): a writer killed while it deletes step 1 must leave no partial
  step 1 that readers take for the newest, being the higher number."""
  run = tmp_path / "run"
  shutil.copytree(pristine, run)
  checkpoint.save_params(run, "averaged", 1, params_like(1), {"step": 1})
  rmtree = shutil.rmtree

  def killed_midway(path, *args, **kwargs):  # deletes one file of step 1, then dies
    if Path(path).name not in ("1", ".1.gone"):
      return rmtree(path, *args, **kwargs)
    next(f for f in sorted(Path(path).rglob("*")) if f.is_file() and f.stat().st_size).unlink()
    raise KeyboardInterrupt("killed")

  monkeypatch.setattr(shutil, "rmtree", killed_midway)
  with pytest.raises(KeyboardInterrupt):
    checkpoint.save_params(run, "averaged", 0, params_like(0), {"step": 0})
  monkeypatch.undo()
  params, meta = checkpoint.load_params(run, "averaged", MODEL)
  assert meta["step"] == 0
  assert_tree_equal(params, params_like(0))
  checkpoint.save_params(run, "averaged", 2, params_like(2), {"step": 2})  # the next writer
  assert sorted(p.name for p in (run / "checkpoints" / "averaged").iterdir()) == ["2"]


@contextlib.contextmanager
def mounted_tmpfs(path: Path, options: str):
  path.mkdir()
  if shutil.which("mount") is None:
    pytest.skip("no mount command to make a small or read-only file system")
  made = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                        capture_output=True)
  if made.returncode:
    pytest.skip(f"cannot mount a tmpfs here ({made.stderr.decode().strip()}): needs root")
  try:
    yield path
  finally:
    subprocess.run(["umount", "-l", str(path)], check=True)


def test_a_full_disk_is_one_line_naming_the_space_and_the_previous_checkpoint_survives(
    tmp_path):
  with mounted_tmpfs(tmp_path / "small", "size=600k") as small:
    run = small / "run"
    ckpt = checkpoint.Checkpointer(run, keep=5)
    ckpt.save_latest(1, params_like(1), opt_like(1), {"step": 1})
    checkpoint.save_params(run, "best", 1, params_like(1), {"step": 1})
    with pytest.raises(checkpoint.CheckpointError) as latest_full:
      for step in range(2, 12):  # until the disk is full
        ckpt.save_latest(step, params_like(step), opt_like(step), {"step": step})
    filler = small / "filler"  # leaves less than the new "best" needs beside the old
    filler.write_bytes(b"\0" * max(shutil.disk_usage(small).free - 16 * 1024, 0))
    with pytest.raises(checkpoint.CheckpointError) as best_full:
      for step in range(2, 12):
        checkpoint.save_params(run, "best", step, params_like(step), {"step": step})
    for e in (latest_full.value, best_full.value):
      message = str(e)
      assert "\n" not in message and str(run / "checkpoints") in message
      assert "no space left on device" in message and " free there" in message
      assert "is intact" in message
    last = ckpt.latest.latest_step()
    params, _, meta = checkpoint.Checkpointer(run, keep=5).restore_latest(params_like(0),
                                                                        opt_like(0))
    assert meta["step"] == last
    assert_tree_equal(params, params_like(last))
    params, meta = checkpoint.load_params(run, "best", MODEL)
    assert_tree_equal(params, params_like(meta["step"]))
    assert not list(run.rglob("*.orbax-checkpoint-tmp*")) and not list(run.rglob(".*.new"))


def test_a_read_only_directory_is_one_line(pristine, tmp_path):
  with mounted_tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
    with pytest.raises(checkpoint.CheckpointError, match="read-only file system") as e:
      checkpoint.save_params(ro / "run", "averaged", 3, params_like(3), {"step": 3})
    assert "\n" not in str(e.value)


def test_the_crc_of_a_tree_changes_with_any_byte_dtype_or_shape():
  """atomic_checkpoints.crc32, which every checkpoint's meta carries: a flipped byte, the
  same bytes as another dtype, or another shape each read as damage."""
  import numpy as np

  from seq2seq.rundir.atomic_checkpoints import crc32
  tree = {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}
  flipped = {"w": tree["w"].copy()}
  flipped["w"].view(np.uint8).reshape(-1)[5] ^= 1
  assert crc32(tree) == crc32({"w": tree["w"].copy()})
  for other in (flipped, {"w": tree["w"].view(np.int32)}, {"w": tree["w"].reshape(4, 3)}):
    assert crc32(other) != crc32(tree)
