"""SentencePiece: train a joint source+target model, load it, encode and decode.

Models are trained with the special ids of `seq2seq.vocab` (PAD 0, UNK 1, BOS 2, EOS 3)
and refused if they have others.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import time
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm

from seq2seq.runtime import Progress, format_seconds, write_atomic
from seq2seq.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, cut_at_eos

MODEL_FILE = "spm.model"
# The token that asks a multilingual model for a target language (before the source):
# a SentencePiece control symbol, never produced from text and decoded to nothing.
LANGUAGE_TOKEN = "<2{}>"
# A model of several directions: {language: the piece ids its training targets hold}
# (`multilingual.write_language_pieces`), beside the model in the run.
LANGUAGE_PIECES_FILE = "language_pieces.json"
META_FILE = "spm.json"
# A model imported with separate source and target SentencePiece models over one id
# vocabulary (OPUS-MT's source.spm and target.spm; rundir/importing.py): MODEL_FILE
# segments sources, this one targets. Both hold every piece at the same id.
TARGET_MODEL_FILE = "spm.target.model"
# How an imported model reads its sources, where it differs from this package's models:
# {"source_eos": false} for a model trained on sources without EOS (OpenNMT-py's, which
# Argos packages hold). Absent: the defaults.
SETTINGS_FILE = "tokenizer.json"

log = logging.getLogger(__name__)


class TokenizerMismatchError(ValueError):
  """The tokenizer on disk does not belong to this corpus or this model."""


def _processor(proto: bytes) -> spm.SentencePieceProcessor:
  sp = spm.SentencePieceProcessor(model_proto=proto)
  ids = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
  if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
    raise TokenizerMismatchError(
        f"SentencePiece model has pad/unk/bos/eos ids {ids}, expected "
        f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; it was not trained by seq2seq")
  return sp


class Tokenizer:
  """A loaded SentencePiece model with the project's special ids: one model for both
  sides, or (an imported model) a source model and a target model over the same ids."""

  def __init__(self, model_proto: bytes, target_proto: bytes | None = None,
               source_eos: bool = True):
    """`source_eos`: sources end with EOS (every model trained here; SETTINGS_FILE)."""
    self.model_proto, self.target_proto = model_proto, target_proto
    self.source_eos = source_eos
    self.sp = _processor(model_proto)
    self.target_sp = self.sp if target_proto is None else _processor(target_proto)
    if self.target_sp.get_piece_size() != self.sp.get_piece_size():
      raise TokenizerMismatchError(
          f"the target SentencePiece model has {self.target_sp.get_piece_size()} pieces, "
          f"the source model {self.sp.get_piece_size()}: they must share one vocabulary")

  @classmethod
  def load(cls, path: str | os.PathLike) -> "Tokenizer":
    """MODEL_FILE at `path`, with TARGET_MODEL_FILE beside it where there is one."""
    target, settings = (Path(path).with_name(n) for n in (TARGET_MODEL_FILE, SETTINGS_FILE))
    options = json.loads(settings.read_text()) if settings.is_file() else {}
    return cls(Path(path).read_bytes(), target.read_bytes() if target.is_file() else None,
               source_eos=options.get("source_eos", True))

  def write(self, directory: str | os.PathLike) -> None:
    """MODEL_FILE (and TARGET_MODEL_FILE) into `directory`, the source model last."""
    directory = Path(directory)
    if not self.source_eos:
      write_atomic(directory / SETTINGS_FILE, json.dumps({"source_eos": False}) + "\n")
    if self.target_proto is not None:
      write_atomic(directory / TARGET_MODEL_FILE, self.target_proto)
    write_atomic(directory / MODEL_FILE, self.model_proto)

  @property
  def separate(self) -> bool:
    """Whether targets have a SentencePiece model of their own."""
    return self.target_proto is not None

  @property
  def vocab_size(self) -> int:
    return self.sp.get_piece_size()

  def encode(self, texts: Sequence[str]) -> list[list[int]]:
    """Pieces of each source text, without BOS/EOS."""
    return self.sp.encode(list(texts), out_type=int, num_threads=os.cpu_count() or 1)

  def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
    """Pieces of each target text (a reference, a prefix, a glossary term)."""
    return self.target_sp.encode(list(texts), out_type=int, num_threads=os.cpu_count() or 1)

  def sample_encode(self, texts: Sequence[str], alpha: float, nbest: int, seed: int
                    ) -> list[list[int]]:
    """Pieces of each text with a segmentation sampled by SentencePiece (subword
    regularization, Kudo 2018; BPE-dropout for a BPE model, `alpha` the drop rate):
    smaller `alpha` flattens a unigram model's distribution, `nbest` -1 samples from all
    segmentations. Within one process the same (texts, seed) give the same pieces: one
    thread, SentencePiece's generator seeded first (process-wide, so two threads must
    not sample at once). Another process gives other pieces for the same seed
    (sentencepiece 0.2.3), which is why training samples unigram models with
    `seq2seq.data.subword_sampling` instead."""
    spm.set_random_generator_seed(seed)
    return self.sp.encode(list(texts), out_type=int, enable_sampling=True, alpha=alpha,
                          nbest_size=nbest, num_threads=1)

  def decode(self, ids_batch: Iterable[Sequence[int]]) -> list[str]:
    """Text of each id sequence, cut at its first EOS; padding and BOS are ignored."""
    return [self.target_sp.decode(cut_at_eos(ids)) for ids in ids_batch]

  def pieces(self, ids: Sequence[int]) -> list[str]:
    return [self.sp.id_to_piece(int(i)) for i in ids]

  def language_token(self, lang: str) -> int | None:
    """The id of the token that asks for target language `lang`, None without one."""
    i = self.sp.piece_to_id(LANGUAGE_TOKEN.format(lang))
    return i if i != UNK_ID and self.sp.is_control(i) else None

  def normalize(self, text: str) -> str:
    """The text as SentencePiece normalises it (NFKC, whitespace folded and stripped)."""
    return self.sp.normalize(text).replace("\u2581", " ").strip()

  def fingerprint(self) -> str:
    return hashlib.sha256(self.model_proto + (self.target_proto or b"")).hexdigest()[:16]


def train(sentences: Iterable[str], vocab_size: int, model_type: str = "unigram",
          max_sentences: int = 2_000_000, languages: Sequence[str] = ()) -> Tokenizer:
  """Trains a SentencePiece model in memory on `sentences` (source and target together),
  with a language token (`LANGUAGE_TOKEN`) for each of `languages`."""
  if model_type not in ("unigram", "bpe"):
    raise ValueError(f"spm_model_type must be 'unigram' or 'bpe', got {model_type!r}")
  proto = io.BytesIO()
  reading = Progress("SentencePiece: reading sentences", unit="sentences")

  def counted():
    i = 0
    for i, sentence in enumerate(sentences, 1):
      if i % 10_000 == 0:
        reading.update(10_000)
      yield sentence
    reading.update(i % 10_000)
    reading.close()
    log.info("SentencePiece: training %d %s pieces", vocab_size, model_type)

  started = time.perf_counter()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=counted(), model_writer=proto,
        vocab_size=vocab_size, model_type=model_type,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        byte_fallback=True,  # every character is representable: no <unk> at all
        character_coverage=1.0,
        normalization_rule_name="nmt_nfkc",
        input_sentence_size=max_sentences, shuffle_input_sentence=True,
        control_symbols=[LANGUAGE_TOKEN.format(lang) for lang in languages] or None,
        num_threads=os.cpu_count() or 1, minloglevel=2)
  except RuntimeError as e:
    raise ValueError(f"SentencePiece training failed for vocab_size={vocab_size}: {e}. "
                     "A small corpus needs a smaller model.vocab_size.") from e
  log.info("SentencePiece: trained in %s", format_seconds(time.perf_counter() - started))
  return Tokenizer(proto.getvalue())


def write_run_files(workdir: Path, tok: Tokenizer, corpus_id: str, model_type: str) -> None:
  """A run's tokenizer files: `spm.vocab` (piece and score per id), META_FILE (what it was
  made from) and the model(s), last: MODEL_FILE's presence means the others are there."""
  vocab = "\n".join(f"{tok.sp.id_to_piece(i)}\t{tok.sp.get_score(i)}"
                    for i in range(tok.vocab_size))
  write_atomic(workdir / "spm.vocab", vocab + "\n")
  write_atomic(workdir / META_FILE, json.dumps(
      {"corpus_id": corpus_id, "vocab_size": tok.vocab_size, "model_type": model_type},
      indent=1))
  tok.write(workdir)


def load_or_train(workdir: str | os.PathLike, corpus_id: str, sentences_fn,
                  vocab_size: int, model_type: str, max_sentences: int,
                  given: str | os.PathLike = "", languages: Sequence[str] = ()) -> Tokenizer:
  """Loads WORKDIR/spm.model if it was trained on this corpus, else trains and stores it.

  Args:
    corpus_id: a string identifying the training corpus and tokenizer settings; a stored
      model trained on another corpus is refused rather than silently reused or replaced.
    sentences_fn: called only when training is needed; returns an iterable of sentences.
    given: an existing SentencePiece model to copy into the run instead of training one
      (data.spm_model, or the source run's model when fine-tuning).
    languages: a multilingual run's languages, each with its token (a given model must
      have them).
  """
  workdir = Path(workdir)
  model_path, meta_path = workdir / MODEL_FILE, workdir / META_FILE
  source = None
  if given:
    if not Path(given).is_file():
      raise TokenizerMismatchError(f"SentencePiece model {given} does not exist")
    source = Tokenizer.load(given)
    if missing := [lang for lang in languages if source.language_token(lang) is None]:
      raise TokenizerMismatchError(
          f"SentencePiece model {given} has no token for {', '.join(missing)} "
          f"({LANGUAGE_TOKEN.format(missing[0])}): it was not trained for these directions")
    corpus_id, model_type = f"given:{source.fingerprint()}", f"copied from {given}"
  if model_path.exists():
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if meta.get("corpus_id") != corpus_id:
      raise TokenizerMismatchError(
          f"{model_path} was trained on corpus {meta.get('corpus_id')!r}, but this run's "
          f"data and tokenizer settings give {corpus_id!r}. Use a new --workdir, or delete "
          f"{model_path} to retrain (checkpoints in that run would no longer match).")
    tok = Tokenizer.load(model_path)
    log.info("loaded tokenizer %s (%d pieces)", model_path, tok.vocab_size)
    return tok
  tok = source or train(sentences_fn(), vocab_size, model_type, max_sentences, languages)
  workdir.mkdir(parents=True, exist_ok=True)
  write_run_files(workdir, tok, corpus_id, model_type)
  log.info("%s tokenizer %s (%d pieces)", "copied" if source else "trained", model_path,
           tok.vocab_size)
  return tok
