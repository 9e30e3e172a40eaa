"""`seq2seq-import`: a model trained elsewhere becomes a run directory; what is wrong is
said in one line, without a traceback."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import foreign_models as fm  # noqa: E402

from seq2seq.decoding.translator import Translator  # noqa: E402

from conftest import run_cli  # noqa: E402

pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def release(tmp_path_factory):
  return fm.small_marian(tmp_path_factory.mktemp("opus") / "release")


def test_the_command_imports_and_names_what_is_wrong(release, tmp_path):
  out = run_cli("-m", "seq2seq.cli.import_model", release, "--workdir", tmp_path / "run")
  assert str(tmp_path / "run") in out.stdout.decode()
  assert Translator.load(tmp_path / "run").translate(["A dog."])
  card = (tmp_path / "run" / "README.md").read_text()
  assert f"imported from `{release}` (marian)" in card and "CC-BY-4.0" in card
  again = run_cli("-m", "seq2seq.cli.import_model", release, "--workdir", tmp_path / "run",
                  check=False)
  assert again.returncode != 0 and "exists and is not empty" in again.stderr.decode()
  missing = run_cli("-m", "seq2seq.cli.import_model", tmp_path / "nothing", "--workdir",
                    tmp_path / "other", check=False)
  assert missing.returncode != 0 and "nothing" in missing.stderr.decode()
  assert "Traceback" not in missing.stderr.decode()
