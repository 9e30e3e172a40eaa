"""Subtitles: SubRip (.srt, with the `srt` library) and WebVTT (.vtt, with webvtt-py).
Each cue's text is translated (its lines joined: a caption broken over two lines is one
sentence) and broken again into as many lines as it had; cue numbers, identifiers,
timings, settings, voices and NOTE blocks are kept. A cue with inline tags (<i>, <b>)
is translated as HTML (its tags carried over) on one line. A sentence that runs over
several cues is translated cue by cue."""

from __future__ import annotations

import io
import re

from seq2seq.documents.blocks import BlockTranslator
from seq2seq.documents.html import translate_html

_TAG = re.compile(r"</?[a-zA-Z][^>]*>")


def balanced_lines(text: str, lines: int) -> str:
  """`text` broken at spaces into `lines` lines of about equal length (fewer if it has
  fewer words)."""
  words = text.split()
  if lines <= 1 or len(words) <= 1:
    return " ".join(words)
  out, start = [], 0
  for k in range(1, lines):
    target = len(text) * k / lines
    best, length = start, sum(len(w) + 1 for w in words[:start])
    while best < len(words) - (lines - k) and length + len(words[best]) + 1 <= target:
      length += len(words[best]) + 1
      best += 1
    best = max(best, start + 1)
    out.append(" ".join(words[start:best]))
    start = best
  out.append(" ".join(words[start:]))
  return "\n".join(line for line in out if line)


def _translate_cues(texts: list[str], translate: BlockTranslator) -> list[str]:
  """Each cue's text translated: plain cues in one batch, tagged ones as HTML."""
  plain = [i for i, t in enumerate(texts) if not _TAG.search(t)]
  out = list(texts)
  found = translate.texts([" ".join(texts[i].split()) for i in plain], "translating cues")
  for i, text in zip(plain, found):
    out[i] = balanced_lines(text, len(texts[i].strip().splitlines()))
  for i, text in enumerate(texts):
    if i not in set(plain):
      out[i] = translate_html(" ".join(text.split()), translate)
  return out


def translate_srt(text: str, translate: BlockTranslator) -> str:
  import srt
  cues = list(srt.parse(text))
  for cue, content in zip(cues, _translate_cues([c.content for c in cues], translate)):
    cue.content = content
  return srt.compose(cues, reindex=False)


def translate_vtt(text: str, translate: BlockTranslator) -> str:
  import webvtt
  vtt = webvtt.from_buffer(io.StringIO(text))
  voices = [re.match(r"\s*(<v[^>]*>)", c.raw_text) for c in vtt.captions]
  found = _translate_cues([c.text for c in vtt.captions], translate)
  for caption, voice, content in zip(vtt.captions, voices, found):
    caption.text = (voice.group(1) if voice else "") + content
  return vtt.content
