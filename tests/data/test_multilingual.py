"""Several directions in one run (seq2seq/data/multilingual.py): the config, the draw of
each epoch's pairs, the language tokens and the data of every direction."""

import dataclasses
import json
import logging
import shutil

import numpy as np
import pytest

from seq2seq.config import Config, DataConfig
from seq2seq.data import corpus, multilingual
from seq2seq.data.corpus import Ragged, _with_eos
from seq2seq.data.textfiles import DataError

from helpers import SAMPLE, tiny_config


def sample_copy(folder, languages=("en", "de", "fr")):
  folder.mkdir(parents=True, exist_ok=True)
  for split in ("train", "val", "test"):
    for lang in languages:
      shutil.copy(SAMPLE / f"{split}.{lang}", folder / f"{split}.{lang}")
  return folder


def multilingual_config(folder, directions="en-de,de-en,en-fr,fr-en", vocab=448, **data):
  cfg = tiny_config(folder)
  return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=vocab),
                             data=dataclasses.replace(cfg.data, directions=directions, **data))


@pytest.mark.parametrize("directions, problem", [
    ("en-de,de", "expected 'src-tgt,...'"), ("en-EN", "is not a language code"),
    ("en-en", "into itself"), ("en-de,en-de", "given twice"), ("english-de", "not a language")])
def test_directions_that_are_not_directions_are_refused(directions, problem):
  with pytest.raises(ValueError, match=problem):
    DataConfig(directions=directions)


def test_one_pair_s_files_cannot_feed_several_directions():
  with pytest.raises(ValueError, match="data.train_path names one pair's files"):
    DataConfig(directions="en-de,de-en", train_path="pairs.tsv")


def test_a_language_code_that_is_not_one_is_refused():
  with pytest.raises(ValueError, match="'de/..' is not a language code"):
    DataConfig(directions="en-de/..")
  assert DataConfig(directions="en-pt_BR,zh_Hant-en").languages() == ("en", "pt_BR", "zh_Hant")


def test_directions_give_the_pairs_and_the_languages_in_order():
  data = DataConfig(directions=" en-de, de-en,en-fr ")
  assert data.direction_pairs() == (("en", "de"), ("de", "en"), ("en", "fr"))
  assert data.languages() == ("en", "de", "fr")
  assert DataConfig().direction_pairs() == (("en", "de"),) and not DataConfig().multilingual
  one = DataConfig(hub="wmt19", hub_config="{src}-{tgt}").for_direction("de", "en")
  assert (one.src_lang, one.tgt_lang, one.hub_config) == ("de", "en", "de-en")


def test_the_draw_follows_the_temperature_and_repeats_a_small_direction_evenly():
  direction = np.array([0] * 900 + [1] * 100)
  pairs = np.arange(1000)
  rng = np.random.default_rng(0)
  as_data = multilingual.draw_epoch(direction, pairs, 1.0, rng)
  assert sorted(as_data) == list(pairs)  # T = 1: the epoch is the data, shuffled
  flat = multilingual.draw_epoch(direction, pairs, 100.0, rng)
  counts = np.bincount(direction[flat])
  assert len(flat) == 1000 and abs(counts[1] - 500) < 15  # T large: near uniform
  # the small direction: each of its pairs 4 or 5 times, the large one a subset, once each
  small = np.bincount(flat[direction[flat] == 1])[900:]
  assert small.min() >= 4 and small.max() <= 5
  assert np.bincount(flat[direction[flat] == 0]).max() == 1
  # T = 5 from (0.9, 0.1): shares 0.9^0.2 : 0.1^0.2, normalised
  p = multilingual.draw_weights(np.array([900.0, 100.0]), 5.0)
  assert np.isclose(p[1], 0.1 ** 0.2 / (0.9 ** 0.2 + 0.1 ** 0.2))


def test_tokens_lead_the_sources_and_sampled_segmentations_keep_them():
  ragged = Ragged.from_list([np.array([5, 6, 3]), np.array([7, 3])])
  led = multilingual.with_token(ragged, 9)
  assert [list(x) for x in led] == [[9, 5, 6, 3], [9, 7, 3]]
  joined = multilingual.concatenate([corpus.EncodedCorpus(led, ragged),
                                     corpus.EncodedCorpus(ragged, led)], ("a-b", "b-a"))
  assert list(joined.direction) == [0, 0, 1, 1] and joined.names == ("a-b", "b-a")
  assert [list(x) for x in joined.src] == [[9, 5, 6, 3], [9, 7, 3], [5, 6, 3], [7, 3]]
  # a sampled segmentation (flat ids, offsets) with each sequence's first id and EOS
  out = _with_eos(np.array([5, 6, 7]), np.array([0, 2, 3]), np.array([9, 8]))
  assert [list(x) for x in out] == [[9, 5, 6, 3], [8, 7, 3]]


def test_every_direction_is_read_tokenized_with_its_target_and_validated(tmp_path, caplog):
  cfg = multilingual_config(sample_copy(tmp_path / "data"))
  with caplog.at_level(logging.INFO):
    tok, train, val, refs = multilingual.prepare(cfg, tmp_path / "run")
  tokens = {lang: tok.language_token(lang) for lang in ("en", "de", "fr")}
  assert None not in tokens.values() and tok.encode(["<2de> x"])[0][0] != tokens["de"]
  assert train.names == ("en-de", "de-en", "en-fr", "fr-en") and len(train) == 4 * 500
  for k, name in enumerate(train.names):
    rows = np.flatnonzero(train.direction == k)
    assert {int(train.src[i][0]) for i in rows} == {tokens[name[-2:]]}
    assert tok.decode([train.src[rows[0]]])[0] == (
        SAMPLE / f"train.{name[:2]}").read_text().splitlines()[0]
  assert refs[100:200] == (SAMPLE / "val.en").read_text().splitlines()  # de-en's references
  assert list(val.direction) == [k for k in range(4) for _ in range(100)]
  report = json.loads((tmp_path / "run" / "data_report.json").read_text())
  assert set(report["directions"]) == set(train.names)
  assert all(r["kept"] == 500 and not r["too_few"] for r in report["directions"].values())
  # SentencePiece read as many sentences of each language (en is in all four directions)
  assert [m for m in caplog.messages if m.startswith("SentencePiece sample")] == [
      "SentencePiece sample: 500 en sentences", "SentencePiece sample: 500 de sentences",
      "SentencePiece sample: 500 fr sentences"]


def test_a_direction_without_files_fails_at_start_naming_them(tmp_path):
  data = sample_copy(tmp_path / "data", ("en", "de"))
  with pytest.raises(DataError, match=r"direction en-fr: split 'train' not found: expected "
                     rf"{data}/train.en and .fr"):
    multilingual.prepare(multilingual_config(data), tmp_path / "run")
  assert not (tmp_path / "run" / "spm.model").exists()  # nothing trained before it


def test_misaligned_files_of_a_direction_fail_naming_the_files(tmp_path):
  data = sample_copy(tmp_path / "data")
  (data / "train.fr").write_text("".join(
      line + "\n" for line in (SAMPLE / "train.fr").read_text().splitlines()[:-3]))
  with pytest.raises(DataError, match="direction en-fr: .*train.fr"):
    multilingual.prepare(multilingual_config(data), tmp_path / "run")


def test_a_direction_with_too_few_pairs_is_reported_and_trained(tmp_path, caplog):
  data = sample_copy(tmp_path / "data")
  for lang in ("en", "fr"):
    for split in ("train", "val"):
      lines = (SAMPLE / f"{split}.{lang}").read_text().splitlines()[:60]
      (data / f"{split}.{lang}").write_text("".join(x + "\n" for x in lines))
  cfg = multilingual_config(data, directions="en-fr,fr-en", vocab=300)
  with caplog.at_level(logging.WARNING):
    _, train, _, _ = multilingual.prepare(cfg, tmp_path / "run")
  assert np.bincount(train.direction).tolist() == [60, 60]
  assert any("en-fr has 60 training pairs: too few" in m for m in caplog.messages)
  report = json.loads((tmp_path / "run" / "data_report.json").read_text())
  assert report["directions"]["en-fr"]["too_few"] and report["directions"]["fr-en"]["too_few"]


def test_without_validation_files_each_direction_holds_out_its_own(tmp_path):
  data = sample_copy(tmp_path / "data")
  for path in data.glob("val.*"):
    path.unlink()
  cfg = multilingual_config(data, directions="en-de,en-fr", heldout_pairs=40)
  _, train, val, refs = multilingual.prepare(cfg, tmp_path / "run")
  assert len(train) == 2 * 460 and list(np.bincount(val.direction)) == [40, 40]
  for name in ("en-de", "en-fr"):
    held = (tmp_path / "run" / f"heldout.{name}.jsonl").read_text().splitlines()
    assert len(held) == 40
  french = set((SAMPLE / "train.fr").read_text().splitlines())
  assert set(refs[40:]) <= french and not set(refs[:40]) & french


def test_a_multilingual_run_s_training_pairs_are_every_direction_s(tmp_path):
  cfg = multilingual_config(sample_copy(tmp_path / "data"), directions="en-de,fr-en")
  pairs = multilingual.training_pairs(cfg, tmp_path / "run")
  assert len(pairs) == 1000
  assert pairs[500]["src"] == (SAMPLE / "train.fr").read_text().splitlines()[0]
  assert isinstance(Config.from_dict(cfg.to_dict()).data.directions, str)
