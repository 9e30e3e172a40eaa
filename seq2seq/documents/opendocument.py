"""OpenDocument text and presentations (.odt, .odp): the paragraphs and headings of the
document's content and of its master pages (headers, footers), wherever they are (body,
lists, tables, frames and text boxes of slides, speaker notes), translated a paragraph
at a time, each span's style and each link carried onto the words they wrapped; every
other part of the package (styles, pictures, metadata, settings) copied byte for byte.
Read and written with lxml over the package's zip; the `mimetype` entry stays first and
uncompressed, as ODF requires. Bookmarks, notes, fields, frames, tabs and line breaks
inside a paragraph stay where they are, and the text on either side of them is translated
on its own."""

from __future__ import annotations

import io
import zipfile

from seq2seq.documents.blocks import BlockTranslator
from seq2seq.documents.encodings import DocumentError
from seq2seq.documents.formats import FORMATS
from seq2seq.documents.inline import Run
from seq2seq.documents.packages import rewrite

TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
PARAGRAPHS = {f"{{{TEXT}}}p", f"{{{TEXT}}}h"}
# Elements that flow within a sentence: a styled span, a link, a run of spaces.
INLINE = {f"{{{TEXT}}}span", f"{{{TEXT}}}a"}
SPACES = f"{{{TEXT}}}s"
PARTS = ("content.xml", "styles.xml")  # the parts that hold text


def _tokens(element, path: tuple) -> list:
  """The content of a paragraph (or an inline element within it) in order: a Run per
  piece of text (its style: the inline elements around it, outermost first, each a
  (tag, attributes) pair) and every other element as itself, kept."""
  out = []
  if element.text:
    out.append(Run(element.text, path))
  for child in element:
    if child.tag in INLINE:
      out += _tokens(child, path + ((child.tag, tuple(sorted(child.attrib.items()))),))
    elif child.tag == SPACES:
      out.append(Run(" " * int(child.get(f"{{{TEXT}}}c", "1")), path))
    else:
      out.append(child)
    if child.tail:
      out.append(Run(child.tail, path))
  return out


def _segments(tokens: list) -> list:
  """The tokens grouped: lists of consecutive Runs, and kept elements between them."""
  out: list = []
  for token in tokens:
    if isinstance(token, Run):
      if out and isinstance(out[-1], list):
        out[-1].append(token)
      else:
        out.append([token])
    else:
      out.append(token)
  return out


def _rebuild(paragraph, segments: list) -> None:
  """The paragraph's content made anew: text and inline elements from the Runs (each
  style path's elements made once per stretch of runs that share it), kept elements as
  they were."""
  from lxml import etree
  for child in list(paragraph):
    paragraph.remove(child)
  paragraph.text = None

  def add_text(parent, text):
    if len(parent):
      parent[-1].tail = (parent[-1].tail or "") + text
    else:
      parent.text = (parent.text or "") + text

  for segment in segments:
    if not isinstance(segment, list):
      segment.tail = None
      paragraph.append(segment)
      continue
    stack: list = []  # [(path entry, element)]
    for run in segment:
      path = run.style or ()
      shared = 0
      while shared < min(len(path), len(stack)) and path[shared] == stack[shared][0]:
        shared += 1
      del stack[shared:]
      for entry in path[shared:]:
        tag, attributes = entry
        parent = stack[-1][1] if stack else paragraph
        new = etree.SubElement(parent, tag, dict(attributes))
        stack.append((entry, new))
      add_text(stack[-1][1] if stack else paragraph, run.text)


def _translate_part(xml: bytes, translate: BlockTranslator) -> bytes:
  from lxml import etree
  parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
  root = etree.fromstring(xml, parser)
  # innermost first: a paragraph inside a frame inside a paragraph is its own paragraph
  paragraphs = [e for e in root.iter() if e.tag in PARAGRAPHS]
  jobs = []
  for paragraph in paragraphs:
    segments = _segments(_tokens(paragraph, ()))
    texts = [k for k, s in enumerate(segments)
             if isinstance(s, list) and any(r.text.strip() for r in s)]
    jobs.append((paragraph, segments, texts))
  found = iter(translate([segments[k] for _, segments, texts in jobs for k in texts],
                         "translating paragraphs"))
  for paragraph, segments, texts in jobs:
    for k in texts:
      segments[k] = next(found)
    if texts:
      _rebuild(paragraph, segments)
  return etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)


def translate_opendocument(data: bytes, translate: BlockTranslator, fmt: str) -> bytes:
  """An .odt or .odp package's bytes with its prose translated (module docstring)."""
  try:
    source = zipfile.ZipFile(io.BytesIO(data))
    mimetype = source.read("mimetype").decode("ascii", "replace").strip()
  except KeyError:
    raise DocumentError(f"not a valid {fmt} document (no mimetype entry: not an "
                        "OpenDocument package)") from None
  if mimetype != FORMATS[fmt].media_type:
    raise DocumentError(f"not a valid {fmt} document (its mimetype is {mimetype!r}, "
                        f"expected {FORMATS[fmt].media_type})")
  return rewrite(data, mimetype, lambda name, content: _translate_part(content, translate)
                 if name in PARTS else content)
