"""Texts cut into sentences and parts that fit the model, and joined back: the spacing and
line breaks kept, nothing dropped, nothing cut without a cut point, the splitter's
boundaries on real paragraphs; the Translator over paragraphs and long texts."""

import gzip

import pytest

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding import sentences
from seq2seq.decoding.engine_io import Hypothesis, source_limit
from seq2seq.decoding.sentences import Plan, Segmented, TooLongError, check_cuttable
from seq2seq.decoding.translator import Translator

from helpers import SAMPLE

words = lambda texts: [len(t.split()) + 1 for t in texts]  # noqa: E731 (a word a piece, + EOS)


def test_sentences_concatenate_to_the_text_and_line_breaks_end_them():
  text = "A man runs.  Two dogs play!\nDr. Smith is here. Is it?\n\n  Yes "
  found = sentences.split_sentences(text, "en")
  assert "".join(found) == text
  assert [s.strip() for s in found if s.strip()] == [
      "A man runs.", "Two dogs play!", "Dr. Smith is here.", "Is it?", "Yes"]


def test_a_plan_joins_translations_with_the_text_s_own_spacing():
  texts = ["A man runs.  Two dogs play!\nA cat sleeps. ", "", "   ", "One sentence"]
  plan = Plan.of(texts, "en", words, 50)
  assert plan.sentences == ["A man runs.", "Two dogs play!", "A cat sleeps.", "One sentence"]
  assert plan.owners() == [(0, 0), (0, 1), (0, 2), (3, 0)]
  hyps = [[Hypothesis(s.upper(), -1.0, [k]), Hypothesis(s.lower(), -2.0, [k, k])]
          for k, s in enumerate(plan.sentences)]
  joined = plan.join(hyps)
  assert [h[0].text for h in joined] == [
      "A MAN RUNS.  TWO DOGS PLAY!\nA CAT SLEEPS. ", "", "", "ONE SENTENCE"]
  # the k-th hypothesis of a text joins its sentences' k-th: scores add, ids concatenate
  assert joined[0][1].text == "a man runs.  two dogs play!\na cat sleeps. "
  assert joined[0][1].score == -6.0 and joined[0][0].ids == [0, 1, 2]
  assert plan.prefixes(["Ein", "", "", "Der"]) == ["Ein", "", "", "Der"]
  # without sentences, a text that fits is one unit, as given
  whole = Plan.of(texts, None, words, 50)
  assert whole.sentences == [texts[0], texts[1], texts[2], texts[3]]


def test_a_sentence_too_long_is_cut_at_clauses_then_at_white_space_and_nothing_dropped():
  sentence = ("one two, three four five six seven eight nine ten eleven, twelve; "
              "thirteen fourteen")
  seg = Segmented.of(sentence, "en", lambda part: words([part])[0] <= 5)
  assert all(words([u])[0] <= 5 for u in seg.units)
  assert seg.units[0] == "one two," and seg.units[-1] == "twelve; thirteen fourteen"
  assert seg.join(seg.units) == sentence  # every character kept, in order
  assert " ".join(seg.units).split() == sentence.split()
  with pytest.raises(TooLongError, match=r"text 2: 'x{40}'\.\.\. has no white space"):
    Plan.of(["fine", "a " + "x" * 50], "en", lambda ts: [len(t) // 10 + 1 for t in ts], 3)
  with pytest.raises(TooLongError, match="text 2: .* more than the model's maximum of 3"):
    check_cuttable(["fine", "a " + "x" * 50], lambda ts: [len(t) // 10 + 1 for t in ts], 3)
  check_cuttable(["a " * 500], lambda ts: [len(t) // 10 + 1 for t in ts], 3)  # cuttable


def test_the_splitter_finds_the_sentences_of_joined_test_paragraphs(multi30k_dir):
  # 250 paragraphs of 4 consecutive test_2016_flickr sentences (each given a full stop
  # where it has none, as sentences in running text have): at least 99 % of them come
  # back as their 4 sentences.
  with gzip.open(multi30k_dir / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
    lines = [sentences.with_full_stop(line.strip()) for line in f]
  paragraphs = [lines[i:i + 4] for i in range(0, 1000, 4)]
  found = [Plan.of([" ".join(p)], "en", words, 1000).sentences for p in paragraphs]
  assert sum(f == p for f, p in zip(found, paragraphs)) >= 0.99 * len(paragraphs)


def test_a_paragraph_is_translated_as_its_sentences_joined(trained_run):
  t = Translator.load(trained_run)
  lines = [line for line in read_lines(SAMPLE / "test.en")[:6] if line.strip()]
  ended = [sentences.with_full_stop(line) for line in lines]
  paragraph = "  ".join(ended[:3]) + "\n" + " ".join(ended[3:])
  for beam in (1, 3):
    alone = t.translate(ended, beam_size=beam)
    assert t.translate(paragraph, beam_size=beam) == (
        "  ".join(alone[:3]) + "\n" + " ".join(alone[3:]))
    # one pass over every text's sentences: a paragraph among other texts, alike
    many = t.translate([lines[0], paragraph, ""], beam_size=beam, batch_size=64)
    assert many[1] == t.translate(paragraph, beam_size=beam, batch_size=1)
  # off: the paragraph is one sequence (as sentence-per-line data is)
  assert t.translate(paragraph, split_sentences=False) != t.translate(paragraph)


def test_a_text_longer_than_the_model_takes_is_translated_whole_in_parts(trained_run, caplog):
  t = Translator.load(trained_run)
  clause = "a young man in a red shirt is running in the park with his dog"
  text = ", ".join([clause] * 12)  # one sentence, over the tiny model's 128 pieces
  assert t.count_pieces([text])[0] > t.model_cfg.max_len
  out = t.translate(text)
  assert "maximum" not in caplog.text  # no truncation warning: cut, not truncated
  limit = t.limits.max_source_pieces
  assert limit == source_limit(t.model_cfg.max_len, t.decode_cfg)
  parts = Plan.of([text], "en", t.count_pieces, limit).sentences
  assert len(parts) > 1 and out == " ".join(t.translate(parts, split_sentences=False))
  with pytest.raises(TooLongError, match="text 1: .* no white space"):
    t.translate("x" * 400)


RUN_ON = ("A man in a blue shirt is standing on a ladder cleaning windows Two dogs are "
          "playing in the snow near a fence A woman sits on a bench reading a book")


def test_a_long_run_on_sentence_is_cut_at_the_sentence_starts_inside_it():
  parts = sentences.split_run_ons(RUN_ON + "  ", "en")
  assert "".join(parts) == RUN_ON + "  "
  assert [p.split()[0] for p in parts] == ["A", "Two", "A"]
  assert sentences.split_run_ons(RUN_ON, "de") == [RUN_ON]  # no starters: German nouns
  short = "A man runs Two dogs play in the snow"  # capitalised too, so no starters
  assert sentences.split_run_ons(short, "en") == [short]
  names = ("In the park near The Hague a man with a red hat sings and A Tribe Called Quest "
           "plays on the stage tonight")
  assert all(len(p.split()) >= 3 for p in sentences.split_run_ons(names, "en"))
  punctuated = RUN_ON.replace(" Two", ". Two").replace(" A woman", ", A woman")
  assert len(sentences.split_run_ons(punctuated, "en")) == 1  # after punctuation: no cut


def test_captions_joined_without_punctuation_translate_as_the_captions(trained_run):
  t = Translator.load(trained_run)
  captions = ["A young man is running in the park", "Two dogs are playing in the snow",
              "A woman is sitting on a bench with a small dog"]
  assert t.translate(" ".join(captions)) == " ".join(t.translate(captions,
                                                                 split_sentences=False))
