"""Subword sampling: the samplers draw from SentencePiece's distributions, and their draws
depend on the seed only, in this process or another."""

import collections
import math
import subprocess
import sys

import pytest
import sentencepiece as spm

from seq2seq.data import subword_sampling as ss
from seq2seq.data import textfiles, tokenizer
from seq2seq.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

from helpers import ROOT, SAMPLE

LINES = textfiles.read_lines(SAMPLE / "train.en") + textfiles.read_lines(SAMPLE / "train.de")
# Characters the model never saw (written as their bytes), blanks that normalisation
# folds, an empty line.
ODD = ["a \u2603x", "  Ünïcödé  \u2603\u2603 ok 日本語 ", "", "\t"]


@pytest.fixture(scope="module")
def tok():
  return tokenizer.train(LINES, vocab_size=400)


def _seqs(flat, offsets):
  return [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


def _score(tok, ids):
  """A segmentation's score as SentencePiece's lattice counts it: its pieces' scores,
  and min(score) - 10 for each unknown character (the first of its bytes)."""
  sp = tok.sp
  normal = [sp.get_score(i) for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i))]
  unknown = min(normal) - 10.0
  lead = lambda i: (int(sp.id_to_piece(i)[3:5], 16) & 0xC0) != 0x80
  return sum((unknown if lead(i) else 0.0) if sp.is_byte(i) else sp.get_score(i) for i in ids)


def _segmentations(tok, text):
  """Every segmentation of a normalised text into the model's pieces (no unknowns)."""
  pieces = {tok.sp.id_to_piece(i): i for i in range(tok.vocab_size)
            if not (tok.sp.is_control(i) or tok.sp.is_unknown(i) or tok.sp.is_byte(i))}
  if not text:
    return [()]
  return [(pieces[text[:n]],) + rest for n in range(1, len(text) + 1) if text[:n] in pieces
          for rest in _segmentations(tok, text[n:])]


def _count_segmentations(tok, text):
  count = [1] + [0] * len(text)
  for end in range(1, len(text) + 1):
    count[end] = sum(count[start] for start in range(end)
                     if tok.sp.piece_to_id(text[start:end]) != UNK_ID)
  return count[-1]


def _total_variation(counts, probs, n):
  return 0.5 * sum(abs(counts.get(k, 0) / n - probs.get(k, 0.0)) for k in set(counts) | set(probs))


def test_a_sharp_distribution_draws_sentencepieces_best_segmentation(tok):
  texts = LINES + ODD
  got = _seqs(*ss.LatticeSampler(tok, texts, alpha=1000.0).sample(0))
  best = tok.sp.encode(texts, out_type=int)
  assert got[-2:] == best[-2:] == [[], []]
  assert any(tok.sp.is_byte(i) for i in got[-4])  # unknown characters as their bytes
  differ = [i for i in range(len(texts)) if got[i] != best[i]]
  assert len(differ) < len(texts) // 100
  for i in differ:  # only where two segmentations score the same
    assert _score(tok, got[i]) == pytest.approx(_score(tok, best[i]), abs=1e-4)


def test_draws_follow_the_unigram_distribution_as_sentencepieces_do(tok):
  alpha, n = 0.5, 20_000
  words = {w for line in LINES for w in line.split() if len(w) < 10}
  word = max(sorted(words), key=lambda w: _count_segmentations(tok, tok.sp.normalize(w)))
  exact = {s: math.exp(alpha * _score(tok, s)) for s in _segmentations(tok, tok.sp.normalize(word))}
  assert len(exact) >= 8, word
  total = sum(exact.values())
  exact = {s: p / total for s, p in exact.items()}
  ours = collections.Counter(map(tuple, _seqs(*ss.LatticeSampler(tok, [word] * n, alpha).sample(1))))
  spm.set_random_generator_seed(1)
  theirs = collections.Counter(map(tuple, tok.sp.encode(
      [word] * n, out_type=int, enable_sampling=True, alpha=alpha, nbest_size=-1)))
  assert _total_variation(ours, exact, n) < 0.02
  assert _total_variation(theirs, exact, n) < 0.02


def test_nbest_draws_among_sentencepieces_n_best_as_it_does(tok):
  alpha, nbest, n = 0.5, 4, 20_000
  text = LINES[0]
  candidates = [tuple(c) for c in tok.sp.nbest_encode(text, nbest_size=nbest, out_type=int)]
  weights = {c: math.exp(alpha * _score(tok, c)) for c in candidates}
  exact = {c: w / sum(weights.values()) for c, w in weights.items()}
  ours = collections.Counter(map(tuple, _seqs(*ss.NBestSampler(tok, [text] * n, alpha, nbest).sample(1))))
  assert set(ours) <= set(candidates) and len(ours) == nbest
  spm.set_random_generator_seed(1)
  theirs = collections.Counter(map(tuple, tok.sp.encode(
      [text] * n, out_type=int, enable_sampling=True, alpha=alpha, nbest_size=nbest)))
  assert _total_variation(ours, exact, n) < 0.02
  assert _total_variation(theirs, exact, n) < 0.02


def test_without_byte_fallback_a_run_of_unknown_characters_is_one_unk(tmp_path):
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(LINES), model_prefix=str(tmp_path / "m"), vocab_size=150,
      pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, byte_fallback=False,
      minloglevel=2)
  tok = tokenizer.Tokenizer.load(tmp_path / "m.model")
  texts = ODD + LINES[:50]
  got = _seqs(*ss.LatticeSampler(tok, texts, alpha=1000.0).sample(0))
  assert got[:4] == tok.sp.encode(texts[:4], out_type=int)
  assert UNK_ID in got[1] and (UNK_ID, UNK_ID) not in zip(got[1], got[1][1:])


@pytest.mark.parametrize("nbest", [-1, 3])
def test_each_seed_gives_its_own_draw_and_the_same_one_every_time(tok, nbest):
  make = lambda: ss.make_sampler(tok, LINES + ODD, 0.1, nbest, "unigram")
  a, b = make(), make()
  first = _seqs(*a.sample(5))
  assert _seqs(*a.sample(6)) != first
  assert _seqs(*b.sample(5)) == first == _seqs(*a.sample(5))
  assert tok.decode(first) == tok.decode(tok.encode(LINES + ODD))
  assert first[-2:] == [[], []]


_SAMPLE_IN_A_PROCESS = """
import hashlib, sys
from seq2seq.data import subword_sampling, tokenizer
from seq2seq.data.textfiles import read_lines
tok = tokenizer.Tokenizer(open(sys.argv[1], "rb").read())
sampler = subword_sampling.make_sampler(tok, read_lines(sys.argv[2]), 0.1, int(sys.argv[3]),
                                        "unigram")
flat, offsets = sampler.sample(7)
print(hashlib.sha256(flat.tobytes() + offsets.tobytes()).hexdigest())
"""


@pytest.mark.parametrize("nbest", [-1, 3])
def test_another_process_draws_the_same_pieces(tok, tmp_path, nbest):
  """What a resumed run and every process of a cluster rely on (SentencePiece's own
  sampling gives other pieces in each process)."""
  model = tmp_path / "spm.model"
  model.write_bytes(tok.model_proto)
  run = lambda: subprocess.run(
      [sys.executable, "-c", _SAMPLE_IN_A_PROCESS, str(model), str(SAMPLE / "train.en"),
       str(nbest)], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
  first, second = run(), run()
  assert first and first == second


def test_a_model_whose_pieces_span_words_is_refused(tmp_path):
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(LINES), model_prefix=str(tmp_path / "m"), vocab_size=150,
      pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
      split_by_whitespace=False, minloglevel=2)
  tok = tokenizer.Tokenizer.load(tmp_path / "m.model")
  with pytest.raises(ss.UnsupportedModelError, match="never span two words"):
    ss.LatticeSampler(tok, LINES, 0.1)
