"""A user's own corpus end to end (seq2seq/data/corpus.py through train.py): a TSV file
and a pair of plain files each train, evaluate and translate with one command each; a
broken file is one line naming file and line."""

import json

import pytest

from seq2seq.data.textfiles import read_lines

from conftest import run_cli
from helpers import SAMPLE

pytestmark = pytest.mark.slow  # each test trains

FAST = ["--config", "tiny", "--config.data.dir=", "--config.model.encoder_layers=1",
        "--config.model.decoder_layers=1", "--config.train.max_steps=30",
        "--config.train.eval_every=30", "--config.train.checkpoint_every=30",
        "--config.train.log_every=10"]


def test_a_tsv_file_trains_evaluates_and_translates_with_one_command_each(tmp_path):
  src, tgt = read_lines(SAMPLE / "train.en"), read_lines(SAMPLE / "train.de")
  rows = [f"{s}\t{t}" for s, t in zip(src, tgt)] + ["", "Same\tsame",
      "A dog.\tEin sehr großer brauner Hund rennt schnell über die grüne Wiese im Park."]
  (tmp_path / "pairs.tsv").write_text("\n".join(rows) + "\n", "utf-8")
  run = tmp_path / "run"
  run_cli("train.py", *FAST, "--workdir", run, f"--config.data.train_path={tmp_path}/pairs.tsv")
  report = json.loads((run / "data_report.json").read_text())
  assert report["pairs"] == len(src) + 3 and report["removed"]["empty"] == 1
  assert report["removed"]["copy"] == 1 and report["removed"]["ratio"] == 1
  unique = len(set(zip(src, tgt)))
  assert report["kept"] == unique and report["heldout"]["pairs"] == unique // 10
  heldout = [json.loads(x) for x in (run / "heldout.jsonl").read_text().splitlines()]
  assert len(heldout) == unique // 10
  out = run_cli("evaluate.py", "--workdir", run, "--split", "val", "--beam", "2")
  result = json.loads(out.stdout.decode().strip().splitlines()[-1])
  assert result["bleu"] >= 0 and len(read_lines(result["hypotheses"])) == len(heldout)
  out = run_cli("translate.py", "--workdir", run, input_bytes=b"A dog runs.\nA cat sleeps.\n")
  assert len(out.stdout.decode().splitlines()) == 2
  card = (run / "README.md").read_text()
  assert "held out of the training pairs" in card


def test_a_pair_of_plain_files_trains_evaluates_and_translates(tmp_path):
  run = tmp_path / "run"
  test_tsv = tmp_path / "test.tsv"
  test_tsv.write_text("".join(f"{s}\t{t}\n" for s, t in zip(
      read_lines(SAMPLE / "test.en")[:20], read_lines(SAMPLE / "test.de")[:20])), "utf-8")
  run_cli("train.py", *FAST, "--workdir", run,
          f"--config.data.train_path={SAMPLE}/train.en,{SAMPLE}/train.de",
          f"--config.data.val_path={SAMPLE}/val.en,{SAMPLE}/val.de",
          f"--config.data.test_path={test_tsv}")
  assert not (run / "heldout.jsonl").exists()
  out = run_cli("evaluate.py", "--workdir", run, "--split", "test")
  result = json.loads(out.stdout.decode().strip().splitlines()[-1])
  assert len(read_lines(result["hypotheses"])) == 20
  out = run_cli("translate.py", "--workdir", run, input_bytes=b"A dog runs.\n")
  assert len(out.stdout.decode().splitlines()) == 1


def test_a_broken_corpus_is_one_line_naming_file_and_line(tmp_path):
  (tmp_path / "bad.tsv").write_text("a\tb\nno tab\n")
  proc = run_cli("train.py", *FAST, "--workdir", tmp_path / "run",
                 f"--config.data.train_path={tmp_path}/bad.tsv", check=False)
  assert proc.returncode == 1
  assert f"error: {tmp_path}/bad.tsv, line 2: expected 2 tab-separated" in proc.stderr.decode()
  assert b"Traceback" not in proc.stderr
