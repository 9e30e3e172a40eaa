"""Helpers shared by the benchmarks: where the data is, JSON output, the machine."""

import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"


def machine() -> dict:
  import jax
  return {"cpus": os.cpu_count(), "platform": platform.platform(),
          "devices": [str(d) for d in jax.devices()], "jax": jax.__version__}


def report(result: dict) -> None:
  """Prints the figures; the last line is one JSON object."""
  print(json.dumps(result))
