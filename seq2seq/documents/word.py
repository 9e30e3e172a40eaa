"""Word documents (.docx), read and written with python-docx: the paragraphs of the body,
of tables (nested ones too) and of headers and footers translated a paragraph at a time,
each run's formatting (bold, italic, font, colour, its character style) and hyperlinks
carried onto the words they wrapped; paragraph styles, numbering, tables, sections,
images and fields kept. A run holding more than text (an image, a field) stays where it
is, and the text on either side of it is translated on its own."""

from __future__ import annotations

import copy
import dataclasses
import io

from seq2seq.documents.blocks import BlockTranslator
from seq2seq.documents.inline import Run
from seq2seq.documents.packages import unreadable

_TEXT_PARTS = {"rPr", "t", "tab", "br", "cr", "lastRenderedPageBreak", "noBreakHyphen",
               "softHyphen"}


def _local(element) -> str:
  return element.tag.rsplit("}", 1)[-1]


def _paragraphs(container):
  """Every paragraph of a body, cell, header or footer, nested tables included."""
  yield from container.paragraphs
  for table in container.tables:
    seen = set()
    for row in table.rows:
      for cell in row.cells:
        if id(cell._tc) not in seen:  # a merged cell appears once per grid column
          seen.add(id(cell._tc))
          yield from _paragraphs(cell)


def _all_paragraphs(document):
  yield from _paragraphs(document)
  for section in document.sections:
    for part in (section.header, section.footer, section.first_page_header,
                 section.first_page_footer, section.even_page_header, section.even_page_footer):
      if not part.is_linked_to_previous:
        yield from _paragraphs(part)


def _is_text_run(r) -> bool:
  return _local(r) == "r" and all(_local(child) in _TEXT_PARTS for child in r)


def _segments(paragraph):
  """Runs of consecutive text runs and hyperlinks (of text runs) of a paragraph."""
  current = []
  for child in paragraph._p:
    kind = _local(child)
    if _is_text_run(child) or (kind == "hyperlink" and all(_is_text_run(r) for r in child)):
      current.append(child)
    elif kind in ("r", "hyperlink", "fldSimple", "sdt", "smartTag"):
      if current:
        yield current
      current = []
  if current:
    yield current


def _runs(paragraph, elements, styles: dict) -> list[Run]:
  from docx.text.run import Run as DocxRun
  runs = []
  for element in elements:
    link = element if _local(element) == "hyperlink" else None
    for r in ([element] if link is None else list(element)):
      properties = r.find(r.tag.replace("}r", "}rPr"))
      key = _Style(b"" if properties is None else _xml(properties),
                   None if link is None else id(link))
      styles[key] = (properties, link)
      runs.append(Run(DocxRun(r, paragraph).text, key))
  return [r for r in runs if r.text]


@dataclasses.dataclass(frozen=True)
class _Style:
  """A run's formatting (its w:rPr, serialised) and the hyperlink it is in, if any."""

  properties: bytes
  link: int | None


def _xml(element) -> bytes:
  from lxml import etree
  return etree.tostring(element)


def _replace(paragraph, elements, runs: list[Run], styles: dict) -> None:
  from docx.oxml import OxmlElement
  from docx.text.run import Run as DocxRun
  anchor, link_of = elements[0], {}
  for run in runs:
    properties, link = styles[run.style]
    r = OxmlElement("w:r")
    if properties is not None:
      r.append(copy.deepcopy(properties))
    if link is None:
      anchor.addprevious(r)
    else:
      if run.style.link not in link_of:
        new_link = copy.deepcopy(link)
        for child in list(new_link):
          new_link.remove(child)
        anchor.addprevious(new_link)
        link_of[run.style.link] = new_link
      link_of[run.style.link].append(r)
    DocxRun(r, paragraph).text = run.text
  for element in elements:
    element.getparent().remove(element)


def translate_docx(data: bytes, translate: BlockTranslator, fmt: str) -> bytes:
  """A .docx file's bytes with its prose translated (module docstring)."""
  import docx
  try:
    document = docx.Document(io.BytesIO(data))
  except Exception as e:  # noqa: BLE001 - python-docx's reading fails in many ways on a
    # file that is not a Word document (a zip of other parts, XML of another shape)
    raise unreadable(fmt, e) from None
  styles: dict = {}
  jobs = []
  for paragraph in _all_paragraphs(document):
    for elements in _segments(paragraph):
      runs = _runs(paragraph, elements, styles)
      if any(r.text.strip() for r in runs):
        jobs.append((paragraph, elements, runs))
  found = translate([runs for _, _, runs in jobs], "translating paragraphs")
  for (paragraph, elements, _), runs in zip(jobs, found):
    _replace(paragraph, elements, runs, styles)
  out = io.BytesIO()
  document.save(out)
  return out.getvalue()
