"""Plain text (.txt): each paragraph (lines up to a blank line) translated whole, its
sentences cut as any text's, its line breaks and blank lines kept."""

from __future__ import annotations

import re

from seq2seq.documents.blocks import BlockTranslator

_PARAGRAPH_BREAK = re.compile(r"(\n[ \t]*\n\s*)")


def translate_text(text: str, translate: BlockTranslator) -> str:
  parts = _PARAGRAPH_BREAK.split(text)  # paragraphs at even places, breaks at odd ones
  found = translate.texts(parts[0::2], "translating paragraphs")
  parts[0::2] = found
  return "".join(parts)
