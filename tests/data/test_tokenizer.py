"""SentencePiece training, special ids, round trips and reuse rules."""

import pytest

from seq2seq import vocab
from seq2seq.data import tokenizer
from seq2seq.data.textfiles import read_lines

from helpers import SAMPLE


@pytest.fixture
def multi30k_tok(multi30k_tokenizer):
  return multi30k_tokenizer


def test_special_ids_are_the_vocab_modules(multi30k_tok):
  sp = multi30k_tok.sp
  ids = [sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()]
  assert ids == [vocab.PAD_ID, vocab.UNK_ID, vocab.BOS_ID, vocab.EOS_ID]
  assert multi30k_tok.vocab_size == 8000


def test_a_foreign_sentencepiece_model_is_refused(tmp_path):
  import io

  import sentencepiece as spm
  lines = read_lines(SAMPLE / "train.en") + read_lines(SAMPLE / "train.de")
  proto = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=proto,
                                 vocab_size=100, minloglevel=2)  # default ids: unk 0, bos 1
  with pytest.raises(tokenizer.TokenizerMismatchError, match="not trained by seq2seq"):
    tokenizer.Tokenizer(proto.getvalue())


def test_round_trip_on_multi30k(multi30k_tok, multi30k_dir):
  lines = read_lines(multi30k_dir / "val.de.gz") + read_lines(multi30k_dir / "val.en.gz")
  decoded = multi30k_tok.decode(multi30k_tok.encode(lines))
  mismatches = [(a, b) for a, b in zip(lines, decoded) if multi30k_tok.normalize(a) != b]
  assert not mismatches, mismatches[:3]


def test_byte_fallback_leaves_no_unknown(multi30k_tok):
  text = ["Ein Hund 🐕 läuft über Ŝnee – 雪 \u2028 und ẞ."]
  ids = multi30k_tok.encode(text)[0]
  assert vocab.UNK_ID not in ids
  assert multi30k_tok.decode([ids])[0] == multi30k_tok.normalize(text[0])


def test_bpe_option():
  lines = read_lines(SAMPLE / "train.en") + read_lines(SAMPLE / "train.de")
  tok = tokenizer.train(lines, vocab_size=400, model_type="bpe")
  assert tok.decode(tok.encode(lines[:5])) == [tok.normalize(l) for l in lines[:5]]


def test_vocab_too_large_is_a_clear_error():
  with pytest.raises(ValueError, match="smaller model.vocab_size"):
    tokenizer.train(["a b c", "d e f"], vocab_size=5000)


def test_stored_model_is_reused_and_never_retrained_silently(tmp_path):
  lines = read_lines(SAMPLE / "train.en") + read_lines(SAMPLE / "train.de")
  calls = []

  def sentences():
    calls.append(1)
    return lines

  tok = tokenizer.load_or_train(tmp_path, "corpus-a", sentences, 400, "unigram", 10**6)
  again = tokenizer.load_or_train(tmp_path, "corpus-a", sentences, 400, "unigram", 10**6)
  assert len(calls) == 1 and again.model_proto == tok.model_proto
  with pytest.raises(tokenizer.TokenizerMismatchError, match="new --workdir"):
    tokenizer.load_or_train(tmp_path, "corpus-b", sentences, 400, "unigram", 10**6)
