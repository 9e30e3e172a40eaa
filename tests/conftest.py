import os
import sys
from pathlib import Path

# Tests run on the CPU whatever is installed; two host devices let data-parallel code be
# exercised in-process (a no-op for single-device tests).
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
