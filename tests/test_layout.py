"""Tests mirror the package: each module with logic, `seq2seq/<sub>/<module>.py`, has
`tests/<sub>/test_<module>.py`, or is tested where this table says (a module tested
through the one that uses it), and that file names it."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "seq2seq"

# module -> (the test file that tests it, what in that file calls it)
TESTED_WITH = {
    "seq2seq/cli/average.py": ("tests/rundir/test_shared_rundir.py", "seq2seq.cli.average"),
    "seq2seq/cli/export.py": ("tests/rundir/test_ctranslate2_model.py", "seq2seq.cli.export"),
    "seq2seq/cli/parsing.py": ("tests/test_config.py", "parsing"),
    "seq2seq/cli/push.py": ("tests/rundir/test_hub.py", "push"),
    "seq2seq/cli/serve.py": ("tests/serving/test_http_server.py", "start_server"),
    "seq2seq/cli/train.py": ("tests/test_config.py", "\"train.py\""),
    "seq2seq/data/cleaning.py": ("tests/data/test_data_source.py", "cleaning"),
    "seq2seq/data/textfiles.py": ("tests/data/test_data_source.py", "textfiles"),
    "seq2seq/decoding/attention.py": ("tests/serving/test_http_server.py", '"attention"'),
    "seq2seq/decoding/ct2_engine.py": ("tests/rundir/test_ctranslate2_model.py", '"ctranslate2")'),
    "seq2seq/decoding/engines.py": ("tests/decoding/test_engine.py", "load_engine"),
    "seq2seq/decoding/loading.py": ("tests/model/test_ensemble.py", "Translator.load"),
    "seq2seq/decoding/programs.py": ("tests/decoding/test_program_store.py", "programs"),
    "seq2seq/documents/blocks.py": ("tests/documents/test_inline.py", "blocks"),
    "seq2seq/documents/html.py": ("tests/documents/test_formats.py", ".html"),
    "seq2seq/documents/markdown.py": ("tests/documents/test_formats.py", ".md"),
    "seq2seq/documents/plain.py": ("tests/documents/test_formats.py", ".txt"),
    "seq2seq/documents/subtitles.py": ("tests/documents/test_formats.py", ".srt"),
    "seq2seq/documents/word.py": ("tests/documents/test_formats.py", ".docx"),
    "seq2seq/documents/opendocument.py": ("tests/documents/test_formats.py", ".odp"),
    "seq2seq/documents/powerpoint.py": ("tests/documents/test_formats.py", ".pptx"),
    "seq2seq/documents/epub.py": ("tests/documents/test_formats.py", "epub"),
    "seq2seq/model/layers.py": ("tests/model/test_transformer.py", "layers"),
    "seq2seq/rundir/languages.py": ("tests/rundir/test_argos_package.py",
                                    '("English", "German")'),
    "seq2seq/rundir/lock.py": ("tests/rundir/test_shared_rundir.py", "lock"),
    "seq2seq/rundir/run_files.py": ("tests/test_config.py", "run_files"),
    "seq2seq/rundir/atomic_checkpoints.py": ("tests/rundir/test_checkpoint_faults.py",
                                             "atomic_checkpoints"),
    "seq2seq/rundir/averaging.py": ("tests/rundir/test_shared_rundir.py", "seq2seq.cli.average"),
    "seq2seq/training/compiling.py": ("tests/training/test_trainer.py", "compiling"),
    "seq2seq/training/metrics.py": ("tests/training/test_trainer.py", "metrics"),
    "seq2seq/training/validation.py": ("tests/training/test_trainer.py", "val"),
    "seq2seq/runtime.py": ("tests/test_progress.py", "runtime"),
    "seq2seq/scoring.py": ("tests/cli/test_evaluate.py", "scoring"),
    "seq2seq/vocab.py": ("tests/model/test_masks.py", "seq2seq.vocab"),
    "seq2seq/version.py": ("tests/test_imports.py", "version"),
}


def mirror(module: Path) -> Path:
  rel = module.relative_to(PACKAGE)
  return ROOT / "tests" / rel.parent / f"test_{rel.stem}.py"


def test_every_module_has_its_test_file():
  missing = []
  for module in sorted(PACKAGE.rglob("*.py")):
    rel = module.relative_to(ROOT).as_posix()
    if module.name == "__init__.py" or mirror(module).exists():
      continue
    where = TESTED_WITH.get(rel, (None,))[0]
    if where is None or not (ROOT / where).exists():
      missing.append(f"{rel}: no {mirror(module).relative_to(ROOT)}"
                     + (f" and no {where}" if where else ""))
  assert not missing, "\n".join(missing)


def test_the_table_names_test_files_that_call_their_modules():
  for rel, (where, shown_by) in TESTED_WITH.items():
    assert not mirror(ROOT / rel).exists(), f"{rel} has its own test file now"
    assert shown_by in (ROOT / where).read_text(), (
        f"{where} has no {shown_by!r}: is {rel} still tested there?")
