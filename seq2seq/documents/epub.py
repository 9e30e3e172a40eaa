"""E-books (.epub): every chapter and the table of contents (the package's XHTML
documents, as EbookLib lists them) translated as HTML (html.py: inline markup carried,
code and `translate="no"` kept), each read and written as XML so that names, namespaces
and case stay as written; every other entry of the package (the manifest, styles,
pictures, fonts) copied byte for byte, the `mimetype` entry first and uncompressed, as
EPUB requires."""

from __future__ import annotations

import io
import posixpath
import zipfile

from seq2seq.documents.blocks import BlockTranslator
from seq2seq.documents.encodings import DocumentError
from seq2seq.documents.formats import FORMATS
from seq2seq.documents.html import translate_html
from seq2seq.documents.packages import rewrite, unreadable


def _documents(data: bytes, fmt: str) -> set[str]:
  """The zip entry names of the book's XHTML documents (chapters and navigation)."""
  import ebooklib
  from ebooklib import epub
  try:
    book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
  except Exception as e:  # noqa: BLE001 - EbookLib's reading fails in many ways on a file
    # that is not an EPUB
    raise unreadable(fmt, e) from None
  folder = posixpath.dirname(_package_document(data))
  kinds = (ebooklib.ITEM_DOCUMENT, ebooklib.ITEM_NAVIGATION)
  return {posixpath.normpath(posixpath.join(folder, item.file_name))
          for item in book.get_items() if item.get_type() in kinds
          and item.file_name.lower().endswith(FORMATS["html"].extensions)}


def _package_document(data: bytes) -> str:
  """The zip entry of the book's package document (its OPF), as META-INF/container.xml
  names it; EbookLib's items are named relative to its folder."""
  from lxml import etree
  with zipfile.ZipFile(io.BytesIO(data)) as z:
    container = etree.fromstring(z.read("META-INF/container.xml"),
                                 etree.XMLParser(resolve_entities=False, no_network=True))
  rootfile = container.find(".//{urn:oasis:names:tc:opendocument:xmlns:container}rootfile")
  return rootfile.get("full-path", "") if rootfile is not None else ""


def translate_epub(data: bytes, translate: BlockTranslator, fmt: str) -> bytes:
  """An .epub's bytes with its chapters translated (module docstring)."""
  documents = _documents(data, fmt)

  def translated(name: str, content: bytes) -> bytes:
    if name not in documents:
      return content
    try:
      text = content.decode("utf-8")
    except UnicodeDecodeError as e:
      raise DocumentError(f"{name} is not UTF-8 (byte {e.start})") from None
    return translate_html(text, translate, parser="xml").encode("utf-8")

  return rewrite(data, FORMATS[fmt].media_type, translated)
