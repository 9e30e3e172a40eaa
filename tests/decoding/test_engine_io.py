"""What a translation engine takes and gives (seq2seq/decoding/engine_io.py), shared by the
JAX and CTranslate2 engines: settings resolved and checked once, requests refused by name,
the answer picked, the source limit, sources encoded, and what counts as text."""

import dataclasses

import pytest

from seq2seq.config import DecodeConfig
from seq2seq.decoding.engine_io import (
  Hypothesis,
  PairScore,
  check_request,
  has_text,
  hypotheses_needed,
  pick,
  resolve_settings,
  source_limit,
)


def test_given_settings_replace_the_saved_ones_and_none_keeps_them():
  saved = DecodeConfig(beam_size=4, alpha=0.6, batch_size=32)
  assert resolve_settings(saved) == saved
  got = resolve_settings(saved, beam_size=1, alpha=2, batch_size=8)
  assert (got.beam_size, got.alpha, got.batch_size) == (1, 2.0, 8)
  assert isinstance(got.alpha, float)


@pytest.mark.parametrize("given, name", [
    (dict(beam_size=0), "beam_size"), (dict(batch_size=-1), "batch_size"),
    (dict(alpha=-1.0), "alpha"),
])
def test_bad_given_settings_are_refused_by_name(given, name):
  with pytest.raises(ValueError, match=name):
    resolve_settings(DecodeConfig(), **given)


def test_a_request_s_prefixes_and_nbest_must_fit_its_texts_and_beam():
  c = DecodeConfig(beam_size=3)
  check_request(["a", "b"], ["x", ""], c, 3, None)
  with pytest.raises(ValueError, match="2 texts but 1 prefixes"):
    check_request(["a", "b"], ["x"], c, 0, None)
  with pytest.raises(ValueError, match="nbest=4 needs a beam of at least 4"):
    check_request(["a"], None, c, 4, None)
  check_request(["a"], None, c, 4, sampling=object())  # samples are not a beam's


def test_the_search_returns_what_the_answer_needs():
  c = DecodeConfig(beam_size=5)
  assert hypotheses_needed(c, 3, None) == 3 and hypotheses_needed(c, 0, None) == 1
  mbr = dataclasses.replace(c, mbr="bleu")
  assert hypotheses_needed(mbr, 0, None) == 5 and hypotheses_needed(mbr, 0, object()) == 1


def test_pick_gives_texts_or_the_n_best_lists():
  hyps = [[Hypothesis("b", -1.0, [5]), Hypothesis("a", -2.0, [4])],
          [Hypothesis("c", -0.5, [6]), Hypothesis("d", -3.0, [7])]]
  assert pick(hyps, 0, DecodeConfig()) == ["b", "c"]
  assert pick(hyps, 1, DecodeConfig()) == [hyps[0][:1], hyps[1][:1]]


def test_a_source_leaves_room_for_its_translation_under_the_output_limit():
  assert source_limit(128, DecodeConfig(max_len_a=0.0, max_len_b=10)) == 128
  assert source_limit(128, DecodeConfig(max_len_a=1.5, max_len_b=10)) == 78  # 1.5 * 78 + 10
  assert source_limit(8, DecodeConfig(max_len_a=2.0, max_len_b=20)) == 2  # never below 2


def test_text_is_anything_but_white_space_and_control_characters():
  assert has_text("a") and has_text(" ä ") and has_text("·")
  assert not has_text("") and not has_text(" \t\n") and not has_text("\x00\x00")


def test_a_pair_s_score_per_token_is_its_mean_log_probability():
  assert PairScore(-6.0, 3).per_token == -2.0
