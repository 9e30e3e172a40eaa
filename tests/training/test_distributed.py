"""Multi-process training on JAX's distributed runtime, on this machine's CPU.

Two train.py processes (one CPU device each, a coordinator on 127.0.0.1) must train the
same model as one process with two host devices, and a two-process run killed mid-way and
restarted must end bit-identical to one that was not. Subword sampling is on, so every
process, and every restarted one, must draw the same pieces.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from seq2seq.rundir import checkpoint, run_files

from conftest import run_cli, xla_flags
from helpers import ROOT

pytestmark = pytest.mark.slow  # each test trains, kills or restarts processes

STEPS = 12
TRAIN_ARGS = ("--config", "configs/tiny.py", f"--config.train.max_steps={STEPS}",
              "--config.model.encoder_layers=1", "--config.model.decoder_layers=1",
              "--config.train.checkpoint_every=3", "--config.train.keep_checkpoints=3",
              "--config.train.eval_every=6", "--config.train.eval_max_sentences=24",
              "--config.train.log_every=3", "--config.train.average_last=1",
              "--config.data.sampling_alpha=0.1")
TIMEOUT = 600  # seconds for any one run (about 30 s each on an idle 2-core machine)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int) -> dict:
  return dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(devices))


def _start_cluster(workdir, processes: int = 2) -> list[subprocess.Popen]:
  port = _free_port()
  return [subprocess.Popen(
      [sys.executable, "train.py", *TRAIN_ARGS, "--workdir", str(workdir),
       "--coordinator-address", f"127.0.0.1:{port}", "--num-processes", str(processes),
       "--process-id", str(i)],
      cwd=ROOT, env=_env(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
      for i in range(processes)]


def _wait(procs, timeout=TIMEOUT) -> list[tuple[int, str, str]]:
  try:
    outs = [p.communicate(timeout=timeout) for p in procs]
  finally:
    _kill(procs)
  return [(p.returncode, o.decode(), e.decode()) for p, (o, e) in zip(procs, outs)]


def _kill(procs) -> None:
  for p in procs:
    if p.poll() is None:
      p.send_signal(signal.SIGKILL)
      p.wait()


def _run_cluster(workdir) -> list[tuple[int, str, str]]:
  results = _wait(_start_cluster(workdir))
  for code, _, err in results:
    assert code == 0, err[-3000:]
  return results


def _params(workdir):
  cfg = run_files.load_config(workdir)
  params, meta = checkpoint.load_params(workdir, "latest", cfg.model)
  assert meta["step"] == STEPS
  return jax.tree_util.tree_leaves(params)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("cluster") / "run"
  return workdir, _run_cluster(workdir)


def test_two_processes_train_like_one_process_with_two_devices(two_processes, tmp_path):
  workdir, results = two_processes
  single = tmp_path / "single"
  proc = subprocess.run([sys.executable, "train.py", *TRAIN_ARGS, "--workdir", str(single)],
                        cwd=ROOT, env=_env(2), capture_output=True, timeout=TIMEOUT)
  assert proc.returncode == 0, proc.stderr.decode()[-3000:]
  # Process 0 alone trained the tokenizer; the single process trains the same one.
  assert (workdir / "spm.model").read_bytes() == (single / "spm.model").read_bytes()
  for a, b in zip(_params(workdir), _params(single), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  # Both processes saw the same validation BLEU (gathered translations): one decision.
  summaries = [json.loads(line) for _, out, _ in results for line in out.splitlines()
               if line.startswith("{")]
  assert len(summaries) == 1, "only process 0 prints the summary"
  assert summaries[0]["step"] == STEPS
  reference = json.loads(proc.stdout.decode().splitlines()[-1])
  assert summaries[0]["best_step"] == reference["best_step"]
  assert summaries[0]["best_bleu"] == pytest.approx(reference["best_bleu"], abs=0.5)


def test_only_process_zero_writes_logs_and_metrics(two_processes):
  workdir, _ = two_processes
  records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  train_steps = [r["step"] for r in records if r["kind"] == "train"]
  assert train_steps == sorted(set(train_steps)) == list(range(3, STEPS + 1, 3))
  assert [r["step"] for r in records if r["kind"] == "val"] == [6, 12]
  log_lines = (workdir / "train.log").read_text().splitlines()
  assert sum("validation at step 6" in line for line in log_lines) == 1
  assert (workdir / "README.md").is_file() and (workdir / "curves.png").is_file()


def test_killed_cluster_resumes_bit_identical(two_processes, tmp_path):
  workdir, _ = two_processes
  resumed = tmp_path / "resumed"
  procs = _start_cluster(resumed)
  latest = resumed / "checkpoints" / "latest"
  try:
    deadline = time.time() + TIMEOUT
    while not (latest / "3").is_dir():  # killed once step 3 is on disk, mid-run
      assert time.time() < deadline and all(p.poll() is None for p in procs), \
          "the run ended or hung before its third checkpoint"
      time.sleep(0.02)
  finally:
    _kill(procs)
  steps_at_kill = [int(p.name) for p in latest.iterdir() if p.name.isdigit()]
  assert max(steps_at_kill) < STEPS, "the kill came after the run had finished"
  _run_cluster(resumed)
  for a, b in zip(_params(workdir), _params(resumed), strict=True):
    np.testing.assert_array_equal(a, b)


def test_incomplete_cluster_flags_are_refused(tmp_path):
  proc = run_cli("train.py", "--config", "configs/tiny.py", "--workdir", tmp_path / "never",
                 "--num-processes", "2", check=False)
  assert proc.returncode == 2
  assert b"needs all of --coordinator-address, --num-processes and --process-id" in proc.stderr
  assert not (tmp_path / "never").exists()
