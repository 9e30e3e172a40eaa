"""The benchmarks: every script of bench/ still imports against the current package and
test helpers (their figures are measured by hand; a moved module must not break them
unnoticed)."""

import importlib

import pytest

from helpers import ROOT

SCRIPTS = sorted(p.stem for p in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_benchmark_imports(name, monkeypatch):
  monkeypatch.syspath_prepend(str(ROOT / "bench"))
  module = importlib.import_module(name)
  assert name == "common" or callable(getattr(module, "main", None)), \
      f"bench/{name}.py has no main()"
