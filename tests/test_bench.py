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


def test_decode_memory_accounts_for_each_pass_within_the_programs_kept(trained_run, monkeypatch,
                                                                      capsys):
  """bench/decode_memory.py on the tiny run, keeping one compiled search: each pass needs
  the run loaded plus its workers' batch buffers, which XLA sizes above zero, and no stage
  keeps more than one search although the passes ran more than one."""
  import json

  from helpers import SAMPLE
  monkeypatch.syspath_prepend(str(ROOT / "bench"))
  decode_memory = importlib.import_module("decode_memory")
  monkeypatch.setattr("sys.argv", ["decode_memory.py", "--workdir", str(trained_run),
                                   "--src", str(SAMPLE / "test.en"), "--beams", "1,2",
                                   "--batch-size", "8", "--programs", "1"])
  decode_memory.main()
  result = json.loads(capsys.readouterr().out.splitlines()[-1])
  passes = [s for s in result["stages"] if "pass" in s["stage"]]
  assert [s["kept"] for s in passes] == [1, 1, 1, 1] and passes[-1]["programs"] > 2
  loaded = next(s["rss_mib"] for s in result["stages"] if s["stage"] == "run loaded")
  for account in result["accounts"]:
    assert account["batch_buffers_mib"] > 0 and account["programs_kept"] == 1
    assert account["needed_mib"] == pytest.approx(
        loaded + account["workers"] * account["batch_buffers_mib"], abs=0.2)
