"""Batches of a decoding call (seq2seq/decoding/batching.py): rows, padding, order, keys
and prefixes, and the pool that searches them."""

import threading

import jax
import numpy as np
import pytest

from seq2seq.config import DecodeConfig
from seq2seq.data.input_pipeline import LengthBuckets
from seq2seq.decoding.batching import (
  batch_rows,
  encode_prefixes,
  forced_scores,
  ordered_map,
  sampling_keys,
  search_jobs,
)
from seq2seq.decoding.engine_io import Sampling, SearchSettings
from seq2seq.numerics import LEAST_ROWS
from seq2seq.vocab import EOS_ID, PAD_ID

BUCKETS = LengthBuckets.up_to((8, 16, 32), 32)


def ids(*lengths):
  return [np.arange(3, 3 + n - 1, dtype=np.int32).tolist() + [EOS_ID] for n in lengths]


def test_ordered_map_keeps_the_order_of_jobs_that_finish_out_of_order():
  import time
  # Job k sleeps longer the smaller k is, so with 3 running at once later ones finish first.
  slow_first = lambda k: (time.sleep(0.02 * (6 - k)), k)[1]
  assert list(ordered_map(slow_first, iter(range(6)), 3)) == list(range(6))
  assert list(ordered_map(slow_first, iter(range(6)), 1)) == list(range(6))


def test_ordered_map_runs_a_lone_job_on_the_calling_thread_and_more_on_its_pool():
  here = threading.current_thread()
  where = lambda job: (job, threading.current_thread())  # noqa: E731
  assert list(ordered_map(where, iter([7]), 2)) == [(7, here)]
  assert list(ordered_map(where, iter([]), 2)) == []
  both = list(ordered_map(where, iter([1, 2]), 2))
  assert [job for job, _ in both] == [1, 2] and all(t is not here for _, t in both)


def test_batch_rows_are_powers_of_two_up_to_the_batch_size():
  assert [batch_rows(n, 64) for n in (1, 2, 3, 5, 8, 9, 33, 64)] == [1, 2, 4, 8, 8, 16, 64, 64]
  assert batch_rows(5, 6) == 6 and batch_rows(1, 6) == 1
  # the server's two sizes: a lone sentence, else a full batch
  assert [batch_rows(n, 64, (1, 64)) for n in (1, 2, 33, 64)] == [1, 64, 64, 64]


def test_search_jobs_sort_by_length_pad_to_the_bucket_and_fill_rows_with_one_token():
  sources = [np.asarray(x, np.int32) for x in ids(10, 3, 7, 20, 5)]
  jobs = list(search_jobs(sources, SearchSettings(batch_size=2), DecodeConfig(), BUCKETS, 32,
                          None, None))
  assert [chunk for chunk, _ in jobs] == [[1, 4], [2, 0], [3]]  # shortest first
  for chunk, args in jobs:
    src = args["src_BS"]
    assert src.shape[1] == BUCKETS.length_for(max(len(sources[i]) for i in chunk))
    for row, i in enumerate(chunk):
      assert src[row, :len(sources[i])].tolist() == sources[i].tolist()
      assert (src[row, len(sources[i]):] == PAD_ID).all()
  last = jobs[-1][1]["src_BS"]
  assert last.shape[0] == LEAST_ROWS and last[1].tolist() == [EOS_ID] + [PAD_ID] * 31


def test_a_prefix_widens_the_step_limit_and_is_padded_per_row():
  sources = [np.asarray(x, np.int32) for x in ids(4, 4)]
  prefixes = [np.asarray([5, 6, 7], np.int32), np.asarray([], np.int32)]
  limits = DecodeConfig(max_len_a=0.0, max_len_b=2)
  (_, plain), = search_jobs(sources, SearchSettings(batch_size=2), limits, BUCKETS, 32, None,
                            None)
  (_, forced), = search_jobs(sources, SearchSettings(batch_size=2), limits, BUCKETS, 32, None,
                             prefixes)
  assert forced["prefix_BP"][0, :3].tolist() == [5, 6, 7] and (forced["prefix_BP"][1] == 0).all()
  assert forced["max_steps"] > plain["max_steps"]


def test_a_text_s_first_sentence_samples_with_the_text_s_own_key():
  base = jax.random.PRNGKey(3)
  single = np.asarray(sampling_keys(base, np.array([0, 1, 2])))
  pairs = np.asarray(sampling_keys(base, np.array([[0, 0], [1, 0], [1, 1]])))
  assert (pairs[0] == single[0]).all() and (pairs[1] == single[1]).all()
  assert not (pairs[2] == pairs[1]).all()


def test_sampling_keys_follow_the_inputs_not_their_batches():
  sources = [np.asarray(x, np.int32) for x in ids(9, 3, 5)]
  sampling = Sampling(temperature=1.0, seed=7)
  keys = {}
  for batch_size in (1, 2, 3):
    for chunk, args in search_jobs(sources, SearchSettings(batch_size=batch_size,
                                                           sampling=sampling),
                                   DecodeConfig(), BUCKETS, 32, None, None):
      for row, i in enumerate(chunk):
        keys.setdefault(i, set()).add(np.asarray(args["keys_B"][row]).tobytes())
  assert all(len(k) == 1 for k in keys.values())


def test_a_prefix_that_leaves_no_room_names_its_line():
  class Pieces:  # prefixes are targets
    def encode_target(self, texts):
      return [[4] * len(t.split()) for t in texts]
  with pytest.raises(ValueError, match="line 2: the prefix has 5 pieces"):
    encode_prefixes(Pieces(), ["a", "a b c d e"], [0, 1], max_len=6)


def test_forced_scores_come_back_in_the_input_order():
  sources = [np.asarray(x, np.int32) for x in ids(3, 9, 5)]
  targets = [np.asarray(x, np.int32) for x in ids(7, 2, 4)]
  seen = []

  def logprob(src, tgt):
    seen.append(src.shape[0])
    return -(tgt != PAD_ID).sum(axis=1).astype(np.float32)  # minus each target's length

  scores = forced_scores(logprob, sources, targets, rows=2, buckets=BUCKETS)
  assert [s.logprob for s in scores] == [-7.0, -2.0, -4.0]
  assert [s.tokens for s in scores] == [7, 2, 4] and seen == [2, 2]
