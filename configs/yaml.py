"""Loads a YAML config: `--config configs/yaml.py:my_run.yaml`.

The YAML file holds the sections to change (model, data, train, decode) and may name a
model preset with a top-level `preset:` key (default "small"); unknown fields are errors.
"""

import yaml

from seq2seq.config import default_config


def _update(cfg, values, where=""):
  for key, value in values.items():
    if key not in cfg:
      raise KeyError(f"unknown config field {where}{key}")
    if isinstance(value, dict):
      _update(cfg[key], value, f"{where}{key}.")
    else:
      cfg[key] = tuple(value) if isinstance(value, list) else value


def get_config(path):
  with open(path, encoding="utf-8") as f:
    values = yaml.safe_load(f) or {}
  cfg = default_config(values.pop("preset", "small"))
  with cfg.unlocked():
    pass
  _update(cfg, values)
  return cfg
