"""Minimum Bayes risk choice (seq2seq/decoding/mbr.py) and decode.mbr in the translators."""

import json

import pytest
import sacrebleu

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding import mbr
from seq2seq.decoding.translator import Translator

from conftest import run_cli
from helpers import SAMPLE

SENTENCES = ["Ein Hund läuft im Park.", "Ein Hund rennt im Park.",
             "Ein brauner Hund läuft durch den großen Park.", "Hund", "",
             "Zwei Männer spielen Fußball auf einer Wiese , während es regnet."]


def test_bleu_utility_equals_sacrebleu_add_one_sentence_bleu():
  reference = sacrebleu.metrics.BLEU(smooth_method="add-k", smooth_value=1,
                                     effective_order=False)
  u = mbr.bleu_matrix(SENTENCES, SENTENCES)
  for i, h in enumerate(SENTENCES):
    for j, r in enumerate(SENTENCES):
      expected = reference.sentence_score(h, [r]).score / 100 if h else 0.0
      assert u[i, j] == pytest.approx(expected, abs=1e-9), (h, r)


def test_chrf_utility_equals_sacrebleu_chrf():
  u = mbr.chrf_matrix(SENTENCES[:3], SENTENCES[1:4])
  assert u.shape == (3, 3)
  assert u[0, 0] == pytest.approx(
      sacrebleu.sentence_chrf(SENTENCES[0], [SENTENCES[1]]).score / 100)


@pytest.mark.parametrize("utility", mbr.UTILITIES)
def test_the_consensus_beats_a_higher_scored_outlier(utility):
  candidates = ["Ein Mann fährt Fahrrad.", "Ein Mann fährt ein Fahrrad.",
                "Ein Mann fährt Rad.", "Eine Frau schwimmt im See."]
  scores = [-1.0, -1.2, -1.3, -0.5]  # the outlier is the beam's best
  assert mbr.choose(candidates, scores, utility, "uniform") != 3
  # With model weights a candidate that holds almost all the mass is its own reference.
  assert mbr.choose(candidates, [-50.0, -50.0, -50.0, 0.0], utility, "model") == 3


def test_ties_and_single_candidates_keep_the_beams_order():
  assert mbr.choose(["Ein Hund."], [-1.0]) == 0
  assert mbr.choose(["Ein Hund.", "Ein Hund."], [-1.0, -2.0]) == 0


def test_bad_settings_are_named():
  with pytest.raises(ValueError, match="MBR utility must be one of bleu, chrf, got 'ter'"):
    mbr.choose(["a"], [0.0], utility="ter")
  with pytest.raises(ValueError, match="MBR weights must be one of uniform, model"):
    mbr.choose(["a"], [0.0], weights="softmax")
  with pytest.raises(ValueError, match="2 candidates but 1 scores"):
    mbr.expected_utility(["a", "b"], [0.0])


def test_translator_returns_the_mbr_choice_among_its_beam(trained_run):
  """decode.mbr: each output is the mbr.choose pick of the beam's W finished hypotheses
  (the n-best list), for every utility and weighting; with beam 1 it is greedy search."""
  lines = read_lines(SAMPLE / "test.en")[:24]
  plain = Translator.load(trained_run)
  nbest = plain.translate(lines, beam_size=4, alpha=1.0, nbest=4)
  changed = 0
  for utility in mbr.UTILITIES:
    for weights in mbr.WEIGHTS:
      t = Translator.load(trained_run, mbr=utility, mbr_weights=weights)
      out = t.translate(lines, beam_size=4, alpha=1.0)
      for hyps, text in zip(nbest, out):
        k = mbr.choose([h.text for h in hyps], [h.score for h in hyps], utility, weights)
        assert text == hyps[k].text
        changed += k != 0
  assert changed, "MBR never chose other than the beam's best: the test shows nothing"
  greedy = Translator.load(trained_run, mbr="bleu").translate(lines, beam_size=1)
  assert greedy == plain.translate(lines, beam_size=1)


def test_a_bad_mbr_setting_is_refused_before_decoding(trained_run):
  with pytest.raises(ValueError, match="decode.mbr_weights='softmax': expected one of 'model'"):
    Translator.load(trained_run, mbr="bleu", mbr_weights="softmax")


def test_evaluate_cli_scores_the_mbr_choice(trained_run, tmp_path):
  out = tmp_path / "mbr.txt"
  proc = run_cli("evaluate.py", "--workdir", trained_run, "--src", SAMPLE / "test.en",
                 "--ref", SAMPLE / "test.de", "--beam", "4", "--mbr", "chrf",
                 "--output", out)
  result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
  assert (result["mbr"], result["mbr_weights"]) == ("chrf", "model")
  lines = read_lines(SAMPLE / "test.en")
  expected = Translator.load(trained_run, mbr="chrf").translate(lines, beam_size=4)
  assert out.read_text(encoding="utf-8").splitlines() == expected
  bad = run_cli("translate.py", "--workdir", trained_run, "--mbr", "ter",
                input_bytes=b"A dog.\n", check=False)
  assert bad.returncode == 2 and b"--mbr: invalid choice: 'ter'" in bad.stderr
