"""Helpers shared by the benchmarks: where the data is, JSON output, the machine.

Benchmarks import the installed package (`make install` installs it into .venv)."""

import json
import os
import platform
import resource
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"


# The package's errors about its input (a run directory, a data file, an export): their
# messages say what is wrong, a traceback adds nothing.
USER_ERRORS = {"CheckpointError", "DataError", "ExportError", "HubError", "GlossaryError"}


def _cannot_run_here(kind, error, trace):
  """A benchmark that cannot run on this machine (a file it reads, Multi30k among them, or
  an optional package missing) says so in one line and exits 2; any other error keeps its
  traceback."""
  import sys
  cause = error
  while cause is not None and not isinstance(cause, (FileNotFoundError, ModuleNotFoundError)):
    cause = cause.__cause__
  if cause is None:
    if kind.__name__ in USER_ERRORS:  # the package's own message names file and problem
      print(f"bench/{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
      sys.exit(2)
    return sys.__excepthook__(kind, error, trace)
  what = (f"{cause.filename} not found" if isinstance(cause, FileNotFoundError)
          and cause.filename else str(cause))
  hint = (" (Multi30k is read from ../shared/data/multi30k beside the checkout)"
          if "multi30k" in what else "")
  print(f"bench/{Path(sys.argv[0]).name}: cannot run here: {what}{hint}", file=sys.stderr)
  sys.exit(2)


def _install_hook():
  import sys
  sys.excepthook = _cannot_run_here


_install_hook()


def machine() -> dict:
  """What every benchmark's JSON says of the machine, its CPU (`cpu`) first."""
  import jax
  return {"cpu": cpu(), "cpus": os.cpu_count(), "platform": platform.platform(),
          "devices": [str(d) for d in jax.devices()], "jax": jax.__version__}


def cpu() -> str:
  """The CPU's model and the flag that decides its matmul speed here, e.g. "AMD EPYC
  (AVX-512 BF16)": AMX, else AVX-512 BF16, else AVX-512 without BF16, else AVX2 (as in the
  results tables)."""
  text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
  model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                if line.startswith("model name")), platform.processor() or "unknown CPU")
  flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines()
                    if line.startswith("flags")), []))
  kind = ("AMX" if "amx_tile" in flags else "AVX-512 BF16" if "avx512_bf16" in flags
          else "AVX-512 without BF16" if "avx512f" in flags
          else "AVX2" if "avx2" in flags else "no AVX2")
  return f"{model} ({kind})"


def report(results: str | None, result: dict, rows: list[dict] | None = None) -> None:
  """Prints the figures (the last line is one JSON object) and appends `rows` to the
  results file `results` (--results; None: nothing), by default one row of kind
  "measurement" holding them (`measurement`)."""
  print(json.dumps(result), flush=True)
  record(results, measurement(result) if rows is None else rows)


def add_results_flag(p) -> None:
  """--results FILE: where `report` appends the figures as results rows."""
  p.add_argument("--results", default=None, metavar="FILE", help="append the figures as "
                 "rows to this results file, in bench/results.jsonl's format (check them, "
                 "then move them there; default: print only)")


def measurement(result: dict) -> list[dict]:
  """The row of a benchmark whose figures no table of bench/report.py shows."""
  import sys
  bench = Path(sys.argv[0]).stem
  return [{"name": bench, "kind": "measurement", "benchmark": bench, "figures": result}]


def commit() -> str:
  """The checkout's short commit, "+changes" after it where the tree differs from it."""
  import subprocess
  git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
  head = git("rev-parse", "--short", "HEAD").stdout.strip() or "unknown"
  return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no").stdout.strip()
                 else "")


def slug(cpu_name: str) -> str:
  """A results row name's part for a CPU: "amx", "avx512bf16", "avx512", "avx2"."""
  kind = cpu_name.rsplit("(", 1)[-1]
  return ("amx" if "AMX" in kind and "or AMX" not in kind else "avx512bf16" if "BF16)" in kind
          and "without" not in kind else "avx512" if "AVX-512" in kind else "avx2")


def record(path: str | None, rows: list[dict]) -> None:
  """Appends `rows` to the results file at `path` (none: nothing), each with the CPU, the
  command that measured it and the commit, as bench/results.jsonl holds them
  (bench/report.py's `check_row` says what each kind carries)."""
  if not path:
    return
  import sys
  command = " ".join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]])
  done, at = cpu(), commit()
  with open(path, "a", encoding="utf-8") as f:
    for row in rows:
      row = {**row, "name": f"{row['name']}-{at.split('+')[0]}"} if "name" in row else row
      f.write(json.dumps({"cpu": done, "commit": at, "command": command, **row}) + "\n")


def peak_rss_mib() -> float:
  """This process's peak resident memory so far (MiB)."""
  return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def alternate(variants: dict, rounds: int = 10, settle: float = 0.0) -> dict:
  """Times `variants` (name -> a callable that runs the work once and blocks until it is
  done) in alternation, `rounds` times each, so that the machine's drift hits all alike.
  `settle`: seconds to wait before each run, untimed, for the threads of the run before
  to stop spinning (thread pools that keep polling for a while after their work, such
  as OpenMP's, can slow another library's run that starts at once). Returns name -> the
  seconds of every round."""
  import time
  seconds = {name: [] for name in variants}
  for _ in range(rounds):
    for name, run in variants.items():
      time.sleep(settle)
      t = time.perf_counter()
      run()
      seconds[name].append(time.perf_counter() - t)
  return seconds


def summary(seconds: list, scale: float = 1000.0, unit: str = "ms", digits: int = 0) -> str:
  """Median and minimum of `alternate`'s rounds, and every round, scaled (default ms)."""
  import statistics
  return (f"median {statistics.median(seconds) * scale:.{digits}f} {unit}, "
          f"min {min(seconds) * scale:.{digits}f}, "
          f"rounds {[round(s * scale, digits) for s in seconds]}")


def training_steps(preset: str, rows: int, length: int, steps: int = 3,
                   model: dict | None = None, package: str = "seq2seq", **train_overrides):
  """A jitted training step of `preset` (with `ModelConfig` fields `model` and
  `TrainConfig` fields `train_overrides`) on one random `rows x length` batch, compiled
  and warmed up now (so with the package's module globals as they are at this call).
  `package`: the importable name of the seq2seq package to build it from (another
  revision's, for bench/step_vs_revision.py). Returns a callable for `alternate` that
  runs `steps` steps and waits for them."""
  import dataclasses
  import importlib

  import jax
  import numpy as np

  config = importlib.import_module(f"{package}.config")
  PRESETS, Config, DataConfig, TrainConfig = (
      config.PRESETS, config.Config, config.DataConfig, config.TrainConfig)

  def found(*names):
    """The first of the modules `names` that `package` has (revisions moved them)."""
    for name in names:
      try:
        return importlib.import_module(f"{package}.{name}")
      except ModuleNotFoundError:
        continue
    raise ModuleNotFoundError(f"{package} has none of {names}")

  Batch = found("data.input_pipeline", "input_pipeline").Batch
  Model = found("model").Model
  steps_module = found("training.train_step", "train_step", "train_lib")
  Steps = getattr(steps_module, "DataParallelSteps", None) or steps_module.Steps
  cfg = dataclasses.replace(PRESETS[preset], **(model or {}))
  rng = np.random.default_rng(0)
  ids = lambda: rng.integers(4, cfg.vocab_size, (rows, length)).astype(np.int32)
  train = Steps(Config(model=cfg, data=DataConfig(), train=TrainConfig(**train_overrides)),
                Model(cfg))
  box = {"state": train.init_state()}
  batch = train.put_batch(Batch(ids(), ids()))

  def run():
    for _ in range(steps):
      box["state"], metrics = train.train_step(box["state"], batch)
    jax.block_until_ready(metrics)

  run()  # compile and warm up
  return run
