"""Ensembles: runs sharing a vocabulary decode with the mean of their log-probabilities."""

import dataclasses

import numpy as np
import pytest

from seq2seq import checkpoint
from seq2seq.textfiles import read_lines
from seq2seq.trainer import train
from seq2seq.translator import Translator

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


def test_members_average_their_log_probabilities(trained_run, tmp_path):
  # A second member: the same vocabulary, other weights.
  cfg = tiny_config(SAMPLE, max_steps=40, seed=1)
  cfg = dataclasses.replace(cfg, data=dataclasses.replace(
      cfg.data, spm_model=str(trained_run / "spm.model")),
      model=dataclasses.replace(cfg.model, max_len=128))
  train(cfg, tmp_path / "other")
  a, b = Translator.load(trained_run), Translator.load(tmp_path / "other", "latest")
  both = Translator.load([trained_run, tmp_path / "other"], "latest")
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
  cfg = tiny_config(SAMPLE, max_steps=2)
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=380))
  train(cfg, tmp_path / "other_vocab")
  with pytest.raises(checkpoint.CheckpointError, match="different SentencePiece models"):
    Translator.load([trained_run, tmp_path / "other_vocab"], "latest")


def test_cli_takes_workdir_several_times(trained_run):
  text = "".join(s + "\n" for s in SOURCES[:6]).encode()
  one = run_cli("translate.py", "--workdir", trained_run, "--beam", "2", input_bytes=text)
  two = run_cli("translate.py", "--workdir", trained_run, "--workdir", trained_run, "--beam",
                "2", input_bytes=text)
  assert one.stdout == two.stdout
