"""The document formats translated here, each once: its extensions, whether it is a zipped
package or text, the function that translates it, its media type, and what the docs say
of it. The command line (`--format`, the extensions it reads), the server's
/translate_file and /frontend/settings, the OpenAPI document and the table in
docs/translating.md all read this list (tests/documents/test_formats.py fails where a
format is named anywhere else).

    FORMATS["docx"].extensions   # (".docx",)
    for_extension(".HTM").name   # "html"
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Format:
  """One document format. `handler` is "module.function" in seq2seq.documents: a text
  format's takes (text, BlockTranslator) and returns the text; a zipped one's takes
  (bytes, BlockTranslator, format name) and returns the bytes."""

  name: str
  extensions: tuple[str, ...]  # lower case; the first is the one shown, the rest read too
  zipped: bool  # a package (written to a file), else text in its own encoding
  media_type: str
  handler: str
  description: str  # one line
  library: str  # the docs' table: what reads and writes it,
  translated: str  # what of it is translated,
  kept: str  # and what is kept
  # the errors ("module.Class") by which its library says a file is not of the format
  malformed: tuple[str, ...] = ()
  # the command line translates a file of this extension whole unless told otherwise
  # (`--format lines`); a .txt file is read a sentence a line unless `--format txt`
  whole_by_default: bool = True

  @property
  def extension(self) -> str:
    return self.extensions[0]

  def translator(self) -> Callable:
    module, function = self.handler.rsplit(".", 1)
    return getattr(importlib.import_module(f"seq2seq.documents.{module}"), function)

  def errors(self) -> tuple[type[Exception], ...]:
    """The classes of `malformed`, imported."""
    return tuple(getattr(importlib.import_module(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1])
                 for name in self.malformed)


ZIP = ("zipfile.BadZipFile", "zipfile.LargeZipFile")  # a zipped format's, and its own
_ALL = (
    Format("txt", (".txt", ".text"), False, "text/plain", "plain.translate_text",
           "plain text: paragraphs, by sentences", "(none)",
           "each paragraph, by sentences", "line breaks, blank lines", whole_by_default=False),
    Format("md", (".md", ".markdown"), False, "text/markdown", "markdown.translate_markdown",
           "Markdown: prose of blocks, inline markup; code, links and images kept",
           "markdown-it-py", "paragraphs, headings, list items, quotes, table cells",
           "code blocks, inline code, link and image targets, URLs, HTML blocks, every "
           "other line byte for byte"),
    Format("html", (".html", ".htm", ".xhtml"), False, "text/html", "html.translate_html",
           "HTML: text of elements, inline tags carried; script, style, code kept",
           "BeautifulSoup", "the text of every element",
           "tags and attributes, comments, `script`, `style`, `pre`, `code`, "
           '`translate="no"` and `class="notranslate"`'),
    Format("srt", (".srt",), False, "application/x-subrip", "subtitles.translate_srt",
           "SubRip subtitles: cue texts; numbers and timings kept", "srt",
           "each cue's text (its lines as one sentence, broken again into as many lines)",
           "cue numbers (1 to N where the file has none), timings, inline tags (`<i>`, "
           "`<b>`, `<u>`, `<font>`)", malformed=("srt.SRTParseError",)),
    Format("vtt", (".vtt",), False, "text/vtt", "subtitles.translate_vtt",
           "WebVTT subtitles: cue texts; timings and settings kept", "webvtt-py",
           "each cue's text, as for SubRip", "identifiers, timings, cue settings, voices, "
           "`NOTE` blocks", malformed=("webvtt.errors.MalformedFileError",
                                       "webvtt.errors.MalformedCaptionError")),
    Format("docx", (".docx",), True,
           "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
           "word.translate_docx",
           "Word: paragraphs of body, tables, headers, footers; run formatting kept",
           "python-docx", "paragraphs of the body, tables, headers and footers",
           "paragraph styles, numbering, tables, run formatting (bold, italic, font, "
           "colour), hyperlinks, images, fields",
           malformed=(ZIP + ("docx.opc.exceptions.OpcError", "lxml.etree.LxmlError",
                             "builtins.KeyError"))),
    Format("odt", (".odt",), True, "application/vnd.oasis.opendocument.text",
           "opendocument.translate_opendocument",
           "OpenDocument text: paragraphs, lists, tables; span styles and links kept",
           "lxml over the zip", "paragraphs and headings of the body, lists, tables, "
           "frames, headers and footers",
           "span styles, links, bookmarks, notes, fields, line breaks, every other part "
           "of the package byte for byte", malformed=ZIP + ("lxml.etree.LxmlError",)),
    Format("odp", (".odp",), True, "application/vnd.oasis.opendocument.presentation",
           "opendocument.translate_opendocument",
           "OpenDocument presentation: slides' frames and notes; span styles, links kept",
           "lxml over the zip", "the text of every slide's frames and tables, speaker notes",
           "span styles, links, notes, fields, line breaks, every other part of the "
           "package byte for byte", malformed=ZIP + ("lxml.etree.LxmlError",)),
    Format("pptx", (".pptx",), True,
           "application/vnd.openxmlformats-officedocument.presentationml.presentation",
           "powerpoint.translate_pptx",
           "PowerPoint: paragraphs of slides' shapes, tables and notes; run formatting kept",
           "python-pptx", "paragraphs of every slide's shapes, groups and table cells, "
           "and of its notes", "run formatting (bold, italic, font, colour, size), "
           "hyperlinks, line breaks, fields, layouts, pictures", malformed=ZIP),
    Format("epub", (".epub",), True, "application/epub+zip", "epub.translate_epub",
           "EPUB: chapters and navigation as XHTML; everything else kept",
           "EbookLib, lxml", "every chapter and the table of contents, as XHTML (as HTML)",
           "the manifest, styles, pictures, fonts, byte for byte",
           malformed=ZIP + ("lxml.etree.LxmlError",)),
)
FORMATS: dict[str, Format] = {f.name: f for f in _ALL}
EXTENSIONS: dict[str, Format] = {e: f for f in _ALL for e in f.extensions}

# Documents of other tools, not translated here, and what to convert each to (None: no
# advice).
NOT_TRANSLATED: dict[str, str | None] = {
    ".pdf": "a PDF holds positioned glyphs, not paragraphs: convert it to .docx or .odt "
            "(LibreOffice, pdf2docx) and translate that",
    ".doc": "convert it to .docx", ".ppt": "convert it to .pptx",
    ".rtf": "convert it to .docx or .odt", ".ods": None, ".xls": None, ".xlsx": None}


def for_extension(suffix: str) -> Format | None:
  """The format of a file extension (".HTM": html), or None."""
  return EXTENSIONS.get(suffix.lower())


def listed() -> list[str]:
  """The formats' shown extensions, in the registry's order."""
  return [f.extension for f in _ALL]


def docs_table() -> str:
  """The table of formats in docs/translating.md."""
  rows = ["| format | library | translated | kept |", "|---|---|---|---|"]
  rows += [f"| {', '.join(f'`{e}`' for e in f.extensions)} | {f.library} | {f.translated} "
           f"| {f.kept} |" for f in _ALL]
  return "\n".join(rows) + "\n"
