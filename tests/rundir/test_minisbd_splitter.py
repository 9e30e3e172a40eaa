"""The sentence splitter an Argos package ships (seq2seq/rundir/minisbd_splitter.py), run
by MiniSBD's own code as Argos Translate and LibreTranslate run it: it cuts where the
package's own splitter (sentencex, in seq2seq.decoding.sentences) cuts."""

import pytest
import sentencex

from seq2seq.rundir import minisbd_splitter

pytest.importorskip("onnx", reason="onnx comes with the [ctranslate2] extra")
minisbd = pytest.importorskip("minisbd", reason="MiniSBD is a test extra")

TEXTS = [
    "A man rides a bike. Two dogs play in the snow.",
    "Is it raining? Yes! The children run home... Then they eat. Wait… what?",
    'He said "Go." Then he left. The bill was 3.50 dollars. It was 9 a.m. Monday.',
    "Dr. Smith met Mr. J. Jones in the U.S. last year. They talked.",
    "No full stop at the end",
    "Spaces   between. And a line\nbreak. Here.",
    "A first paragraph. Its second sentence.\n\nA second paragraph.",
    "e.g. lower case after an abbreviation stays. Numbers like 1.5 and v2.0 too.",
    "Ünïcode Ärger. Ölig ist es. «Quoted.» Done.",
]


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
  path = minisbd_splitter.write(tmp_path_factory.mktemp("sbd") / "en.onnx", "en")
  return minisbd.SBDetect(str(path), use_gpu=False)


@pytest.mark.parametrize("text", TEXTS)
def test_the_shipped_splitter_cuts_where_sentencex_cuts(detector, text):
  ours = [s.strip() for s in sentencex.segment("en", text) if s.strip()]
  assert detector.sentences(text) == ours


def test_a_period_ends_a_sentence_only_before_space_and_a_new_sentence(detector):
  assert detector.sentences("Version 2.5 is out. it is lower case. U.S. Army. Yes") == [
      "Version 2.5 is out. it is lower case.", "U.S. Army.", "Yes"]


def test_abbreviations_are_the_ones_sentencex_keeps_whole_in_the_language():
  english, german = minisbd_splitter.abbreviations("en"), minisbd_splitter.abbreviations("de")
  assert {"a.", "z.", "dr.", "e.g."} <= set(english)
  assert {"bzw.", "usw.", "z.b."} <= set(german)
  for word in english[26:]:  # after the single letters
    assert len(list(sentencex.segment("en", f"We met {word.capitalize()} Miller there."))) == 1
