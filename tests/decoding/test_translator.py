"""The Translator over a trained run: batch-size independence, shrinking batches, n-best
lists, early stops equal to the full search, compiled searches reused."""

import json
import shutil

import numpy as np
import pytest

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.batching import encode_prefixes
from seq2seq.decoding.translator import Sampling, Translator
from seq2seq.numerics import speed_probe

from helpers import SAMPLE


def test_translations_do_not_depend_on_batch_size(trained_run):
  t = Translator.load(trained_run)
  lines = read_lines(SAMPLE / "test.en")[:70] + ["", "A dog."]
  for beam in (1, 3):
    one = t.translate(lines, beam_size=beam, batch_size=1)
    many = t.translate(lines, beam_size=beam, batch_size=64)
    assert one == many, f"beam {beam} on {speed_probe.cpu_class()}"
    assert len(one) == len(lines) and one[-2] == ""


def test_translations_do_not_depend_on_batch_size_at_the_recipes_precision(trained_run,
                                                                            tmp_path):
  # The recipe trains with bfloat16 operands; such a run decodes with whichever of
  # bfloat16 and float32 this machine multiplies faster. Either way, the batch a
  # sentence is searched in must not change its translation.
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  cfg = json.loads((run / "config.json").read_text())
  cfg["model"]["matmul_dtype"] = "bfloat16"
  (run / "config.json").write_text(json.dumps(cfg))
  t = Translator.load(run)
  lines = read_lines(SAMPLE / "test.en")[:70]
  for beam in (1, 3):
    one = t.translate(lines, beam_size=beam, batch_size=1)
    cpu = f"beam {beam} with {t.model.numerics.operand_dtype} operands on {speed_probe.cpu_class()}"
    assert one == t.translate(lines, beam_size=beam, batch_size=8), cpu
    assert one == t.translate(lines, beam_size=beam, batch_size=64), cpu


def test_batches_searched_at_once_give_the_same_translations_in_order(trained_run):
  """Several decoding batches in flight on threads (the default) change nothing: the
  same hypotheses and scores, each returned for its own input, as one batch at a time."""
  ids = Translator.load(trained_run).encode(read_lines(SAMPLE / "test.en")[:40])
  results = {}
  for workers in (1, 3):
    t = Translator.load(trained_run, workers=workers)
    results[workers] = [t.translate_ids(ids, beam_size=beam, batch_size=4) for beam in (1, 3)]
  for one_at_a_time, concurrent in zip(results[1], results[3]):
    for a, b in zip(one_at_a_time, concurrent, strict=True):
      np.testing.assert_array_equal(a[0][0], b[0][0])
      assert a[0][1] == b[0][1]
  with pytest.raises(ValueError, match=r"decode.workers=0: expected an integer >= 1"):
    Translator.load(trained_run, workers=0).translate("A dog.")


def test_shrinking_batches_change_no_translation(trained_run):
  """Greedy, beam, sampling and forced prefixes give the same hypotheses and scores
  whether a batch shrinks down to one row as sentences finish or keeps all its rows.
  One batch of 16 sentences of different lengths (one compiled shape per search)."""
  lines = read_lines(SAMPLE / "test.en")[:16]
  prefixes = ["Ein" if i % 3 == 0 else "" for i in range(len(lines))]
  results = {}
  for min_rows in (0, 1):
    t = Translator.load(trained_run, min_rows=min_rows)
    ids = t.encode(lines)
    results[min_rows] = [
        t.translate_ids(ids, beam_size=1, batch_size=16),
        t.translate_ids(ids, beam_size=3, batch_size=16),
        t.translate_ids(ids, batch_size=16, sampling=Sampling(temperature=1.0, seed=5)),
        t.translate_ids(ids, beam_size=3, batch_size=16,
                        prefix_ids=encode_prefixes(t.tokenizer, prefixes, range(len(lines)),
                                                               t.model_cfg.max_len))]
  for full, shrunk in zip(results[0], results[1]):
    for a, b in zip(full, shrunk, strict=True):
      np.testing.assert_array_equal(a[0][0], b[0][0])
      np.testing.assert_allclose(a[0][1], b[0][1], rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match=r"decode.min_rows=-1: expected an integer >= 0"):
    Translator.load(trained_run, min_rows=-1).translate("A dog.")


def test_nbest_is_sorted_and_consistent_with_one_best(trained_run):
  t = Translator.load(trained_run)
  lines = read_lines(SAMPLE / "test.en")[:10]
  nbest = t.translate(lines, beam_size=4, nbest=4)
  best = t.translate(lines, beam_size=4)
  for hyps, one in zip(nbest, best):
    assert len(hyps) == 4 and hyps[0].text == one
    scores = [h.score for h in hyps]
    assert scores == sorted(scores, reverse=True)
  with pytest.raises(ValueError, match="nbest=5 needs a beam"):
    t.translate(lines, beam_size=4, nbest=5)


def test_early_stopped_best_equals_the_full_search(trained_run):
  """translate() asks beam search for the best hypothesis only, which stops a sentence
  as soon as no live beam can beat its best finished one: that bound is exact, so the
  best hypothesis and its score are those of the search that keeps all W final (the
  score to float rounding: the two searches shrink their batches at different steps,
  and a matmul over fewer rows may round differently)."""
  t = Translator.load(trained_run)
  ids = t.encode(read_lines(SAMPLE / "test.en")[:40])
  for alpha in (1.6,):  # a length penalty: the bound must hold at every length
    best = t.translate_ids(ids, beam_size=4, alpha=alpha, nbest=1)
    full = t.translate_ids(ids, beam_size=4, alpha=alpha, nbest=4)
    for one, four in zip(best, full):
      assert len(one) == 1 and len(four) == 4
      np.testing.assert_array_equal(one[0][0], four[0][0])
      np.testing.assert_allclose(one[0][1], four[0][1], rtol=1e-5)


@pytest.mark.parametrize("stop", ["current", "count"])
def test_sooner_stops_find_no_better_than_the_exact_search(trained_run, stop):
  """A sentence's search with beam_stop "current" or "count" is the exact search cut
  short, so its best score is at most the exact one's, and the same score means the same
  translation."""
  exact = Translator.load(trained_run)
  sooner = Translator.load(trained_run, beam_stop=stop)
  assert (exact.decode_cfg.beam_stop, sooner.decode_cfg.beam_stop) == ("exact", stop)
  ids = exact.encode(read_lines(SAMPLE / "test.en")[:40])
  for a, b in zip(exact.translate_ids(ids, beam_size=4, alpha=1.6),
                  sooner.translate_ids(ids, beam_size=4, alpha=1.6)):
    (ids_exact, score_exact), (ids_sooner, score_sooner) = a[0], b[0]
    assert score_sooner <= score_exact + 1e-5
    if abs(score_sooner - score_exact) <= 1e-5:
      np.testing.assert_array_equal(ids_sooner, ids_exact)
  with pytest.raises(ValueError, match="decode.beam_stop='soon': expected one of 'exact', 'current'"):
    Translator.load(trained_run, beam_stop="soon").translate("A dog.", beam_size=2)


def test_translator_reuses_compiled_search(trained_run):
  # Other sentences padded to the same length bucket and row count reuse the compiled
  # program; a longer bucket, or more rows, compiles one more (so the count really
  # measures compilations).
  t = Translator.load(trained_run)
  lines = read_lines(SAMPLE / "test.en")
  bucket = lambda line: t.buckets.length_for(len(t.encode([line])[0]))
  first = lines[0]
  same = [l for l in lines[1:] if l != first and bucket(l) == bucket(first)][:4]
  assert len(same) == 4, "the sample has other sentences in the first sentence's bucket"
  t.translate([first], beam_size=2, batch_size=4)
  compiled = t.search_programs
  t.translate(same[:1], beam_size=2, batch_size=4)
  assert t.search_programs == compiled
  longer = " ".join([first] * 4)
  assert bucket(longer) != bucket(first)
  t.translate([longer], beam_size=2, batch_size=4, split_sentences=False)  # one sequence
  assert t.search_programs == compiled + 1
  # 3 and 4 sentences both run 4 rows (rows: next power of two, at most batch_size)
  t.translate(same[:3], beam_size=2, batch_size=4)
  t.translate(same, beam_size=2, batch_size=4)
  assert t.search_programs == compiled + 2


def test_a_run_loaded_again_runs_the_searches_already_compiled(trained_run, tmp_path):
  """Translators of one model share their compiled searches within a process (a server
  reloading a run, the trainer's validation made anew): the second traces nothing and
  translates alike; a model of another configuration gets searches of its own."""
  lines = read_lines(SAMPLE / "test.en")[:6]
  # A length penalty no other test uses: the first translator builds these searches even
  # when other tests in this process translated the run before.
  search = dict(beam_size=2, alpha=0.37)
  first = Translator.load(trained_run)
  expected = first.translate(lines, **search)
  assert first.search_programs > 0
  again = Translator.load(trained_run)
  assert again.translate(lines, **search) == expected
  assert again.search_programs == 0
  other = tmp_path / "other"  # the same weights, another dropout rate: traced anew
  shutil.copytree(trained_run, other)
  cfg = json.loads((other / "config.json").read_text())
  cfg["model"]["dropout"] += 0.05
  (other / "config.json").write_text(json.dumps(cfg))
  retrained = Translator.load(other)
  retrained.translate(lines, **search)
  assert retrained.search_programs > 0


def test_decoding_buckets_set_the_programs_not_the_translations(trained_run):
  """Searches pad sources to decode.length_buckets: training's finer buckets compile more
  searches for the same inputs and give the same translations."""
  lines = read_lines(SAMPLE / "test.en")[:40]
  fine = Translator.load(trained_run, length_buckets=(8, 10, 12, 14, 16, 20, 24, 28, 32))
  coarse = Translator.load(trained_run)
  assert coarse.buckets.boundaries[:2] == (16, 32)
  shapes = lambda t: {t.buckets.length_for(len(ids)) for ids in t.encode(lines)}
  assert len(shapes(fine)) > len(shapes(coarse))
  for beam in (1, 3):
    assert fine.translate(lines, beam_size=beam, batch_size=8) == coarse.translate(
        lines, beam_size=beam, batch_size=8)
  assert fine.search_programs > coarse.search_programs
