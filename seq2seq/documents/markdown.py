"""Markdown: the text of paragraphs, headings, list items, quotes and table cells
translated; code blocks, front matter, HTML blocks, inline code, link targets and images
kept as written. Parsed with markdown-it-py (CommonMark and tables); each block's lines
are replaced in the source, so everything else stays byte for byte. A paragraph
hard-wrapped over several lines comes back as one line (the same Markdown)."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from seq2seq.documents.blocks import BlockTranslator, render
from seq2seq.documents.inline import Run

_PAIRS = {"em_open": "em", "strong_open": "strong", "s_open": "s"}
_SPECIAL = re.compile(r"([\\`*_\[\]<])")


def _runs(children) -> list[Run]:
  """The inline tokens of one block as runs whose styles are tuples of nested markup."""
  runs, path, number = [], [], 0
  for c in children:
    if c.type == "text":
      runs.append(Run(c.content, tuple(path)))
    elif c.type in ("softbreak", "hardbreak"):
      runs.append(Run(" ", tuple(path)))
    elif c.type in _PAIRS:
      path.append(("mark", c.markup))
    elif c.type == "link_open":
      number += 1
      path.append(("link", number, c.attrs.get("href", ""), c.attrs.get("title") or ""))
    elif c.type.endswith("_close"):
      if path:
        path.pop()
    elif c.type == "code_inline":
      number += 1
      runs.append(Run(c.content, tuple(path) + (("code", number, c.markup),)))
    else:  # an image, inline HTML, anything else: kept as written
      number += 1
      raw = c.content if c.type != "image" else _image(c)
      runs.append(Run(raw, tuple(path) + (("raw", number),)))
  return [r for r in runs if r.text]


def _image(c) -> str:
  title = c.attrs.get("title")
  return f"![{c.content}]({c.attrs.get('src', '')}" + (f' "{title}"' if title else "") + ")"


def _verbatim(style) -> bool:
  return any(part[0] in ("code", "raw") for part in style or ())


def _open(style) -> str:
  if style[0] == "mark":
    return style[1]
  if style[0] == "code":
    return style[2]
  return "[" if style[0] == "link" else ""


def _close(style) -> str:
  if style[0] == "link":
    return f"]({style[2]}" + (f' "{style[3]}"' if style[3] else "") + ")"
  return _open(style) if style[0] != "raw" else ""


def _written(run: Run) -> str:
  return run.text if _verbatim(run.style) else _SPECIAL.sub(r"\\\1", run.text)


def translate_markdown(text: str, translate: BlockTranslator) -> str:
  """`text` (Markdown) with its prose translated (module docstring)."""
  translate.verbatim = _verbatim
  md = MarkdownIt("commonmark").enable("table")
  lines = text.splitlines(keepends=True)
  inlines = [t for t in md.parse(text) if t.type == "inline" and t.map and t.children]
  found = translate([_runs(t.children) for t in inlines])
  new = {}  # first line -> (last line, its text)
  cells: dict[int, list] = {}
  for token, runs in zip(inlines, found):
    written = render(runs, _open, _close, _written)
    first, last = token.map
    if last - first == 1 and len(lines[first].split("|")) > 2 and "\n" not in token.content:
      cells.setdefault(first, []).append((token.content, written))  # a table cell
      continue
    head = token.content.split("\n", 1)[0]
    at = lines[first].find(head)
    prefix = lines[first][:at] if at >= 0 else ""
    ending = lines[last - 1][len(lines[last - 1].rstrip("\r\n")):]
    new[first] = (last, prefix + written + ending)
  for row, pairs in cells.items():
    line, at = lines[row], 0
    for source, written in pairs:
      found_at = line.find(source, at)
      if found_at < 0:
        continue
      line = line[:found_at] + written + line[found_at + len(source):]
      at = found_at + len(written)
    new[row] = (row + 1, line)
  out, i = [], 0
  while i < len(lines):
    if i in new:
      last, written = new[i]
      out.append(written)
      i = last
    else:
      out.append(lines[i])
      i += 1
  return "".join(out)
