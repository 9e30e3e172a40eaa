"""Documents: files translated whole, their structure and everything that is not prose
kept, each format read and written with its own maintained library.

    translate_document(engine, "report.docx", "bericht.docx")
    translate_document(engine, "page.md", fmt="md")     # the translation as a string

    formats.py    the formats, each once: extensions, text or zipped, handler, media type
    inline.py     formatted runs of text translated whole, styles carried by alignment
    blocks.py     blocks of runs translated in chunks with progress; runs written back
    encodings.py  a text document's encoding, BOM and line endings, read and written back
    packages.py   zipped documents checked, rewritten entry by entry, their errors named
    plain.py      .txt: paragraphs
    markdown.py   .md: prose of blocks, inline markup; code, links and images kept
    html.py       .html: text of elements, inline tags carried; script, style, code kept
    subtitles.py  .srt and .vtt: cue texts; numbers, timings and settings kept
    word.py       .docx: paragraphs of body, tables, headers, footers; run formatting kept
    opendocument.py .odt, .odp: paragraphs of text, slides, notes; span styles, links kept
    powerpoint.py .pptx: paragraphs of slides' shapes, tables and notes; run formatting kept
    epub.py       .epub: chapters and navigation as XHTML; everything else kept
"""

from __future__ import annotations

import os
from pathlib import Path

from seq2seq.decoding.engine import Engine
from seq2seq.decoding.engine_io import SearchSettings
from seq2seq.documents.blocks import BlockTranslator
from seq2seq.documents.encodings import DocumentError, TextFile, read_text
from seq2seq.documents.formats import EXTENSIONS, FORMATS, NOT_TRANSLATED, for_extension
from seq2seq.documents.packages import check_package


def format_of(path: str | os.PathLike, fmt: str | None = None) -> str:
  """The format named `fmt`, else the one of `path`'s extension (`formats.FORMATS`).

  Raises:
    ValueError: naming the path and the formats known.
  """
  if fmt is not None:
    if fmt not in FORMATS:
      raise ValueError(f"unknown document format {fmt!r}: expected one of "
                       f"{', '.join(sorted(FORMATS))}")
    return fmt
  suffix = Path(path).suffix.lower()
  if suffix in NOT_TRANSLATED:
    advice = NOT_TRANSLATED[suffix]
    raise ValueError(f"{path}: {suffix} documents are not translated"
                     f"{f' ({advice})' if advice else ''}; known: {', '.join(sorted(EXTENSIONS))}")
  found = for_extension(suffix)
  if found is None:
    raise ValueError(f"{path}: cannot tell the document format from {suffix or 'no'} "
                     f"extension (known: {', '.join(sorted(EXTENSIONS))}); give the format")
  return found.name


def translate_bytes(engine: Engine, data: bytes, fmt: str, settings: SearchSettings | None = None,
                    progress: bool = True, split_sentences: bool = True) -> bytes:
  """A document's bytes translated with the search `settings` (default: the engine's).
  A text format is read in its own encoding and written back in it (`encodings`).

  Raises:
    DocumentError: a file that is not a valid document of its format, naming what is
      wrong.
  """
  translated, source = _translate(engine, data, fmt, settings, progress, split_sentences)
  return translated if source is None else source.write(translated, fmt)


def _translate(engine: Engine, data: bytes, fmt: str, settings: SearchSettings | None,
               progress: bool, split_sentences: bool) -> tuple[bytes | str, TextFile | None]:
  """(the translated docx's bytes, None) or (the translated text, how its source was
  written)."""
  translate = BlockTranslator(engine, settings, progress=progress,
                              split_sentences=split_sentences)
  document = FORMATS[fmt]
  try:
    if document.zipped:
      check_package(data, fmt)
      return document.translator()(data, translate, fmt), None
    source = read_text(data, fmt)
    return document.translator()(source.text, translate), source
  except document.errors() as e:
    reason = " ".join(str(e).split())[:200] or type(e).__name__
    raise DocumentError(f"not a valid {fmt} document ({type(e).__name__}: {reason})"
                        ) from None


def translate_document(engine: Engine, source: str | os.PathLike,
                       target: str | os.PathLike | None = None, fmt: str | None = None,
                       settings: SearchSettings | None = None, progress: bool = True,
                       split_sentences: bool = True, **changes) -> str | None:
  """Translates the document at `source` into `target` (same format; written whole or
  not at all), or returns its translation (text formats) when no target is given.
  `fmt`: the format, else from `source`'s extension (`FORMATS`). `settings` (default:
  the engine's) with `changes` (SearchSettings fields: beam_size, glossary, ...) say how
  to search."""
  fmt = format_of(source, fmt)
  settings = engine.settings(settings, **changes)
  try:
    data = Path(source).read_bytes()
  except OSError as e:
    raise ValueError(f"{source}: {e.strerror}") from None
  if target is None and FORMATS[fmt].zipped:
    raise ValueError(f"{source}: a {fmt} document is written to a file: give a target")
  try:
    translated, text_file = _translate(engine, data, fmt, settings, progress, split_sentences)
  except ValueError as e:
    raise ValueError(f"{source}: {e}") from None
  if target is None:
    return translated
  out = translated if text_file is None else text_file.write(translated, fmt)
  target = Path(target)
  partial = target.with_name(target.name + ".partial")
  partial.write_bytes(out)
  os.replace(partial, target)
  return None
