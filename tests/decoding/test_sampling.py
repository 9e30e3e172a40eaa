"""Sampling: the sampler's distribution, seeds, batch-size independence, limits to greedy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding import decode
from seq2seq.decoding.translator import Sampling, Translator

from conftest import run_cli
from helpers import SAMPLE

SOURCES = read_lines(SAMPLE / "test.en")[:40]


def draw(probs, n=4000, **kwargs):
  logp_BV = jnp.log(jnp.tile(jnp.asarray(probs, jnp.float32), (n, 1)))
  keys_B = jax.random.split(jax.random.PRNGKey(0), n)
  return np.asarray(decode.sampler(**kwargs)(logp_BV, jnp.int32(0), keys_B))


def test_sampler_follows_the_restricted_distribution():
  probs = [0.5, 0.3, 0.15, 0.05]
  counts = np.bincount(draw(probs, temperature=1.0), minlength=4) / 4000
  np.testing.assert_allclose(counts, probs, atol=0.03)
  top_k = np.bincount(draw(probs, temperature=1.0, top_k=2), minlength=4) / 4000
  np.testing.assert_allclose(top_k, [0.625, 0.375, 0, 0], atol=0.03)
  nucleus = np.bincount(draw(probs, temperature=1.0, top_p=0.75), minlength=4) / 4000
  np.testing.assert_allclose(nucleus, [0.625, 0.375, 0, 0], atol=0.03)  # 0.5 + 0.3 >= 0.75
  hot = np.bincount(draw(probs, temperature=2.0), minlength=4) / 4000
  flat = np.sqrt(probs) / np.sum(np.sqrt(probs))
  np.testing.assert_allclose(hot, flat, atol=0.03)
  assert set(draw(probs, temperature=0.0)) == {0}
  with pytest.raises(ValueError, match="top_p"):
    decode.sampler(1.0, top_p=0.0)


@pytest.fixture(scope="module")
def translator(trained_run):
  return Translator.load(trained_run)


def test_a_seed_gives_the_same_samples_whatever_the_batch_size(translator):
  s = Sampling(temperature=1.0, seed=7)
  a = translator.translate(SOURCES, sampling=s, batch_size=32)
  assert a == translator.translate(SOURCES, sampling=s, batch_size=32)
  assert a == translator.translate(SOURCES, sampling=s, batch_size=5)
  # A stream read in parts: the second half with first_index gives the same lines.
  assert a[20:] == translator.translate(SOURCES[20:], sampling=s, first_index=20)
  other = translator.translate(SOURCES, sampling=Sampling(temperature=1.5, seed=8))
  assert sum(x != y for x, y in zip(a, other)) >= 5


def test_sampling_limits_equal_greedy(translator):
  greedy = translator.translate(SOURCES, beam_size=1)
  assert translator.translate(SOURCES, sampling=Sampling(top_k=1, seed=3)) == greedy
  assert translator.translate(SOURCES, sampling=Sampling(temperature=0.0)) == greedy
  assert translator.translate(SOURCES, sampling=Sampling(top_p=1e-6, seed=4)) == greedy


def test_sampling_ignores_the_runs_beam_size(trained_run, translator):
  """A run saved with beam 4 (as the Multi30k recipe saves beam 5) samples one row per
  sentence, the same draws as a run saved with beam 1 (its search cache once had beam
  rows, and sampling failed with a shape error deep inside the model)."""
  s = Sampling(temperature=1.0, seed=2)
  wide = Translator.load(trained_run, beam_size=4)
  assert wide.translate(SOURCES, sampling=s) == translator.translate(SOURCES, sampling=s)


def test_a_new_seed_compiles_nothing(translator):
  """The seed reaches the search as keys, not as a compile-time setting: `nbest=N`
  samples once compiled a search per seed, and 32 of them ran XLA out of memory."""
  translator.translate(SOURCES, sampling=Sampling(temperature=1.0, seed=11))
  compiled = translator.search_programs
  translator.translate(SOURCES, nbest=3, sampling=Sampling(temperature=1.0, seed=12))
  assert translator.search_programs == compiled


def test_nbest_samples_are_scored_and_sorted(translator):
  hyps = translator.translate(SOURCES[:5], nbest=3, sampling=Sampling(temperature=1.2, seed=1))
  for options in hyps:
    assert len(options) == 3
    assert [h.score for h in options] == sorted((h.score for h in options), reverse=True)


def test_cli_sample_is_reproducible_and_usage_is_checked(trained_run):
  text = "".join(s + "\n" for s in SOURCES[:10]).encode()
  args = ["translate.py", "--workdir", trained_run, "--sample", "--seed", "3", "--top-p", "0.9"]
  one = run_cli(*args, input_bytes=text).stdout
  assert one == run_cli(*args, "--batch-size", "3", "--buffer", "1", input_bytes=text).stdout
  assert len(one.decode().splitlines()) == 10
  bad = run_cli("translate.py", "--workdir", trained_run, "--top-k", "5", input_bytes=text,
                check=False)
  assert bad.returncode == 2 and b"are for --sample" in bad.stderr
