"""evaluate.py: scores equal the sacrebleu CLI; misaligned files are errors."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu

from seq2seq.scoring import ScoreError, lowercase_tokenized_bleu, score

from conftest import run_cli
from helpers import SAMPLE


def test_bleu_equals_the_sacrebleu_command_line(trained_run, tmp_path):
  ref = tmp_path / "test.de.gz"
  with gzip.open(ref, "wb") as f:
    f.write((SAMPLE / "test.de").read_bytes())
  hyp = tmp_path / "hyp.de"
  proc = run_cli("evaluate.py", "--workdir", trained_run, "--src", SAMPLE / "test.en",
                 "--ref", ref, "--beam", "3", "--output", hyp, "--lowercase-tokenized")
  result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
  assert len(hyp.read_text("utf-8").splitlines()) == 100
  sacrebleu_cli = Path(sys.executable).with_name("sacrebleu")
  cli = subprocess.run([str(sacrebleu_cli), str(SAMPLE / "test.de"), "-i", str(hyp), "-m",
                        "bleu", "chrf", "-b", "-f", "text"], capture_output=True, text=True, check=True)
  bleu, chrf = (float(x) for x in cli.stdout.split())
  assert round(result["bleu"], 1) == bleu and round(result["chrf"], 1) == chrf
  assert result["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
  hyps = hyp.read_text("utf-8").splitlines()
  refs = (SAMPLE / "test.de").read_text("utf-8").splitlines()
  assert result["bleu_lc_tok"] == lowercase_tokenized_bleu(hyps, refs)
  split = run_cli("evaluate.py", "--workdir", trained_run, "--split", "test", "--beam", "3")
  assert json.loads(split.stdout.decode().strip().splitlines()[-1])["bleu"] == result["bleu"]
  # The same file scored without a model, with per-sentence scores for error analysis.
  tsv = tmp_path / "sentences.tsv"
  alone = run_cli("evaluate.py", "--hyp", hyp, "--ref", ref, "--sentence-level", tsv)
  again = json.loads(alone.stdout.decode().strip().splitlines()[-1])
  assert (again["bleu"], again["chrf"]) == (result["bleu"], result["chrf"])
  rows = [line.split("\t") for line in tsv.read_text("utf-8").splitlines()[1:]]
  assert len(rows) == 100 and [r[4] for r in rows] == hyps and [r[5] for r in rows] == refs
  for number, bleu_i, chrf_i, _, h, r in rows[:10]:
    assert float(bleu_i) == pytest.approx(sacrebleu.sentence_bleu(h, [r]).score, abs=0.006), number
    assert float(chrf_i) == pytest.approx(sacrebleu.sentence_chrf(h, [r]).score, abs=0.006)


def test_lowercase_tokenized_bleu_ignores_case_and_splits_punctuation():
  refs = ["Ein Hund läuft durch den Schnee.", "Zwei Männer, die arbeiten."]
  hyps = ["ein hund läuft durch den schnee .", "zwei männer , die arbeiten ."]
  assert lowercase_tokenized_bleu(hyps, refs) == pytest.approx(100.0)
  assert score(hyps, refs)["bleu"] < 60  # cased, detokenized BLEU sees the differences
  worse = ["ein hund läuft durch den regen .", "zwei frauen , die arbeiten ."]
  assert lowercase_tokenized_bleu(worse, refs) < 100


def test_misaligned_files_are_an_error(trained_run, tmp_path):
  short = tmp_path / "short.de"
  short.write_text("".join(l + "\n" for l in (SAMPLE / "test.de").read_text().splitlines()[:50]))
  proc = run_cli("evaluate.py", "--workdir", trained_run, "--src", SAMPLE / "test.en",
                 "--ref", short, check=False)
  assert proc.returncode != 0 and b"has 100 lines but" in proc.stderr
  with pytest.raises(ScoreError, match="2 hypotheses but 1 references"):
    score(["a", "b"], ["a"])


def test_scoring_a_file_needs_aligned_files_and_no_model(tmp_path):
  hyp = tmp_path / "hyp.de"
  hyp.write_text("Ein Hund läuft durch den Schnee.\nZwei Katzen schlafen auf dem Sofa.\n")
  proc = run_cli("evaluate.py", "--hyp", hyp, "--ref", SAMPLE / "test.de", check=False)
  assert proc.returncode == 1 and b"2 hypotheses but 100 references" in proc.stderr
  proc = run_cli("evaluate.py", "--hyp", hyp, "--ref", hyp, "--workdir", tmp_path, check=False)
  assert proc.returncode == 2 and b"--hyp FILE takes --ref FILE and no --workdir" in proc.stderr
  proc = run_cli("evaluate.py", "--hyp", hyp, "--ref", hyp)
  assert json.loads(proc.stdout.decode().strip().splitlines()[-1])["bleu"] == pytest.approx(100)
