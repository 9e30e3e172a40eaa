"""Reading, bad-input errors, Hub mapping, encoding cache, bucketing and resume."""

import dataclasses
import gzip
import os
import subprocess
import sys

import datasets
import numpy as np
import pytest

from seq2seq.config import MULTI30K_BUCKETS, Config, DataConfig
from seq2seq.data import corpus, data_source, textfiles, tokenizer
from seq2seq.data import input_pipeline as ip
from seq2seq.vocab import EOS_ID, PAD_ID

from helpers import ROOT, SAMPLE, write_corpus


def test_plain_and_gzipped_files_read_the_same(tmp_path):
  write_corpus(tmp_path / "plain", "train", ["a b", "c\u2028d"], ["x", "y"])
  gz = tmp_path / "gz"
  gz.mkdir()
  for lang in ("en", "de"):
    data = (tmp_path / "plain" / f"train.{lang}").read_bytes()
    with gzip.open(gz / f"train.{lang}.gz", "wb") as f:
      f.write(data)
  a = data_source.load_split(DataConfig(dir=str(tmp_path / "plain")), "train")
  b = data_source.load_split(DataConfig(dir=str(gz)), "train")
  assert list(a["src"]) == list(b["src"]) == ["a b", "c\u2028d"]  # U+2028 does not split a line
  assert list(a["tgt"]) == list(b["tgt"]) == ["x", "y"]


def test_missing_split_is_named(tmp_path):
  write_corpus(tmp_path, "train", ["a"], ["x"])
  with pytest.raises(textfiles.DataError, match="split 'val' not found.*holds: train.de, train.en"):
    data_source.load_split(DataConfig(dir=str(tmp_path)), "val")


def test_invalid_utf8_names_file_and_line(tmp_path):
  write_corpus(tmp_path, "train", ["a", "b", "c"], ["x", "y", "z"])
  (tmp_path / "train.de").write_bytes(b"x\ny\n\xff\xfez\n")
  with pytest.raises(textfiles.DataError, match=r"train\.de, line 3: not valid UTF-8"):
    data_source.load_split(DataConfig(dir=str(tmp_path)), "train")


def test_empty_corpus_is_an_error(tmp_path):
  write_corpus(tmp_path, "train", [], [])
  with pytest.raises(textfiles.DataError, match="empty"):
    data_source.load_split(DataConfig(dir=str(tmp_path)), "train")


def test_a_corpus_that_cleaning_empties_is_an_error(tmp_path):
  write_corpus(tmp_path, "train", [" ", "a"], ["x", ""])
  with pytest.raises(textfiles.DataError, match=r"cleaning removed every training pair.*"
                     r"'empty': 2"):
    corpus.training_split(Config(data=DataConfig(dir=str(tmp_path))))


def test_hub_dataset_fields_are_mapped(tmp_path):
  # A WMT-style nested layout saved to disk exercises the Hub code path offline.
  rows = {"translation": [{"en": "a dog", "de": "ein Hund"}, {"en": "a cat", "de": "eine Katze"}]}
  datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "hub")
  cfg = DataConfig(dir="", hub=str(tmp_path / "hub"), src_field="translation.en",
                   tgt_field="translation.de")
  ds = data_source.load_split(cfg, "train")
  assert list(ds["src"]) == ["a dog", "a cat"] and list(ds["tgt"]) == ["ein Hund", "eine Katze"]
  with pytest.raises(textfiles.DataError, match="split 'validation' not in"):
    data_source.load_split(cfg, "validation")
  with pytest.raises(textfiles.DataError, match="no field 'translation.fr'"):
    data_source.load_split(dataclasses.replace(cfg, src_field="translation.fr"), "train")


def test_unreachable_hub_gives_one_clear_error():
  code = ("from seq2seq.data import data_source, textfiles; from seq2seq.config import DataConfig\n"
          "try:\n  data_source.load_split(DataConfig(dir='', hub='bentrevett/multi30k'), 'train')\n"
          "except textfiles.DataError as e:\n  print('DATAERROR', e)\n")
  env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
  out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
  assert "DATAERROR cannot load Hub data set 'bentrevett/multi30k'" in out.stdout, out.stderr
  assert "data.train_path" in out.stdout


@pytest.fixture(scope="module")
def multi30k(multi30k_dir, multi30k_tokenizer):
  cfg = DataConfig(dir=str(multi30k_dir), bucket_boundaries=MULTI30K_BUCKETS)  # the recipe's
  ds = data_source.load_split(cfg, "train")
  return cfg, multi30k_tokenizer, corpus.encode_dataset(multi30k_tokenizer, ds)


def test_encoding_is_cached(multi30k, tmp_path):
  cfg, tok, _ = multi30k
  ds = data_source.load_split(cfg, "val")
  path = tmp_path / "val"
  first = corpus.encode_dataset(tok, ds, path)
  assert path.is_dir() and not list(tmp_path.glob("*.tmp*"))
  second = corpus.encode_dataset(None, None, path)  # no tokenizer or text needed: from cache
  in_memory = corpus.encode_dataset(tok, ds)
  assert len(first) == len(second) == len(in_memory) == len(ds)
  for side in ("src", "tgt"):
    assert isinstance(getattr(second, side).flat, np.memmap)  # memory-mapped, not loaded
    for a, b, c in zip(getattr(first, side), getattr(second, side), getattr(in_memory, side),
                       strict=True):
      np.testing.assert_array_equal(a, b)
      np.testing.assert_array_equal(a, c)
  assert all(x[-1] == EOS_ID for x in first.src)
  np.testing.assert_array_equal(second.lengths()[0], [len(x) for x in in_memory.src])


def test_encoding_streams_in_batches_and_a_damaged_cache_is_named(multi30k, tmp_path,
                                                                   monkeypatch):
  cfg, tok, _ = multi30k
  ds = data_source.load_split(cfg, "val")
  monkeypatch.setattr(corpus, "ENCODE_BATCH", 100)  # 1,014 pairs: 11 batches, one partial
  streamed = corpus.encode_dataset(tok, ds, tmp_path / "val")
  whole = corpus.encode_dataset(tok, ds)
  np.testing.assert_array_equal(streamed.src.flat, whole.src.flat)
  np.testing.assert_array_equal(streamed.tgt.offsets, whole.tgt.offsets)
  ids = tmp_path / "val" / "tgt.ids"
  ids.write_bytes(ids.read_bytes()[:-8])
  with pytest.raises(textfiles.DataError, match=r"tgt\.ids holds .* ids but its offsets expect"):
    corpus.encode_dataset(None, None, tmp_path / "val")


def test_tokenizer_sample_is_drawn_from_the_whole_corpus():
  n = 1000
  ds = datasets.Dataset.from_dict({"src": [f"s{i}" for i in range(n)],
                                   "tgt": [f"t{i}" for i in range(n)]})
  sample = corpus.tokenizer_sample(ds, max_sentences=200, seed=0)
  rows = sorted(int(x[1:]) for x in sample if x.startswith("s"))
  assert len(sample) == 200 and len(rows) == 100 == len(set(rows))
  assert max(rows) > n // 2 and min(rows) < n // 2  # not the head of the corpus
  assert sample == corpus.tokenizer_sample(ds, max_sentences=200, seed=0)
  assert len(corpus.tokenizer_sample(ds, max_sentences=10_000, seed=0)) == 2 * n


def test_local_files_stream_to_an_on_disk_dataset(tmp_path):
  write_corpus(tmp_path, "train", ["a", "b"], ["x", "y"])
  ds = data_source.load_split(DataConfig(dir=str(tmp_path)), "train")
  assert ds.cache_files, "written to datasets' cache and memory-mapped, not held in memory"
  write_corpus(tmp_path, "train", ["a", "b", "c"], ["x", "y", "z"])  # same path, new content
  assert list(data_source.load_split(DataConfig(dir=str(tmp_path)), "train")["src"]) == ["a", "b", "c"]


def test_multi30k_epoch_has_few_shapes_and_little_padding(multi30k):
  cfg, _, corpus = multi30k
  batches_ = ip.TrainBatches(corpus, cfg)
  batches = [batches_.make_batch(i) for i in batches_.epoch_batches(0)]
  shapes = {b.shape for b in batches}
  assert len(shapes) <= len(cfg.bucket_boundaries)
  assert all(b.src.size <= cfg.max_tokens and b.tgt.size <= cfg.max_tokens for b in batches)
  fraction = ip.padding_fraction(batches)
  print(f"Multi30k padding fraction: {fraction:.3f} over {len(batches)} batches, "
        f"{len(shapes)} shapes")
  assert fraction < 0.15
  seen = np.concatenate(batches_.epoch_batches(0))
  assert sorted(seen) == list(range(len(corpus)))  # each pair exactly once per epoch


def test_multi30k_packed_epoch_is_one_shape_and_keeps_pairs_whole(multi30k):
  cfg, _, corpus = multi30k
  packed = dataclasses.replace(cfg, pack_length=64, max_tokens=2048)
  batches_ = ip.TrainBatches(corpus, packed)
  order = batches_.epoch_batches(0)
  batches = [batches_.make_batch(b) for b in order]
  assert {b.shape for b in batches} == {((32, 64), (32, 64))}
  fraction = ip.padding_fraction(batches[:-1])  # the last batch may have empty rows
  print(f"Multi30k packed padding fraction: {fraction:.3f} over {len(batches)} batches")
  # A row closes when either side is full and first fit leaves gaps: 0.076 measured,
  # against 0.141 bucketed.
  assert fraction < 0.09
  seen = np.concatenate([row for b in order for row in b])
  assert sorted(seen) == sorted(batches_.kept.tolist())  # each kept pair once per epoch
  # Segment k of a row is pair k on both sides, each piece in place.
  b, rows = batches[3], order[3]
  for r, pairs in enumerate(rows):
    for k, i in enumerate(pairs, start=1):
      np.testing.assert_array_equal(b.src[r][b.src_segments[r] == k], corpus.src[i])
      np.testing.assert_array_equal(b.tgt[r][b.tgt_segments[r] == k], corpus.tgt[i])
    assert ((b.src[r] == PAD_ID) == (b.src_segments[r] == 0)).all()


def test_long_pairs_dropped_from_training_only(multi30k, caplog):
  cfg, _, corpus = multi30k
  short = dataclasses.replace(cfg, max_train_len=20)
  with caplog.at_level("WARNING"):
    batches = ip.TrainBatches(corpus, short)
  src_len, tgt_len = corpus.lengths()
  n_long = int((np.maximum(src_len, tgt_len) > 20).sum())
  assert n_long > 0 and f"dropped {n_long} of" in caplog.text
  assert batches.num_pairs == len(corpus) - n_long
  # Evaluation keeps every pair, in order, truncating to the model's max length.
  lengths = ip.LengthBuckets.from_config(cfg, 20)
  evald = list(ip.eval_batches(corpus, rows=64, lengths=lengths))
  assert {b.src.shape[1] for b in evald} <= set(lengths.boundaries)
  real_rows = [r for b in evald for r in b.src if (r != PAD_ID).any()]
  assert len(real_rows) == len(corpus)
  np.testing.assert_array_equal(real_rows[5][:len(corpus.src[5])], corpus.src[5][:20])


def test_resume_sees_the_same_batches(multi30k):
  cfg, _, corpus = multi30k
  batches = ip.TrainBatches(corpus, dataclasses.replace(cfg, max_tokens=2048))
  n_epoch = len(batches.epoch_batches(0))
  stream = batches.iterate()
  uninterrupted = [next(stream) for _ in range(n_epoch + 10)]
  stop = n_epoch - 5  # resume across an epoch boundary
  epoch, index, _ = uninterrupted[stop - 1]
  resumed = batches.iterate(epoch, index)
  for expected in uninterrupted[stop:]:
    got = next(resumed)
    assert got[:2] == expected[:2]
    np.testing.assert_array_equal(got[2].src, expected[2].src)
    np.testing.assert_array_equal(got[2].tgt, expected[2].tgt)
  other_epoch = [b.tolist() for b in batches.epoch_batches(1)]
  assert other_epoch != [b.tolist() for b in batches.epoch_batches(0)]  # reshuffled


def test_subword_sampling_resegments_each_epoch_reproducibly():
  cfg = DataConfig(dir=str(SAMPLE), max_tokens=300, sampling_alpha=0.1)
  ds = data_source.load_split(cfg, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), vocab_size=400)
  encoded = corpus.encode_dataset(tok, ds)
  sampled = lambda: ip.TrainBatches(encoded, cfg, sampler=corpus.SubwordSampler(tok, ds, cfg))

  def epoch(batches, e):
    return [batches.make_batch(idx) for idx in batches.epoch_batches(e)]

  a, b = sampled(), sampled()
  b1, b0 = epoch(b, 1), epoch(b, 0)  # b asks for epoch 1 first
  a0, a1 = epoch(a, 0), epoch(a, 1)
  for x, y in [*zip(a0, b0), *zip(a1, b1)]:  # an epoch's pieces depend on (seed, epoch) only
    np.testing.assert_array_equal(x.src, y.src)
    np.testing.assert_array_equal(x.tgt, y.tgt)
  seg0, seg1 = a.sampler.corpus(0), a.sampler.corpus(1)
  for side in ("src", "tgt"):
    best, one, two = (getattr(c, side) for c in (encoded, seg0, seg1))
    # Other pieces for most sentences, and other pieces in each epoch, for the same text.
    assert sum(not np.array_equal(x, y) for x, y in zip(best, one)) > len(best) // 2
    assert sum(not np.array_equal(x, y) for x, y in zip(one, two)) > len(best) // 2
    assert tok.decode(one) == tok.decode(two) == tok.decode(best)
  # Every pair trains in every epoch, whatever its sampled length.
  assert sorted(np.concatenate(a.epoch_batches(1)).tolist()) == list(range(len(encoded)))


def test_templates_come_in_the_order_the_batches_first_need_their_shapes():
  cfg = DataConfig(dir=str(SAMPLE), max_tokens=300, bucket_boundaries=(8, 12, 16, 20, 24, 32, 48))
  ds = data_source.load_split(cfg, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), vocab_size=400)
  batches = ip.TrainBatches(corpus.encode_dataset(tok, ds), cfg)
  for epoch, index in [(0, 0), (1, 0), (2, 5)]:
    seen = []
    for idx in batches.epoch_batches(epoch)[index:]:
      shape = batches.make_batch(idx).src.shape
      if shape not in seen:
        seen.append(shape)
    ordered = [t.src.shape for t in batches.templates(epoch=epoch, index=index)]
    assert ordered[:len(seen)] == seen
    assert sorted(ordered) == sorted(t.src.shape for t in batches.templates())
  assert len(seen) > 2


def test_batches_split_evenly_across_devices():
  cfg = DataConfig(dir=str(SAMPLE), max_tokens=300)
  ds = data_source.load_split(cfg, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), vocab_size=400)
  encoded = corpus.encode_dataset(tok, ds)
  batches = ip.TrainBatches(encoded, cfg, num_devices=2)
  for idx in batches.epoch_batches(0):
    b = batches.make_batch(idx)
    assert b.src.shape[0] % 2 == 0 and b.tgt.shape[0] % 2 == 0


@pytest.mark.parametrize("pack_length", [0, 48])
def test_each_process_builds_exactly_its_rows_of_the_global_batch(pack_length):
  cfg = DataConfig(dir=str(SAMPLE), max_tokens=300, pack_length=pack_length,
                   max_train_len=48, bucket_boundaries=(16, 24, 48))
  ds = data_source.load_split(cfg, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), vocab_size=400)
  batches = ip.TrainBatches(corpus.encode_dataset(tok, ds), cfg, num_devices=4)
  whole = batches.iterate(epoch=1)
  parts = [batches.iterate(1, 0, part, 2) for part in range(2)]
  for _ in range(len(batches.epoch_batches(1)) + 3):
    epoch, index, full = next(whole)
    mine = [next(p) for p in parts]
    assert all(m[:2] == (epoch, index) for m in mine)
    for field in ("src", "tgt", "src_segments", "tgt_segments"):
      if getattr(full, field) is None:
        assert all(getattr(m[2], field) is None for m in mine)
        continue
      np.testing.assert_array_equal(
          np.concatenate([getattr(m[2], field) for m in mine]), getattr(full, field))
      np.testing.assert_array_equal(getattr(ip.local_rows(full, 1, 2), field),
                                    getattr(mine[1][2], field))


def test_length_buckets_pad_to_the_first_boundary_up_to_the_longest():
  data = DataConfig(bucket_boundaries=(8, 16, 32, 64))
  train = ip.LengthBuckets.from_config(data, 20)
  assert train.boundaries == (8, 16, 20)  # boundaries past the longest give way to it
  assert [train.length_for(n) for n in (1, 8, 9, 17, 20)] == [8, 8, 16, 20, 20]
  decode = ip.LengthBuckets.from_config(data, 128)
  assert decode.boundaries == (8, 16, 32, 64, 128)
  assert decode.length_for(200) == 200  # past the last boundary: its own length


def test_batch_is_a_pytree_that_moves_in_one_call():
  import jax
  b = ip.Batch(np.ones((2, 3), np.int32), np.ones((2, 4), np.int32))
  leaves = jax.tree_util.tree_leaves(b)
  assert len(leaves) == 2  # unpacked: no segment arrays
  on_device = jax.device_put(b)
  assert isinstance(on_device, ip.Batch) and on_device.src_segments is None
  packed = ip.Batch(b.src, b.tgt, b.src, b.tgt)
  assert len(jax.tree_util.tree_leaves(packed)) == 4


def test_prefetch_propagates_errors():
  def gen():
    yield 1
    raise RuntimeError("boom")
  it = ip.prefetch(gen())
  assert next(it) == 1
  with pytest.raises(RuntimeError, match="boom"):
    next(it)
