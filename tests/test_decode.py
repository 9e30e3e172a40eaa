"""Search invariants: known best sequence, beam 1 == greedy, EOS, n-best order, limits,
cache == recomputation, batch-size independence."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import SAMPLE
from seq2seq import decode
from seq2seq.config import PRESETS
from seq2seq.input_pipeline import read_lines
from seq2seq.model import Model
from seq2seq.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.translator import Translator

A, B = 4, 5
V = 6


def _table_model(rows):
  """tokens_to_logits whose next-token distribution depends only on the last token."""
  table = np.full((V, V), -30.0, np.float32)
  for prev, dist in rows.items():
    for tok, p in dist.items():
      table[prev, tok] = np.log(p)
  table = jnp.asarray(table)
  return lambda ids, cache: (table[ids], cache)


# Greedy takes A (0.6) and then can only wander; beam search finds B EOS (0.4 * 0.99).
TRAP = {BOS_ID: {A: 0.6, B: 0.4}, A: {A: 0.34, B: 0.33, EOS_ID: 0.33},
        B: {EOS_ID: 0.99, A: 0.01}}


def _cache(rows):
  return {"dummy": jnp.zeros((rows, 1)), "index": jnp.zeros((), jnp.int32)}


def test_beam_search_finds_the_known_best_sequence():
  step = _table_model(TRAP)
  max_len = jnp.array([6])
  seqs, scores = decode.beam_search(step, _cache(2), max_len, 6, beam_size=2, alpha=0.0)
  assert seqs[0, 0, :2].tolist() == [B, EOS_ID] and (seqs[0, 0, 2:] == PAD_ID).all()
  np.testing.assert_allclose(scores[0, 0], np.log(0.4 * 0.99), rtol=1e-5)
  greedy, logprob = decode.greedy_search(step, _cache(1), max_len, 6)
  assert greedy[0, 0] == A  # greedy falls into the trap
  assert logprob[0] < scores[0, 0]


def test_hypotheses_stop_at_first_eos_and_respect_max_length():
  step = _table_model(TRAP)
  limits = jnp.array([3, 5, 6])
  seqs, scores = decode.beam_search(step, _cache(3 * 4), limits, 6, beam_size=4, alpha=0.6)
  for b, limit in enumerate(limits.tolist()):
    for w in range(4):
      seq = seqs[b, w].tolist()
      assert EOS_ID in seq
      end = seq.index(EOS_ID)
      assert end + 1 <= limit  # EOS included in the limit
      assert all(t == PAD_ID for t in seq[end + 1:])
      assert all(t not in (PAD_ID, EOS_ID) for t in seq[:end])
    assert list(scores[b]) == sorted(scores[b].tolist(), reverse=True)
  greedy, _ = decode.greedy_search(step, _cache(3), limits, 6)
  for b, limit in enumerate(limits.tolist()):
    assert greedy[b].tolist().index(EOS_ID) == limit - 1  # forced to end at the limit


def test_length_penalty_alpha_zero_is_raw_logprob():
  assert float(decode.length_penalty(jnp.asarray(7), 0.0)) == 1.0
  assert float(decode.length_penalty(jnp.asarray(1), 1.0)) == 1.0


@pytest.fixture(scope="module")
def random_tiny():
  model = Model(PRESETS["tiny"])
  src = jnp.array([[5, 6, 7, 8, 9, 3, 0, 0], [10, 11, 3, 0, 0, 0, 0, 0]])
  params = model.init(jax.random.PRNGKey(3), src, src)
  return model, params, src


def test_cached_greedy_equals_full_recomputation(random_tiny):
  model, params, src = random_tiny
  steps = 8
  ids, _ = decode.translate_ids(model, params, src, beam_size=1, alpha=0.0, max_len_a=0.0,
                                max_len_b=steps, max_steps=steps)
  # Naive greedy: re-run the whole teacher-forced decoder on the prefix at every step.
  prefix = jnp.full((2, 1), BOS_ID, jnp.int32)
  done = np.zeros(2, bool)
  out = []
  for t in range(steps):
    logits = model.apply(params, src, prefix)[:, -1]
    if t == steps - 1:
      logits = jnp.where(jnp.arange(logits.shape[-1]) == EOS_ID, logits, -1e9)
    nxt = np.where(done, PAD_ID, np.asarray(jnp.argmax(logits, -1)))
    out.append(nxt)
    done |= nxt == EOS_ID
    prefix = jnp.concatenate([prefix, jnp.asarray(nxt)[:, None]], axis=1)
  np.testing.assert_array_equal(np.asarray(ids[:, 0]), np.stack(out, 1))


def test_beam_one_equals_greedy(random_tiny):
  model, params, src = random_tiny
  kw = dict(alpha=0.0, max_len_a=1.0, max_len_b=4, max_steps=12)
  greedy, g_scores = decode.translate_ids(model, params, src, beam_size=1, **kw)
  beam1, b1_scores = decode.beam_search(
      lambda i, c: model.decode_step(params, i, c),
      model.init_cache(params, model.encode(params, src), src, 12),
      decode.output_limits(src, 1.0, 4, 12), 12, beam_size=1, alpha=0.0)
  np.testing.assert_array_equal(np.asarray(greedy[:, 0]), np.asarray(beam1[:, 0]))
  np.testing.assert_allclose(g_scores[:, 0], b1_scores[:, 0], rtol=1e-5)


def test_translations_do_not_depend_on_batch_size(trained_run):
  t = Translator.load(trained_run)
  lines = read_lines(SAMPLE / "test.en")[:70] + ["", "A dog."]
  for beam in (1, 3):
    one = t.translate(lines, beam_size=beam, batch_size=1)
    many = t.translate(lines, beam_size=beam, batch_size=64)
    assert one == many
    assert len(one) == len(lines) and one[-2] == ""


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


def test_translator_reuses_compiled_search(trained_run):
  t = Translator.load(trained_run)
  lines = read_lines(SAMPLE / "test.en")[:8]
  t.translate(lines, beam_size=2)
  compiled = t._search._cache_size()
  t.translate(lines[::-1], beam_size=2)
  assert t._search._cache_size() == compiled


@pytest.mark.parametrize("n,k", [(8000, 10), (1000, 6), (8001, 2), (40, 4)])
def test_top_k_rows_equals_lax_top_k(n, k):
  x = jax.random.normal(jax.random.PRNGKey(n), (7, n))
  values, index = decode.top_k_rows(x, k)
  ref_values, ref_index = jax.lax.top_k(x, k)
  np.testing.assert_array_equal(np.asarray(index), np.asarray(ref_index))
  np.testing.assert_array_equal(np.asarray(values), np.asarray(ref_values))
