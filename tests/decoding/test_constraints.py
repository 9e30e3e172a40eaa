"""Lexically constrained beam search (seq2seq/decoding/constraints.py) on a small random
model: every finished hypothesis holds one alternative of each constraint, contiguous;
a sentence's result does not depend on its batch or on the padding of the constraints;
the progress of a constraint follows its pieces."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.config import ModelConfig
from seq2seq.decoding import constraints
from seq2seq.decoding.model_search import search
from seq2seq.model.transformer import Model
from seq2seq.numerics import Numerics
from seq2seq.vocab import EOS_ID, PAD_ID

CFG = ModelConfig(vocab_size=40, d_model=32, num_heads=2, d_ff=64, encoder_layers=1,
                  decoder_layers=1, max_len=32, dropout=0.0)
SRC_BS = jnp.asarray([[5, 6, 7, 8, EOS_ID, PAD_ID], [9, 10, EOS_ID, PAD_ID, PAD_ID, PAD_ID],
                      [11, 12, 13, EOS_ID, PAD_ID, PAD_ID]], jnp.int32)
SETTINGS = dict(alpha=0.6, max_len_a=1.0, max_len_b=4, max_steps=20)
# the pieces that begin a word: the special ids and the even ones
WORD_START = jnp.asarray([True] * 4 + [i % 2 == 0 for i in range(4, 40)])  # even ids


def pad(constraints_per_sentence, c=None, a=None, length=None):
  """[B, C, A, L] pieces of each sentence's constraints (each a list of alternatives)."""
  c = c or max(1, max(len(x) for x in constraints_per_sentence))
  a = a or max(1, max((len(alts) for x in constraints_per_sentence for alts in x), default=1))
  length = length or max(1, max((len(p) for x in constraints_per_sentence for alts in x
                                 for p in alts), default=1))
  out = np.full((len(constraints_per_sentence), c, a, length), PAD_ID, np.int32)
  for b, cons in enumerate(constraints_per_sentence):
    for i, alts in enumerate(cons):
      for j, pieces in enumerate(alts):
        out[b, i, j, :len(pieces)] = pieces
  return jnp.asarray(out)


def ends_a_word(seq, pieces):
  """`pieces` occur in `seq` (cut at its EOS) followed by a word's start or the end."""
  seq = list(seq) + [EOS_ID]
  return any(seq[i:i + len(pieces)] == list(pieces) and bool(WORD_START[seq[i + len(pieces)]])
             for i in range(len(seq) - len(pieces)))


@pytest.fixture(scope="module")
def model_and_params():
  model = Model(CFG, Numerics())
  return model, model.init(jax.random.PRNGKey(1), SRC_BS, SRC_BS)


CONSTRAINTS = [[[[20, 21]], [[30], [31, 32]]],  # two constraints, the second of two forms
               [[[25, 26, 27]]],
               [[[33], [34]]]]


def test_every_finished_hypothesis_holds_its_constraints(model_and_params):
  model, params = model_and_params
  seqs, scores = search(model, params, SRC_BS, beam_size=4, nbest=4,
                        constraints_BCAL=pad(CONSTRAINTS), word_start_V=WORD_START, **SETTINGS)
  finished = np.asarray(scores) > -1e6
  assert finished[:, 0].all()  # every sentence found one
  for b, cons in enumerate(CONSTRAINTS):
    for k in np.flatnonzero(finished[b]):
      out = [int(x) for x in np.asarray(seqs[b, k])]
      out = out[:out.index(EOS_ID)] if EOS_ID in out else out
      for alternatives in cons:
        assert any(ends_a_word(out, alt) for alt in alternatives), (b, k, out, alternatives)


def test_a_sentence_alone_gets_what_it_gets_in_a_batch_and_padding_changes_nothing(
    model_and_params):
  model, params = model_and_params
  together = search(model, params, SRC_BS, beam_size=3, nbest=1,
                    constraints_BCAL=pad(CONSTRAINTS), word_start_V=WORD_START, **SETTINGS)
  for b in range(3):
    alone = search(model, params, SRC_BS[b:b + 1], beam_size=3, nbest=1,
                   constraints_BCAL=pad(CONSTRAINTS[b:b + 1], c=4, a=3, length=5),
                   word_start_V=WORD_START, **SETTINGS)
    np.testing.assert_array_equal(np.asarray(alone[0][0]), np.asarray(together[0][b]))
    assert float(alone[1][0, 0]) == float(together[1][b, 0])


def test_no_constraint_at_all_finds_what_beam_search_finds(model_and_params):
  """With every constraint empty the banks are one, and the search is beam search's."""
  model, params = model_and_params
  plain = search(model, params, SRC_BS, beam_size=3, nbest=1, **SETTINGS)
  empty = search(model, params, SRC_BS, beam_size=3, nbest=1,
                 constraints_BCAL=pad([[], [], []]), word_start_V=WORD_START, **SETTINGS)
  np.testing.assert_array_equal(np.asarray(plain[0][:, 0]), np.asarray(empty[0][:, 0]))


def test_progress_goes_on_restarts_and_is_met_where_a_word_begins():
  cons = pad([[[[4, 5, 6]], [[8]]]])
  lengths = constraints.constraint_lengths(cons, PAD_ID)
  progress = jnp.zeros((1, 1, 2, 1), jnp.int32)
  met = jnp.zeros((1, 1, 2), bool)
  seen = []
  # 4 5 4 5 6 | 9 (no word begins: 6 goes on into 9, the first is not met) 4 5 6 | 10
  # (a word begins: met) 8 | 3 (EOS: met)
  for token in (4, 5, 4, 5, 6, 9, 4, 5, 6, 10, 8, 3):
    progress, met = constraints.advance(cons, lengths, progress, met,
                                        jnp.asarray([[token]], jnp.int32), WORD_START)
    seen.append((int(progress[0, 0, 0, 0]), bool(met[0, 0, 0]), bool(met[0, 0, 1])))
  assert seen == [(1, False, False), (2, False, False), (1, False, False), (2, False, False),
                  (3, False, False), (0, False, False), (1, False, False), (2, False, False),
                  (3, False, False), (0, True, False), (0, True, False), (0, True, True)]


def test_the_banks_take_turns_best_first():
  scores = jnp.asarray([[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]])
  banks = jnp.asarray([[0, 0, 0, 1, 1, 2]])
  valid = jnp.ones((1, 6), bool)
  # turn 0: bank 2's best (-6), bank 1's (-4), bank 0's (-1); turn 1, fuller bank
  # first: bank 1's second (-5) before bank 0's (-2)
  picked = constraints.allocate(scores, banks, valid, 4, 2)
  assert np.asarray(picked[0]).tolist() == [0, 3, 4, 5]  # best score first
  valid = valid.at[0, 4].set(False)
  assert np.asarray(constraints.allocate(scores, banks, valid, 4, 2)[0]).tolist() == [0, 1, 3, 5]
