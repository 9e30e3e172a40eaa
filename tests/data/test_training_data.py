"""A run's data through its one entry point (seq2seq/data/training_data.py): a run of one
pair gets its pair's data and a run of several directions every direction's, from the
same two calls the trainer makes."""

import dataclasses

from seq2seq.data import training_data

from helpers import SAMPLE, tiny_config


def test_one_pair_and_several_directions_come_through_the_same_calls(tmp_path):
  one = tiny_config(SAMPLE)
  several = dataclasses.replace(one, data=dataclasses.replace(one.data,
                                                              directions="en-de,en-fr"))
  english = (SAMPLE / "train.en").read_text().splitlines()
  pairs = training_data.training_pairs(one, tmp_path / "one")
  assert [p["src"] for p in pairs] == english[:len(pairs)] and len(pairs) <= len(english)
  both = training_data.training_pairs(several, tmp_path / "several")
  assert len(both) == 2 * len(pairs) and both[len(pairs)]["src"] == pairs[0]["src"]
  french = set((SAMPLE / "train.fr").read_text().splitlines())
  assert both[len(pairs)]["tgt"] in french and pairs[0]["tgt"] not in french

  tok, train, val, references = training_data.prepare(several, tmp_path / "several")
  assert len(train) == len(both) and len(references) == len(val)
  assert tok.language_token("de") is not None and tok.language_token("fr") is not None
  one_tok = training_data.prepare(one, tmp_path / "one")[0]
  assert one_tok.language_token("de") is None  # a pair needs no language tokens
