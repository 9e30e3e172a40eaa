"""The benchmarks: every script of bench/ still imports against the current package and
test helpers (their figures are measured by hand; a moved module must not break them
unnoticed)."""

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from helpers import ROOT

SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_benchmark_imports(name, monkeypatch):
  monkeypatch.syspath_prepend(str(ROOT / "bench"))
  module = importlib.import_module(name)
  assert name == "common" or callable(getattr(module, "main", None)), \
      f"bench/{name}.py has no main()"



def test_the_modules_benchmarks_run_exist_and_run():
  """Modules a benchmark starts as `python -m MODULE` (a server, a command line) exist and
  run something as a script."""
  started = {m for p in (ROOT / "bench").glob("*.py")
             for m in re.findall(r'"-m", "([\w.]+)"', p.read_text())}
  assert started  # the control: the pattern finds serve_load.py's server
  for name in started:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, f"no module {name}"
    assert '__name__ == "__main__"' in Path(spec.origin).read_text(), \
        f"python -m {name} runs nothing: it has no __main__ block"
