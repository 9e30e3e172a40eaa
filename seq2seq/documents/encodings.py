"""The bytes of a text document (.txt, .md, .html, .srt, .vtt): its encoding found, its text
read, and the translation written back in the same encoding, byte order mark and line
endings, as subtitle editors do.

    source = read_text(data, "srt")        # TextFile(text, encoding, bom, newline)
    data = source.write(translated_text)

The encoding is the byte order mark's (UTF-8, UTF-16, UTF-32) where there is one; else
UTF-8 where the bytes are valid UTF-8; else, for HTML, the charset its `<meta>` declares;
else what charset-normalizer finds most likely
(Windows-1252, Latin-1, UTF-16 without a mark, ...; where readings are equally likely,
Windows-1252 first). Bytes that no encoding reads as
text are a `DocumentError` naming what was found. A character of the translation that
the file's encoding lacks (a German quotation mark in a Latin-1 file) is written as a
character reference in HTML, and as its closest ASCII form elsewhere, with a warning.
"""

from __future__ import annotations

import codecs
import dataclasses
import logging
import re
import unicodedata

log = logging.getLogger(__name__)


class DocumentError(ValueError):
  """A document that cannot be read as its format: what is wrong, named."""


# (mark, encoding): the longest first, so that UTF-32's mark is not read as UTF-16's.
BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
        (codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"))
# Where charset-normalizer finds readings equally likely (a short text read as cp1250 or
# cp1252 alike), the one users of these languages' files most often have.
PREFERRED = {"cp1252": 0, "latin_1": 1, "iso8859_15": 2, "cp1250": 3, "iso8859_2": 4}
# Characters that Western single-byte encodings lack, written as the nearest they have.
NEAREST = {"\u201e": '"', "\u201c": '"', "\u201d": '"', "\u201a": "'", "\u2018": "'",
           "\u2019": "'", "\u2013": "-", "\u2014": "-", "\u2026": "...", "\u00a0": " "}


@dataclasses.dataclass(frozen=True)
class TextFile:
  """A text document's text, with how its bytes were written."""

  text: str  # line endings as "\n"
  encoding: str  # a Python codec name
  bom: bytes  # the byte order mark it began with (b"" for none)
  newline: str  # "\r\n" or "\n"

  def write(self, text: str, fmt: str = "txt") -> bytes:
    """`text` (line endings "\n") as this file's bytes."""
    text = text.replace("\n", self.newline)
    try:
      return self.bom + text.encode(self.encoding)
    except UnicodeEncodeError:
      pass
    if fmt == "html":
      return self.bom + text.encode(self.encoding, errors="xmlcharrefreplace")
    lacking = sorted({ch for ch in text if not _encodes(ch, self.encoding)})
    log.warning("the translation has %d character(s) that %s lacks (%s): written as the "
                "nearest it has", len(lacking), self.encoding, "".join(lacking[:10]))
    return self.bom + "".join(ch if _encodes(ch, self.encoding) else _nearest(ch)
                              for ch in text).encode(self.encoding, errors="replace")


def _encodes(ch: str, encoding: str) -> bool:
  try:
    ch.encode(encoding)
    return True
  except UnicodeEncodeError:
    return False


def _nearest(ch: str) -> str:
  if ch in NEAREST:
    return NEAREST[ch]
  plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
  return plain or "?"


def read_text(data: bytes, fmt: str) -> TextFile:
  """A text document's bytes read (module docstring).

  Raises:
    DocumentError: bytes that are no text in any encoding found, naming it.
  """
  for mark, encoding in BOMS:
    if data.startswith(mark):
      try:
        text = data[len(mark):].decode(encoding)
      except UnicodeDecodeError as e:
        raise DocumentError(f"it begins with a {encoding.upper()} byte order mark, but byte "
                            f"{e.start + len(mark)} is not {encoding.upper()}") from None
      return _text_file(text, encoding, mark)
  try:
    return _text_file(data.decode("utf-8"), "utf-8", b"")
  except UnicodeDecodeError as e:
    first_bad = e.start
  declared = _declared_charset(data) if fmt == "html" else None
  if declared is not None:
    try:
      return _text_file(data.decode(declared), codecs.lookup(declared).name, b"")
    except (UnicodeDecodeError, LookupError):
      pass  # a wrong declaration: detected below
  from charset_normalizer import from_bytes
  found = [m for m in from_bytes(data) if m.encoding]
  # the least chaotic, most coherent reading; among equals, the commonest Western one
  best = min(found, default=None, key=lambda m: (round(m.chaos, 3), -round(m.coherence, 3),
                                                 PREFERRED.get(m.encoding, len(PREFERRED))))
  if best is None:
    raise DocumentError(f"a {fmt} document must be text: byte {first_bad} is not UTF-8 and "
                        "no other text encoding reads it")
  text = str(best)
  if "\x00" in text:
    raise DocumentError(f"a {fmt} document must be text: read as {best.encoding} it holds "
                        "NUL characters")
  return _text_file(text, codecs.lookup(best.encoding).name, b"")


_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.I)


def _declared_charset(data: bytes) -> str | None:
  """The charset an HTML document declares in a `<meta>` of its first 4 KB, if any."""
  found = _CHARSET.search(data[:4096])
  return found.group(1).decode("ascii") if found else None


def _text_file(text: str, encoding: str, bom: bytes) -> TextFile:
  newline = "\r\n" if "\r\n" in text else "\n"
  return TextFile(text.replace("\r\n", "\n"), encoding, bom, newline)
