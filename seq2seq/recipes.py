"""Named recipes and the data they read, in a checkout and in an installed wheel.

`--config tiny` and `--config multi30k` name a file of the top-level `configs/` folder,
which the wheel ships as `seq2seq/configs/` (pyproject.toml maps it there, and
`data/sample/` to `seq2seq/sample_data/`). Any other value is the path of a user's own
config file. Both forms take ml_collections' `:ARG`, passed to `get_config(ARG)`.
"""

from __future__ import annotations

import os
from pathlib import Path

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


def config_file(value: str) -> str:
  """The config file that `--config VALUE` means: a preset name or a path, with any `:ARG`."""
  path, sep, arg = value.partition(":")
  if not Path(path).exists() and path in names():
    return str(configs_dir() / f"{path}.py") + sep + arg
  if not Path(path).is_file():
    raise ValueError(f"--config {value!r}: no such config file, and not a preset name "
                     f"(presets: {', '.join(names())})")
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
