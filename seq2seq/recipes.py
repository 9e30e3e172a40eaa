"""Named recipes and the data they read, in a checkout and in an installed wheel.

`--config tiny` and `--config multi30k` name a file of the top-level `configs/` folder,
which the wheel ships as `seq2seq/configs/` (pyproject.toml maps it there, and
`data/sample/` to `seq2seq/sample_data/`); a model preset of `config.PRESETS` that no
file is named after (`--config small`) is that model with the default data and training.
`presets()` is the one list of the names `--config` takes, each with what it is
(`seq2seq-train --list-presets`). Any other value is the path of a user's own config
file. Both forms take ml_collections' `:ARG`, passed to `get_config(ARG)`.
`training_config` loads one with `SECTION.FIELD` overrides into a typed `Config`: for
train.py's `--config` and for `seq2seq.train`.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
import types
from pathlib import Path
from typing import Any

import ml_collections

from seq2seq.config import PRESETS, Config, default_config

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent  # the repository root when running from a checkout

MULTI30K_HUB = "bentrevett/multi30k"  # columns en, de; splits train, validation, test
MULTI30K_ENV = "SEQ2SEQ_MULTI30K"  # a local Multi30k folder ({split}.{lang}[.gz] files)


def _shipped(in_wheel: str, in_checkout: str) -> Path:
  path = _PACKAGE / in_wheel
  return path if path.is_dir() else _CHECKOUT / in_checkout


def configs_dir() -> Path:
  return _shipped("configs", "configs")


def sample_dir() -> Path:
  """The bundled sample corpus (train/val/test .en and .de files)."""
  return _shipped("sample_data", "data/sample")


def names() -> list[str]:
  return sorted(p.stem for p in configs_dir().glob("*.py") if not p.stem.startswith("_"))


def presets() -> dict[str, str]:
  """Every name `--config NAME` takes, with what it is: the recipes of configs/ (their
  docstring's first sentence), then the model presets no recipe is named after."""
  out = {}
  for name in names():
    doc = ast.get_docstring(ast.parse((configs_dir() / f"{name}.py").read_text())) or ""
    out[name] = " ".join(doc.split("\n\n")[0].split()).split(". ")[0].rstrip(".")
  for name, model in PRESETS.items():
    out.setdefault(name, f"the {name} model (d_model {model.d_model}, {model.num_heads} "
                         f"heads, d_ff {model.d_ff}, {model.encoder_layers} + "
                         f"{model.decoder_layers} layers) with the default data and "
                         "training: give --config.data.dir or --config.data.hub")
  return out


def config_file(value: str) -> str:
  """The config file that `--config VALUE` means: a recipe's name or a path, with any
  `:ARG` (a model preset's name has none: `load_config_module` makes its config)."""
  path, sep, arg = value.partition(":")
  if not Path(path).exists() and path in names():
    return str(configs_dir() / f"{path}.py") + sep + arg
  if not Path(path).is_file():
    raise ValueError(f"--config {value!r}: no such config file, and not a preset name "
                     f"(presets: {', '.join(presets())})")
  return value


def multi30k_dir(arg: str | None = None) -> Path | None:
  """A local Multi30k folder, or None when the recipe should read the Hub.

  In order: the config argument (`--config multi30k:FOLDER`), $SEQ2SEQ_MULTI30K, and
  `../shared/data/multi30k` beside a checkout of this repository.
  """
  for given in (arg, os.environ.get(MULTI30K_ENV)):
    if given:
      if not Path(given).is_dir():
        raise ValueError(f"Multi30k folder {given!r} does not exist")
      return Path(given)
  beside = _CHECKOUT.parent / "shared" / "data" / "multi30k"
  if (_CHECKOUT / "pyproject.toml").is_file() and beside.is_dir():
    return beside
  return None


# ------------------------------------------------- a config file, with overrides


def load_config_module(value: str):
  """The module of a preset or config file (`VALUE` or `VALUE:ARG`) and its `ARG`; a
  model preset's is made here (`get_config()`: `config.default_config(NAME)`)."""
  if value in PRESETS and value not in names() and not Path(value).exists():
    return types.SimpleNamespace(get_config=lambda: default_config(value)), ""
  path, _, arg = config_file(value).partition(":")  # checks that the file exists
  spec = importlib.util.spec_from_file_location("seq2seq_user_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module, arg


def _parse_value(text: str, current: Any, name: str) -> Any:
  """`text` as the type of the field's current value."""
  try:
    if isinstance(current, bool):
      if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError
      return text.lower() in ("true", "1", "yes")
    if isinstance(current, (tuple, list)):
      items = [x.strip() for x in text.strip("()[] ").split(",") if x.strip()]
      kind = type(current[0]) if current else int
      return tuple(kind(x) for x in items)
    if isinstance(current, int):
      return int(text)
    if isinstance(current, float):
      return float(text)
    return text
  except ValueError:
    kind = {bool: "true or false", int: "an integer", float: "a number", tuple: "numbers, "
            "comma-separated"}.get(type(current), type(current).__name__)
    raise ValueError(f"--config.{name}={text}: expected {kind}") from None


def apply_overrides(cfg: ml_collections.ConfigDict, overrides: list[tuple[str, str]]) -> None:
  """Sets each `(section.field, text)`; a command-line data.dir (or data.hub) replaces the
  source the config file set through the other."""
  known = [f"{s}.{k}" for s in cfg.keys() for k in cfg[s].keys()]
  for name, text in overrides:
    if name not in known:
      close = difflib.get_close_matches(name, known, n=1)
      hint = f'. Did you mean "{close[0]}"?' if close else ""
      raise ValueError(f"unknown config field {name}{hint}")
    section, field = name.split(".")
    cfg[section][field] = _parse_value(text, cfg[section][field], name)
  given = {name for name, _ in overrides}
  if "data.dir" in given and "data.hub" not in given:
    cfg.data.hub = ""
  elif "data.hub" in given and "data.dir" not in given:
    cfg.data.dir = ""


def training_config(value: str, overrides: list[tuple[str, str]],
                    workdir: str | None = None, complete: bool = True) -> Config:
  """The typed config of `--config VALUE` with the overrides applied. A config file that
  defines `complete(cfg, given, workdir)` (configs/auto.py) then chooses the fields that
  the overrides (`given`, "section.field" names) leave to it, unless `complete` is False."""
  module, arg = load_config_module(value)
  cfg = module.get_config(arg) if arg else module.get_config()
  cfg.lock()
  apply_overrides(cfg, overrides)
  if complete and hasattr(module, "complete"):
    module.complete(cfg, {name for name, _ in overrides}, Path(workdir or "."))
  return Config.from_dict(cfg)
