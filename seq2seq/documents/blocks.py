"""What every format hands over: blocks of styled runs, translated in chunks with a
progress display, and the runs written back with the format's own markup.

    translate = BlockTranslator(engine, settings, verbatim=...)
    new_blocks = translate(blocks)           # a list of lists of `Run`
    text = render(runs, open_style, close_style)
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

from seq2seq.decoding.engine import Engine
from seq2seq.decoding.engine_io import SearchSettings
from seq2seq.documents.inline import Run, translate_blocks
from seq2seq.runtime import Progress

CHUNK = 64  # blocks per translate() call: a progress update each, sentences batched across


class BlockTranslator:
  """Translates blocks of runs with one engine and one search settings value."""

  def __init__(self, engine: Engine, settings: SearchSettings | None = None,
               verbatim: Callable[[Hashable], bool] = lambda style: False,
               split_sentences: bool = True, progress: bool = True):
    self.engine, self.settings, self.verbatim = engine, settings, verbatim
    self.split_sentences, self.progress = split_sentences, progress

  def __call__(self, blocks: Sequence[Sequence[Run]], what: str = "translating") -> list[list[Run]]:
    out: list[list[Run]] = []
    progress = Progress(what, total=len(blocks), unit="blocks") if self.progress else None
    for start in range(0, len(blocks), CHUNK):
      chunk = blocks[start:start + CHUNK]
      out += translate_blocks(self.engine, chunk, self.verbatim, self.split_sentences,
                              self.settings)
      if progress is not None:
        progress.update(len(chunk))
    if progress is not None:
      progress.close()
    return out

  def texts(self, texts: Sequence[str], what: str = "translating") -> list[str]:
    """Plain texts translated (each one block of one plain run)."""
    return ["".join(r.text for r in runs)
            for runs in self([[Run(t)] for t in texts], what)]


def render(runs: Sequence[Run], open_style: Callable[[Hashable], str],
           close_style: Callable[[Hashable], str],
           escape: Callable[[Run], str] = lambda run: run.text) -> str:
  """Runs written with markup: a run's style is a tuple of nested styles (outermost
  first); between two runs the styles they do not share are closed and opened."""
  out: list[str] = []
  current: tuple = ()
  for run in runs:
    path = run.style if isinstance(run.style, tuple) else (() if run.style is None
                                                            else (run.style,))
    shared = 0
    while shared < min(len(path), len(current)) and path[shared] == current[shared]:
      shared += 1
    out += [close_style(s) for s in reversed(current[shared:])]
    out += [open_style(s) for s in path[shared:]]
    out.append(escape(run))
    current = path
  out += [close_style(s) for s in reversed(current)]
  return "".join(out)
