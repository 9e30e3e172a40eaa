"""Training data of a run: the cleaned pairs, the held-out validation set, SentencePiece
ids (EOS appended) cached per run. `prepare` does all of it for a training run.

Where pairs come from is `seq2seq.data.data_source`; how they are cleaned, `seq2seq.data.cleaning`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from seq2seq.config import Config, DataConfig
from seq2seq.data import cleaning, data_source, subword_sampling, tokenizer
from seq2seq.data.textfiles import DataError
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.runtime import Progress, write_atomic
from seq2seq.vocab import EOS_ID

if TYPE_CHECKING:
  import datasets

log = logging.getLogger(__name__)

REPORT_FILE = "data_report.json"

# ----------------------------------------------------------------------------- encoding


class Ragged:
  """Variable-length id sequences stored as one flat int32 array and offsets: sequence i
  is `flat[offsets[i]:offsets[i + 1]]`. Loaded from a cache, both are memory-mapped, so a
  corpus of millions of pairs costs memory only for the pages a batch reads (the layout
  of fairseq's indexed data sets)."""

  def __init__(self, flat: np.ndarray, offsets: np.ndarray):
    self.flat, self.offsets = flat, offsets

  @classmethod
  def from_list(cls, seqs: Sequence[Sequence[int]]) -> "Ragged":
    offsets = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum([len(x) for x in seqs], out=offsets[1:])
    flat = np.concatenate(seqs).astype(np.int32) if len(seqs) else np.zeros(0, np.int32)
    return cls(flat, offsets)

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def __getitem__(self, i):
    if isinstance(i, slice):
      return [self[j] for j in range(*i.indices(len(self)))]
    i = int(i)
    if not -len(self) <= i < len(self):
      raise IndexError(f"sequence {i} of {len(self)}")
    i %= len(self)
    return self.flat[self.offsets[i]:self.offsets[i + 1]]

  def __iter__(self) -> Iterator[np.ndarray]:
    return (self[i] for i in range(len(self)))

  def lengths(self) -> np.ndarray:
    return np.diff(self.offsets)



@dataclasses.dataclass
class EncodedCorpus:
  """Token ids (EOS appended) of aligned source and target sentences; in a run of several
  directions, each pair's direction (an index into `names`)."""

  src: Ragged
  tgt: Ragged
  direction: np.ndarray | None = None
  names: tuple[str, ...] = ()

  def __len__(self):
    return len(self.src)

  def lengths(self) -> tuple[np.ndarray, np.ndarray]:
    return self.src.lengths(), self.tgt.lengths()


def with_eos(pieces: Sequence[list[int]]) -> list[np.ndarray]:
  return [np.array(ids + [EOS_ID], np.int32) for ids in pieces]


def encode_texts(tok: Tokenizer, texts: Sequence[str], target: bool = False
                 ) -> list[np.ndarray]:
  """Ids with EOS of `target` texts (`Tokenizer.encode_target`), or of source texts (with
  EOS unless the model reads sources without, `Tokenizer.source_eos`)."""
  if target:
    return with_eos(tok.encode_target(texts))
  if not tok.source_eos:
    return [np.array(ids, np.int32) for ids in tok.encode(texts)]
  return with_eos(tok.encode(texts))


ENCODE_BATCH = 20_000  # sentences per SentencePiece call while streaming a corpus


def encode_dataset(tok: Tokenizer, ds: datasets.Dataset, cache_path: Path | None = None
                   ) -> EncodedCorpus:
  """Encodes both columns in one streaming pass over the data set.

  With `cache_path` (a directory), the ids are written there once (`src.ids`,
  `src.offsets.npy`, the same for tgt; written to a temporary sibling and renamed when
  complete) and every later call, a resumed run or another process of a cluster,
  memory-maps them without a tokenizer or the text. Without it, the corpus is encoded in
  memory.
  """
  if cache_path is not None and cache_path.is_dir():
    return EncodedCorpus(*(_load_ragged(cache_path, side) for side in ("src", "tgt")))
  if cache_path is None:
    return EncodedCorpus(Ragged.from_list(encode_texts(tok, ds["src"])),
                         Ragged.from_list(encode_texts(tok, ds["tgt"], target=True)))
  tmp = cache_path.with_name(f"{cache_path.name}.tmp{os.getpid()}")
  tmp.mkdir(parents=True, exist_ok=True)
  lengths: dict[str, list[np.ndarray]] = {"src": [], "tgt": []}
  with (open(tmp / "src.ids", "wb") as src_file, open(tmp / "tgt.ids", "wb") as tgt_file,
        Progress("encoding into pieces", total=len(ds), unit="pairs") as progress):
    files = {"src": src_file, "tgt": tgt_file}
    for batch in ds.iter(batch_size=ENCODE_BATCH):
      for side, f in files.items():
        ids = encode_texts(tok, batch[side], target=side == "tgt")
        lengths[side].append(np.array([len(x) for x in ids], np.int64))
        f.write(np.concatenate(ids).astype("<i4").tobytes())
      progress.update(len(batch["src"]))
  for side, parts in lengths.items():
    offsets = np.zeros(sum(len(x) for x in parts) + 1, np.int64)
    np.cumsum(np.concatenate(parts), out=offsets[1:])
    np.save(tmp / f"{side}.offsets.npy", offsets)
  try:
    os.replace(tmp, cache_path)
  except OSError:  # another process finished the same cache first
    shutil.rmtree(tmp, ignore_errors=True)
  return encode_dataset(tok, ds, cache_path)


class SubwordSampler:
  """The training pairs segmented anew for each epoch (`data.sampling_alpha`): the
  corpus of epoch e is a pure function of (data.seed, e), in any process, so a resumed
  run and every process of a cluster see the same pieces (`seq2seq.data.subword_sampling`;
  BPE-dropout excepted, which SentencePiece draws)."""

  def __init__(self, tok: Tokenizer, ds: datasets.Dataset, cfg: DataConfig,
               encoded: EncodedCorpus | None = None):
    """`encoded`: the run's encoded pairs, whose sources' language tokens (several
    directions) lead each sampled source too."""
    self.cfg, self.source_eos = cfg, tok.source_eos
    if tok.separate:
      raise ValueError("data.sampling_alpha: subword sampling needs one SentencePiece model "
                       "for both sides; this run's tokenizer has a target model of its own "
                       "(an imported model): set data.sampling_alpha=0")
    make = lambda texts: subword_sampling.make_sampler(
        tok, texts, cfg.sampling_alpha, cfg.sampling_nbest, cfg.spm_model_type)
    self.src, self.tgt = make(list(ds["src"])), make(list(ds["tgt"]))
    self.direction, self.names, self.tokens = None, (), None
    if encoded is not None and encoded.direction is not None:
      self.direction, self.names = encoded.direction, encoded.names
      self.tokens = np.asarray(encoded.src.flat)[encoded.src.offsets[:-1]].astype(np.int32)

  def corpus(self, epoch: int) -> EncodedCorpus:
    seed = int(np.random.default_rng([self.cfg.seed, epoch, 11]).integers(2**31))
    return EncodedCorpus(_with_eos(*self.src.sample(seed), self.tokens, self.source_eos),
                         _with_eos(*self.tgt.sample(seed + 1)), self.direction, self.names)


def _with_eos(flat: np.ndarray, offsets: np.ndarray, first: np.ndarray | None = None,
              eos: bool = True) -> Ragged:
  """Sequences given as flat ids and offsets, each followed by EOS (unless not `eos`) and
  led by its id of `first`, when given."""
  lead = 0 if first is None else 1
  ends = offsets[1:] + np.arange(1, len(offsets)) * (int(eos) + lead)  # EOS and lead included
  out = np.full(int(ends[-1]) if len(ends) else 0, EOS_ID, np.int32)
  keep = np.ones(len(out), bool)
  if eos:
    keep[ends - 1] = False
  if first is not None:
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    out[starts], keep[starts] = first, False
  out[keep] = flat
  return Ragged(out, np.concatenate([[0], ends]).astype(np.int64))


def _load_ragged(directory: Path, side: str) -> Ragged:
  offsets = np.load(directory / f"{side}.offsets.npy", mmap_mode="r")
  path = directory / f"{side}.ids"
  if path.stat().st_size != 4 * int(offsets[-1]):
    raise DataError(f"{path} holds {path.stat().st_size // 4} ids but its offsets expect "
                    f"{int(offsets[-1])}: a damaged cache; delete {directory} to re-encode")
  flat = np.memmap(path, dtype="<i4", mode="r") if offsets[-1] else np.zeros(0, np.int32)
  return Ragged(flat, offsets)


def tokenizer_sample(ds: datasets.Dataset, max_sentences: int, seed: int) -> list[str]:
  """The sentences SentencePiece trains on: both sides of every pair, or of
  `max_sentences // 2` pairs drawn uniformly from the whole corpus (not its head)."""
  pairs = max(max_sentences // 2, 1)
  if len(ds) > pairs:
    rows = np.sort(np.random.default_rng([seed, 7]).choice(len(ds), pairs, replace=False))
    ds = ds.select(rows)
  return list(ds["src"]) + list(ds["tgt"])


def cache_dir(cfg: Config, workdir: Path) -> Path:
  return Path(cfg.data.cache_dir) if cfg.data.cache_dir else workdir / "cache"


@dataclasses.dataclass
class TrainingSplit:
  """The cleaned training pairs, and the validation pairs held out of them (None when the
  source has a validation split)."""

  train: datasets.Dataset
  heldout: datasets.Dataset | None
  report: cleaning.Report


def heldout_rows(pairs: int, cfg: DataConfig) -> np.ndarray:
  """Rows held out for validation: `heldout_pairs`, at most a tenth, drawn with the seed."""
  n = min(cfg.heldout_pairs, pairs // 10)
  if n == 0:
    raise DataError(f"no validation split, and {pairs} training pairs are too few to hold "
                    "out a tenth for validation: give data.val_path")
  return np.sort(np.random.default_rng([cfg.heldout_seed, 5]).permutation(pairs)[:n])


def training_split(cfg: Config, workdir: Path | None = None) -> TrainingSplit:
  """The training split, cleaned (reasons cached in the run's cache when `workdir` is
  given), less the pairs held out for validation when the source has no validation split."""
  data = cfg.data
  ds = data_source.load_split(data, data.train_split)
  source = data_source.split_path(data, data.train_split) or data.dir or data.hub
  cache = None
  if workdir is not None:
    raw_id = data_source.corpus_id(data, data.train_split, 0)
    cache = cache_dir(cfg, workdir) / f"clean-{raw_id}-{cleaning.settings_id(data)}"
  split = data.train_split + (f", {data.src_lang}-{data.tgt_lang}" if data.multilingual
                              else "")
  ds, report = cleaning.clean(ds, data, f"{source} ({split})", cache)
  if not len(ds):
    raise DataError(f"cleaning removed every training pair of {source}: "
                    f"{report.removed} (data.clean)")
  if data_source.has_split(data, data.val_split):
    return TrainingSplit(ds, None, report)
  held = heldout_rows(len(ds), data)
  keep = np.setdiff1d(np.arange(len(ds)), held)
  return TrainingSplit(ds.select(keep), ds.select(held), report)


def training_pairs(cfg: Config, workdir: Path | None = None) -> datasets.Dataset:
  """The pairs trained on: cleaned, the held-out validation pairs left out (a run of
  several directions: `multilingual.training_pairs`; either: `training_data`)."""
  one_pair(cfg)
  return training_split(cfg, workdir).train


def one_pair(cfg: Config) -> None:
  if cfg.data.multilingual:
    raise ValueError("a run of several directions (data.directions) reads its data with "
                     "seq2seq.data.training_data (or multilingual)")


def report(split: TrainingSplit, cfg: Config, workdir: Path) -> dict:
  """Logs what cleaning did, writes the held-out validation pairs (if any); returns
  the record data_report.json holds."""
  for line in split.report.lines():
    log.info("%s", line)
  record = json.loads(split.report.to_json())
  if split.heldout is not None:
    heldout = workdir / data_source.heldout_file(cfg.data)
    record["heldout"] = {"pairs": len(split.heldout), "seed": cfg.data.heldout_seed,
                         "file": str(heldout)}
    text = "".join(json.dumps({"src": s, "tgt": t}, ensure_ascii=False) + "\n"
                   for s, t in zip(split.heldout["src"], split.heldout["tgt"]))
    write_atomic(heldout, text)
    log.info("no %r split: %d cleaned training pairs held out for validation "
             "(data.heldout_pairs, data.heldout_seed=%d), in %s", cfg.data.val_split,
             len(split.heldout), cfg.data.heldout_seed, heldout)
  return record


def run_tokenizer(cfg: Config, workdir: Path, train_id: str, sample, languages=()
                  ) -> Tokenizer:
  """The run's tokenizer: trained on `sample()` (or given: data.spm_model, the source
  run's with train.init_from), stored in the run, checked against model.vocab_size."""
  vocab_size = cfg.model.vocab_size
  given = cfg.data.spm_model
  if cfg.train.init_from:
    given = str(Path(cfg.train.init_from) / tokenizer.MODEL_FILE)
    if cfg.data.spm_model and Path(cfg.data.spm_model).resolve() != Path(given).resolve():
      raise tokenizer.TokenizerMismatchError(
          f"data.spm_model={cfg.data.spm_model} differs from the SentencePiece model of "
          f"train.init_from ({given}); a fine-tuned model keeps its source's vocabulary")
  tok = tokenizer.load_or_train(workdir, train_id, sample, vocab_size,
                                cfg.data.spm_model_type, cfg.data.spm_max_sentences, given,
                                languages)
  if tok.vocab_size != vocab_size:
    raise tokenizer.TokenizerMismatchError(
        f"tokenizer has {tok.vocab_size} pieces but model.vocab_size={vocab_size}")
  return tok


def cache_names(cfg: Config, workdir: Path, tok: Tokenizer, train_id: str
                ) -> tuple[str, str, bool]:
  """The cache folders of the encoded training and validation pairs, and whether the
  validation pairs are held out of the training split."""
  held_out = not data_source.has_split(cfg.data, cfg.data.val_split)
  settings = cleaning.settings_id(cfg.data) + (
      f"-h{cfg.data.heldout_pairs}s{cfg.data.heldout_seed}" if held_out else "")
  val_id = (data_source.corpus_id(cfg.data, cfg.data.val_split, cfg.model.vocab_size)
            if not held_out else f"heldout-{train_id}-{settings}")
  return (f"{cfg.data.train_split}-{train_id}-{settings}-{tok.fingerprint()}",
          f"{cfg.data.val_split}-{val_id}-{tok.fingerprint()}", held_out)


def prepare(cfg: Config, workdir: Path
            ) -> tuple[Tokenizer, EncodedCorpus, EncodedCorpus, list[str]]:
  """A training run's tokenizer (trained or reused), encoded training and validation
  corpora, and validation references (`multilingual.prepare` for several directions;
  either: `training_data.prepare`).

  The training text is read only when the tokenizer or the encoded ids are not cached
  yet: a resumed run, or a process that joins after process 0 prepared the data, maps
  the ids from the run's cache."""
  one_pair(cfg)
  split = functools.cache(lambda: training_split(cfg, workdir))
  train_id = data_source.corpus_id(cfg.data, cfg.data.train_split, cfg.model.vocab_size)
  tok = run_tokenizer(cfg, workdir, train_id, lambda: tokenizer_sample(
      split().train, cfg.data.spm_max_sentences, cfg.data.seed))
  cache = cache_dir(cfg, workdir)
  train_ids, val_ids, held_out = cache_names(cfg, workdir, tok, train_id)
  if not (cache / train_ids).is_dir() or not (workdir / REPORT_FILE).is_file() or (
      held_out and not (workdir / data_source.heldout_file(cfg.data)).is_file()):
    write_atomic(workdir / REPORT_FILE, json.dumps(report(split(), cfg, workdir), indent=1,
                                                   ensure_ascii=False))
  train = encode_dataset(tok, None if (cache / train_ids).is_dir() else split().train,
                         cache / train_ids)
  val_ds = data_source.load_split(cfg.data, cfg.data.val_split, workdir)
  val = encode_dataset(tok, val_ds, cache / val_ids)
  log.info("data: %d training pairs, %d validation pairs, %d pieces",
           len(train), len(val), tok.vocab_size)
  return tok, train, val, list(val_ds["tgt"])
