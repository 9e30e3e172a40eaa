"""The searches over a model (seq2seq/decoding/model_search.py) on a small random model:
output limits, greedy's choices and score against forced decoding, the n-best of a beam,
and a forced prefix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.config import ModelConfig
from seq2seq.decoding.model_search import forced_logprob, max_steps_for, output_limits, search
from seq2seq.model.transformer import Model
from seq2seq.numerics import Numerics
from seq2seq.vocab import EOS_ID, PAD_ID

CFG = ModelConfig(vocab_size=40, d_model=32, num_heads=2, d_ff=64, encoder_layers=1,
                  decoder_layers=1, max_len=32, dropout=0.0)
SRC_BS = jnp.asarray([[5, 6, 7, 8, EOS_ID, PAD_ID], [9, 10, EOS_ID, PAD_ID, PAD_ID, PAD_ID]],
                     jnp.int32)
SETTINGS = dict(alpha=0.0, max_len_a=1.0, max_len_b=4, max_steps=12)


@pytest.fixture(scope="module")
def model_and_params():
  model = Model(CFG, Numerics())
  params = model.init(jax.random.PRNGKey(1), SRC_BS, SRC_BS)
  return model, params


def test_output_limits_are_a_times_the_source_plus_b_within_the_steps():
  assert output_limits(SRC_BS, 1.0, 4, 12).tolist() == [8, 6]  # 4 and 2 pieces, no EOS
  assert output_limits(SRC_BS, 3.0, 4, 12).tolist() == [12, 10]
  assert max_steps_for(6, 1.5, 10, 32) == 19 and max_steps_for(6, 10.0, 10, 32) == 32


def test_greedy_returns_the_log_probability_forced_decoding_gives_its_output(
    model_and_params):
  model, params = model_and_params
  seqs, scores = search(model, params, SRC_BS, beam_size=1, **SETTINGS)
  assert seqs.shape[:2] == (2, 1)
  for row in range(2):
    seq = [int(x) for x in np.asarray(seqs[row, 0])]
    # its pieces and EOS, or as many as the output limit allowed
    tgt = seq[:seq.index(EOS_ID) + 1] if EOS_ID in seq else [x for x in seq if x != PAD_ID]
    forced = forced_logprob(model, params, SRC_BS[row:row + 1], jnp.asarray([tgt], jnp.int32))
    assert float(forced[0]) == pytest.approx(float(scores[row, 0]), abs=1e-4)


def test_greedy_takes_the_most_likely_piece_at_every_step(model_and_params):
  model, params = model_and_params
  seqs, _ = search(model, params, SRC_BS[:1], beam_size=1, **SETTINGS)
  seq = [int(x) for x in np.asarray(seqs[0, 0])]
  out = seq[:seq.index(EOS_ID)] if EOS_ID in seq else seq  # special ids included
  full = out + [EOS_ID]
  tgt_in = jnp.asarray([[2] + full[:-1]], jnp.int32)  # BOS, then the output
  logp = np.asarray(model.log_probs(params, SRC_BS[:1], tgt_in)[0])
  top2 = np.sort(logp[:len(out)], axis=-1)[:, -2:]
  clear = top2[:, 1] - top2[:, 0] > 1e-3  # not a near-tie that rounding could turn
  assert clear.sum() >= len(out) // 2  # the control: most steps are clear
  assert (np.argmax(logp[:len(out)], axis=-1)[clear] == np.asarray(out)[clear]).all()


def test_beam_search_returns_its_n_best_in_order_of_score(model_and_params):
  model, params = model_and_params
  seqs, scores = search(model, params, SRC_BS, beam_size=3, nbest=3, **SETTINGS)
  assert seqs.shape[:2] == (2, 3) and scores.shape == (2, 3)
  assert (np.diff(np.asarray(scores), axis=1) <= 0).all()
  for row in range(2):  # three different hypotheses
    assert len({tuple(np.asarray(seqs[row, k]).tolist()) for k in range(3)}) == 3


def test_a_forced_prefix_starts_every_output(model_and_params):
  model, params = model_and_params
  prefix = jnp.asarray([[11, 12, 13], [14, PAD_ID, PAD_ID]], jnp.int32)
  for beam in (1, 3):
    seqs, _ = search(model, params, SRC_BS, beam_size=beam, prefix_BP=prefix, **SETTINGS)
    assert np.asarray(seqs[0, :, :3]).tolist() == [[11, 12, 13]] * seqs.shape[1]
    assert np.asarray(seqs[1, :, :1]).tolist() == [[14]] * seqs.shape[1]
