"""Shared fixtures. The package is imported as installed (`pip install -e .`); pytest
puts this folder on sys.path, so tests import `helpers` and `conftest` directly."""

import atexit
import importlib
import io
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import filelock
import pytest

# Tests run on the CPU whatever is installed.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA:CPU compiles the suite's programs with its cheapest settings: LLVM's optimizations
# off and the older fused-loop emitters. The tiny models' programs compute in
# milliseconds, so compiling them was most of the suite's time; these settings compile a
# search program in a third of the time and run it 2-4x slower, and took `make test` from
# 22:39 to 15:40 on an AVX2-only AMD EPYC (all tests passing). Subprocesses inherit them.
# They change how XLA builds a program, not what it computes: every property a test checks
# (equal translations, bit-identical resumes, ...) compares programs built alike.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()
# One persistent XLA cache for the test run, shared with the CLI subprocesses, so a shape
# compiled by one test is not compiled again by the next (seconds each on 2 cores). One
# this run made is removed when it ends (~50 MB after the whole suite).
# Every program is stored, however fast it compiled: the CLI tests' processes then load
# what the suite compiled before instead of compiling it again.
os.environ.setdefault("SEQ2SEQ_XLA_CACHE_MIN_SECONDS", "0")
if "SEQ2SEQ_XLA_CACHE" not in os.environ:
  os.environ["SEQ2SEQ_XLA_CACHE"] = tempfile.mkdtemp(prefix="seq2seq-xla-")
  atexit.register(shutil.rmtree, os.environ["SEQ2SEQ_XLA_CACHE"], ignore_errors=True)

import jax  # noqa: E402

from helpers import MULTI30K, ROOT, TEST_SEED  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ["SEQ2SEQ_XLA_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ["SEQ2SEQ_XLA_CACHE_MIN_SECONDS"]))
# Broadcasting must be explicit: a [B] against [B, T] by accident is a bug, not a feature.
jax.config.update("jax_numpy_rank_promotion", "raise")


# The fast subset (`make test-fast`: -m "not slow") leaves out what trains, serves or
# decodes a trained run. A test is slow when it takes one of these fixtures (directly or
# through another), or when its file or itself is marked `slow` by hand.
SLOW_FIXTURES = {"trained_run", "trained_multilingual", "multi30k_dir", "multi30k_tokenizer"}


# Files that take longest, longest first (seconds in a clean-clone `make test` on 2 cores,
# AMD EPYC with AVX-512 BF16: 83, 64, 62, 60, 56). `make test` hands each file whole to
# one of two workers in the order of the collection (`--no-loadscope-reorder`; xdist's own
# order, most tests first, hands test_distributed.py's 4 tests out near the end, where a
# long file can leave the other core idle); these go out first, the rest as collected.
# Measured, the suite's time stayed within the machine's spread (445 s before; 422-452 s).
LONGEST_FIRST = ("training/test_distributed.py", "training/test_train_step.py",
                 "serving/test_http_server.py", "model/test_transformer.py", "training/test_resume.py")


def pytest_collection_modifyitems(config, items):
  for item in items:
    if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
      item.add_marker(pytest.mark.slow)
  tests = Path(__file__).parent

  def rank(item) -> int:
    name = item.path.relative_to(tests).as_posix() if item.path.is_relative_to(tests) else ""
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
  items.sort(key=rank)  # stable: each file's tests keep their order


# The scripts at the top level, by the module whose main() they run.
SCRIPTS = {"train.py": "seq2seq.cli.train", "translate.py": "seq2seq.cli.translate",
           "evaluate.py": "seq2seq.cli.evaluate"}


def run_cli(*args, input_bytes=None, check=True, timeout=600, fresh_process=False, env=None):
  """Runs a project CLI (train.py, translate.py, `-m seq2seq.cli.X`) as a user would, and
  returns its exit status and output as `subprocess.run` does.

  By default the CLI's main() runs in this process, with its own argv, stdin, stdout,
  stderr and working directory (see `in_process`): a new Python process would import JAX
  and the package again (1.5 s) and trace every program again, which was a fifth of the
  suite's time. `fresh_process` runs it in one, for what a process of its own is about
  (signals, environment, a second process beside a running one), with `env` if given.
  `timeout` applies to a fresh process only."""
  args = tuple(map(str, args))
  if fresh_process:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, input=input_bytes, env=env,
                          capture_output=True, timeout=timeout)
  else:
    assert env is None, "an environment of its own needs fresh_process=True"
    # sys.argv[0] is the script, or for `-m` the module, as Python sets it
    module, argv = (args[1], args[1:]) if args[0] == "-m" else (SCRIPTS[args[0]], args)
    proc = in_process(module, list(argv), input_bytes)
  if check and proc.returncode != 0:
    raise AssertionError(f"{args} exited {proc.returncode}:\n{proc.stderr.decode()[-3000:]}")
  return proc


def in_process(main: str | Callable[[], object], argv: list[str], input_bytes: bytes | None,
               cwd: Path = ROOT) -> subprocess.CompletedProcess:
  """`main` (a module whose main() to call, or a function) with sys.argv = `argv`, in
  folder `cwd`, reading `input_bytes` as stdin: its exit status as a process would have it
  (0, a `sys.exit` code, 1 with the message or traceback on stderr), its stdout and
  stderr as bytes. Logging handlers, SIGTERM's handler and the working directory are put
  back afterwards, so one CLI run leaves nothing behind for the next test."""
  streams = {name: io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
             for name in ("stdout", "stderr")}
  stdin = io.TextIOWrapper(io.BytesIO(input_bytes or b""), encoding="utf-8")
  saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr, os.getcwd())
  root = logging.getLogger()
  handlers, level = list(root.handlers), root.level
  sigterm = signal.getsignal(signal.SIGTERM)
  sys.argv, sys.stdin, sys.stdout, sys.stderr = argv, stdin, streams["stdout"], streams["stderr"]
  os.chdir(cwd)
  code = 0
  try:
    main() if callable(main) else importlib.import_module(main).main()
  except SystemExit as e:
    if isinstance(e.code, str):
      print(e.code, file=sys.stderr)
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  except Exception:  # noqa: BLE001 - a process would print it and exit 1
    traceback.print_exc(file=sys.stderr)
    code = 1
  finally:
    sys.argv, sys.stdin, sys.stdout, sys.stderr, cwd = saved
    os.chdir(cwd)
    for h in root.handlers:
      if h not in handlers:
        h.close()
    root.handlers[:], root.level = handlers, level
    signal.signal(signal.SIGTERM, sigterm)
  out, err = (streams[n].buffer.getvalue() for n in ("stdout", "stderr"))
  return subprocess.CompletedProcess(argv, code, out, err)


def xla_flags(devices: int) -> str:
  """XLA_FLAGS for a subprocess with `devices` CPU devices, on top of the suite's."""
  return f"{os.environ['XLA_FLAGS']} --xla_force_host_platform_device_count={devices}"


@pytest.fixture
def untraced():
  """Empties the process's caches of jitted programs (the training steps and the searches,
  shared by equal models), so that a test whose control counts tracing sees its programs
  traced whatever ran before it in this worker."""
  from seq2seq.decoding.programs import compiled_functions
  from seq2seq.training.train_step import jitted_programs
  jitted_programs.cache_clear()
  compiled_functions.cache_clear()


@pytest.fixture(scope="session")
def multi30k_dir():
  """The Multi30k folder beside this checkout; tests that need it skip without it."""
  if not (MULTI30K / "train.en.gz").exists():
    pytest.skip(f"Multi30k not found at {MULTI30K} (set SEQ2SEQ_MULTI30K to its folder)")
  return MULTI30K


@pytest.fixture(scope="session")
def multi30k_tokenizer(multi30k_dir):
  """One 8,000-piece joint SentencePiece model of Multi30k's training set, shared."""
  from seq2seq.data import tokenizer
  from seq2seq.data.textfiles import read_lines
  lines = read_lines(multi30k_dir / "train.en.gz") + read_lines(multi30k_dir / "train.de.gz")
  return tokenizer.train(lines, vocab_size=8000)


def shared_run(tmp_path_factory, request, config: str, steps: int, eval_every: int,
               checkpoint_every: int) -> Path:
  """A run of the preset `config` (configs/) trained for `steps` updates through train.py,
  one layer per stack (every test that decodes it compiles its searches, and a layer
  fewer halves what each search program holds), seed TEST_SEED: once for all
  pytest-xdist workers, then copied, so that each worker's tests own their copy."""
  name = config
  train_args = ("--config", f"configs/{config}.py", "--config.model.encoder_layers=1",
                "--config.model.decoder_layers=1", f"--config.train.max_steps={steps}",
                f"--config.train.eval_every={eval_every}",
                f"--config.train.checkpoint_every={checkpoint_every}",
                "--config.train.log_every=25", f"--config.train.seed={TEST_SEED}")
  shared = tmp_path_factory.getbasetemp()
  if hasattr(request.config, "workerinput"):  # an xdist worker
    shared = shared.parent  # the base temporary directory all workers share
  source = shared / f"trained_{name}"
  with filelock.FileLock(str(shared / f"trained_{name}.lock")):
    if not (source / "TRAINED").exists():
      shutil.rmtree(source, ignore_errors=True)
      run_cli("train.py", "--workdir", source, *train_args)
      (source / "TRAINED").touch()
  workdir = tmp_path_factory.mktemp("runs") / name
  shutil.copytree(source, workdir, ignore=shutil.ignore_patterns("TRAINED"))
  return workdir


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, request):
  """The tiny config trained briefly through the train.py CLI (with overrides), shared
  (`shared_run`).

  Each CPU class trains a model of its own (float32 sums run in another order), so the
  tests that use it hold for any such run: `SEQ2SEQ_TEST_SEED=N` trains it with seed N
  (helpers.TEST_SEED, default 0) to check that they do."""
  return shared_run(tmp_path_factory, request, "tiny", steps=300, eval_every=150,
                    checkpoint_every=100)


@pytest.fixture(scope="session")
def trained_multilingual(tmp_path_factory, request):
  """The tiny multilingual preset (en-de, de-en, en-fr, fr-en of data/sample) trained
  briefly, one layer per stack, shared (`shared_run`)."""
  return shared_run(tmp_path_factory, request, "tiny_multilingual", steps=500,
                    eval_every=250, checkpoint_every=250)


@pytest.fixture(scope="module")
def argos_package(trained_run, tmp_path_factory):
  """The tiny run exported as an Argos Translate package (`seq2seq-export --format argos`)."""
  pytest.importorskip("ctranslate2", reason="CTranslate2 is the optional [ctranslate2] extra")
  out = tmp_path_factory.mktemp("argos") / "en_de.argosmodel"
  run_cli("-m", "seq2seq.cli.export", "--workdir", trained_run, "--format", "argos",
          "--output", out)
  return out
