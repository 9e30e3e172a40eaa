"""Prefix-constrained decoding: outputs start with the forced prefix, search continues."""

import numpy as np
import pytest

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.translator import Sampling, Translator
from seq2seq.vocab import EOS_ID

from conftest import run_cli
from helpers import SAMPLE

SOURCES = read_lines(SAMPLE / "test.en")[:24]
PREFIXES = ["Ein Mann", "Zwei", "Eine Frau mit", ""] * 6


@pytest.fixture(scope="module")
def translator(trained_run):
  return Translator.load(trained_run)


@pytest.mark.parametrize("beam", [1, 3])
def test_outputs_start_with_the_prefix(translator, beam):
  hyps = translator.translate(SOURCES, beam_size=beam, nbest=1, prefixes=PREFIXES)
  for prefix, (h,) in zip(PREFIXES, hyps):
    pieces = translator.tokenizer.encode([prefix])[0] if prefix else []
    assert h.ids[:len(pieces)] == pieces
    assert h.text.startswith(prefix)
  free = translator.translate(SOURCES, beam_size=beam)
  assert [h[0].text for h, p in zip(hyps, PREFIXES) if not p] == [
      f for f, p in zip(free, PREFIXES) if not p]


def test_forcing_greedys_own_start_changes_nothing(translator):
  src = translator.encode(SOURCES)
  greedy = translator.translate_ids(src, beam_size=1)
  starts = [np.asarray(h[0][0][:3]) for h in greedy]
  forced = translator.translate_ids(src, beam_size=1, prefix_ids=starts)
  for g, f in zip(greedy, forced):
    np.testing.assert_array_equal(g[0][0], f[0][0])
    assert g[0][1] == pytest.approx(f[0][1], abs=1e-4)


def test_score_of_a_prefixed_output_is_its_forced_decoding_score(translator):
  hyps = translator.translate(SOURCES[:8], beam_size=1, nbest=1, prefixes=PREFIXES[:8])
  src = translator.encode(SOURCES[:8])
  tgt = [np.asarray(h[0].ids + [EOS_ID], np.int32) for h in hyps]
  scores = translator.score_ids(src, tgt)
  np.testing.assert_allclose([s.logprob for s in scores], [h[0].score for h in hyps],
                             rtol=1e-4, atol=1e-4)
  # Prefixes work with sampling too.
  sampled = translator.translate(SOURCES[:8], sampling=Sampling(seed=2), prefixes=PREFIXES[:8])
  assert all(t.startswith(p) for t, p in zip(sampled, PREFIXES[:8]))


def test_cli_prefix_reads_tab_separated_lines(trained_run):
  text = "".join(f"{s}\t{p}\n" for s, p in zip(SOURCES[:4], PREFIXES[:4])).encode()
  out = run_cli("translate.py", "--workdir", trained_run, "--prefix", "--beam", "2",
                input_bytes=text).stdout.decode().splitlines()
  assert len(out) == 4 and all(o.startswith(p) for o, p in zip(out, PREFIXES[:4]))
  bad = run_cli("translate.py", "--workdir", trained_run, "--prefix", input_bytes=b"no tab\n",
                check=False)
  assert bad.returncode == 1 and b"line 1: expected SOURCE<TAB>PREFIX" in bad.stderr
