"""The language detector of seq2seq-serve (seq2seq/serving/detection.py): the sample's
English and German told apart, ranked with confidences, one served language answered."""

from seq2seq.data.textfiles import read_lines
from seq2seq.serving.detection import LanguageDetector

from helpers import SAMPLE

EN = read_lines(SAMPLE / "test.en")
DE = read_lines(SAMPLE / "test.de")


def test_the_detector_tells_the_sample_s_english_from_its_german():
  detector = LanguageDetector(["en", "de"])
  found = [detector.detect(t)[0] for t in EN] + [detector.detect(t)[0] for t in DE]
  right = sum(f == want for f, want in zip(found, ["en"] * len(EN) + ["de"] * len(DE)))
  assert right >= 0.98 * len(found), right
  ranked = detector.rank("Ein Mann geht mit seinem Hund spazieren.")
  assert [code for code, _ in ranked] == ["de", "en"] and 50 < ranked[0][1] <= 100
  assert LanguageDetector(["en"]).rank("anything") == [("en", 100.0)]  # one source: it
