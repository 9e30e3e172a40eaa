"""Forced decoding: Translator.score / score_ids and translate.py --score."""

import numpy as np
import pytest

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.translator import Translator
from seq2seq.vocab import EOS_ID, cut_at_eos

from conftest import run_cli
from helpers import SAMPLE

SOURCES = read_lines(SAMPLE / "test.en")[:40]
TARGETS = read_lines(SAMPLE / "test.de")[:40]


@pytest.fixture(scope="module")
def translator(trained_run):
  return Translator.load(trained_run)


def test_score_of_greedy_output_is_the_log_probability_greedy_chose(translator):
  src = translator.encode(SOURCES)
  found = translator.translate_ids(src, beam_size=1)
  ended = [i for i, h in enumerate(found) if EOS_ID in h[0][0].tolist()]
  assert len(ended) > 30
  tgt = [np.append(cut_at_eos(found[i][0][0]), EOS_ID).astype(np.int32) for i in ended]
  scores = translator.score_ids([src[i] for i in ended], tgt)
  np.testing.assert_allclose([s.logprob for s in scores], [found[i][0][1] for i in ended],
                             rtol=1e-4, atol=1e-4)
  assert [s.tokens for s in scores] == [len(t) for t in tgt]


def test_scores_do_not_depend_on_batch_size(translator):
  a = translator.score(SOURCES, TARGETS, batch_size=32)
  b = translator.score(SOURCES, TARGETS, batch_size=3)
  np.testing.assert_allclose([x.logprob for x in a], [x.logprob for x in b], rtol=1e-5, atol=1e-5)
  assert all(x.logprob < 0 and x.per_token == x.logprob / x.tokens for x in a)
  # The reference scores higher than another sentence's reference as its translation.
  shuffled = translator.score(SOURCES, TARGETS[1:] + TARGETS[:1])
  assert np.mean([x.per_token for x in a]) > np.mean([x.per_token for x in shuffled])


def test_cli_scores_tab_separated_lines_or_a_references_file(trained_run, translator, tmp_path):
  tsv = "".join(f"{s}\t{t}\n" for s, t in zip(SOURCES[:5], TARGETS[:5])).encode()
  out = run_cli("translate.py", "--workdir", trained_run, "--score", input_bytes=tsv)
  rows = [line.split("\t") for line in out.stdout.decode().splitlines()]
  expected = translator.score(SOURCES[:5], TARGETS[:5])
  assert len(rows) == 5
  for (logprob, per_token, tokens), e in zip(rows, expected):
    assert float(logprob) == pytest.approx(e.logprob, abs=1e-3) and int(tokens) == e.tokens
    assert float(per_token) == pytest.approx(e.per_token, abs=1e-3)
  src, ref = tmp_path / "src.en", tmp_path / "ref.de"
  src.write_text("".join(s + "\n" for s in SOURCES[:5]))
  ref.write_text("".join(t + "\n" for t in TARGETS[:5]))
  again = run_cli("translate.py", "--workdir", trained_run, "--score", "--input", src,
                  "--references", ref)
  assert again.stdout == out.stdout
  ref.write_text("".join(t + "\n" for t in TARGETS[:4]))
  short = run_cli("translate.py", "--workdir", trained_run, "--score", "--input", src,
                  "--references", ref, check=False)
  assert short.returncode == 1 and b"ends at line 4, before the input does" in short.stderr
  bad = run_cli("translate.py", "--workdir", trained_run, "--score",
                input_bytes=b"no tab here\n", check=False)
  assert bad.returncode == 1 and b"line 1: expected SOURCE<TAB>TARGET" in bad.stderr
