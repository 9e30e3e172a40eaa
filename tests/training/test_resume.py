"""Stopping and resuming: an interrupted run resumes bit for bit; every way a run stops
(early stopping, time limit, Ctrl-C, SIGTERM, a non-finite loss) leaves a checkpoint to resume from."""

import dataclasses
import os
import shutil
import signal

import jax
import numpy as np
import pytest

from seq2seq.rundir import checkpoint
from seq2seq.training import metrics
from seq2seq.training.train_step import DataParallelSteps as Steps
from seq2seq.training.trainer import train

from helpers import SAMPLE, tiny_config

pytestmark = pytest.mark.slow  # each test trains, kills or restarts processes


def _params(workdir, cfg):
  return checkpoint.load_params(workdir, "latest", cfg.model)[0]


# Packed rows, two micro-batches per update, the moving average, the dropout ramp and
# subword sampling share one case (its 80 batches cross an epoch after the checkpoint at
# 20): each run costs ~40 s.
@pytest.mark.parametrize("pack_length,sampling,accum,ema,ramp",
                         [(0, 0.0, 1, 0.0, 0), (48, 0.2, 2, 0.9, 30)])
def test_exact_resume(tmp_path, pack_length, sampling, accum, ema, ramp, monkeypatch):
  """40 updates uninterrupted == 25 updates, killed after the checkpoint at 20 (so the
  records of updates 21-25 are on disk but not in any checkpoint), then resumed to 40:
  same parameters and per-update losses, bit for bit, each update recorded once; with
  length buckets, and with packed rows, two micro-batches per update, a moving average,
  dropout ramped up over 30 updates and pairs segmented anew each epoch. Both runs are in
  this process; that another process samples the same pieces is test_subword_sampling.py's."""
  def cfg(max_steps):
    c = tiny_config(SAMPLE, max_steps=max_steps, checkpoint_every=10, grad_accum_steps=accum,
                    ema_decay=ema, dropout_ramp_steps=ramp)
    return dataclasses.replace(c, data=dataclasses.replace(
        c.data, pack_length=pack_length, sampling_alpha=sampling))

  train(cfg(40), tmp_path / "straight")
  with monkeypatch.context() as patch:  # the 26th update never happens
    patch.setattr(Steps, "update", _interrupted_at(26))
    assert train(cfg(40), tmp_path / "resumed")["step"] == 25
  latest = tmp_path / "resumed" / "checkpoints" / "latest"
  shutil.rmtree(latest / "25")  # as if the process died before its exit checkpoint
  summary = train(cfg(40), tmp_path / "resumed")  # the same command again resumes
  assert summary["step"] == 40
  if sampling:
    assert summary["epoch"] >= 1, summary  # the resumed part entered a resampled epoch
  a, b = _params(tmp_path / "straight", cfg(40)), _params(tmp_path / "resumed", cfg(40))
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(x, y)
  loss = lambda d: [(r["step"], r["loss"]) for r in metrics.read(d) if r["kind"] == "train"]
  assert loss(tmp_path / "straight") == loss(tmp_path / "resumed")
  assert [step for step, _ in loss(tmp_path / "resumed")] == list(range(1, 41))
  assert sorted(int(p.name) for p in latest.iterdir()) == [20, 30, 40]  # named by update
  if ema:
    a, b = (checkpoint.load_params(d, "ema", cfg(40).model)[0]
            for d in (tmp_path / "straight", tmp_path / "resumed"))
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
      np.testing.assert_array_equal(x, y)


def _interrupted_at(call: int):
  """Steps.update that raises KeyboardInterrupt (Ctrl-C) on its `call`-th call."""
  real_update, calls = Steps.update, []

  def update(self, state, batches):
    calls.append(1)
    if len(calls) == call:
      raise KeyboardInterrupt
    return real_update(self, state, batches)

  return update


def _latest_step(workdir):
  return int(checkpoint.checkpoint_path(workdir, "latest").name)


def test_early_stopping_stops_with_a_checkpoint(tmp_path):
  # Learning rate 0: validation BLEU never improves after the first validation.
  cfg = tiny_config(SAMPLE, max_steps=40, learning_rate=0.0, eval_every=5,
                     early_stopping_patience=2, checkpoint_every=1000)
  summary = train(cfg, tmp_path / "run")
  assert summary["step"] == 15 and "early stopping" in summary["stop_reason"]
  assert _latest_step(tmp_path / "run") == 15


def test_time_limit_stops_with_a_checkpoint(tmp_path):
  cfg = tiny_config(SAMPLE, max_steps=1000, max_minutes=1e-4, checkpoint_every=1000)
  summary = train(cfg, tmp_path / "run")
  assert summary["step"] < 1000 and "time limit" in summary["stop_reason"]
  assert _latest_step(tmp_path / "run") == summary["step"]


def test_interrupt_stops_with_a_checkpoint(tmp_path, monkeypatch):
  monkeypatch.setattr(Steps, "update", _interrupted_at(4))
  summary = train(tiny_config(SAMPLE, max_steps=20, checkpoint_every=1000), tmp_path / "run")
  assert summary["step"] == 3 and summary["stop_reason"] == "interrupted"
  assert _latest_step(tmp_path / "run") == 3


def test_sigterm_stops_with_a_checkpoint_and_the_run_resumes_exactly(tmp_path, monkeypatch):
  """`kill` during the 4th update: that update completes, is checkpointed and averaged,
  the previous SIGTERM handler is back afterwards, and resuming to 8 updates gives the
  parameters of 8 uninterrupted updates."""
  cfg = lambda steps: tiny_config(SAMPLE, max_steps=steps, checkpoint_every=2,
                                  average_last=2)
  real_update, calls = Steps.update, []

  def update(self, state, batches):
    calls.append(1)
    if len(calls) == 4:
      os.kill(os.getpid(), signal.SIGTERM)
    return real_update(self, state, batches)

  before = signal.getsignal(signal.SIGTERM)
  with monkeypatch.context() as patch:
    patch.setattr(Steps, "update", update)
    summary = train(cfg(8), tmp_path / "killed")
  assert summary["step"] == 4 and summary["stop_reason"] == "terminated (SIGTERM)"
  assert _latest_step(tmp_path / "killed") == 4
  assert checkpoint.checkpoint_path(tmp_path / "killed", "averaged").exists()
  assert signal.getsignal(signal.SIGTERM) is before
  assert train(cfg(8), tmp_path / "killed")["step"] == 8
  train(cfg(8), tmp_path / "straight")
  a, b = _params(tmp_path / "straight", cfg(8)), _params(tmp_path / "killed", cfg(8))
  for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    np.testing.assert_array_equal(x, y)


def test_resume_refuses_another_model(tmp_path):
  cfg = tiny_config(SAMPLE, max_steps=1)
  train(cfg, tmp_path / "run")
  other = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, d_ff=256))
  with pytest.raises(checkpoint.CheckpointError, match="other model settings"):
    train(other, tmp_path / "run")


def test_non_finite_loss_stops_and_keeps_the_good_checkpoint(tmp_path):
  cfg = tiny_config(SAMPLE, max_steps=3, checkpoint_every=1, warmup_steps=1)
  train(cfg, tmp_path / "run")
  good = _params(tmp_path / "run", cfg)
  exploding = dataclasses.replace(cfg, train=dataclasses.replace(
      cfg.train, max_steps=10, learning_rate=1e30, checkpoint_every=1000))
  with pytest.raises(FloatingPointError, match=r"non-finite loss or gradient at step \d+"):
    train(exploding, tmp_path / "run")
  latest = checkpoint.checkpoint_path(tmp_path / "run", "latest")
  assert int(latest.name) == 3  # the failed run did not save its diverged state at exit
  for x, y in zip(jax.tree_util.tree_leaves(good),
                  jax.tree_util.tree_leaves(_params(tmp_path / "run", cfg))):
    np.testing.assert_array_equal(x, y)


def test_a_finite_but_exploding_loss_stops_naming_the_update_and_saves_nothing_more(tmp_path):
  """The probe of a learning rate of 1e4: the loss stays finite (~1e8), but leaves twice a
  uniform guess's; the run stops, and neither latest nor best holds the diverged state."""
  cfg = tiny_config(SAMPLE, max_steps=4, checkpoint_every=2, eval_every=2, warmup_steps=1)
  train(cfg, tmp_path / "run")
  good = _params(tmp_path / "run", cfg)

  exploding = dataclasses.replace(cfg, train=dataclasses.replace(
      cfg.train, max_steps=30, learning_rate=1e4, checkpoint_every=1, eval_every=1))
  with pytest.raises(FloatingPointError, match=r"training diverged at update \d+: loss .* "
                     r"above twice a uniform guess's.* latest/\d+, is the last good state"
                     ) as e:
    train(exploding, tmp_path / "run")
  update = int(str(e.value).split("update ")[1].split(":")[0])
  latest = checkpoint.checkpoint_path(tmp_path / "run", "latest")
  assert int(latest.name) < update
  assert f"latest/{latest.name}," in str(e.value)
  if int(latest.name) == 4:  # diverged at once: what was there is untouched
    for x, y in zip(jax.tree_util.tree_leaves(good),
                    jax.tree_util.tree_leaves(_params(tmp_path / "run", cfg))):
      np.testing.assert_array_equal(x, y)
  best_now, meta = checkpoint.load_params(tmp_path / "run", "best", cfg.model)
  assert meta["step"] < update


def test_divergence_rule_on_the_running_level():
  from seq2seq.training.trainer import LEVEL_UPDATES, Diverged, Progress, check_divergence
  cfg = tiny_config(SAMPLE)  # vocabulary 400: twice a uniform guess is 2 ln 400 = 11.98
  p = Progress()
  rng = np.random.default_rng(0)
  for step in range(1, LEVEL_UPDATES + 1):  # noisy, falling: never stops
    loss = 6.0 - step * 0.02 + rng.uniform(-0.5, 0.5)
    check_divergence(p, {"loss": loss * 100, "tokens": 100}, step, cfg, None)
  assert p.loss_updates == LEVEL_UPDATES and 4.0 < p.loss_level < 5.5
  check_divergence(p, {"loss": 1.9 * p.loss_level, "tokens": 1}, 101, cfg, 100)  # a spike
  with pytest.raises(Diverged, match=r"update 102: loss .* above 2x its running level.*"
                     r"latest/100, .*--config.train.learning_rate=0.0015"):
    check_divergence(p, {"loss": 2.1 * p.loss_level, "tokens": 1}, 102, cfg, 100)
  fresh = Progress()  # before its 100th update only the ceiling applies
  check_divergence(fresh, {"loss": 11.0, "tokens": 1}, 1, cfg, None)
  with pytest.raises(Diverged, match="above twice a uniform guess's, 12.*no checkpoint"):
    check_divergence(fresh, {"loss": 12.5, "tokens": 1}, 2, cfg, None)
  off = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, divergence_factor=0.0))
  check_divergence(Progress(), {"loss": 1e9, "tokens": 1}, 1, off, None)
