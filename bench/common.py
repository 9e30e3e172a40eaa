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
  import jax
  return {"cpus": os.cpu_count(), "platform": platform.platform(),
          "devices": [str(d) for d in jax.devices()], "jax": jax.__version__}


def report(result: dict) -> None:
  """Prints the figures; the last line is one JSON object."""
  print(json.dumps(result))


def peak_rss_mib() -> float:
  """This process's peak resident memory so far (MiB)."""
  return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
