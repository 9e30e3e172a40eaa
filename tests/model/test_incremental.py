"""Incremental decoding (seq2seq/model/incremental.py) computes the teacher-forced model:
each step's logits equal the full model's at that position, for every architecture
option; the beams of a sentence share its encoder keys; a step computes its rotary
angles once."""

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_transformer import SRC, TGT, TINY, _init, _target_positions

from seq2seq.model.transformer import shift_right


@pytest.mark.parametrize("pre_norm,positional,tied", [
    (True, "sinusoidal", True), (False, "sinusoidal", False), (True, "learned", False),
    (False, "learned", True), (True, "rotary", True), (False, "rotary", False)])
def test_incremental_decoding_matches_forward(pre_norm, positional, tied):
  cfg = dataclasses.replace(TINY, pre_norm=pre_norm, activation="gelu", positional=positional,
                            tied_embeddings=tied)
  model, params = _init(cfg)
  tgt_in = shift_right(TGT)
  full = np.asarray(model.apply(params, SRC, tgt_in))
  cache, source = model.init_cache(params, model.encode(params, SRC), SRC, max_len=8)
  step = jax.jit(model.decode_step)
  steps = []
  for t in range(TGT.shape[1]):
    logits, cache = step(params, tgt_in[:, t], cache, source)
    steps.append(np.asarray(logits))
  real = _target_positions(TGT)
  np.testing.assert_allclose(np.stack(steps, 1)[real], full[real], atol=2e-5, rtol=1e-5)


def test_beam_rows_share_the_source_cache():
  # W hypotheses per sentence, each fed its own prefix, against one copy of the encoder
  # keys: every row must get the logits that decoding its prefix alone gives.
  W = 3
  model, params = _init()
  memory = model.encode(params, SRC)
  rng = np.random.default_rng(0)
  prefixes = rng.integers(4, TINY.vocab_size, (SRC.shape[0] * W, 4)).astype(np.int32)
  beam_cache, beam_source = model.init_cache(params, memory, SRC, max_len=6, beam_size=W)
  assert beam_source["layers"][0]["k"].shape[0] == SRC.shape[0]
  assert beam_cache["layers"][0]["k"].shape[0] == SRC.shape[0] * W
  repeated = jnp.repeat(SRC, W, axis=0)
  alone_cache, alone_source = model.init_cache(params, model.encode(params, repeated), repeated,
                                               max_len=6)
  for t in range(prefixes.shape[1]):
    beam_logits, beam_cache = model.decode_step(params, prefixes[:, t], beam_cache, beam_source)
    alone_logits, alone_cache = model.decode_step(params, prefixes[:, t], alone_cache,
                                                  alone_source)
    np.testing.assert_allclose(beam_logits, alone_logits, atol=1e-5, rtol=1e-5)


def _fused_writes(hlo: str, op: str) -> list[int]:
  """How many elements each fused computation of compiled `hlo` that holds `op` writes."""
  counts = []
  for header, body in re.findall(r"\n(%\S+ \([^\n]*\) -> [^\n]* \{)\n(.*?)\n\}", hlo, re.S):
    if f" {op}(" in body:
      dims = re.search(r"-> \(?\w+\[([\d,]*)\]", header).group(1)
      counts.append(math.prod(int(n) for n in dims.split(",") if n))
  return counts


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_decoding_step_computes_its_rotary_angles_once(beam_size):
  # XLA:CPU fuses an element-wise producer into each consumer and evaluates it again for
  # every element that consumer writes: without `Numerics.shared_table` each layer's
  # rotation of queries and keys computed the step's cosines for every row and head.
  cfg = dataclasses.replace(TINY, positional="rotary")
  model, params = _init(cfg)
  cache, source = model.init_cache(params, model.encode(params, SRC), SRC, max_len=8,
                                   beam_size=beam_size)
  ids = jnp.full((SRC.shape[0] * beam_size,), 5, jnp.int32)
  hlo = jax.jit(model.decode_step).lower(params, ids, cache, source).compile().as_text()
  written = _fused_writes(hlo, "cosine")
  assert written and max(written) <= cfg.head_dim // 2, written
