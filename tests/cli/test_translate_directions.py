"""The command line with a model of several directions: train.py's validation per
direction, translate.py and evaluate.py with --src-lang / --tgt-lang (and --pivot), the
model card."""

import json

import pytest

from seq2seq import Translator
from seq2seq.data.textfiles import read_lines

from conftest import run_cli
from helpers import SAMPLE

EN, FR = read_lines(SAMPLE / "test.en"), read_lines(SAMPLE / "test.fr")


def test_training_validates_each_direction_and_keeps_the_best_mean(trained_multilingual):
  rows = [json.loads(x) for x in (trained_multilingual / "metrics.jsonl").read_text().splitlines()]
  val = [r for r in rows if r["kind"] == "val"]
  names = ("en-de", "de-en", "en-fr", "fr-en")
  for r in val:
    each = [r[f"bleu_{n}"] for n in names]
    assert r["bleu"] == pytest.approx(sum(each) / 4)
  best = max(val, key=lambda r: r["bleu"])
  training = json.loads((trained_multilingual / "training.json").read_text())
  assert training["best_step"] == best["step"]
  assert training["best_bleu_directions"] == {n: best[f"bleu_{n}"] for n in names}
  card = (trained_multilingual / "README.md").read_text()
  assert card.startswith("# en→de, de→en, en→fr, fr→en translation model")
  assert "the mean of the directions' BLEU" in card


def test_translate_py_translates_the_direction_asked_for(trained_multilingual):
  out = run_cli("translate.py", "--workdir", trained_multilingual, "--tgt-lang", "fr",
                "--no-split-sentences", input_bytes="\n".join(EN[:5]).encode() + b"\n")
  engine = Translator.load(trained_multilingual)
  assert out.stdout.decode().splitlines() == engine.translate(
      EN[:5], tgt_lang="fr", split_sentences=False)
  bad = run_cli("translate.py", "--workdir", trained_multilingual, "--tgt-lang", "cs",
                input_bytes=b"A dog.\n", check=False)
  assert bad.returncode == 1 and b"does not translate en-cs: it was trained on en-de" in bad.stderr


def test_evaluate_py_reads_the_direction_s_files_and_records_it(trained_multilingual, tmp_path):
  out = run_cli("evaluate.py", "--workdir", trained_multilingual, "--split", "test",
                "--src-lang", "en", "--tgt-lang", "fr", "--output", tmp_path / "fr.txt")
  result = json.loads(out.stdout.decode().splitlines()[-1])
  assert result["direction"] == "en-fr" and not result["zero_shot"]
  engine = Translator.load(trained_multilingual)
  hyps = engine.translate(EN, tgt_lang="fr", split_sentences=False)
  assert read_lines(tmp_path / "fr.txt") == hyps
  import sacrebleu
  assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [FR]).score)
  # zero-shot, and the same pair through English with the same model
  zero = json.loads(run_cli("evaluate.py", "--workdir", trained_multilingual, "--split",
                            "test", "--src-lang", "de", "--tgt-lang", "fr", "--output",
                            tmp_path / "zero.txt").stdout.decode().splitlines()[-1])
  pivot = json.loads(run_cli("evaluate.py", "--workdir", trained_multilingual, "--split",
                             "test", "--src-lang", "de", "--tgt-lang", "fr", "--pivot", "en",
                             "--output", tmp_path / "pivot.txt")
                     .stdout.decode().splitlines()[-1])
  assert zero["zero_shot"] and not pivot["zero_shot"] and pivot["pivot"] == "en"
  english = engine.translate(read_lines(SAMPLE / "test.de"), src_lang="de", tgt_lang="en",
                             split_sentences=False)
  assert read_lines(tmp_path / "pivot.txt") == engine.translate(english, tgt_lang="fr",
                                                             split_sentences=False)
  card = (trained_multilingual / "README.md").read_text()
  assert "| test, en-fr |" in card and "| test, de-fr (zero-shot) |" in card
  assert "| test, de-fr (through en) |" in card
