"""Subtitles: SubRip (.srt, with the `srt` library) and WebVTT (.vtt, with webvtt-py).
Each cue's text is translated (its lines joined: a caption broken over two lines is one
sentence) and broken again into as many lines of about equal length as it had; cue
numbers (numbered 1 to N where a SubRip file has none), identifiers, timings, settings,
voices and NOTE blocks are kept. A cue with inline tags (<i>, <b>, <u>, <font ...>) is
translated as HTML, its tags carried onto the words they wrapped. A sentence that runs
over several cues is translated cue by cue."""

from __future__ import annotations

import io
import re

from seq2seq.documents.blocks import BlockTranslator
from seq2seq.documents.html import translate_html

_TAG = re.compile(r"</?[a-zA-Z][^>]*>")


def _words(text: str) -> list[str]:
  """`text` split at white space outside tags (`<font color="red">` is one word's part)."""
  words, current, in_tag = [], [], False
  for ch in text:
    if ch == "<":
      in_tag = True
    elif ch == ">":
      in_tag = False
    if ch.isspace() and not in_tag:
      if current:
        words.append("".join(current))
        current = []
    else:
      current.append(ch)
  if current:
    words.append("".join(current))
  return words


def balanced_lines(text: str, lines: int) -> str:
  """`text` broken at spaces (outside tags) into `lines` lines of about equal visible
  length (fewer if it has fewer words)."""
  words = _words(text)
  if lines <= 1 or len(words) <= 1:
    return " ".join(words)
  sizes = [len(_TAG.sub("", w)) for w in words]
  total = sum(sizes) + len(words) - 1
  out, start = [], 0
  for k in range(1, lines):
    target = total * k / lines
    best, length = start, sum(n + 1 for n in sizes[:start])
    while best < len(words) - (lines - k) and length + sizes[best] + 1 <= target:
      length += sizes[best] + 1
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
      out[i] = balanced_lines(translate_html(" ".join(text.split()), translate),
                              len(text.strip().splitlines()))
  return out


def translate_srt(text: str, translate: BlockTranslator) -> str:
  import srt
  cues = list(srt.parse(text))
  for cue, content in zip(cues, _translate_cues([c.content for c in cues], translate)):
    cue.content = content
  # numbers kept as given; a file without them (players number cues themselves) gets 1..N
  return srt.compose(cues, reindex=any(cue.index is None for cue in cues), start_index=1)


def translate_vtt(text: str, translate: BlockTranslator) -> str:
  import webvtt
  vtt = webvtt.from_buffer(io.StringIO(text))
  voices = [re.match(r"\s*(<v[^>]*>)", c.raw_text) for c in vtt.captions]
  found = _translate_cues([c.text for c in vtt.captions], translate)
  for caption, voice, content in zip(vtt.captions, voices, found):
    caption.text = (voice.group(1) if voice else "") + content
  return vtt.content
