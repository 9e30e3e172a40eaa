"""Models trained elsewhere, imported as ordinary run directories.

    seq2seq-import SOURCE --workdir RUN

SOURCE is an OPUS-MT release in Marian's format (a folder or zip with the `.npz`), a
Hugging Face Marian checkpoint (a folder, or a Hub name read through the Hub's cache), a
CTranslate2 model directory, or an Argos package (`.argosmodel` or its folder).
`model_formats.py` reads each into one neutral form; this module maps it onto the Haiku
model and writes the run: `config.json`, the tokenizer, a 'best' checkpoint (step 0),
`imported.json` (where it came from, its license and reported scores) and the model card.
The run loads with the defaults (`Translator.load(RUN)`, `translate.py --workdir RUN`),
serves, fine-tunes (`train.init_from`) and exports like any other.

The vocabulary keeps the model's tokens and moves four of them to this package's special
ids (PAD 0, UNK 1, BOS 2, EOS 3; `seq2seq.vocab`). A special token the model has not (a
Marian model has no padding and no start token: its decoder starts from a zero vector)
gets a row of its own whose output bias is `vocab.CLOSED_BIAS`: the model never predicts
it, and every probability is the source model's. Target-language tokens (OPUS-MT's
`>>por<<`) become this package's language tokens (`<2pt>`), so the model's directions are
`Translator.directions`, `--tgt-lang` and the server's routes.

The source and target SentencePiece models are rewritten over the new ids (each keeps its
own pieces and scores; the other side's pieces are present but unused), so sources
segment as the source model does and targets as the target model does. A piece of the
source model missing from the vocabulary (6 of 32,000 in opus-mt-tc-big-en-pt) is one
`<unk>` to Marian; here the text around it segments into the pieces that are there.

A failed import leaves no run directory behind: everything is written into a sibling
folder, renamed into place at the end.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
from sentencepiece import sentencepiece_model_pb2

from seq2seq.config import SINUSOIDS, Config, ModelConfig
from seq2seq.data.tokenizer import LANGUAGE_TOKEN, Tokenizer, write_run_files
from seq2seq.model.layers import sinusoidal_positions
from seq2seq.rundir import checkpoint, hub, model_card, run_files
from seq2seq.rundir.model_formats import (
  DEFAULT_MAX_LEN,
  FormatError,
  Weights,
  read_ctranslate2,
  read_huggingface,
  read_marian,
)
from seq2seq.runtime import write_atomic
from seq2seq.vocab import BOS_ID, CLOSED_BIAS, EOS_ID, PAD_ID, UNK_ID

log = logging.getLogger(__name__)

IMPORTED_FILE = model_card.IMPORTED_FILE
FORMATS = ("marian", "huggingface", "ctranslate2", "argos")
# OPUS-MT's target-language tokens
OPUS_LANGUAGE_TOKEN = re.compile(r">>([a-z]{2,3}(?:_[A-Za-z0-9]{2,8})?)<<")


def detect(path: Path) -> str:
  """The format of a source folder (or file)."""
  if path.is_file() and path.suffix == ".argosmodel":
    return "argos"
  if (path / "metadata.json").is_file() and (path / "model").is_dir():
    return "argos"
  if (path / "model.bin").is_file():
    return "ctranslate2"
  if (path / "config.json").is_file() and ((path / "model.safetensors").is_file() or (
      path / "pytorch_model.bin").is_file()):
    return "huggingface"
  if (path / "decoder.yml").is_file() or list(path.glob("*.npz")):
    return "marian"
  raise FormatError(
      f"{path}: not a model this package imports. Expected an OPUS-MT release (decoder.yml "
      "and a Marian .npz), a Hugging Face Marian folder (config.json and model.safetensors "
      "or pytorch_model.bin), a CTranslate2 model (model.bin) or an Argos package "
      "(.argosmodel, or a folder with metadata.json and model/)")


# --------------------------------------------------------------------------- vocabulary


def language_code(code: str) -> str:
  """OPUS-MT's ISO 639-3 code as this package's (639-1 where there is one: por -> pt)."""
  import langcodes
  try:
    tag = langcodes.standardize_tag(code)
  except (ValueError, langcodes.tag_parser.LanguageTagError):
    return code
  return tag.replace("-", "_") if re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})?", tag) else code


@dataclasses.dataclass
class Vocabulary:
  """The model's tokens in this package's ids: `tokens[i]` was the model's id
  `source_ids[i]` (-1: a row of its own, closed); `kinds[i]`: its SentencePiece type."""

  tokens: list[str]
  source_ids: np.ndarray
  kinds: list[int]
  targets: list[str]  # the target languages of its language tokens, in the model's order


PIECE = sentencepiece_model_pb2.ModelProto.SentencePiece
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = (
    PIECE.NORMAL, PIECE.UNKNOWN, PIECE.CONTROL, PIECE.USER_DEFINED, PIECE.UNUSED, PIECE.BYTE)


def remap(w: Weights) -> Vocabulary:
  """The model's vocabulary with its special tokens at PAD/UNK/BOS/EOS."""
  index = {t: i for i, t in enumerate(w.vocab)}
  for token, what in ((w.eos, "end-of-sentence"), (w.unk, "unknown")):
    if token not in index:
      raise FormatError(f"the vocabulary has no {what} token {token!r}")
  pad = next((t for t in ("<pad>", "<blank>") if t in index), None)
  bos = w.bos if w.bos is not None else ("<s>" if "<s>" in index else None)
  special = {PAD_ID: (pad or "<pad>", index.get(pad, -1)), UNK_ID: (w.unk, index[w.unk]),
             BOS_ID: (bos or "<s>", index.get(bos, -1)), EOS_ID: (w.eos, index[w.eos])}
  taken = {i for _, i in special.values() if i >= 0}
  tokens = [special[i][0] for i in range(4)]
  source_ids = [special[i][1] for i in range(4)]
  kinds = [CONTROL, UNKNOWN, CONTROL, CONTROL]
  targets = []
  for i, token in enumerate(w.vocab):
    if i in taken:
      continue
    if m := OPUS_LANGUAGE_TOKEN.fullmatch(token):
      code = language_code(m.group(1))
      targets.append(code)
      token, kind = LANGUAGE_TOKEN.format(code), CONTROL
    else:
      kind = NORMAL
    tokens.append(token)
    source_ids.append(i)
    kinds.append(kind)
  if len(set(tokens)) != len(tokens):
    dup = next(t for t in tokens if tokens.count(t) > 1)
    raise FormatError(f"the vocabulary holds {dup!r} twice (after its language tokens were "
                      "renamed)")
  return Vocabulary(tokens, np.asarray(source_ids), kinds, targets)


def sentencepiece_over(spm_bytes: bytes, vocab: Vocabulary, what: str) -> bytes:
  """A SentencePiece model segmenting as `spm_bytes` does, over `vocab`'s ids: its own
  pieces keep their scores and types, the vocabulary's others are unused (decoded, never
  produced)."""
  model = sentencepiece_model_pb2.ModelProto()
  try:
    model.ParseFromString(spm_bytes)
  except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and others
    raise FormatError(f"{what} is not a SentencePiece model: {e}") from e
  if not model.pieces:
    raise FormatError(f"{what} is not a SentencePiece model (it has no pieces)")
  own = {p.piece: p for p in model.pieces}
  del model.pieces[:]
  for token, kind in zip(vocab.tokens, vocab.kinds):
    piece = model.pieces.add()
    piece.piece = token
    theirs = own.get(token)
    if kind != NORMAL:
      piece.type = kind
    elif theirs is not None and theirs.type in (NORMAL, USER_DEFINED, BYTE):
      piece.type, piece.score = theirs.type, theirs.score
    else:
      piece.type = UNUSED
  spec = model.trainer_spec
  spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID
  spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = vocab.tokens[:4]
  spec.vocab_size = len(vocab.tokens)
  return model.SerializeToString()


# ------------------------------------------------------------------------------ weights


def position_options(w: Weights, d: int) -> tuple[dict, dict[str, np.ndarray]]:
  """(the positional options, learned tables by side): a stored table that is one of the
  sinusoid conventions becomes that convention, any other a learned table."""
  if w.options.get("positional") == "rotary":  # nothing added to the embeddings
    return dict(positional="rotary", max_len=w.options.get("max_len", DEFAULT_MAX_LEN)), {}
  tables = {s: w.arrays.get(f"{s}/position_encodings/encodings") for s in ("encoder", "decoder")}
  if all(t is None for t in tables.values()):
    # none stored: the format's own convention (CTranslate2 computes tensor2tensor's)
    return dict(positional="sinusoidal", sinusoidal=w.options.get("sinusoidal", "tensor2tensor"),
                max_len=w.options.get("max_len", DEFAULT_MAX_LEN)), {}
  if any(t is None for t in tables.values()):
    raise FormatError("one side has a position table and the other none")
  rows = min(len(t) for t in tables.values())
  for convention in SINUSOIDS:
    reference = sinusoidal_positions(rows, d, convention)
    if all(np.allclose(t[:rows], reference, atol=1e-4) for t in tables.values()):
      return dict(positional="sinusoidal", sinusoidal=convention,
                  max_len=min(rows, w.options.get("max_len", rows))), {}
  return dict(positional="learned", max_len=rows), {s: t[:rows] for s, t in tables.items()}


def model_config(w: Weights, vocab: Vocabulary) -> tuple[ModelConfig, dict]:
  a = w.arrays
  rows = len(w.vocab)
  for key in ("encoder/embeddings_0/weight", "decoder/embeddings/weight",
              "decoder/projection/weight"):
    if a[key].shape[0] != rows:
      raise FormatError(f"the vocabulary has {rows:,} tokens but {key} has "
                        f"{a[key].shape[0]:,} rows: the vocabulary does not belong to "
                        "these weights")
  d = a["encoder/embeddings_0/weight"].shape[1]
  tied = (np.array_equal(a["encoder/embeddings_0/weight"], a["decoder/embeddings/weight"])
          and np.array_equal(a["decoder/embeddings/weight"], a["decoder/projection/weight"]))
  positions, tables = position_options(w, d)
  options = {k: v for k, v in w.options.items()
             if k not in ("max_len", "sinusoidal", "positional")}
  # a tied output layer needs a bias of its own for the source's, or for closed rows
  bias = "decoder/projection/bias" in a or bool(np.any(vocab.source_ids < 0))
  cfg = ModelConfig(vocab_size=len(vocab.tokens), tied_embeddings=tied,
                    output_bias=tied and bias, **options, **positions)
  return cfg, tables


def to_params(w: Weights, vocab: Vocabulary, cfg: ModelConfig, tables: dict) -> dict:
  """The Haiku parameter tree of `cfg` holding `w`'s weights in `vocab`'s ids."""
  a = w.arrays
  f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))
  ids = vocab.source_ids
  closed = ids < 0

  def rows(table):  # the model's rows in this package's ids, a closed row zero
    out = table[np.where(closed, 0, ids)].astype(np.float32)
    out[closed] = 0.0
    return out

  params: dict[str, dict[str, np.ndarray]] = {}
  p = lambda name: params.setdefault(f"transformer/~/{name}", {})

  def dense(name, weight, bias):  # CTranslate2's [out, in] -> Haiku's [in, out]
    p(name).update(w=f32(weight.T), b=f32(bias))

  def norm(name, key):
    p(f"{name}/ln").update(scale=f32(a[f"{key}/gamma"]), offset=f32(a[f"{key}/beta"]))

  def attention(name, key, fused_qkv):
    if fused_qkv:
      q, k, v = np.split(a[f"{key}/linear_0/weight"], 3)
      bq, bk, bv = np.split(a[f"{key}/linear_0/bias"], 3)
      out = 1
    else:
      q, bq = a[f"{key}/linear_0/weight"], a[f"{key}/linear_0/bias"]
      k, v = np.split(a[f"{key}/linear_1/weight"], 2)
      bk, bv = np.split(a[f"{key}/linear_1/bias"], 2)
      out = 2
    for part, weight, bias in (("query", q, bq), ("key", k, bk), ("value", v, bv)):
      dense(f"{name}/~/{part}", weight, bias)
    dense(f"{name}/~/out", a[f"{key}/linear_{out}/weight"], a[f"{key}/linear_{out}/bias"])

  def ffn(name, key):
    dense(f"{name}/~/feed_forward/~/inner", a[f"{key}/linear_0/weight"],
          a[f"{key}/linear_0/bias"])
    dense(f"{name}/~/feed_forward/~/outer", a[f"{key}/linear_1/weight"],
          a[f"{key}/linear_1/bias"])

  bias = a.get("decoder/projection/bias")
  bias = rows(bias[:, None])[:, 0] if bias is not None else np.zeros(len(ids), np.float32)
  bias[closed] = CLOSED_BIAS
  if cfg.tied_embeddings:
    p("shared_embedding")["embeddings"] = rows(a["decoder/embeddings/weight"])
    if cfg.output_bias:
      params["transformer"] = {"output_bias": f32(bias)}
  else:
    p("src_embedding")["embeddings"] = rows(a["encoder/embeddings_0/weight"])
    p("tgt_embedding")["embeddings"] = rows(a["decoder/embeddings/weight"])
    p("output_projection").update(w=f32(rows(a["decoder/projection/weight"]).T), b=f32(bias))
  if cfg.positional == "learned":
    names = (("shared_embedding", "decoder"),) if cfg.tied_embeddings else (
        ("src_embedding", "encoder"), ("tgt_embedding", "decoder"))
    if cfg.tied_embeddings and not np.array_equal(tables["encoder"], tables["decoder"]):
      raise FormatError("shared embeddings with different position tables per side are "
                        "not supported")
    for name, side in names:
      p(name)["positions"] = f32(tables[side])
  for side, prefix in (("encoder", "encoder_layer"), ("decoder", "decoder_layer")):
    for i in range(getattr(cfg, f"{side}_layers")):
      name, key = f"{prefix}_{i}", f"{side}/layer_{i}"
      attention(f"{name}/~/self_attention", f"{key}/self_attention", True)
      if side == "encoder":
        norm(f"{name}/~/res_attention/~/norm", f"{key}/self_attention/layer_norm")
      else:
        norm(f"{name}/~/res_self/~/norm", f"{key}/self_attention/layer_norm")
        attention(f"{name}/~/cross_attention", f"{key}/attention", False)
        norm(f"{name}/~/res_cross/~/norm", f"{key}/attention/layer_norm")
      ffn(name, f"{key}/ffn")
      norm(f"{name}/~/res_ff/~/norm", f"{key}/ffn/layer_norm")
    if cfg.pre_norm:
      norm(f"{side}_norm", f"{side}/layer_norm")
  return params


# ----------------------------------------------------------------------------- sources


def unpacked(path: Path, scratch: Path) -> Path:
  """A zip (an OPUS-MT release, an .argosmodel) unpacked into `scratch`; its one top
  folder where it has one. A folder is returned as it is."""
  if path.is_dir():
    return path
  if not path.exists():
    raise FormatError(f"{path} not found")
  try:
    with zipfile.ZipFile(path) as archive:
      archive.extractall(scratch)
  except zipfile.BadZipFile as e:
    raise FormatError(f"{path} is neither a folder nor a zip archive ({e})") from e
  entries = [p for p in scratch.iterdir() if not p.name.startswith(".")]
  return entries[0] if len(entries) == 1 and entries[0].is_dir() else scratch


def read(source: str | os.PathLike, scratch: Path, spm_model: str | None = None
         ) -> tuple[Weights, dict]:
  """(the model, where it came from) of any source kind."""
  # a Hub name (ORG/NAME) through the Hub's cache (HF_HUB_OFFLINE=1: the cache only)
  path = hub.resolve(source) if hub.is_repo_id(str(source)) else Path(source)
  folder = unpacked(path, scratch)
  kind = detect(folder)
  origin = {"format": kind, "source": str(source)}
  if kind == "marian":
    w = read_marian(folder)
  elif kind == "huggingface":
    w = read_huggingface(folder)
  elif kind == "ctranslate2":
    w = read_ctranslate2(folder, Path(spm_model) if spm_model else None)
  else:
    meta = json.loads((folder / "metadata.json").read_text("utf-8"))
    w = read_ctranslate2(folder / "model", Path(spm_model) if spm_model else None)
    w.format = "argos"
    w.languages = (meta["from_code"], meta["to_code"])
    w.card = {k: meta[k] for k in ("package_version", "argos_version", "license", "name",
                                   "description") if meta.get(k)}
  return w, origin


def import_model(source: str | os.PathLike, workdir: str | os.PathLike,
                 src_lang: str | None = None, tgt_lang: str | None = None,
                 spm_model: str | None = None, force: bool = False) -> Path:
  """Imports a model trained elsewhere as the run directory `workdir` (module doc)."""
  workdir = Path(workdir)
  if workdir.exists() and any(workdir.iterdir()) and not force:
    raise FormatError(f"{workdir} exists and is not empty (add --force to replace it)")
  workdir.parent.mkdir(parents=True, exist_ok=True)
  partial = workdir.with_name(f"{workdir.name}.importing-{os.getpid()}")
  try:
    with tempfile.TemporaryDirectory(prefix="seq2seq-import-") as scratch:
      w, origin = read(source, Path(scratch), spm_model)
      _write_run(w, origin, partial, src_lang, tgt_lang)
    if workdir.exists():
      shutil.rmtree(workdir)
    partial.rename(workdir)
  finally:
    if partial.exists():
      shutil.rmtree(partial, ignore_errors=True)
  log.info("imported %s (%s) into %s", source, origin["format"], workdir)
  return workdir


def _languages(w: Weights, vocab: Vocabulary, src_lang, tgt_lang) -> dict:
  """The run's data section: its languages (and directions, for target tokens)."""
  given = w.languages or (None, None)
  src = src_lang or given[0]
  tgt = tgt_lang or (vocab.targets[0] if vocab.targets else given[1])
  if not src or not tgt:
    raise FormatError("the model's files do not say its languages: give --src-lang and "
                      "--tgt-lang")
  src, tgt = language_code(src), language_code(tgt)
  directions = ",".join(f"{src}-{t}" for t in vocab.targets)
  return {"src_lang": src, "tgt_lang": tgt, "directions": directions}


def _write_run(w: Weights, origin: dict, workdir: Path, src_lang, tgt_lang) -> None:
  vocab = remap(w)
  model_cfg, tables = model_config(w, vocab)
  params = to_params(w, vocab, model_cfg, tables)
  cfg = Config.from_dict({"model": dataclasses.asdict(model_cfg),
                          "data": _languages(w, vocab, src_lang, tgt_lang),
                          "train": w.training, "decode": w.decoding})
  source = sentencepiece_over(w.source_spm, vocab, "the source SentencePiece model")
  target = (None if w.target_spm == w.source_spm else
            sentencepiece_over(w.target_spm, vocab, "the target SentencePiece model"))
  tok = Tokenizer(source, target, w.source_eos)
  workdir.mkdir(parents=True)
  run_files.save_config(workdir, cfg)
  write_run_files(workdir, tok, f"imported:{tok.fingerprint()}",
                  f"imported ({origin['format']})")
  record = dict(origin, **w.card, imported=time.strftime("%Y-%m-%d %H:%M:%S"),
                languages=list(cfg.data.languages()),
                closed_rows=int(np.sum(vocab.source_ids < 0)))
  write_atomic(workdir / IMPORTED_FILE, json.dumps(record, indent=2) + "\n")
  checkpoint.save_params(workdir, "best", 0, params, {"step": 0, "imported_from": origin})
  model_card.write(workdir)
