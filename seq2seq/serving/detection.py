"""Which language a text is in, among the languages a server translates from.

py3langid (a numpy port of langid.py, Lui & Baldwin 2012, whose model ships inside the
package: nothing is downloaded) ranks the text's language among the served sources only,
its probabilities normalised over them; LibreTranslate's confidence is that probability
on a 0-100 scale. A server with one source language answers it, at 100, for any text;
a served language py3langid does not know is never detected (the others are ranked).
The accuracy measured on Multi30k's captions is in docs/serving.md.
"""

from __future__ import annotations

from typing import Sequence


class LanguageDetector:
  """Ranks a text's language among `languages` (ISO 639-1 codes)."""

  def __init__(self, languages: Sequence[str]):
    self.languages = list(dict.fromkeys(languages))
    self.identifier = None
    if len(self.languages) > 1:
      from py3langid.langid import MODEL_FILE, LanguageIdentifier
      identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
      known = [code for code in self.languages if code in identifier.labels]
      if len(known) > 1:
        identifier.set_languages(known)
        self.identifier = identifier
      self.languages = known or self.languages[:1]

  def rank(self, text: str) -> list[tuple[str, float]]:
    """(language, confidence 0-100) of each served language, most likely first."""
    if self.identifier is None:
      return [(self.languages[0], 100.0)]
    return [(code, round(100.0 * float(p), 2)) for code, p in self.identifier.rank(text)]

  def detect(self, text: str) -> tuple[str, float]:
    """The most likely language of `text` and its confidence (0-100)."""
    return self.rank(text)[0]
