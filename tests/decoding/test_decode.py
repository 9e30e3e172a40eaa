"""Search invariants: known best sequence, beam 1 == greedy, EOS, n-best order, limits,
cache == recomputation (the Translator's are in test_translator.py)."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.config import PRESETS
from seq2seq.decoding import decode
from seq2seq.decoding.model_search import output_limits, search
from seq2seq.model import kv_cache
from seq2seq.model.transformer import Model
from seq2seq.numerics import row_select
from seq2seq.vocab import BOS_ID, EOS_ID, PAD_ID

IDS = dict(bos_id=BOS_ID, eos_id=EOS_ID, pad_id=PAD_ID)

A, B = 4, 5
V = 6


def _table(rows):
  """[V, V] next-token logits from {previous token: {token: probability}}."""
  table = np.full((V, V), -30.0, np.float32)
  for prev, dist in rows.items():
    for tok, p in dist.items():
      table[prev, tok] = np.log(p)
  return jnp.asarray(table)


def _table_model(rows):
  """tokens_to_logits whose next-token distribution depends only on the last token."""
  table = _table(rows)
  return lambda ids, cache, source: (table[ids], cache)


# Greedy takes A (0.6) and then can only wander; beam search finds B EOS (0.4 * 0.99).
TRAP = {BOS_ID: {A: 0.6, B: 0.4}, A: {A: 0.34, B: 0.33, EOS_ID: 0.33},
        B: {EOS_ID: 0.99, A: 0.01}}


def _cache(rows):
  return {"dummy": jnp.zeros((rows, 1)), "index": jnp.zeros((), jnp.int32)}


def test_beam_search_finds_the_known_best_sequence():
  step = _table_model(TRAP)
  max_len = jnp.array([6])
  seqs, scores = decode.beam_search(step, _cache(2), max_len, 6, beam_size=2, alpha=0.0, **IDS)
  assert seqs[0, 0, :2].tolist() == [B, EOS_ID] and (seqs[0, 0, 2:] == PAD_ID).all()
  np.testing.assert_allclose(scores[0, 0], np.log(0.4 * 0.99), rtol=1e-5)
  greedy, logprob = decode.greedy_search(step, _cache(1), max_len, 6, **IDS)
  assert greedy[0, 0] == A  # greedy falls into the trap
  assert logprob[0] < scores[0, 0]


def test_hypotheses_stop_at_first_eos_and_respect_max_length():
  step = _table_model(TRAP)
  limits = jnp.array([3, 5, 6])
  seqs, scores = decode.beam_search(step, _cache(3 * 4), limits, 6, beam_size=4, alpha=0.6,
                                    **IDS)
  for b, limit in enumerate(limits.tolist()):
    for w in range(4):
      seq = seqs[b, w].tolist()
      assert EOS_ID in seq
      end = seq.index(EOS_ID)
      assert end + 1 <= limit  # EOS included in the limit
      assert all(t == PAD_ID for t in seq[end + 1:])
      assert all(t not in (PAD_ID, EOS_ID) for t in seq[:end])
    assert list(scores[b]) == sorted(scores[b].tolist(), reverse=True)
  greedy, _ = decode.greedy_search(step, _cache(3), limits, 6, **IDS)
  for b, limit in enumerate(limits.tolist()):
    assert greedy[b].tolist().index(EOS_ID) == limit - 1  # forced to end at the limit


def _counting(step, calls):
  """The step function, counting its calls (the number of positions searched)."""
  def counted(ids, cache, source):
    jax.debug.callback(lambda: calls.append(1))
    return step(ids, cache, source)
  return counted


def _recording_rows(step, calls):
  """The step function, recording the number of rows of every call."""
  def recorded(ids, cache, source):
    jax.debug.callback(calls.append, ids.shape[0])
    return step(ids, cache, source)
  return recorded


def test_beam_search_stops_once_the_requested_best_are_final():
  # After two steps "B EOS" (0.396) is finished and no live beam can beat it, while the
  # second-best ("A EOS", 0.198) is still beatable by "A A ...": nbest=1 stops there.
  steps = {}
  results = {}
  for nbest in (1, 2):
    calls = []
    results[nbest] = decode.beam_search(_counting(_table_model(TRAP), calls), _cache(2),
                                        jnp.array([6]), 6, beam_size=2, alpha=0.0,
                                        nbest=nbest, **IDS)
    jax.effects_barrier()
    steps[nbest] = len(calls)
  assert steps[1] < steps[2]
  np.testing.assert_array_equal(results[1][0][:, 0], results[2][0][:, 0])
  np.testing.assert_array_equal(results[1][1][:, 0], results[2][1][:, 0])
  with pytest.raises(ValueError, match="nbest must be between 1 and the beam size 2"):
    decode.beam_search(_table_model(TRAP), _cache(2), jnp.array([6]), 6, beam_size=2,
                       alpha=0.0, nbest=3, **IDS)


def test_current_length_stop_ends_sooner_and_can_miss_a_longer_best():
  # "EOS" (0.6) finishes at step 1. With alpha 3 the live "A" (0.4) bounded at the
  # current length (-0.92 / 1.59 = -0.58) cannot beat it (-0.51): "current" stops there.
  # Bounded at the limit (-0.92 / 6.16) it can: "exact" goes on and finds "A B EOS"
  # (0.4 * 0.99 * 0.99: -0.94 / 2.37 = -0.40), the best of a search to the limit.
  table = {BOS_ID: {EOS_ID: 0.6, A: 0.4}, A: {B: 0.99, EOS_ID: 0.01},
           B: {EOS_ID: 0.99, A: 0.01}}
  found, steps = {}, {}
  for alpha in (3.0, 0.0):
    for stop in decode.BEAM_STOPS:
      calls = []
      found[alpha, stop] = decode.beam_search(_counting(_table_model(table), calls), _cache(2),
                                              jnp.array([6]), 6, beam_size=2, alpha=alpha,
                                              nbest=1, stop=stop, **IDS)
      jax.effects_barrier()
      steps[alpha, stop] = len(calls)
  assert found[3.0, "exact"][0][0, 0, :3].tolist() == [A, B, EOS_ID]
  assert found[3.0, "current"][0][0, 0, 0] == EOS_ID
  assert steps[3.0, "current"] == 1 < steps[3.0, "exact"]
  # Without a length penalty the current length's bound is the limit's: the same search.
  for a, b in zip(found[0.0, "exact"], found[0.0, "current"]):
    np.testing.assert_array_equal(a, b)
  assert steps[0.0, "exact"] == steps[0.0, "current"]
  with pytest.raises(ValueError, match="beam stop must be one of exact, current"):
    decode.beam_search(_table_model(table), _cache(2), jnp.array([6]), 6, beam_size=2,
                       alpha=1.0, stop="soon", **IDS)


def test_a_sentence_whose_search_ended_waits_unchanged_for_its_batch():
  # Sentence 0 (STOP_SOON) is done after one step with stop="current"; sentence 1 loops
  # on A until its limit. Going on with sentence 0 would find "A B EOS"; it must not,
  # or its translation would depend on the sentences it is batched with.
  stop_soon = {BOS_ID: {EOS_ID: 0.6, A: 0.4}, A: {B: 0.99, EOS_ID: 0.01},
               B: {EOS_ID: 0.99, A: 0.01}}
  long = {BOS_ID: {A: 0.99, B: 0.01}, A: {A: 0.99, EOS_ID: 0.01}, B: {A: 0.99, EOS_ID: 0.01}}
  tables = jnp.stack([_table(stop_soon), _table(long)])

  def step(ids, cache, source_B):  # source: which table each sentence uses
    return tables[jnp.repeat(source_B, ids.shape[0] // source_B.shape[0]), ids], cache

  for stop in decode.BEAM_STOPS:
    alone = decode.beam_search(step, _cache(2), jnp.array([6]), 6, beam_size=2, alpha=3.0,
                               source=jnp.array([0]), nbest=1, stop=stop, **IDS)
    both = decode.beam_search(step, _cache(4), jnp.array([6, 6]), 6, beam_size=2, alpha=3.0,
                              source=jnp.array([0, 1]), nbest=1, stop=stop, **IDS)
    np.testing.assert_array_equal(both[0][0], alone[0][0])
    np.testing.assert_array_equal(both[1][0], alone[1][0])
    if stop != "count":  # which ends it once two of its hypotheses have
      assert both[0][1, 0, :6].tolist() == [A] * 5 + [EOS_ID]  # the other ran to its limit


def test_count_stop_ends_once_beam_size_hypotheses_have_ended():
  # Step 1 ends "EOS" (0.6), step 2 "A EOS" (0.004), step 3 "A B EOS" (0.392): with
  # beam 2 the search ends after two steps, with beam 3 after three, and only the
  # longer search finds what alpha 3 ranks first ("A B EOS", as "exact" does).
  table = {BOS_ID: {EOS_ID: 0.6, A: 0.4}, A: {B: 0.99, EOS_ID: 0.01},
           B: {EOS_ID: 0.99, A: 0.01}}
  for width, steps, best in ((2, 2, [EOS_ID]), (3, 3, [A, B, EOS_ID])):
    calls = []
    seqs, _ = decode.beam_search(_counting(_table_model(table), calls), _cache(width),
                                 jnp.array([6]), 6, beam_size=width, alpha=3.0, stop="count",
                                 **IDS)
    jax.effects_barrier()
    assert len(calls) == steps
    assert seqs[0, 0, :len(best)].tolist() == best


def test_a_batch_shrinks_as_its_sentences_finish_and_results_keep_their_rows():
  # Greedy falls into TRAP's A-loop and ends only when forced, at each row's limit: row
  # b runs limits[b] steps. With min_rows=1 the 8 rows shrink to a quarter, 2, once 6
  # are done (after step 6); 2 // 4 rows would be none, so the last two steps run 2 rows.
  limits = jnp.array([5, 1, 8, 3, 7, 2, 6, 4])
  results, sizes = {}, {}
  for min_rows in (0, 1):
    calls = []
    results[min_rows] = decode.greedy_search(_recording_rows(_table_model(TRAP), calls),
                                             _cache(8), limits, 8, min_rows=min_rows, **IDS)
    jax.effects_barrier()
    sizes[min_rows] = [int(n) for n in calls]
  assert sizes[0] == [8] * 8
  assert sizes[1] == [8] * 6 + [2] * 2
  seqs, logprob = results[1]
  np.testing.assert_array_equal(seqs, results[0][0])
  np.testing.assert_array_equal(logprob, results[0][1])
  ends = [seq.index(EOS_ID) + 1 for seq in np.asarray(seqs).tolist()]
  assert ends == limits.tolist()  # each row's result in its own row
  assert decode.shrink_sizes(64, 8) == [64, 16] and decode.shrink_sizes(64, 1) == [64, 16, 4, 1]
  assert decode.shrink_sizes(64, 0) == [64] and decode.shrink_sizes(6, 1) == [6, 1]


def test_length_penalty_is_gnmt_and_changes_the_winner():
  lengths = jnp.arange(1, 20)
  np.testing.assert_allclose(decode.length_penalty(lengths, 0.6),
                             ((5.0 + np.arange(1, 20)) / 6.0) ** 0.6, rtol=1e-6)
  np.testing.assert_array_equal(decode.length_penalty(lengths, 0.0), np.ones(19))
  # A short hypothesis (B EOS, p = 0.5 * 0.9) against a long one (A A A A EOS,
  # p = 0.5 * 0.6^3 * 0.4): raw log-probability picks the short one; a length penalty
  # with alpha 6 divides the long one's log-probability by 21.4, the short one's by 2.5,
  # and picks the long one.
  table = {BOS_ID: {A: 0.5, B: 0.5}, A: {A: 0.6, EOS_ID: 0.4}, B: {EOS_ID: 0.9, A: 0.1}}
  step = _table_model(table)
  limit = jnp.array([5])
  raw, _ = decode.beam_search(step, _cache(4), limit, 5, beam_size=4, alpha=0.0, **IDS)
  long, _ = decode.beam_search(step, _cache(4), limit, 5, beam_size=4, alpha=6.0, **IDS)
  assert raw[0, 0, :2].tolist() == [B, EOS_ID]
  assert long[0, 0].tolist() == [A, A, A, A, EOS_ID]


def test_beam_search_reorders_the_cache_with_its_beams():
  # A second-order model keeps the token before the last in its cache, so it scores
  # correctly only if the search moves each row's cache with its hypothesis. With a
  # beam wider than the number of possible prefixes the search is exhaustive: it must
  # find the best sequence that brute-force enumeration finds.
  import itertools
  rng = np.random.default_rng(0)
  logits = np.full((V, V, V), -1e4, np.float32)
  logits[:, :, [A, B, EOS_ID]] = rng.normal(size=(V, V, 3)) * 2
  logp = jax.nn.log_softmax(jnp.asarray(logits), axis=-1)

  def step(ids, cache, source):
    return logp[cache["prev"], ids], {"prev": ids, "index": cache["index"] + 1}

  limit = 4  # EOS included
  W = 16
  cache = {"prev": jnp.full((W,), BOS_ID, jnp.int32), "index": jnp.zeros((), jnp.int32)}
  seqs, scores = decode.beam_search(step, cache, jnp.array([limit]), limit, beam_size=W,
                                    alpha=0.0, **IDS)
  best, best_score = None, -np.inf
  for n in range(limit):
    for body in itertools.product([A, B], repeat=n):
      seq = (BOS_ID, BOS_ID) + body + (EOS_ID,)
      total = sum(float(logp[seq[k], seq[k + 1], seq[k + 2]]) for k in range(len(seq) - 2))
      if total > best_score:
        best, best_score = list(body) + [EOS_ID], total
  got = [t for t in seqs[0, 0].tolist() if t != PAD_ID]
  assert got == best
  np.testing.assert_allclose(float(scores[0, 0]), best_score, rtol=1e-5)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32])
def test_cache_reorder_is_an_exact_row_gather(dtype):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(12, 2, 16, 3)) * 10.0 ** rng.integers(-30, 30, (1, 1, 1, 3))
  x = jnp.asarray(x if dtype != jnp.int32 else x * 1e-25, dtype)
  parents = rng.integers(0, 12, 12)
  got = decode.gather_rows({"k": x, "index": jnp.int32(7)}, jnp.asarray(parents))
  np.testing.assert_array_equal(np.asarray(got["k"]), np.asarray(x)[parents])
  assert got["k"].dtype == x.dtype and int(got["index"]) == 7


def test_the_models_table_of_origins_gives_the_search_of_a_whole_reorder(random_tiny):
  model, params, src = random_tiny
  kw = dict(beam_size=3, alpha=1.0, max_len_a=2.0, max_len_b=9, max_steps=19)
  ids, scores = search(model, params, src, **kw)  # the model's reorder_cache: origins only
  whole = Model(PRESETS["tiny"])  # every position moved into its hypothesis' row at once
  whole.reorder_cache = lambda cache, parents: kv_cache.settled(
      kv_cache.reorder(cache, parents), 3)
  ids_whole, scores_whole = search(whole, params, src, **kw)
  np.testing.assert_array_equal(np.asarray(ids), np.asarray(ids_whole))
  np.testing.assert_array_equal(np.asarray(scores), np.asarray(scores_whole))
  cache, _ = model.init_cache(params, model.encode(params, src), src, max_len=19, beam_size=3)
  assert cache["layers"][0]["k"].shape[1] == 24  # whole blocks of 8 positions


@pytest.fixture(scope="module")
def random_tiny():
  model = Model(PRESETS["tiny"])
  src = jnp.array([[5, 6, 7, 8, 9, 3, 0, 0], [10, 11, 3, 0, 0, 0, 0, 0]])
  params = model.init(jax.random.PRNGKey(3), src, src)
  return model, params, src


def test_cached_greedy_equals_full_recomputation(random_tiny):
  model, params, src = random_tiny
  steps = 8
  ids, _ = search(model, params, src, beam_size=1, alpha=0.0, max_len_a=0.0,
                  max_len_b=steps, max_steps=steps)
  # Naive greedy: re-run the whole teacher-forced decoder on the prefix at every step.
  prefix = jnp.full((2, 1), BOS_ID, jnp.int32)
  done = np.zeros(2, bool)
  out = []
  for t in range(steps):
    logits = model.apply(params, src, prefix)[:, -1]
    if t == steps - 1:
      logits = jnp.where((jnp.arange(logits.shape[-1]) == EOS_ID)[None, :], logits, -1e9)
    nxt = np.where(done, PAD_ID, np.asarray(jnp.argmax(logits, -1)))
    out.append(nxt)
    done |= nxt == EOS_ID
    prefix = jnp.concatenate([prefix, jnp.asarray(nxt)[:, None]], axis=1)
  np.testing.assert_array_equal(np.asarray(ids[:, 0]), np.stack(out, 1))


def test_beam_one_equals_greedy(random_tiny):
  model, params, src = random_tiny
  kw = dict(alpha=0.0, max_len_a=1.0, max_len_b=4, max_steps=12)
  greedy, g_scores = search(model, params, src, beam_size=1, **kw)
  cache, source = model.init_cache(params, model.encode(params, src), src, 12)
  beam1, b1_scores = decode.beam_search(
      lambda i, c, s: model.decode_step(params, i, c, s), cache,
      output_limits(src, 1.0, 4, 12), 12, beam_size=1, alpha=0.0, source=source, **IDS)
  np.testing.assert_array_equal(np.asarray(greedy[:, 0]), np.asarray(beam1[:, 0]))
  np.testing.assert_allclose(g_scores[:, 0], b1_scores[:, 0], rtol=1e-5)


def only_eos_where(logits_RV, must_end_R, eos_id):
  """The reference: rows that must end may only choose EOS."""
  not_eos_1V = (jnp.arange(logits_RV.shape[-1]) != eos_id)[None, :]
  return jnp.where(must_end_R[:, None] & not_eos_1V, decode.NEG_INF, logits_RV)


def test_forced_tokens_equal_the_argmax_of_the_masked_logits():
  logits = jax.random.normal(jax.random.PRNGKey(0), (6, 50))
  # (a prefix leaves room for EOS: no row must end inside its prefix)
  must_end = jnp.array([False, False, False, True, False, False])
  prefix = jnp.array([[7, 9], [7, PAD_ID], [3, 4], [PAD_ID, PAD_ID], [8, PAD_ID],
                      [5, 6]], jnp.int32)
  for step in range(3):
    masked = decode.force_prefix(only_eos_where(logits, must_end, EOS_ID), prefix,
                                 jnp.asarray(step), PAD_ID)
    forced = decode.forced_tokens(row_select.argmax_rows(logits), must_end, prefix,
                                  jnp.asarray(step), EOS_ID, PAD_ID)
    np.testing.assert_array_equal(np.asarray(forced), np.argmax(np.asarray(masked), axis=-1))
