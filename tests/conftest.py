import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Tests run on the CPU whatever is installed.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent XLA cache for the session, shared with the CLI subprocesses, so a shape
# compiled by one test is not compiled again by the next (about 10 s each on 2 cores).
os.environ.setdefault("SEQ2SEQ_XLA_CACHE", tempfile.mkdtemp(prefix="seq2seq-xla-"))

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ["SEQ2SEQ_XLA_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def run_cli(*args, input_bytes=None, check=True, timeout=600):
  """Runs a project CLI (train.py, translate.py, ...) as a user would."""
  proc = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, input=input_bytes,
                        capture_output=True, timeout=timeout)
  if check and proc.returncode != 0:
    raise AssertionError(f"{args} exited {proc.returncode}:\n{proc.stderr.decode()[-3000:]}")
  return proc


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
  """The tiny config trained briefly through the train.py CLI (with overrides)."""
  workdir = tmp_path_factory.mktemp("runs") / "tiny"
  run_cli("train.py", "--config", "configs/tiny.py", "--workdir", workdir,
          "--config.train.max_steps=300", "--config.train.eval_every=150",
          "--config.train.checkpoint_every=100", "--config.train.log_every=25")
  return workdir
