"""Configs: round trip through a run directory, overrides, unknown fields, presets."""

import json
from importlib import util

import pytest

from seq2seq import checkpoint
from seq2seq.config import PRESETS, Config, DataConfig, default_config

from conftest import run_cli
from helpers import ROOT


def test_round_trip_through_the_run_directory(tmp_path):
  cfg = default_config("tiny")
  cfg.train.max_steps = 7
  cfg.data.bucket_boundaries = (16, 32)
  typed = Config.from_dict(cfg)
  checkpoint.save_config(tmp_path, typed)
  loaded = checkpoint.load_config(tmp_path)
  assert loaded == typed
  assert loaded.train.max_steps == 7 and loaded.data.bucket_boundaries == (16, 32)
  assert loaded.model == PRESETS["tiny"]


def test_unknown_fields_and_sections_are_named():
  with pytest.raises(ValueError, match=r"unknown config field\(s\) train.max_step;"):
    Config.from_dict({"train": {"max_step": 3}})
  with pytest.raises(ValueError, match="unknown config section"):
    Config.from_dict({"trainer": {}})
  cfg = default_config("tiny")
  with pytest.raises(AttributeError):
    cfg.train.max_stepz = 3  # the ConfigDict is locked: a typo is an error, not a new field
  with pytest.raises(ValueError, match="unknown model preset 'huge'"):
    default_config("huge")
  with pytest.raises(ValueError, match="norm must be 'layer' or 'scale', got 'rms'"):
    Config.from_dict({"model": {"norm": "rms"}})
  with pytest.raises(ValueError, match=r"model.qk_norm must be 0 \(off\) or the positive"):
    Config.from_dict({"model": {"qk_norm": -1.0}})


def test_subword_sampling_and_bidirectional_settings_are_checked():
  with pytest.raises(ValueError, match=r"data.sampling_alpha=-0.1: expected 0 \(off\)"):
    DataConfig(sampling_alpha=-0.1)
  with pytest.raises(ValueError, match=r"in \(0, 1\) for a BPE model"):
    DataConfig(spm_model_type="bpe", sampling_alpha=1.0)
  with pytest.raises(ValueError, match="data.sampling_nbest=0"):
    DataConfig(sampling_alpha=0.1, sampling_nbest=0)
  with pytest.raises(ValueError, match=r"data.bidirectional_epochs=-1: expected 0"):
    DataConfig(bidirectional_epochs=-1)
  assert DataConfig(spm_model_type="bpe", sampling_alpha=0.1).sampling_alpha == 0.1
  with pytest.raises(ValueError, match=r"data.sampling_sides='target': expected 'both' or"):
    DataConfig(sampling_alpha=0.1, sampling_sides="target")


def test_run_directories_from_before_one_vocabulary_field_still_load(tmp_path):
  old = Config().to_dict()
  old["data"]["spm_vocab_size"] = old["model"]["vocab_size"]
  (tmp_path / "config.json").write_text(json.dumps(old))
  assert checkpoint.load_config(tmp_path) == Config()


def test_command_line_override_and_typo(tmp_path):
  proc = run_cli("train.py", "--config", "configs/tiny.py", "--workdir", tmp_path / "x",
                 "--config.train.max_stepz=3", check=False)
  err = proc.stderr.decode().strip().splitlines()
  assert proc.returncode == 2 and len(err) == 1, proc.stderr
  assert "unknown config field max_stepz" in err[0] and '"max_steps"' in err[0]
  proc = run_cli("train.py", "--config", "configs/tiny.py", "--workdir", tmp_path / "x",
                 "--config.train.max_steps=abc", check=False)
  assert proc.returncode == 2 and b"max_steps=abc" in proc.stderr
  assert not (tmp_path / "x").exists()  # nothing was started


@pytest.mark.parametrize("name", ["tiny", "multi30k", "wmt14_base"])
def test_shipped_configs_parse(name):
  spec = util.spec_from_file_location(name, ROOT / "configs" / f"{name}.py")
  module = util.module_from_spec(spec)
  spec.loader.exec_module(module)
  cfg = Config.from_dict(module.get_config())
  assert cfg.model.d_model % cfg.model.num_heads == 0
