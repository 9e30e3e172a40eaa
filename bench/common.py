"""Helpers shared by the benchmarks: where the data is, JSON output, the machine.

Benchmarks import the installed package (`make install` installs it into .venv)."""

import json
import os
import platform
import resource
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"


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


def report(result: dict) -> None:
  """Prints the figures; the last line is one JSON object."""
  print(json.dumps(result))


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
