"""A run directory shared by one writer and many readers: loading a checkpoint changes
nothing in the run directory, a second trainer stops at once naming the first, and a
training finishes while other processes load its checkpoints in a loop."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from seq2seq.config import PRESETS
from seq2seq.rundir import checkpoint, lock

from conftest import run_cli
from helpers import ROOT

MODEL = dataclasses.replace(PRESETS["tiny"], vocab_size=64, d_model=16, d_ff=32,
                            encoder_layers=1, decoder_layers=1, max_len=16)
TRAIN = ("train.py", "--config", "configs/tiny.py", "--config.model.encoder_layers=1",
         "--config.model.decoder_layers=1", "--config.train.log_every=5")


def tree_of(value: float):
  import jax
  shapes = checkpoint.abstract_params(MODEL)
  return jax.tree_util.tree_map(lambda x: np.full(x.shape, value, x.dtype), shapes)


def listing(run: Path) -> list[tuple[str, int]]:
  """Every path under the run directory with its modification time."""
  return sorted((str(p.relative_to(run)), p.stat().st_mtime_ns) for p in run.rglob("*"))


def test_a_reader_meeting_a_half_done_swap_changes_nothing_and_the_writer_finishes_it(
    tmp_path, caplog):
  run = tmp_path / "run"
  checkpoint.save_params(run, "best", 10, tree_of(1.0), {"step": 10})
  checkpoint.save_params(run, "latest", 12, tree_of(3.0), {"step": 12})
  root = run / "checkpoints" / "best"
  checkpoint.save_params(run, "best", 20, tree_of(2.0), {"step": 20})
  # A writer killed between the renames of its swap: step 20 complete but not in place.
  (root / "20").rename(root / ".20.new")
  before = listing(run)
  checkpoint.SWAP_WAITS, waits = 3, checkpoint.SWAP_WAITS
  try:
    with caplog.at_level("INFO"):
      params, meta = checkpoint.load_params(run, "best", MODEL)
  finally:
    checkpoint.SWAP_WAITS = waits
  assert meta["step"] == 12  # no complete 'best': 'latest', as before any validation
  assert listing(run) == before  # the reader renamed, removed and wrote nothing
  assert "no 'best' checkpoint" in caplog.text and "step 12" in caplog.text
  # The writer's next save finishes the swap and replaces it.
  checkpoint.save_params(run, "best", 30, tree_of(4.0), {"step": 30})
  assert checkpoint.steps_in(root) == [30] and not list(root.glob(".*"))


def test_a_step_replaced_while_it_is_read_is_read_again_from_the_newest(tmp_path,
                                                                         monkeypatch):
  run = tmp_path / "run"
  checkpoint.save_params(run, "best", 10, tree_of(1.0), {"step": 10})
  real = checkpoint._load_step
  calls = []

  def replaced_under_the_reader(path, model_cfg):
    calls.append(path.name)
    if len(calls) == 1:  # a writer swaps in step 20 and removes 10 while 10 is read
      checkpoint.save_params(run, "best", 20, tree_of(2.0), {"step": 20})
      return real(path, model_cfg)
    return real(path, model_cfg)

  monkeypatch.setattr(checkpoint, "_load_step", replaced_under_the_reader)
  params, meta = checkpoint.load_params(run, "best", MODEL)
  assert calls == ["10", "20"] and meta["step"] == 20


def lock_holder(workdir) -> subprocess.Popen:
  """Another process holding `workdir`'s writer lock (once this returns), until killed."""
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time\nfrom seq2seq.rundir import lock\n"
       f"with lock.training_lock({str(workdir)!r}):\n  print('held', flush=True)\n"
       "  time.sleep(600)"], stdout=subprocess.PIPE, cwd=ROOT)
  assert holder.stdout.readline().strip() == b"held"
  return holder


def test_the_lock_names_its_holder_and_dies_with_it(tmp_path):
  holder = lock_holder(tmp_path)
  try:
    with pytest.raises(lock.RunLocked, match=f"pid {holder.pid} on "):
      with lock.training_lock(tmp_path):
        pass
  finally:
    holder.send_signal(signal.SIGKILL)  # no exit handler runs: the kernel releases it
    holder.wait()
  with lock.training_lock(tmp_path), lock.training_lock(tmp_path):  # re-entrant here
    assert lock.holder(tmp_path)["pid"] == os.getpid()
  with lock.training_lock(tmp_path):  # released on leaving
    pass


@pytest.mark.slow
def test_a_second_trainer_stops_at_once_naming_the_first(tmp_path):
  run = tmp_path / "run"
  first = subprocess.Popen([sys.executable, *TRAIN, "--workdir", run,
                            "--config.train.max_steps=120",
                            "--config.train.checkpoint_every=20",
                            "--config.train.eval_every=1000"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  try:
    deadline = time.time() + 120
    while (lock.holder(run) or {}).get("pid") != first.pid:
      assert first.poll() is None and time.time() < deadline, "the first never took the lock"
      time.sleep(0.2)
    second = run_cli(*TRAIN, "--workdir", run, "--config.train.max_steps=120", check=False)
    assert second.returncode == 1
    err = second.stderr.decode().strip().splitlines()
    assert err[-1].startswith("error: ") and f"pid {first.pid} on " in err[-1], err
    assert "Traceback" not in second.stderr.decode()
    # The first trains on undisturbed: a checkpoint after the refusal, then (as a service
    # manager stops it) a SIGTERM ends it cleanly with its exit checkpoint.
    latest = run / "checkpoints" / "latest"
    refused_at = (checkpoint.steps_in(latest) or [0])[-1]
    while (checkpoint.steps_in(latest) or [0])[-1] <= refused_at and first.poll() is None:
      assert time.time() < deadline + 600, "the first made no checkpoint after the refusal"
      time.sleep(0.2)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=600) == 0, first.stderr.read().decode()[-2000:]
  finally:
    if first.poll() is None:
      first.kill()
  assert checkpoint.steps_in(latest)[-1] > refused_at


READER = """
import json, os, shutil, sys, time
from pathlib import Path
run, kind = Path(sys.argv[1]).absolute(), sys.argv[2]

def refuse(name, fn):  # a reader that renames or removes anything in the run fails
  def guarded(*args, **kwargs):
    for a in args[:2]:
      if isinstance(a, (str, os.PathLike)) and str(Path(a).absolute()).startswith(str(run)):
        raise AssertionError(f"a reader called {name}({a})")
    return fn(*args, **kwargs)
  return guarded

for name in ("rename", "replace", "remove", "unlink", "rmdir"):
  setattr(os, name, refuse(name, getattr(os, name)))
shutil.rmtree, shutil.move = refuse("rmtree", shutil.rmtree), refuse("move", shutil.move)
from seq2seq.rundir import checkpoint, run_files
while not (run / "config.json").exists():
  time.sleep(0.1)
cfg = run_files.load_config(run)
steps, errors, done = [], [], False
while not done:  # from before the trainer's first save to one load after its end
  done = (run / "DONE").exists()
  try:
    meta = checkpoint.load_params(run, kind, cfg.model)[1]
    steps.append(meta["step"] if "step" in meta else meta["averaged_steps"][-1])
    # A few loads a second, each meeting the trainer wherever it is: three readers loading
    # back to back took more CPU than the trainer and the rest of the suite beside it.
    time.sleep(0.1)
  except checkpoint.CheckpointError as e:
    if "no 'latest' checkpoint" not in str(e) and f"no '{kind}' checkpoint" not in str(e):
      errors.append(str(e))
    time.sleep(0.05)  # none written yet: a loop of stat calls would take the trainer's CPU
print(json.dumps({"steps": steps, "errors": errors}))
"""


@pytest.mark.slow
def test_training_finishes_while_other_processes_load_its_checkpoints(tmp_path):
  run = tmp_path / "run"
  readers = [subprocess.Popen([sys.executable, "-c", READER, run, kind], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for kind in ("best", "latest", "averaged")]
  try:
    trainer = run_cli(*TRAIN, "--workdir", run, "--config.train.max_steps=60",
                      "--config.train.checkpoint_every=5", "--config.train.eval_every=10",
                      "--config.train.eval_max_sentences=8", "--config.train.average_last=3",
                      check=False)
    (run / "DONE").touch()
    outputs = [r.communicate(timeout=300) for r in readers]
    for (out, err), r in zip(outputs, readers):
      assert r.returncode == 0 and out, err.decode()[-3000:]
    results = [json.loads(out.decode().splitlines()[-1]) for out, _ in outputs]
  finally:
    for r in readers:
      if r.poll() is None:
        r.kill()
  assert trainer.returncode == 0, trainer.stderr.decode()[-3000:]
  best, latest, averaged = results
  for r in results:
    assert not r["errors"], r["errors"][:3]
  assert len(best["steps"]) > 10 and len(latest["steps"]) > 10
  best_step = json.loads((run / "training.json").read_text())["best_step"]
  assert set(best["steps"]) <= set(range(5, 61, 5)) and best["steps"][-1] == best_step
  assert set(latest["steps"]) <= set(range(5, 61, 5)) and latest["steps"][-1] == 60
  assert averaged["steps"][-1:] == [60]  # written at the end


def test_a_file_system_that_cannot_lock_is_one_line(tmp_path, monkeypatch):
  import errno
  import fcntl

  def refuse(fd, operation):
    raise OSError(errno.ENOLCK, "No locks available")
  monkeypatch.setattr(fcntl, "flock", refuse)
  with pytest.raises(lock.RunLocked, match="this file system cannot lock files"):
    with lock.training_lock(tmp_path):
      pass


def test_averaging_takes_the_writer_lock(trained_run, tmp_path):
  import shutil
  run = tmp_path / "run"  # averaging writes into the run: a copy of the shared one
  shutil.copytree(trained_run, run)
  holder = lock_holder(run)
  try:
    done = run_cli("-m", "seq2seq.cli.average", "--workdir", run, "--last", "2",
                   check=False)
    assert done.returncode == 1 and f"pid {holder.pid}".encode() in done.stderr
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  assert run_cli("-m", "seq2seq.cli.average", "--workdir", run, "--last", "2").stdout
