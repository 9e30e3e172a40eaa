"""Configs: round trip through a run directory, overrides, unknown fields, presets."""

import json
from importlib import util

import pytest

from seq2seq import recipes
from seq2seq.cli import parsing
from seq2seq.config import PRESETS, REMOVED_OPTIONS, Config, DataConfig, default_config
from seq2seq.rundir import run_files

from conftest import run_cli
from helpers import ROOT


def test_round_trip_through_the_run_directory(tmp_path):
  cfg = default_config("tiny")
  cfg.train.max_steps = 7
  cfg.data.bucket_boundaries = (16, 32)
  typed = Config.from_dict(cfg)
  run_files.save_config(tmp_path, typed)
  loaded = run_files.load_config(tmp_path)
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
  with pytest.raises(ValueError, match="train.optimizer must be 'adam' or 'adamw', got 'sgd'"):
    Config.from_dict({"train": {"optimizer": "sgd"}})


@pytest.mark.parametrize("section, field, value", [
    ("model", "qk_norm", 10.0), ("model", "glu", True), ("data", "bidirectional_epochs", 2),
    ("train", "cooldown", 0.2), ("train", "optimizer", "muon")])
def test_a_run_directory_with_a_removed_option_is_refused_by_name(tmp_path, section, field,
                                                                   value):
  old = Config().to_dict()
  (tmp_path / "config.json").write_text(json.dumps(old))
  assert run_files.load_config(tmp_path) == Config()
  # Written before the options went: every removed field, at its "off" value, still loads.
  for name, off in REMOVED_OPTIONS[section].items():
    old[section][name] = off
  (tmp_path / "config.json").write_text(json.dumps(old))
  assert run_files.load_config(tmp_path) == Config()
  old[section][field] = value
  (tmp_path / "config.json").write_text(json.dumps(old))
  with pytest.raises(ValueError, match=rf"{section}.{field}={value!r}.*removed"):
    run_files.load_config(tmp_path)


def test_subword_sampling_settings_are_checked():
  with pytest.raises(ValueError, match=r"data.sampling_alpha=-0.1: expected 0 \(off\)"):
    DataConfig(sampling_alpha=-0.1)
  with pytest.raises(ValueError, match=r"in \(0, 1\) for a BPE model"):
    DataConfig(spm_model_type="bpe", sampling_alpha=1.0)
  with pytest.raises(ValueError, match="data.sampling_nbest=0"):
    DataConfig(sampling_alpha=0.1, sampling_nbest=0)
  assert DataConfig(spm_model_type="bpe", sampling_alpha=0.1).sampling_alpha == 0.1


def test_run_directories_from_before_one_vocabulary_field_still_load(tmp_path):
  old = Config().to_dict()
  old["data"]["spm_vocab_size"] = old["model"]["vocab_size"]
  (tmp_path / "config.json").write_text(json.dumps(old))
  assert run_files.load_config(tmp_path) == Config()


def test_command_line_override_and_typo(tmp_path):
  proc = run_cli("train.py", "--config", "configs/tiny.py", "--workdir", tmp_path / "x",
                 "--config.train.max_stepz=3", check=False)
  err = proc.stderr.decode().strip().splitlines()
  assert proc.returncode == 2 and len(err) == 1, proc.stderr
  assert "unknown config field train.max_stepz" in err[0] and '"train.max_steps"' in err[0]
  proc = run_cli("train.py", "--config", "configs/tiny.py", "--workdir", tmp_path / "x",
                 "--config.train.max_steps=abc", check=False)
  assert proc.returncode == 2 and b"max_steps=abc" in proc.stderr
  proc = run_cli("train.py", "--config", "configs/tiny.py", "--workdir", tmp_path / "x",
                 "--config.train.max_steps=-5", check=False)
  err = proc.stderr.decode().strip().splitlines()
  assert proc.returncode == 2 and len(err) == 1
  assert "train.max_steps=-5: expected an integer >= 1" in err[0]
  assert not (tmp_path / "x").exists()  # nothing was started


@pytest.mark.parametrize("name", ["tiny", "multi30k", "wmt14_base"])
def test_shipped_configs_parse(name):
  spec = util.spec_from_file_location(name, ROOT / "configs" / f"{name}.py")
  module = util.module_from_spec(spec)
  spec.loader.exec_module(module)
  cfg = Config.from_dict(module.get_config())
  assert cfg.model.d_model % cfg.model.num_heads == 0


def test_command_line_overrides_take_each_fields_type():
  cfg = default_config("tiny")
  rest, overrides = parsing.split_overrides(
      ["--workdir", "w", "--config.train.max_steps=7", "--config.model.pre_norm", "false",
       "--config.data.bucket_boundaries=(16, 32)", "--config.train.learning_rate=2e-3",
       "--config.model.positional=rotary"])
  assert rest == ["--workdir", "w"]
  recipes.apply_overrides(cfg, overrides)
  typed = Config.from_dict(cfg)
  assert (typed.train.max_steps, typed.model.pre_norm, typed.data.bucket_boundaries,
          typed.train.learning_rate, typed.model.positional) == (7, False, (16, 32), 2e-3,
                                                                  "rotary")
  with pytest.raises(ValueError, match=r"--config.train.max_steps=many: expected an integer"):
    recipes.apply_overrides(cfg, [("train.max_steps", "many")])
  with pytest.raises(ValueError, match=r'unknown config field model.d_modl. Did you mean "model.d_model"'):
    recipes.apply_overrides(cfg, [("model.d_modl", "64")])
  with pytest.raises(ValueError, match="--config.train.seed needs a value"):
    parsing.split_overrides(["--config.train.seed"])


@pytest.mark.parametrize("section,field,value,message", [
    ("train", "max_steps", 0, "an integer >= 1"),
    ("train", "warmup_steps", -1, "an integer >= 0"),
    ("train", "learning_rate", -1e-3, "a number >= 0"),
    ("train", "learning_rate", float("nan"), "a number >= 0"),
    ("train", "label_smoothing", 1.0, "from 0 to 1"),
    ("train", "b2", -0.1, "from 0 to 1"),
    ("train", "eps", 0.0, "a number > 0"),
    ("train", "checkpoint_every", 0, "an integer >= 1"),
    ("train", "divergence_factor", 0.5, "0 \\(off\\) or a number > 1"),
    ("train", "average_last", 12, "keeps only 3"),
    ("train", "weight_decay", 0.1, "needs train.optimizer='adamw'"),
    ("model", "dropout", 1.0, "from 0 to 1"),
    ("model", "num_heads", 0, "an integer >= 1"),
    ("model", "max_len", 1, "an integer >= 2"),
    ("data", "max_tokens", 0, "an integer >= 1"),
    ("data", "bucket_boundaries", (32, 16), "increasing integers"),
    ("data", "max_train_len", 300, "exceeds model.max_len=256"),
    ("decode", "beam_size", 0, "an integer >= 1"),
    ("decode", "alpha", -0.5, "a number >= 0"),
    ("decode", "programs", -1, "an integer >= 0"),
    ("decode", "length_buckets", (8, 8), "increasing integers"),
    ("decode", "mbr", "ter", "expected one of '', 'bleu', 'chrf'"),
])
def test_values_out_of_range_and_contradictions_name_the_field(section, field, value,
                                                               message):
  d = Config().to_dict()
  d[section][field] = value
  with pytest.raises(ValueError, match=message) as e:
    Config.from_dict(d)
  assert f"{section}.{field}" in str(e.value)
