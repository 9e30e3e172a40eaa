"""Formatted text translated whole: a block (a paragraph, a heading, a table cell) is runs
of text with a style each (bold, a link, inline code, ...); its plain text is translated
as one text, cut into sentences as any text is, and each style carried over to the words
of the translation that the model's cross-attention aligns with the styled words.

    runs = [Run("A ", None), Run("young", "b"), Run(" man is riding.", None)]
    translate_blocks(engine, [runs])   # [[Run("Ein ", None), Run("junger", "b"), ...]]

So the translation's text is the translation of the untagged text, and a style stays on
the words it wrapped (where the alignment finds them). A verbatim style (inline code)
keeps its source text: the run's words are aligned as any others, and the aligned span
of the translation is replaced by the source run's text. Engines without the model's
attention (CTranslate2) place a style by relative position in the sentence instead.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Hashable, Sequence

import numpy as np

from seq2seq.decoding.engine import Alignment, Engine
from seq2seq.decoding.engine_io import SearchSettings


@dataclasses.dataclass(frozen=True)
class Run:
  """Text with one style (None: plain). A style is any hashable its format knows."""

  text: str
  style: Hashable = None


def merged(runs: Sequence[Run]) -> list[Run]:
  """Neighbouring runs of one style as one run; empty runs left out."""
  out: list[Run] = []
  for run in runs:
    if not run.text:
      continue
    if out and out[-1].style == run.style:
      out[-1] = Run(out[-1].text + run.text, run.style)
    else:
      out.append(run)
  return out


# URLs and e-mail addresses in running text: kept as written, never translated.
_URL = re.compile(r"(?:https?://|ftp://|www\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]]"
                  r"|[\w.+-]+@[\w-]+\.[\w.-]*\w")


@dataclasses.dataclass(frozen=True)
class Verbatim:
  """The style of text kept as written (a URL in running text), wrapped around the style
  of the run it was found in."""

  inner: Hashable
  number: int


def protect_urls(runs: Sequence[Run]) -> list[Run]:
  """`runs` with each URL or e-mail address in a run of its own, styled `Verbatim`."""
  out, number = [], 0
  for run in runs:
    start = 0
    for m in _URL.finditer(run.text):
      out += [Run(run.text[start:m.start()], run.style),
              Run(m.group(), Verbatim(run.style, number))]
      number, start = number + 1, m.end()
    out.append(Run(run.text[start:], run.style))
  return [run for run in out if run.text]


def unprotected(runs: Sequence[Run]) -> list[Run]:
  """`runs` with `Verbatim` URL runs back in their own style."""
  return merged([Run(r.text, r.style.inner if isinstance(r.style, Verbatim) else r.style)
                 for r in runs])


def _char_styles(runs: Sequence[Run]) -> list[Hashable]:
  return [run.style for run in runs for _ in run.text]


def _styled_translation(found: Alignment, source: str, styles: list[Hashable], target: str,
                        verbatim: Callable[[Hashable], bool], base: Hashable) -> list[Run]:
  """`target` (a translation of the sentence `source`, aligned to it by `found`) as runs.

  Each target word takes the style of the source piece its pieces attend to most (the
  block's `base` style counts as none); a style no word took goes to the unstyled word
  that attends to it most; a style's words are made one span (`_one_span`: unstyled
  words between two of its words take it too; where another style's words cut its words
  in groups, the group that attends to it most keeps it). A verbatim style's span is
  replaced by the source text it had (or, where no word took it, that text is put after
  the word that attends to it most), so that it appears once, as written."""
  if not target:
    return []
  src_spans, tgt_spans = found.source_spans, found.target_spans
  n = len(tgt_spans)
  if found.weights is None:  # by relative position
    weights = np.zeros((n, len(src_spans)))
    for k in range(n):
      weights[k, min(len(src_spans) - 1, int(k * len(src_spans) / max(n, 1)))] = 1.0
  else:  # without the EOS row and column
    weights = found.weights[:n, :len(src_spans)]
  piece_style = [next((styles[c] for c in range(start, min(end, len(styles)))
                       if not source[c].isspace()), None) for start, end in src_spans]
  piece_style = [None if s == base else s for s in piece_style]
  words = _words(target)
  piece_word = [next((w for w, (ws, we) in enumerate(words) if ws < end and start < we), None)
                for start, end in tgt_spans]
  word_style: list[Hashable] = [None] * len(words)
  for k, w in enumerate(piece_word):
    j = int(weights[k].argmax()) if weights.shape[1] else None
    if w is not None and j is not None and word_style[w] is None:
      word_style[w] = piece_style[j]

  def mass(style) -> np.ndarray:
    """How much each target word attends to the source pieces of `style`."""
    per_word = np.zeros(len(words))
    columns = [j for j, s in enumerate(piece_style) if s == style]
    for k, w in enumerate(piece_word):
      if w is not None and columns:
        per_word[w] += weights[k, columns].sum()
    return per_word

  order = list(dict.fromkeys(s for s in piece_style if s is not None))
  for style in order:
    if verbatim(style) or style in word_style:
      continue
    free = [w for w in range(len(words)) if word_style[w] is None]
    if free:
      attention = mass(style)
      word_style[max(free, key=lambda w: attention[w])] = style
  for style in order:
    where = [i for i, s in enumerate(word_style) if s == style]
    if verbatim(style) and where:  # the run of its words around the one attending most
      attention = mass(style)
      best = max(where, key=lambda w: attention[w])
      first = last = best
      while first - 1 in where:
        first -= 1
      while last + 1 in where:
        last += 1
      for i in where:
        if not first <= i <= last:
          word_style[i] = None
      continue
    _one_span(word_style, style, mass(style))
  # items: [start, end, text, style, space before an inserted one]
  items = [[start, end, target[start:end], style, False]
           for (start, end), style in zip(words, word_style)]
  kept_text: dict = {}
  for ch, style in zip(source, styles):
    if style is not None and style != base and verbatim(style):
      kept_text[style] = kept_text.get(style, "") + ch
  for style in order:
    if not verbatim(style):
      continue
    where = [i for i, item in enumerate(items) if item[3] == style]
    if where:
      first, last = where[0], where[-1]
      items[first:last + 1] = [[items[first][0], items[last][1], kept_text[style], style, False]]
    else:
      attention = mass(style)
      after = int(attention.argmax()) if len(attention) and attention.any() else len(words) - 1
      after = min(after, len(items) - 1)
      at = items[after][1] if items else 0
      items.insert(after + 1, [at, at, kept_text[style], style, True])
  runs, position, previous = [], 0, None
  for start, end, text, style, inserted in items:
    gap = " " if inserted else target[position:start]
    runs.append(Run(gap, _between(previous, style) if runs else None))
    runs.append(Run(text, style))
    position, previous = max(position, end), style
  runs.append(Run(target[position:], None))
  return merged(runs)


def _one_span(word_style: list[Hashable], style: Hashable, attention: np.ndarray) -> None:
  """Leaves `style` on one span of words: of its words, the group that no other style's
  word cuts and that attends to it most, with the unstyled words inside the group; its
  other words lose it. (Interleaved with another style's words, a style would otherwise
  open and close again: two tags where the source had one.)"""
  where = [i for i, s in enumerate(word_style) if s == style]
  if not where:
    return
  groups = [[where[0]]]
  for i in where[1:]:
    cut = any(word_style[j] is not None for j in range(groups[-1][-1] + 1, i))
    if cut:
      groups.append([i])
    else:
      groups[-1].append(i)
  best = max(groups, key=lambda group: attention[group].sum())
  for i in where:
    word_style[i] = None
  for i in range(best[0], best[-1] + 1):
    word_style[i] = style


def _base(styles: Sequence[Hashable]) -> Hashable:
  """The style of a block's text outside its marked words: None where some text has no
  style; for nested styles (tuples) the styles every character is within; else the
  commonest."""
  if None in styles:
    return None
  if all(isinstance(s, tuple) for s in styles):
    common = styles[0]
    for s in styles[1:]:
      common = _between(common, s)
    return common
  return max(set(styles), key=styles.count)


def _between(left: Hashable, right: Hashable) -> Hashable:
  """The style of white space between runs of these styles: theirs if they share it; for
  nested styles (tuples, outermost first) the styles both are within; else None."""
  if left == right:
    return left
  if isinstance(left, tuple) and isinstance(right, tuple):
    shared = 0
    while shared < min(len(left), len(right)) and left[shared] == right[shared]:
      shared += 1
    return left[:shared]
  return None


def translate_blocks(engine: Engine, blocks: Sequence[Sequence[Run]],
                     verbatim: Callable[[Hashable], bool] = lambda style: False,
                     split_sentences: bool = True, settings: SearchSettings | None = None,
                     **changes) -> list[list[Run]]:
  """Each block's runs translated: its plain text cut into sentences and searched with
  every other block's in one call (`settings`, default the engine's, with `changes`), its
  styles carried over (see the module docstring) by one batched alignment of all its
  styled sentences, URLs and e-mail addresses kept as written. A block whose runs all
  have one style is translated as plain text with it."""
  keep = lambda style: isinstance(style, Verbatim) or verbatim(style)  # noqa: E731
  cut = [_kept_edges(protect_urls(b), keep) for b in blocks]
  found = _translate_blocks(engine, [middle for _, middle, _ in cut], keep,
                            split_sentences, engine.settings(settings, **changes))
  return [unprotected(merged([*head, *runs, *tail])) for (head, _, tail), runs in zip(cut, found)]


def _kept_edges(runs: list[Run], keep: Callable[[Hashable], bool]
                ) -> tuple[list[Run], list[Run], list[Run]]:
  """(leading, middle, trailing) runs: the leading and trailing runs that are kept as
  written (and the white space between them) stay out of the text the model sees."""
  edge = lambda run: keep(run.style) or not run.text.strip()  # noqa: E731
  start, end = 0, len(runs)
  while start < end and edge(runs[start]):
    start += 1
  while end > start and edge(runs[end - 1]):
    end -= 1
  return runs[:start], runs[start:end], runs[end:]


def _translate_blocks(engine: Engine, blocks: Sequence[Sequence[Run]],
                      verbatim: Callable[[Hashable], bool], split_sentences: bool,
                      settings: SearchSettings | None) -> list[list[Run]]:
  plains = ["".join(run.text for run in block) for block in blocks]
  plan = engine.plan(plains, split_sentences)
  hyps = engine.translate(plan.sentences, engine.settings(settings, nbest=1),
                          split_sentences=False)
  styles_of = [_char_styles(block) for block in blocks]
  styled, k = [], 0  # (block, its sentences' first index) of the blocks with styles
  for b, (styles, segmented) in enumerate(zip(styles_of, plan.texts)):
    if not (len(set(styles)) <= 1 and not (styles and verbatim(styles[0]))):
      styled.append((b, k))
    k += len(segmented.units)
  pairs = [(plan.texts[b].units[u], hyps[k + u][0])
           for b, k in styled for u in range(len(plan.texts[b].units))]
  aligned = iter(engine.align([unit for unit, _ in pairs], [h.ids for _, h in pairs])
                 if pairs else [])
  out, k, first = [], 0, dict(styled)
  for b, (styles, segmented) in enumerate(zip(styles_of, plan.texts)):
    mine, k = hyps[k:k + len(segmented.units)], k + len(segmented.units)
    if b not in first:
      style = styles[0] if styles else None
      out.append(merged([Run(segmented.join([h[0].text for h in mine]) if mine else "",
                             style)]))
      continue
    runs = [Run(segmented.spaces[0], styles[0] if segmented.spaces[0] else None)]
    position = len(segmented.spaces[0])
    base = _base(styles)
    for unit, space, found in zip(segmented.units, segmented.spaces[1:], mine):
      runs += _styled_translation(next(aligned), unit, styles[position:position + len(unit)],
                                  found[0].text, verbatim, base)
      position += len(unit)
      runs.append(Run(space, styles[position] if space and position < len(styles) else None))
      position += len(space)
    runs = [Run(r.text, base) if r.style is None else r for r in runs]  # unmarked words
    out.append(merged(runs))
  return out


def _words(text: str) -> list[tuple[int, int]]:
  """(start, end) of each maximal run of non-space characters."""
  spans, start = [], None
  for i, ch in enumerate(text + " "):
    if ch.isspace():
      if start is not None:
        spans.append((start, i))
        start = None
    elif start is None:
      start = i
  return spans


