"""The models one server serves, and which of them (or which two, through a pivot
language) translates each pair of languages.

A server may hold several runs or exports (`seq2seq-serve --workdir A --workdir B`, or
`--models DIR`), each an `Engine` with its own directions (a model of several is served
as one model per direction, `served_models`). Each direction is served by
the first model given that has it; a later model with the same direction is not used
for it, and a warning says so at start. A pair no model has is served through a pivot
language (English, as LibreTranslate and Argos pivot): source → pivot by one model,
pivot → target by another, when both directions are served. `Models.route` answers
which, or the LibreTranslate 400 naming the pair and the languages served.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Sequence

from seq2seq.decoding.engine import Engine
from seq2seq.serving.http_api import RequestError

log = logging.getLogger("seq2seq.serve")

PIVOT = "en"


@dataclasses.dataclass(eq=False)
class ServedModel:
  """One model of the server: its name (its folder's), its engine, and the batcher that
  decodes its requests (`http_server.Server` starts it)."""

  name: str
  engine: Engine
  batcher: Any = None
  direction: tuple[str, str] | None = None  # the one direction of a model of several

  @property
  def directions(self) -> tuple[tuple[str, str], ...]:
    return (self.direction,) if self.direction else tuple(self.engine.directions)


def served_models(engines: Sequence[tuple[str, Engine]]) -> list[ServedModel]:
  """A `ServedModel` per engine, and per direction of an engine of several (`NAME:en-fr`,
  each a view of the one model with a batcher of its own): each request's texts then go
  to the batcher of their direction, and the model's weights are held once."""
  served = []
  for name, engine in engines:
    if len(engine.directions) == 1:
      served.append(ServedModel(name, engine))
    else:
      served += [ServedModel(f"{name}:{s}-{t}", engine.for_direction(s, t), direction=(s, t))
                 for s, t in engine.directions]
  return served


@dataclasses.dataclass(frozen=True)
class Hop:
  """One translation of a route: `model` translates `source` into `target`."""

  model: ServedModel
  source: str
  target: str


class Models:
  """The server's models and the routes between their languages (module docstring)."""

  def __init__(self, models: Sequence[ServedModel], pivot: str = PIVOT):
    if not models:
      raise ValueError("no model to serve")
    names = [m.name for m in models]
    if len(set(names)) != len(names):
      raise ValueError(f"two models have one name: {names}; give folders of other names")
    self.models, self.pivot = list(models), pivot
    self.direct: dict[tuple[str, str], ServedModel] = {}
    for model in self.models:
      for direction in model.directions:
        if direction in self.direct:
          log.warning("%s→%s: served by %s, given first; %s has it too and is not used for "
                      "it", *direction, self.direct[direction].name, model.name)
          continue
        self.direct[direction] = model

  @property
  def first(self) -> ServedModel:
    return self.models[0]

  def by_name(self, name: str) -> ServedModel:
    for model in self.models:
      if model.name == name:
        return model
    raise KeyError(name)

  def sources(self) -> list[str]:
    """The languages some route translates from, in the order the models give them."""
    return list(dict.fromkeys(s for s, _ in self.direct))

  def languages(self) -> list[str]:
    return list(dict.fromkeys(code for pair in self.direct for code in pair))

  def targets(self, source: str) -> tuple[list[str], list[str]]:
    """(the targets a model has for `source`, those reached through the pivot)."""
    direct = [t for s, t in self.direct if s == source]
    pivoted = []
    if (source, self.pivot) in self.direct:
      pivoted = [t for s, t in self.direct if s == self.pivot and t != source
                 and t not in direct and t not in pivoted]
    return direct, pivoted

  def route(self, source: str, target: str) -> list[Hop]:
    """The hops that translate `source` into `target`: one model's, or two through the
    pivot; LibreTranslate's 400 naming the pair and the languages served where none."""
    if (source, target) in self.direct:
      return [Hop(self.direct[source, target], source, target)]
    first, second = (source, self.pivot), (self.pivot, target)
    if source != target and first in self.direct and second in self.direct:
      return [Hop(self.direct[first], *first), Hop(self.direct[second], *second)]
    pairs = ", ".join(f"{s}→{t}" for s, t in self.direct)
    for code, known in ((source, self.sources()), (target, self.languages())):
      if code not in known:  # LibreTranslate's words for a language it does not have
        raise RequestError(400, f"{code} is not supported (served: {pairs})")
    raise RequestError(400, f"{target} is not available as a target language from {source} "
                            f"(nor through {self.pivot}); served: {pairs}")

  def describe(self) -> list[dict[str, Any]]:
    """/health's list: each model's name, directions, state, engine, the batches its
    batcher decodes at once (`decoders`) and, for CTranslate2, its threads."""
    out = []
    for m in self.models:
      about = m.engine.describe()
      out.append({"name": m.name, "directions": [f"{s}-{t}" for s, t in m.directions],
                  "serves": [f"{s}-{t}" for (s, t), owner in self.direct.items() if owner is m],
                  "state": "ready" if m.batcher is not None else "loading",
                  "engine": about["engine"],
                  **({"decoders": m.batcher.workers} if m.batcher is not None else {}),
                  **({"threads": about["threads"]} if "threads" in about else {})})
    return out


def model_folders(folder: str | Path) -> list[Path]:
  """The runs (a config.json beside checkpoints/) and CTranslate2 exports (a model.bin)
  directly inside `folder`, by name, as LibreTranslate reads its packages folder."""
  folder = Path(folder)
  if not folder.is_dir():
    raise ValueError(f"--models {folder}: no such folder")
  found = sorted(p for p in folder.iterdir()
                 if p.is_dir() and (((p / "config.json").is_file() and (p / "checkpoints").is_dir())
                                    or (p / "model.bin").is_file()))
  if not found:
    raise ValueError(f"--models {folder}: holds no run (config.json and checkpoints/) and no "
                     "CTranslate2 export (model.bin)")
  return found


def engine_kind(folder: str | Path) -> str:
  """"ctranslate2" for an export (model.bin), else "jax"."""
  return "ctranslate2" if (Path(folder) / "model.bin").is_file() else "jax"
