"""HTML: the text of every element translated a block at a time, inline markup (links,
bold, italics, spans, inline code) carried onto the words it wrapped; tags, attributes,
comments, script, style, pre, code blocks and anything marked `translate="no"` or
`class="notranslate"` kept. Parsed and written with BeautifulSoup (html.parser)."""

from __future__ import annotations

import itertools
import re

from bs4 import BeautifulSoup, NavigableString, Tag

from seq2seq.documents.blocks import BlockTranslator
from seq2seq.documents.inline import Run

# Elements that flow within a sentence; any other element ends the text before it.
INLINE = frozenset("a abbr b bdi bdo cite code data del dfn em font i ins kbd mark q s samp "
                   "small span strong sub sup time u var".split())
# Elements whose content is never translated.
SKIP = frozenset("script style pre code textarea noscript svg math template".split())
VERBATIM = frozenset("code kbd samp var".split())  # inline, kept as written
_SPACE = re.compile(r"\s+")


def _kept(tag: Tag) -> bool:
  return (tag.name in SKIP or tag.get("translate") == "no"
          or "notranslate" in (tag.get("class") or []))


def _is_text(node) -> bool:
  return type(node) is NavigableString  # not a comment, doctype or CDATA (subclasses)


def _sequences(container: Tag):
  """Runs of consecutive inline children of `container` (text and inline elements),
  and every block child's own, depth first."""
  current = []
  for child in list(container.children):
    if _is_text(child) or (isinstance(child, Tag) and child.name in INLINE
                           and not (_kept(child) and child.name not in VERBATIM)):
      current.append(child)
      continue
    if current:
      yield current
      current = []
    if isinstance(child, Tag) and not _kept(child):
      yield from _sequences(child)
  if current:
    yield current


def _runs(nodes, path: tuple, numbers) -> list[Run]:
  runs = []
  for node in nodes:
    if _is_text(node):
      runs.append(Run(_SPACE.sub(" ", str(node)), path))
    elif isinstance(node, Tag) and node.name in INLINE:
      inner = path + ((next(numbers), node),)
      if node.name in VERBATIM or _kept(node):
        runs.append(Run(node.get_text(), inner))
      else:
        runs += _runs(node.children, inner, numbers)
  return [r for r in runs if r.text]


def _verbatim(style) -> bool:
  return any(tag.name in VERBATIM or _kept(tag) for _, tag in style or ())


def _replace(soup: BeautifulSoup, nodes: list, runs: list[Run]) -> None:
  """Puts `runs` where `nodes` were: each style element copied (name and attributes)."""
  anchor = nodes[0]
  made = []
  stack: list[tuple] = []  # (number, new tag)
  for run in runs:
    path = run.style or ()
    shared = 0
    while shared < min(len(path), len(stack)) and path[shared][0] == stack[shared][0]:
      shared += 1
    del stack[shared:]
    for number, original in path[shared:]:
      tag = soup.new_tag(original.name, attrs=dict(original.attrs))
      (stack[-1][1].append(tag) if stack else made.append(tag))
      stack.append((number, tag))
    text = NavigableString(run.text)
    (stack[-1][1].append(text) if stack else made.append(text))
  for node in made:
    anchor.insert_before(node)
  for node in nodes:
    node.extract()


def translate_html(text: str, translate: BlockTranslator, parser: str = "html.parser") -> str:
  """`text` (an HTML document or fragment) with its prose translated (module docstring).
  `parser`: BeautifulSoup's; "xml" for XHTML, whose names and case stay as written."""
  translate.verbatim = _verbatim
  soup = BeautifulSoup(text, parser)
  numbers = itertools.count()
  sequences = [(nodes, _runs(nodes, (), numbers)) for nodes in _sequences(soup)]
  sequences = [(nodes, runs) for nodes, runs in sequences
               if any(r.text.strip() and not _verbatim(r.style) for r in runs)]
  found = translate([runs for _, runs in sequences])
  for (nodes, _), runs in zip(sequences, found):
    _replace(soup, nodes, runs)
  return str(soup)
