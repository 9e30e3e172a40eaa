"""`seq2seq-export --format argos`: an Argos Translate package that argostranslate installs
and translates with.

argostranslate 1.11 from PyPI needs, besides CTranslate2 and SentencePiece, stanza (and
with it PyTorch) at import, though it splits sentences with MiniSBD. The test installs it
without stanza (`make install`: `pip install --no-deps argostranslate`) and stands in an
empty module for it; everything else, installing the package and translating through its
metadata, its sentence splitter (MiniSBD running the package's `minisbd/en.onnx`, no
download), tokenizer and CTranslate2 model, is argostranslate's own code.
"""

import importlib.util
import json
import subprocess
import sys
import zipfile

import pytest

from conftest import run_cli
from helpers import SAMPLE

LINES = (SAMPLE / "test.en").read_text().splitlines()
SOURCES = LINES[:8] + [f"{LINES[8]} {LINES[9]}"]  # the last, two sentences

ARGOS = """
import json, sys, types
try:
  import stanza  # see the module docstring
except ImportError:
  sys.modules["stanza"] = types.ModuleType("stanza")
import argostranslate.package, argostranslate.translate as translate
argostranslate.package.install_from_path(sys.argv[1])
installed = [(p.from_code, p.to_code, p.from_name, p.to_name)
             for p in argostranslate.package.get_installed_packages()]
texts = json.loads(sys.argv[2])
print(json.dumps({"installed": installed,
                  "translations": [translate.translate(t, "en", "de") for t in texts]}))
"""


def test_the_package_is_one_folder_with_argos_metadata_and_the_run_s_facts(argos_package):
  with zipfile.ZipFile(argos_package) as z:
    names = z.namelist()
    folder = names[0].split("/")[0]
    metadata = json.loads(z.read(f"{folder}/metadata.json"))
  assert {n.split("/")[0] for n in names} == {folder}
  assert {f"{folder}/{n}" for n in ("metadata.json", "sentencepiece.model", "README.md",
                                    "model/model.bin", "model/config.json",
                                    "minisbd/en.onnx")} <= set(names)
  assert (metadata["from_code"], metadata["to_code"]) == ("en", "de")
  assert (metadata["from_name"], metadata["to_name"]) == ("English", "German")
  assert metadata["type"] == "translate" and metadata["seq2seq"]["checkpoint"] == "best"
  assert metadata["seq2seq"]["quantization"] == "int8"
  # above the official packages' 1.x: LibreTranslate's --update-models keeps it
  from packaging.version import Version
  assert Version(metadata["package_version"]) > Version("1.9")


def test_argostranslate_installs_the_package_and_translates_as_ctranslate2_does(
    argos_package, trained_run, tmp_path):
  if importlib.util.find_spec("argostranslate") is None:
    pytest.skip("argostranslate is not installed (make install: pip install --no-deps "
                "argostranslate)")
  from seq2seq import load_engine
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  closed = "http://127.0.0.1:9"  # any download would fail
  env = {"HOME": str(tmp_path), "ARGOS_PACKAGES_DIR": str(tmp_path / "packages"),
         "PATH": "/usr/bin:/bin", "http_proxy": closed, "https_proxy": closed}
  proc = subprocess.run([sys.executable, "-c", ARGOS, str(argos_package), json.dumps(SOURCES)],
                        env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  answer = json.loads(proc.stdout.splitlines()[-1])
  assert answer["installed"] == [["en", "de", "English", "German"]]
  # Argos decodes with CTranslate2: beam 4, length penalty 0.2, on the int8 model.
  ct2 = load_engine(export_ctranslate2(trained_run, tmp_path / "ct2", "best", "int8"),
                    "ctranslate2")
  assert answer["translations"] == ct2.translate(SOURCES, beam_size=4, alpha=0.2)


def test_a_package_name_without_its_suffix_is_refused(trained_run, tmp_path):
  proc = run_cli("-m", "seq2seq.cli.export", "--workdir", trained_run, "--format", "argos",
                 "--output", tmp_path / "model.zip", check=False)
  assert proc.returncode == 1 and b".argosmodel" in proc.stderr


def test_a_language_code_that_is_a_path_is_refused_and_nothing_is_left(trained_run, tmp_path):
  import json
  import shutil

  from seq2seq.rundir.argos_package import ExportError, export_argos
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  config = json.loads((run / "config.json").read_text())
  config["data"]["src_lang"] = "../../escape"
  (run / "config.json").write_text(json.dumps(config))
  with pytest.raises(ExportError, match="language code '../../escape' is not one"):
    export_argos(run, tmp_path / "x.argosmodel")
  assert not list(tmp_path.glob("x.argosmodel*"))  # no package, no .partial


def test_force_replaces_an_export_only(trained_run, tmp_path):
  from seq2seq.rundir.ctranslate2_model import ExportError, export_ctranslate2
  (tmp_path / "mine").mkdir()
  (tmp_path / "mine" / "notes.txt").write_text("keep me")
  with pytest.raises(ExportError, match="is not an export"):
    export_ctranslate2(trained_run, tmp_path / "mine", force=True)
  assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
  with pytest.raises(ExportError, match="is not an export"):
    export_ctranslate2(tmp_path / "x", trained_run, force=True)  # the run directory itself
  assert (trained_run / "config.json").exists()
