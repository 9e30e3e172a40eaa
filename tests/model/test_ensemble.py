"""Ensembles: runs sharing a vocabulary decode with the mean of their log-probabilities."""

import dataclasses
import shutil

import numpy as np
import pytest

from seq2seq.data import tokenizer
from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.translator import Translator
from seq2seq.rundir import checkpoint
from seq2seq.training.trainer import Trainer

from conftest import run_cli
from helpers import SAMPLE, tiny_config

SOURCES = read_lines(SAMPLE / "test.en")[:30]


@pytest.mark.parametrize("beam", [1, 4])
def test_an_ensemble_of_a_run_with_itself_equals_the_run(trained_run, beam):
  single = Translator.load(trained_run)
  double = Translator.load([trained_run, trained_run])
  a = single.translate(SOURCES, beam_size=beam, nbest=1)
  b = double.translate(SOURCES, beam_size=beam, nbest=1)
  assert [h[0].text for h in a] == [h[0].text for h in b]
  np.testing.assert_allclose([h[0].score for h in a], [h[0].score for h in b], atol=1e-3)
  targets = [h[0].text for h in a]
  np.testing.assert_allclose([s.logprob for s in single.score(SOURCES, targets)],
                             [s.logprob for s in double.score(SOURCES, targets)], atol=1e-3)


@pytest.fixture(scope="module")
def second_member(trained_run, tmp_path_factory):
  """A second member: the same vocabulary, other weights (another seed's, saved before
  any update: what averaging computes does not depend on how the weights came about)."""
  cfg = tiny_config(SAMPLE, seed=1)
  cfg = dataclasses.replace(cfg, data=dataclasses.replace(
      cfg.data, spm_model=str(trained_run / "spm.model")),
      model=dataclasses.replace(cfg.model, max_len=128))
  run = tmp_path_factory.mktemp("ensemble") / "other"
  Trainer(cfg, run).save()
  return run


def test_members_average_their_log_probabilities(trained_run, second_member):
  a, b = Translator.load(trained_run), Translator.load(second_member, "latest")
  both = Translator.load([trained_run, second_member], "latest")
  targets = read_lines(SAMPLE / "test.de")[:30]
  # Per-token log-probability of the ensemble = log of the renormalised geometric mean.
  sa, sb = a.score(SOURCES, targets), b.score(SOURCES, targets)
  s2 = both.score(SOURCES, targets)
  for x, y, z in zip(sa, sb, s2):
    assert z.tokens == x.tokens
    assert z.logprob >= (x.logprob + y.logprob) / 2 - 1e-3  # renormalising only adds
  outputs = both.translate(SOURCES, beam_size=3)
  assert len(outputs) == 30 and all(isinstance(o, str) for o in outputs)


def test_runs_with_another_vocabulary_are_refused(trained_run, tmp_path):
  # The run trained with a SentencePiece model of 380 pieces instead: what the check reads.
  shutil.copytree(trained_run, tmp_path / "other_vocab")
  lines = read_lines(SAMPLE / "train.en") + read_lines(SAMPLE / "train.de")
  (tmp_path / "other_vocab" / tokenizer.MODEL_FILE).write_bytes(
      tokenizer.train(lines, vocab_size=380).model_proto)
  with pytest.raises(checkpoint.CheckpointError, match="different SentencePiece models"):
    Translator.load([trained_run, tmp_path / "other_vocab"], "latest")


def test_cli_takes_workdir_several_times(trained_run, second_member):
  # Each --workdir is a member: the scores printed are the ensemble's, not the first run's.
  text = "".join(s + "\n" for s in SOURCES[:6]).encode()
  two = run_cli("translate.py", "--workdir", trained_run, "--workdir", second_member,
                "--checkpoint", "latest", "--beam", "2", "--nbest", "1", input_bytes=text)
  scores = [float(line.split(" ||| ")[2]) for line in two.stdout.decode().splitlines()]
  want = Translator.load([trained_run, second_member], "latest").translate(
      SOURCES[:6], beam_size=2, nbest=1)
  first = Translator.load(trained_run, "latest").translate(SOURCES[:6], beam_size=2, nbest=1)
  np.testing.assert_allclose(scores, [h[0].score for h in want], atol=1e-3)
  assert not np.allclose(scores, [h[0].score for h in first], atol=1e-3)
