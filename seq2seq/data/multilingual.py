"""Several directions in one run (`data.directions`, Johnson et al. 2017).

Each direction's pairs are read and cleaned as a run of that pair alone reads them
(`DataConfig.for_direction`), its cleaning reported on its own. One SentencePiece model
is trained on a balanced sample of every language, with a control token per language
(`<2de>`) that never comes out of text. Each source starts with its target language's
token, so the model is told where to translate to and the decoder is the bilingual one.
Each epoch draws the pairs of each direction with a temperature (`draw_epoch`), so that
a small direction is not drowned by a large one.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from seq2seq.config import Config
from seq2seq.data import corpus, data_source
from seq2seq.data.corpus import EncodedCorpus, Ragged
from seq2seq.data.textfiles import DataError
from seq2seq.data.tokenizer import LANGUAGE_PIECES_FILE, Tokenizer
from seq2seq.runtime import write_atomic

if TYPE_CHECKING:
  import datasets

log = logging.getLogger(__name__)

# A direction with fewer cleaned training pairs than this is trained on, and reported as
# too few to learn from (in the log and data_report.json).
FEW_PAIRS = 100


def name(src: str, tgt: str) -> str:
  return f"{src}-{tgt}"


def direction_configs(cfg: Config) -> dict[str, Config]:
  """Each direction's config: the run's, reading that direction's pairs."""
  return {name(s, t): dataclasses.replace(cfg, data=cfg.data.for_direction(s, t))
          for s, t in cfg.data.direction_pairs()}


def with_token(ragged: Ragged, token: int) -> Ragged:
  """Every sequence of `ragged` with `token` before it."""
  lengths = ragged.lengths() + 1
  offsets = np.zeros(len(lengths) + 1, np.int64)
  np.cumsum(lengths, out=offsets[1:])
  flat = np.empty(int(offsets[-1]), np.int32)
  starts = offsets[:-1]
  flat[starts] = token
  keep = np.ones(len(flat), bool)
  keep[starts] = False
  flat[keep] = ragged.flat[:int(ragged.offsets[-1])]
  return Ragged(flat, offsets)


def concatenate(parts: list[EncodedCorpus], names: tuple[str, ...]) -> EncodedCorpus:
  """The directions' corpora one after the other, each pair labelled by its direction."""
  def joined(side: str) -> Ragged:
    raggeds = [getattr(p, side) for p in parts]
    flat = np.concatenate([np.asarray(r.flat[:int(r.offsets[-1])]) for r in raggeds])
    offsets = np.concatenate([[0], np.cumsum(np.concatenate([r.lengths() for r in raggeds]))])
    return Ragged(flat.astype(np.int32), offsets.astype(np.int64))
  direction = np.concatenate([np.full(len(p), k, np.int32) for k, p in enumerate(parts)])
  return EncodedCorpus(joined("src"), joined("tgt"), direction, names)


def language_tokens(tok: Tokenizer, languages) -> dict[str, int]:
  tokens = {lang: tok.language_token(lang) for lang in languages}
  if missing := [lang for lang, i in tokens.items() if i is None]:
    raise DataError(f"the SentencePiece model has no token for {', '.join(missing)}: it "
                    "was not trained for this run's directions")
  return tokens


def tokenizer_sample(splits: dict[str, "datasets.Dataset"], max_sentences: int, seed: int
                     ) -> list[str]:
  """The sentences SentencePiece trains on: as many of each language as of any other
  (`max_sentences` in all, drawn uniformly), each distinct sentence once (a reversed
  direction repeats its pair's sides)."""
  by_language: dict[str, dict[str, None]] = {}
  for direction, ds in splits.items():
    src, tgt = direction.split("-")
    for lang, side in ((src, "src"), (tgt, "tgt")):
      by_language.setdefault(lang, {}).update(dict.fromkeys(ds[side]))
  share = max(max_sentences // max(len(by_language), 1), 1)
  rng = np.random.default_rng([seed, 7])
  out = []
  for lang, sentences in by_language.items():
    texts = list(sentences)
    if len(texts) > share:
      texts = [texts[i] for i in np.sort(rng.choice(len(texts), share, replace=False))]
    log.info("SentencePiece sample: %d %s sentences", len(texts), lang)
    out += texts
  return out


def draw_weights(counts: np.ndarray, temperature: float) -> np.ndarray:
  """Each direction's share of an epoch: (n_k / N) ** (1 / T), normalised."""
  p = (counts / counts.sum()) ** (1.0 / temperature)
  return p / p.sum()


def draw_epoch(direction: np.ndarray, pairs: np.ndarray, temperature: float,
               rng: np.random.Generator) -> np.ndarray:
  """One epoch's pairs (indices from `pairs`, shuffled): as many as `pairs` holds, direction
  k's share `draw_weights`; a direction drawn more often than it has pairs repeats them
  (each once before any twice), one drawn less gives a different subset each epoch."""
  labels = direction[pairs]
  groups = [pairs[labels == k] for k in range(int(direction.max()) + 1)]
  counts = np.array([len(g) for g in groups], float)
  present = counts > 0
  shares = np.zeros(len(groups))
  shares[present] = draw_weights(counts[present], temperature)
  wanted = np.round(shares * len(pairs)).astype(int)
  out = []
  for group, m in zip(groups, wanted):
    if not len(group):
      continue
    whole, rest = divmod(int(m), len(group))
    out += [rng.permutation(group) for _ in range(whole)]
    out.append(rng.choice(group, rest, replace=False))
  return rng.permutation(np.concatenate(out)) if out else pairs[:0]


def check_sources(configs: dict[str, Config]) -> None:
  """Reads every direction's training and validation pairs before anything is trained:
  a missing or misaligned file fails the run at its start, naming the file."""
  for direction, cfg in configs.items():
    try:
      data_source.load_split(cfg.data, cfg.data.train_split)
    except DataError as e:
      raise DataError(f"direction {direction}: {e}") from None


def prepare(cfg: Config, workdir: Path
            ) -> tuple[Tokenizer, EncodedCorpus, EncodedCorpus, list[str]]:
  """`corpus.prepare` for a run of several directions: the tokenizer, the training and
  validation pairs of every direction (each source led by its target's token, each
  pair labelled with its direction), and the validation references."""
  configs = direction_configs(cfg)
  names = tuple(configs)
  check_sources(configs)
  splits = {d: functools.cache(functools.partial(corpus.training_split, c, workdir))
            for d, c in configs.items()}
  vocab_size = cfg.model.vocab_size
  ids = {d: data_source.corpus_id(c.data, c.data.train_split, vocab_size)
         for d, c in configs.items()}
  train_id = hashlib.sha256(json.dumps([ids, cfg.data.languages()]).encode()).hexdigest()[:16]
  tok = corpus.run_tokenizer(
      cfg, workdir, train_id,
      lambda: tokenizer_sample({d: s().train for d, s in splits.items()},
                               cfg.data.spm_max_sentences, cfg.data.seed),
      cfg.data.languages())
  tokens = language_tokens(tok, cfg.data.languages())
  cache = corpus.cache_dir(cfg, workdir)
  names_of = {d: corpus.cache_names(c, workdir, tok, ids[d]) for d, c in configs.items()}
  if not (workdir / corpus.REPORT_FILE).is_file() or any(
      not (cache / train_ids).is_dir()
      or (held_out and not (workdir / data_source.heldout_file(configs[d].data)).is_file())
      for d, (train_ids, _, held_out) in names_of.items()):
    reports = {d: corpus.report(splits[d](), c, workdir) for d, c in configs.items()}
    record = {"directions": {
        d: dict(r, too_few=r["kept"] < FEW_PAIRS) for d, r in reports.items()}}
    write_atomic(workdir / corpus.REPORT_FILE,
                 json.dumps(record, indent=1, ensure_ascii=False))
  trains, vals, refs = [], [], []
  for direction, c in configs.items():
    src, tgt = direction.split("-")
    train_ids, val_ids, _ = names_of[direction]
    train = corpus.encode_dataset(tok, None if (cache / train_ids).is_dir()
                                  else splits[direction]().train,
                                  cache / train_ids)
    if len(train) < FEW_PAIRS:
      log.warning("direction %s has %d training pairs: too few to learn it from; it is "
                  "trained all the same", direction, len(train))
    val_ds = data_source.load_split(c.data, c.data.val_split, workdir)
    val = corpus.encode_dataset(tok, val_ds, cache / val_ids)
    trains.append(EncodedCorpus(with_token(train.src, tokens[tgt]), train.tgt))
    vals.append(EncodedCorpus(with_token(val.src, tokens[tgt]), val.tgt))
    refs += list(val_ds["tgt"])
    log.info("direction %s: %d training pairs, %d validation pairs", direction,
             len(train), len(val))
  train, val = concatenate(trains, names), concatenate(vals, names)
  write_language_pieces(workdir, train, tok.vocab_size)
  log.info("data: %d directions, %d training pairs, %d validation pairs, %d pieces",
           len(names), len(train), len(val), tok.vocab_size)
  return tok, train, val, refs


def write_language_pieces(workdir: Path, train: EncodedCorpus, vocab_size: int) -> None:
  """WORKDIR/language_pieces.json: {language: the piece ids its training targets hold},
  what a zero-shot search into it may write (`DecodeConfig.zero_shot_pieces`)."""
  pieces: dict[str, np.ndarray] = {}
  owner = np.repeat(train.direction, train.tgt.lengths())  # each target id's direction
  flat = np.asarray(train.tgt.flat[:len(owner)])
  for k, direction in enumerate(train.names):
    tgt = direction.split("-")[1]
    seen = pieces.setdefault(tgt, np.zeros(vocab_size, bool))
    seen[flat[owner == k]] = True
  write_atomic(workdir / LANGUAGE_PIECES_FILE, json.dumps(
      {lang: np.flatnonzero(seen).tolist() for lang, seen in pieces.items()}))


def training_pairs(cfg: Config, workdir: Path | None = None) -> "datasets.Dataset":
  """Every direction's cleaned training pairs, one direction after the other (the order
  of `prepare`'s corpus), as `corpus.training_pairs` gives one pair's."""
  import datasets
  return datasets.concatenate_datasets([corpus.training_split(c, workdir).train
                                        for c in direction_configs(cfg).values()])

