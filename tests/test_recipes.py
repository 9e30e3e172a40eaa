"""Presets by name, the Multi30k recipe's data source (local folder or Hub), train.py help."""

import dataclasses
import re
from importlib import util

import datasets
import pytest

from seq2seq import recipes
from seq2seq.config import Config, field_help
from seq2seq.data import data_source, textfiles
from seq2seq.rundir import run_files

from conftest import run_cli
from helpers import ROOT


def load_config(name: str, *args):
  spec = util.spec_from_file_location(name, ROOT / "configs" / f"{name}.py")
  module = util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(*args)


def test_presets_are_found_by_name_and_paths_still_work(tmp_path):
  assert recipes.config_file("tiny") == str(ROOT / "configs" / "tiny.py")
  assert recipes.config_file("multi30k:/data/m30k") == str(ROOT / "configs" / "multi30k.py") + ":/data/m30k"
  own = tmp_path / "mine.py"
  own.write_text("from seq2seq.config import default_config\ndef get_config():\n"
                 "  return default_config('tiny')\n")
  assert recipes.config_file(str(own)) == str(own)
  with pytest.raises(ValueError, match=r"not a preset name \(presets: auto, multi30k, "
                     r"multi30k_multilingual, tiny, tiny_multilingual"):
    recipes.config_file("tinyy")
  assert recipes.sample_dir() == ROOT / "data" / "sample"


def test_multi30k_reads_the_hub_unless_a_folder_is_given(tmp_path, monkeypatch):
  monkeypatch.delenv(recipes.MULTI30K_ENV, raising=False)
  monkeypatch.setattr(recipes, "_CHECKOUT", tmp_path)  # an installed wheel: no ../shared
  cfg = Config.from_dict(load_config("multi30k"))
  assert (cfg.data.hub, cfg.data.dir) == ("bentrevett/multi30k", "")
  assert cfg.data.hub_split(cfg.data.val_split) == "validation"
  assert cfg.data.hub_split(cfg.data.test_split) == "test"
  # A folder as the config argument, or in the environment variable.
  cfg = Config.from_dict(load_config("multi30k", str(tmp_path)))
  assert (cfg.data.hub, cfg.data.dir) == ("", str(tmp_path))
  monkeypatch.setenv(recipes.MULTI30K_ENV, str(tmp_path))
  assert Config.from_dict(load_config("multi30k")).data.dir == str(tmp_path)
  monkeypatch.setenv(recipes.MULTI30K_ENV, str(tmp_path / "missing"))
  with pytest.raises(ValueError, match="Multi30k folder .*missing.* does not exist"):
    load_config("multi30k")


def test_a_command_line_data_source_replaces_the_configs(monkeypatch, tmp_path):
  monkeypatch.delenv(recipes.MULTI30K_ENV, raising=False)
  monkeypatch.setattr(recipes, "_CHECKOUT", tmp_path)
  hub_recipe = load_config("multi30k")
  recipes.apply_overrides(hub_recipe, [("data.dir", "/my/multi30k")])
  assert Config.from_dict(hub_recipe).data.hub == ""
  local_recipe = load_config("tiny")
  recipes.apply_overrides(local_recipe, [("data.hub", "wmt14")])
  assert Config.from_dict(local_recipe).data.dir == ""
  # Both set by a config file itself: one clear error.
  local_recipe.data.dir = "/my/folder"
  with pytest.raises(ValueError, match="data.dir='/my/folder' and data.hub='wmt14' are both set"):
    Config.from_dict(local_recipe)


def test_hub_layout_of_multi30k_is_read_under_the_recipes_split_names(tmp_path, monkeypatch):
  # bentrevett/multi30k's shape: columns en and de; splits train, validation, test.
  def split(n):
    return datasets.Dataset.from_dict({"en": [f"{n} dog {i}" for i in range(3)],
                                       "de": [f"{n} Hund {i}" for i in range(3)]})
  saved = tmp_path / "multi30k_hub"
  datasets.DatasetDict({n: split(n) for n in ("train", "validation", "test")}).save_to_disk(saved)
  monkeypatch.setattr(recipes, "_CHECKOUT", tmp_path)
  cfg = load_config("multi30k")
  cfg.data.hub = str(saved)  # a local stand-in for the Hub name: same loader, same layout
  data = Config.from_dict(cfg).data
  assert list(data_source.load_split(data, "val")["src"])[0] == "validation dog 0"
  assert list(data_source.load_split(data, "test_2016_flickr")["tgt"])[2] == "test Hund 2"
  assert list(data_source.load_split(data, "train")["src"])[1] == "train dog 1"


def test_train_help_lists_options_and_every_config_field_with_its_description():
  out = run_cli("train.py", "--help").stdout.decode()
  for text in ("--config", "--workdir", "--config.SECTION.FIELD=VALUE",
               "multi30k, multi30k_multilingual, tiny,", "--coordinator-address"):
    assert text in out, text
  helps = field_help()
  for section in dataclasses.fields(Config):
    for f in dataclasses.fields(section.default):
      entry = re.escape(f" {section.name}.{f.name}={f.default!r}")
      first_words = r"\s+".join(map(re.escape, helps[section.name][f.name].split()[:3]))
      assert re.search(entry + r"\s+" + first_words, out), (section.name, f.name)


@pytest.mark.parametrize("args, message", [
    (["--config", "tinyy", "--workdir", "x"], "--config 'tinyy': no such config file"),
    (["--config", "tiny"], "--config and --workdir are required"),
    (["--config", "tiny", "--workdir", "x", "--config.data.hub_splits=val"],
     "data.hub_splits='val': expected 'ours=theirs,...'"),
])
def test_usage_errors_are_one_line_with_status_2(args, message):
  proc = run_cli("train.py", *args, check=False)
  err = proc.stderr.decode().strip().splitlines()
  assert proc.returncode == 2 and len(err) == 1 and message in err[0], proc.stderr


@pytest.mark.slow
def test_wmt14_recipe_runs_end_to_end_on_a_slice_of_the_hub_layout(tmp_path):
  # The Hub's wmt14 de-en: one `translation` column of {"de": ..., "en": ...}; splits
  # train, validation, test. A slice in that shape (sample sentences) stands in for it;
  # the recipe's own field paths and split names read it. Only the model is shrunk.
  def split(name):
    en = textfiles.read_lines(ROOT / "data" / "sample" / f"{name}.en")
    de = textfiles.read_lines(ROOT / "data" / "sample" / f"{name}.de")
    return datasets.Dataset.from_dict({"translation": [{"de": d, "en": e} for e, d in zip(en, de)]})
  saved = tmp_path / "wmt14"
  datasets.DatasetDict({"train": split("train"), "validation": split("val"),
                        "test": split("test")}).save_to_disk(saved)
  workdir = tmp_path / "run"
  run_cli("train.py", "--config", "wmt14_base", "--workdir", workdir,
          f"--config.data.hub={saved}", "--config.model.vocab_size=400",
          "--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.d_ff=64",
          "--config.model.encoder_layers=1", "--config.model.decoder_layers=1",
          "--config.data.max_tokens=512", "--config.data.bucket_boundaries=(24,48)",
          "--config.data.max_train_len=48", "--config.train.max_steps=4",
          "--config.train.eval_every=4", "--config.train.eval_max_sentences=8",
          "--config.train.checkpoint_every=2", "--config.train.log_every=2")
  saved_cfg = run_files.load_config(workdir)
  assert (saved_cfg.data.src_field, saved_cfg.data.tgt_field) == ("translation.en", "translation.de")
  assert saved_cfg.model.d_model == 32 and saved_cfg.train.learning_rate == 7e-4
  hyp = workdir.parent / "test.beam1.txt"
  out = run_cli("evaluate.py", "--workdir", workdir, "--split", "test", "--beam", "1",
                "--output", hyp).stdout
  assert "BLEU" in out.decode()
  hyps = hyp.read_text().splitlines()
  assert len(hyps) == len(textfiles.read_lines(ROOT / "data" / "sample" / "test.en"))


def test_every_name_config_takes_is_listed_once_with_what_it_is():
  """recipes.presets() is the one list: each recipe file of configs/, then each model
  preset no recipe is named after, which --config takes as that model with the default
  data and training; docs/training.md's table of model shapes is config.PRESETS'."""
  from seq2seq.config import PRESETS
  listed = recipes.presets()
  assert list(listed)[:len(recipes.names())] == recipes.names()
  assert set(listed) == set(recipes.names()) | set(PRESETS) and all(listed.values())
  assert "multi30k" in listed and "Multi30k" in listed["multi30k"]
  small = recipes.training_config("small", [("data.dir", "x")])
  assert small.model == PRESETS["small"] and small.data.dir == "x"
  tiny = recipes.training_config("tiny", [])  # the recipe file wins over the model preset
  assert tiny.model.vocab_size == 400
  with pytest.raises(ValueError, match="presets: auto, multi30k.*small, base"):
    recipes.config_file("smal")
  out = run_cli("train.py", "--list-presets").stdout.decode()
  assert [line.split()[0] for line in out.splitlines()] == list(listed)
  docs = (ROOT / "docs" / "training.md").read_text()
  for name, model in PRESETS.items():
    row = (f"| `{name}` | {model.d_model} | {model.num_heads} | {model.d_ff} | "
           f"{model.encoder_layers} + {model.decoder_layers} |")
    assert row in docs, row
