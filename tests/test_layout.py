"""Tests mirror the package: each module with logic, `seq2seq/<sub>/<module>.py`, has
`tests/<sub>/test_<module>.py`, or is tested where this table says (a module tested
through the one that uses it), and that file names it."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "seq2seq"

# module (relative to seq2seq/) -> (the test file, relative to tests/, that tests it; what
# in that file calls it)
TESTED_WITH = {
    "cli/average.py": ("rundir/test_shared_rundir.py", "seq2seq.cli.average"),
    "cli/export.py": ("rundir/test_ctranslate2_model.py", "seq2seq.cli.export"),
    "cli/parsing.py": ("test_config.py", "parsing"),
    "cli/push.py": ("rundir/test_hub.py", "push"),
    "cli/serve.py": ("serving/test_http_server.py", "start_server"),
    "cli/train.py": ("test_config.py", "\"train.py\""),
    "data/cleaning.py": ("data/test_data_source.py", "cleaning"),
    "data/textfiles.py": ("data/test_data_source.py", "textfiles"),
    "decoding/attention.py": ("serving/test_http_server.py", '"attention"'),
    "decoding/ct2_engine.py": ("rundir/test_ctranslate2_model.py", 'engine="ctranslate2"'),
    "decoding/loading.py": ("model/test_ensemble.py", "Translator.load"),
    "decoding/programs.py": ("decoding/test_program_store.py", "programs"),
    "documents/blocks.py": ("documents/test_inline.py", "blocks"),
    "documents/html.py": ("documents/test_formats.py", ".html"),
    "documents/markdown.py": ("documents/test_formats.py", ".md"),
    "documents/plain.py": ("documents/test_formats.py", ".txt"),
    "documents/subtitles.py": ("documents/test_formats.py", ".srt"),
    "documents/word.py": ("documents/test_formats.py", ".docx"),
    "model/layers.py": ("model/test_transformer.py", "layers"),
    "rundir/lock.py": ("rundir/test_shared_rundir.py", "lock"),
    "training/compiling.py": ("training/test_trainer.py", "compiling"),
    "training/metrics.py": ("training/test_trainer.py", "metrics"),
    "training/validation.py": ("training/test_trainer.py", "val"),
    "runtime.py": ("test_progress.py", "runtime"),
    "scoring.py": ("cli/test_evaluate.py", "scoring"),
    "vocab.py": ("model/test_masks.py", "seq2seq.vocab"),
    "version.py": ("test_imports.py", "version"),
}


def mirror(module: Path) -> Path:
  rel = module.relative_to(PACKAGE)
  return ROOT / "tests" / rel.parent / f"test_{rel.stem}.py"


def test_every_module_has_its_test_file():
  missing = []
  for module in sorted(PACKAGE.rglob("*.py")):
    rel = module.relative_to(PACKAGE).as_posix()
    if module.name == "__init__.py" or mirror(module).exists():
      continue
    where = TESTED_WITH.get(rel, (None,))[0]
    if where is None or not (ROOT / "tests" / where).exists():
      missing.append(f"{rel}: no {mirror(module).relative_to(ROOT)}"
                     + (f" and no tests/{where}" if where else ""))
  assert not missing, "\n".join(missing)


def test_the_table_names_test_files_that_call_their_modules():
  for rel, (where, shown_by) in TESTED_WITH.items():
    assert not mirror(PACKAGE / rel).exists(), f"{rel} has its own test file now"
    assert shown_by in (ROOT / "tests" / where).read_text(), (
        f"tests/{where} has no {shown_by!r}: is {rel} still tested there?")
