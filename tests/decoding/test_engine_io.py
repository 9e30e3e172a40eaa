"""What a translation engine takes and gives (seq2seq/decoding/engine_io.py), shared by the
JAX and CTranslate2 engines: one settings value checked once when made, requests refused by name,
the answer picked, the source limit, sources encoded, and what counts as text."""

import dataclasses

import pytest

from seq2seq.config import DecodeConfig
from seq2seq.decoding.engine_io import (
  Hypothesis,
  PairScore,
  Sampling,
  SearchSettings,
  check_prefixes,
  has_text,
  pick,
  source_limit,
)


def test_settings_take_the_run_s_and_a_call_s_changes_and_none_keeps_them():
  saved = DecodeConfig(beam_size=4, alpha=0.6, batch_size=32)
  assert SearchSettings.of(saved) == SearchSettings(beam_size=4, alpha=0.6, batch_size=32)
  got = SearchSettings.of(saved, beam_size=1, alpha=2, batch_size=8, nbest=None)
  assert (got.beam_size, got.alpha, got.batch_size, got.nbest) == (1, 2.0, 8, 0)
  assert isinstance(got.alpha, float) and got.changed(alpha=None) == got
  with pytest.raises(TypeError, match="unknown search setting.*colour"):
    SearchSettings.of(saved, colour=1)


@pytest.mark.parametrize("given, name", [
    (dict(beam_size=0), "beam size"), (dict(batch_size=-1), "batch size"),
    (dict(alpha=-1.0), "alpha"), (dict(alpha=float("nan")), "alpha"),
    (dict(beam_size=True), "beam size"), (dict(nbest=-1), "nbest"),
    (dict(sampling="hot"), "sampling must be a Sampling"),
])
def test_bad_settings_are_refused_by_name_when_made(given, name):
  with pytest.raises(ValueError, match=name):
    SearchSettings(**given)
  with pytest.raises(ValueError, match=name):  # and when changed
    SearchSettings().changed(**given)


def test_nbest_must_fit_the_beam_and_a_glossary_does_not_sample():
  SearchSettings(beam_size=3, nbest=3)
  with pytest.raises(ValueError, match="nbest=4 needs a beam of at least 4"):
    SearchSettings(beam_size=3, nbest=4)
  SearchSettings(beam_size=1, nbest=4, sampling=Sampling())  # samples are not a beam's
  with pytest.raises(ValueError, match="does not combine with sampling"):
    SearchSettings(glossary={"dog": "Hund"}, sampling=Sampling())
  assert SearchSettings(glossary={"dog": "Hund"}).glossary.terms[0].targets == ("Hund",)


def test_prefixes_must_pair_with_the_texts():
  check_prefixes(["a", "b"], ["x", ""])
  with pytest.raises(ValueError, match="2 texts but 1 prefixes"):
    check_prefixes(["a", "b"], ["x"])


def test_the_search_returns_what_the_answer_needs():
  c = DecodeConfig(beam_size=5)
  assert SearchSettings(5, nbest=3).hypotheses(c) == 3
  assert SearchSettings(5).hypotheses(c) == 1
  mbr = dataclasses.replace(c, mbr="bleu")
  assert SearchSettings(5).hypotheses(mbr) == 5
  assert SearchSettings(5, sampling=Sampling()).hypotheses(mbr) == 1


def test_pick_gives_texts_or_the_n_best_lists():
  hyps = [[Hypothesis("b", -1.0, [5]), Hypothesis("a", -2.0, [4])],
          [Hypothesis("c", -0.5, [6]), Hypothesis("d", -3.0, [7])]]
  assert pick(hyps, SearchSettings(), DecodeConfig()) == ["b", "c"]
  assert pick(hyps, SearchSettings(nbest=1), DecodeConfig()) == [hyps[0][:1], hyps[1][:1]]


def test_a_source_leaves_room_for_its_translation_under_the_output_limit():
  assert source_limit(128, DecodeConfig(max_len_a=0.0, max_len_b=10)) == 128
  assert source_limit(128, DecodeConfig(max_len_a=1.5, max_len_b=10)) == 78  # 1.5 * 78 + 10
  assert source_limit(8, DecodeConfig(max_len_a=2.0, max_len_b=20)) == 2  # never below 2


def test_text_is_anything_but_white_space_and_control_characters():
  assert has_text("a") and has_text(" ä ") and has_text("·")
  assert not has_text("") and not has_text(" \t\n") and not has_text("\x00\x00")


def test_a_pair_s_score_per_token_is_its_mean_log_probability():
  assert PairScore(-6.0, 3).per_token == -2.0
