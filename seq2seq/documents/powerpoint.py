"""PowerPoint presentations (.pptx), read and written with python-pptx: the paragraphs of
every slide's shapes (text boxes, placeholders, groups, table cells) and of its speaker
notes translated a paragraph at a time, each run's formatting (bold, italic, font,
colour, size) and hyperlink carried onto the words it wrapped; layouts, masters,
pictures, charts and animations kept. Line breaks and fields (a slide number) inside a
paragraph stay where they are, and the text on either side of them is translated on its
own."""

from __future__ import annotations

import copy
import io

from seq2seq.documents.blocks import BlockTranslator
from seq2seq.documents.inline import Run
from seq2seq.documents.packages import unreadable

A = "http://schemas.openxmlformats.org/drawingml/2006/main"


def _text_frames(shapes):
  """Every text frame of `shapes`: their own, their tables' cells', their groups'."""
  for shape in shapes:
    if shape.has_text_frame:
      yield shape.text_frame
    if getattr(shape, "has_table", False) and shape.has_table:
      for row in shape.table.rows:
        for cell in row.cells:
          yield cell.text_frame
    if hasattr(shape, "shapes"):  # a group
      yield from _text_frames(shape.shapes)


def _frames(presentation):
  for slide in presentation.slides:
    yield from _text_frames(slide.shapes)
    if slide.has_notes_slide:
      yield from _text_frames(slide.notes_slide.shapes)


def _segments(p) -> list:
  """The paragraph's runs grouped: lists of Runs (style: the run's a:rPr, serialised) and
  the elements between them (a:br, a:fld), kept."""
  from lxml import etree
  out: list = []
  for child in p:
    tag = child.tag.rsplit("}", 1)[-1]
    if tag == "r":
      properties = child.find(f"{{{A}}}rPr")
      text = "".join(t.text or "" for t in child.iter(f"{{{A}}}t"))
      style = b"" if properties is None else etree.tostring(properties)
      if out and isinstance(out[-1], list):
        out[-1].append(Run(text, style))
      else:
        out.append([Run(text, style)])
    elif tag in ("br", "fld"):
      out.append(child)
  return out


def _rebuild(p, segments: list) -> None:
  """The paragraph's runs and breaks made anew, before its end properties."""
  from lxml import etree
  for child in list(p):
    if child.tag.rsplit("}", 1)[-1] in ("r", "br", "fld"):
      p.remove(child)
  end = p.find(f"{{{A}}}endParaRPr")
  for segment in segments:
    made = [segment] if not isinstance(segment, list) else []
    for run in segment if isinstance(segment, list) else ():
      if not run.text:
        continue
      r = etree.Element(f"{{{A}}}r")
      if run.style:
        r.append(etree.fromstring(run.style))
      etree.SubElement(r, f"{{{A}}}t").text = run.text
      made.append(r)
    for element in made:
      if end is not None:
        end.addprevious(element)
      else:
        p.append(element)


def translate_pptx(data: bytes, translate: BlockTranslator, fmt: str) -> bytes:
  """A .pptx file's bytes with its prose translated (module docstring)."""
  import pptx
  try:
    presentation = pptx.Presentation(io.BytesIO(data))
  except Exception as e:  # noqa: BLE001 - python-pptx's reading fails in many ways on a
    # file that is not a presentation
    raise unreadable(fmt, e) from None
  jobs = []
  for frame in _frames(presentation):
    for paragraph in frame.paragraphs:
      segments = _segments(paragraph._p)
      texts = [k for k, s in enumerate(segments)
               if isinstance(s, list) and any(r.text.strip() for r in s)]
      if texts:
        jobs.append((paragraph._p, segments, texts))
  found = iter(translate([copy.copy(segments[k]) for _, segments, texts in jobs
                          for k in texts], "translating paragraphs"))
  for p, segments, texts in jobs:
    for k in texts:
      segments[k] = next(found)
    _rebuild(p, segments)
  out = io.BytesIO()
  presentation.save(out)
  return out.getvalue()
