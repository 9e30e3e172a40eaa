"""Corpora as users have them: TSV, JSON Lines, file pairs, folders, Hub data sets;
cleaning with its report; a held-out validation set; errors that name file and line."""

import gzip
import json

import numpy as np
import pytest

from seq2seq.config import Config, DataConfig
from seq2seq.data import cleaning, corpus, data_source
from seq2seq.data.textfiles import DataError, read_lines

from helpers import SAMPLE, write_corpus

SRC = read_lines(SAMPLE / "train.en")[:40]
TGT = read_lines(SAMPLE / "train.de")[:40]


def write_tsv(path, src=SRC, tgt=TGT):
  opener = gzip.open if path.suffix == ".gz" else open
  with opener(path, "wt", encoding="utf-8") as f:
    f.writelines(f"{s}\t{t}\n" for s, t in zip(src, tgt))
  return path


def write_jsonl(path, records):
  path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
  return path


def pairs(cfg, split="train"):
  ds = data_source.load_split(cfg, split)
  return list(zip(ds["src"], ds["tgt"]))


def test_every_input_form_gives_the_same_pairs(tmp_path):
  expected = list(zip(SRC, TGT))
  write_corpus(tmp_path / "pair", "train", SRC, TGT)
  forms = {
      "tsv": DataConfig(train_path=str(write_tsv(tmp_path / "c.tsv"))),
      "tsv.gz": DataConfig(train_path=str(write_tsv(tmp_path / "c.tsv.gz"))),
      "file pair": DataConfig(train_path=f"{tmp_path}/pair/train.en,{tmp_path}/pair/train.de"),
      "folder of a pair": DataConfig(dir=str(tmp_path / "pair")),
      "jsonl, language fields": DataConfig(train_path=str(write_jsonl(
          tmp_path / "a.jsonl", [{"en": s, "de": t, "id": i} for i, (s, t) in enumerate(expected)]))),
      "jsonl, nested": DataConfig(train_path=str(write_jsonl(
          tmp_path / "b.jsonl", [{"translation": {"de": t, "en": s}} for s, t in expected]))),
      "jsonl, named fields": DataConfig(
          train_path=str(write_jsonl(tmp_path / "c.jsonl",
                                     [{"text": s, "label": t} for s, t in expected])),
          src_field="text", tgt_field="label"),
  }
  (tmp_path / "tsvdir").mkdir()
  write_tsv(tmp_path / "tsvdir" / "train.tsv")
  forms["folder of a tsv"] = DataConfig(dir=str(tmp_path / "tsvdir"))
  for name, cfg in forms.items():
    assert pairs(cfg) == expected, name


def test_any_language_codes_and_direction(tmp_path):
  write_corpus(tmp_path, "train", TGT, SRC, src="de", tgt="pt-BR")
  assert pairs(DataConfig(dir=str(tmp_path), src_lang="de", tgt_lang="pt-BR")) == list(zip(TGT, SRC))
  write_jsonl(tmp_path / "x.jsonl", [{"en": s, "de": t} for s, t in zip(SRC, TGT)])
  reverse = DataConfig(train_path=str(tmp_path / "x.jsonl"), src_lang="de", tgt_lang="en")
  assert pairs(reverse) == list(zip(TGT, SRC))


def test_a_hub_data_set_has_its_fields_found(tmp_path):
  datasets = pytest.importorskip("datasets")
  rows = {"translation": [{"en": s, "de": t} for s, t in zip(SRC, TGT)]}
  datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "hub")
  assert pairs(DataConfig(hub=str(tmp_path / "hub"))) == list(zip(SRC, TGT))
  rows = {"english": SRC, "german": TGT}
  datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "h2")
  with pytest.raises(DataError, match=r"cannot tell the source and target fields of "
                     r"\['english', 'german'\].*data.src_field"):
    pairs(DataConfig(hub=str(tmp_path / "h2")))
  assert pairs(DataConfig(hub=str(tmp_path / "h2"), src_field="english",
                          tgt_field="german")) == list(zip(SRC, TGT))


@pytest.mark.parametrize("content, message", [
    ("a\tb\nno tab here\n", r"bad.tsv, line 2: expected 2 tab-separated columns .* found no tab"),
    ("a\tb\nx\ty\tz\n", r"bad.tsv, line 2: .* found 3 columns"),
    (b"a\tb\nc\t\xff\n", r"bad.tsv, line 2: not valid UTF-8"),
])
def test_a_broken_tsv_line_is_named(tmp_path, content, message):
  path = tmp_path / "bad.tsv"
  (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
  with pytest.raises(DataError, match=message):
    pairs(DataConfig(train_path=str(path)))


@pytest.mark.parametrize("content, message", [
    ('{"en": "a", "de": "b"}\n{"en": "c", "de": \n', r"bad.jsonl, line 2: not a JSON object"),
    ('{"en": "a", "de": "b"}\n["c", "d"]\n', r"bad.jsonl, line 2: expected a JSON object, found list"),
    ('{"en": "a", "de": "b"}\n{"en": "c"}\n', r"bad.jsonl, line 2: no field 'en' or 'de'"),
    ('{"en": "a", "de": 3}\n', r"bad.jsonl, line 1: fields .* must hold strings"),
])
def test_a_broken_jsonl_line_is_named(tmp_path, content, message):
  (tmp_path / "bad.jsonl").write_text(content)
  with pytest.raises(DataError, match=message):
    pairs(DataConfig(train_path=str(tmp_path / "bad.jsonl")))


def test_files_of_different_lengths_name_the_first_line_without_a_partner(tmp_path):
  write_corpus(tmp_path, "train", SRC, TGT[:-2])
  with pytest.raises(DataError, match=r"train.en, line 39: no partner line in .*train.de, "
                     r"which has 38 lines to its 40"):
    pairs(DataConfig(dir=str(tmp_path)))


def test_a_missing_or_malformed_path_is_named(tmp_path):
  with pytest.raises(DataError, match=r"data.train_path: .*nope.tsv does not exist"):
    pairs(DataConfig(train_path=str(tmp_path / "nope.tsv")))
  (tmp_path / "c.txt").write_text("a\n")
  with pytest.raises(DataError, match=r"expected FILE.tsv, FILE.jsonl .* or SRC_FILE,TGT_FILE"):
    pairs(DataConfig(train_path=str(tmp_path / "c.txt")))
  with pytest.raises(DataError, match=r"no data for split 'train': set data.train_path"):
    pairs(DataConfig())


# The pair each filter removes, after one kept pair; line numbers are 1-based.
DIRTY = [
    ("A dog runs in the park.", "Ein Hund rennt im Park."),  # line 1, kept
    ("   ", "Leer."),  # empty
    ("A " * 700, "Ein " * 700),  # long
    ("A man plays a long and complicated piece on the old piano.", "Ja."),  # ratio
    ("Hello World", "hello world "),  # copy
    ("<td>12</td><td>3.50</td>", "<td>12</td><td>3,50</td>"),  # nontext
    ("A dog runs in the park.", "Ein Hund rennt im Park."),  # duplicate of line 1
    ("Two cats sleep.", "Zwei Katzen schlafen."),  # kept
]


def test_each_filter_removes_its_pairs_and_reports_them(tmp_path):
  cfg = DataConfig(train_path=str(write_tsv(tmp_path / "d.tsv", *zip(*DIRTY))))
  ds = data_source.load_split(cfg, "train")
  kept, report = cleaning.clean(ds, cfg, "d.tsv", None)
  assert list(kept["src"]) == [DIRTY[0][0], DIRTY[7][0]]
  assert report.removed == {name: 1 for name in cleaning.FILTERS}
  assert (report.pairs, report.kept) == (8, 2)
  lines = {name: [e["line"] for e in report.examples[name]] for name in cleaning.FILTERS}
  assert lines == {"empty": [2], "long": [3], "ratio": [4], "copy": [5], "nontext": [6],
                   "duplicate": [7]}
  text = "\n".join(report.lines())
  assert "8 pairs, 2 kept, 6 removed" in text and "e.g. line 4:" in text
  # Each filter alone removes its own pair (the duplicate: the second copy); 'nontext'
  # also the blank one, which has no letters.
  for i, name in enumerate(cleaning.FILTERS):
    alone = DataConfig(train_path=cfg.train_path, clean=name)
    kept, report = cleaning.clean(ds, alone, "d.tsv", None)
    removed = 2 if name == "nontext" else 1
    assert report.removed == {name: removed} and len(kept) == 8 - removed
    assert report.examples[name][-1]["line"] == i + 2
  kept, report = cleaning.clean(ds, DataConfig(train_path=cfg.train_path, clean=""), "d", None)
  assert len(kept) == 8 and report.removed == {}


def test_thresholds_move_the_filters(tmp_path):
  cfg = DataConfig(train_path=str(write_tsv(tmp_path / "d.tsv", *zip(*DIRTY))))
  ds = data_source.load_split(cfg, "train")
  loose = DataConfig(train_path=cfg.train_path, clean_max_chars=5000, clean_max_ratio=10,
                     clean_min_letters=0.1)
  assert cleaning.clean(ds, loose, "d", None)[1].removed == {
      "empty": 1, "long": 0, "ratio": 0, "copy": 1, "nontext": 0, "duplicate": 1}
  with pytest.raises(ValueError, match=r"data.clean='empty,typo': unknown filter\(s\) typo"):
    DataConfig(clean="empty,typo")


def test_cleaning_is_cached_and_deterministic(tmp_path, monkeypatch):
  cfg = DataConfig(train_path=str(write_tsv(tmp_path / "d.tsv", *zip(*DIRTY))))
  ds = data_source.load_split(cfg, "train")
  first = cleaning.clean(ds, cfg, "d", tmp_path / "cache" / "clean-x")
  assert (tmp_path / "cache" / "clean-x.npy").is_file()
  monkeypatch.setattr(cleaning, "reasons", lambda *a: pytest.fail("cleaned again"))
  again = cleaning.clean(ds, cfg, "d", tmp_path / "cache" / "clean-x")
  assert list(again[0]["src"]) == list(first[0]["src"]) and again[1] == first[1]


def test_without_a_validation_split_pairs_are_held_out(tmp_path):
  src = [f"Sentence number {i} is here." for i in range(300)]
  tgt = [f"Satz Nummer {i} ist hier." for i in range(300)]
  path = write_tsv(tmp_path / "c.tsv", src, tgt)
  cfg = Config(data=DataConfig(train_path=str(path), heldout_pairs=25))
  assert not data_source.has_split(cfg.data, "val")
  split = corpus.training_split(cfg)
  train, held = list(split.train["src"]), list(split.heldout["src"])
  assert len(held) == 25 and len(train) == 275 and not set(train) & set(held)
  assert held == list(corpus.training_split(cfg).heldout["src"])  # the seed decides
  other = Config(data=DataConfig(train_path=str(path), heldout_pairs=25, heldout_seed=1))
  assert list(corpus.training_split(other).heldout["src"]) != held
  assert list(corpus.training_pairs(cfg)["src"]) == train
  # At most a tenth; with too few pairs, an error that says what to give.
  big = Config(data=DataConfig(train_path=str(path), heldout_pairs=1000))
  assert len(corpus.training_split(big).heldout) == 30
  tiny = Config(data=DataConfig(train_path=str(write_tsv(tmp_path / "t.tsv", src[:5], tgt[:5]))))
  with pytest.raises(DataError, match="too few to hold out a tenth.*data.val_path"):
    corpus.training_split(tiny)
  # A validation path turns holding out off.
  val = write_tsv(tmp_path / "v.tsv", src[:3], tgt[:3])
  given = Config(data=DataConfig(train_path=str(path), val_path=str(val)))
  assert corpus.training_split(given).heldout is None
  assert pairs(given.data, "val") == list(zip(src[:3], tgt[:3]))


def test_the_heldout_rows_are_a_function_of_size_and_seed():
  cfg = DataConfig(heldout_pairs=50, heldout_seed=3)
  rows = corpus.heldout_rows(1000, cfg)
  assert len(rows) == 50 and np.all(np.diff(rows) > 0)
  assert np.array_equal(rows, corpus.heldout_rows(1000, cfg))
