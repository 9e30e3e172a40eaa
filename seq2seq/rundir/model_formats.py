"""Readers of the formats translation models trained elsewhere come in, each into one
neutral form (`Weights`): the model in CTranslate2's layout (its variable names, weights
`[out, in]`), its options as `ModelConfig` fields, its vocabulary by id, and its
SentencePiece models. `importing.py` turns that form into a run directory.

- `read_marian`: an OPUS-MT release in Marian's format (the model `.npz` with its
  `special:model.yml`, `decoder.yml`, the `vocab.yml` files, `source.spm`, `target.spm`);
  the names and transposes are those of CTranslate2's `MarianConverter`.
- `read_huggingface`: a Hugging Face Marian checkpoint (`config.json`, `model.safetensors`
  or `pytorch_model.bin`, read without torch; `vocab.json`, `source.spm`, `target.spm`).
- `read_ctranslate2`: a CTranslate2 model directory (`model.bin` of any quantization,
  dequantized; `config.json`; the vocabularies), with the SentencePiece model beside it
  (an Argos package's `sentencepiece.model`, an export's `spm.model`).

Every refusal names the file and what was expected (`FormatError`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

DEFAULT_MAX_LEN = 512  # positions of a model whose source does not say


class FormatError(ValueError):
  """A model that cannot be read, or an architecture this package does not compute."""


@dataclasses.dataclass
class Weights:
  """A model in CTranslate2's layout, whatever format it was read from."""

  format: str  # "marian", "huggingface" or "ctranslate2"
  arrays: dict[str, np.ndarray]  # CTranslate2 variable names; weights [out, in], float32
  options: dict[str, Any]  # ModelConfig fields the format fixes (layers, norm, activation, ...)
  vocab: list[str]  # the model's tokens by id (the rows of its embeddings)
  eos: str  # end-of-sentence token
  unk: str  # unknown token
  bos: str | None  # a start token of the vocabulary (OpenNMT's <s>), None for Marian's
  source_spm: bytes  # SentencePiece model of the sources
  target_spm: bytes  # ... and of the targets (the same bytes for a joint model)
  source_eos: bool = True  # sources end with the end-of-sentence token
  languages: tuple[str, str] | None = None  # (source, target) where the files say
  card: dict[str, Any] = dataclasses.field(default_factory=dict)  # license, name, scores
  training: dict[str, Any] = dataclasses.field(default_factory=dict)  # TrainConfig fields known
  decoding: dict[str, Any] = dataclasses.field(default_factory=dict)  # DecodeConfig fields known


def _read(path: Path, what: str) -> bytes:
  if not path.is_file():
    raise FormatError(f"{path} not found: {what}")
  return path.read_bytes()


# ----------------------------------------------------------------------------- Marian


ACTIVATIONS = {"relu": "relu", "swish": "swish", "gelu": "gelu_sigmoid"}  # Marian's gelu


def marian_vocab(path: Path) -> list[str]:
  """A Marian `vocab.yml` (token: id per line), tokens by id. Parsed line by line as
  CTranslate2 does: YAML readers drop some of these keys."""
  entries: dict[int, str] = {}
  token = None
  for number, line in enumerate(_read(path, "the vocabulary").decode("utf-8").splitlines(), 1):
    if not line:
      continue
    if line.startswith("? "):  # a complex key: the token, its id on the next line
      token = line[2:]
      continue
    if token is not None:
      value = line[2:]
    else:
      if ":" not in line:
        raise FormatError(f"{path}, line {number}: expected 'token: id', got {line!r}")
      token, value = line.rsplit(":", 1)
    if token.startswith('"') and token.endswith('"'):
      token = re.sub(r"\\([^x])", r"\1", token)[1:-1]
      if token.startswith("\\x"):
        token = chr(int(token[2:], 16))
    elif token.startswith("'") and token.endswith("'"):
      token = token[1:-1].replace("''", "'")
    try:
      entries[int(value.strip())] = token
    except ValueError:
      raise FormatError(f"{path}, line {number}: expected an integer id, got {line!r}") from None
    token = None
  if sorted(entries) != list(range(len(entries))):
    raise FormatError(f"{path}: the ids are not 0 to {len(entries) - 1} without gaps")
  return [entries[i] for i in range(len(entries))]


def _marian_config(npz, path: Path) -> dict:
  if "special:model.yml" not in npz.files:
    raise FormatError(f"{path} has no 'special:model.yml': not a Marian model")
  raw = npz["special:model.yml"]
  return yaml.safe_load(raw.tobytes().rstrip(b"\x00"))


def check_marian(config: dict, path: Path) -> dict[str, Any]:
  """The `ModelConfig` options of a Marian config; any other architecture refused by name."""
  supported = {
      "type": ("transformer",), "transformer-decoder-autoreg": ("self-attention",),
      "right-left": (False,), "transformer-ffn-depth": (2, None),
      "transformer-decoder-ffn-depth": (0, 2, None), "transformer-postprocess-emb": ("d", ""),
      "transformer-no-projection": (False, None), "transformer-tied-layers": ([], None),
      "transformer-pool": (False, None),
  }
  for option, values in supported.items():
    value = config.get(option)
    if value not in values:
      raise FormatError(
          f"{path}: Marian option --{option} {value!r} is not supported (supported: "
          f"{', '.join(repr(v) for v in values if v is not None)}); this package computes "
          "self-attention Transformers, left to right, with absolute positions")
  if config.get("transformer-max-relative-position"):
    raise FormatError(f"{path}: relative positions (--transformer-max-relative-position) "
                      "are not supported; absolute sinusoidal positions are")
  pre, post = config.get("transformer-preprocess", ""), config.get("transformer-postprocess")
  top = config.get("transformer-postprocess-top", "")
  if (pre, post, top) == ("n", "da", "n"):
    pre_norm = True
  elif (pre, post, top) == ("", "dan", ""):
    pre_norm = False
  else:
    raise FormatError(
        f"{path}: --transformer-preprocess {pre!r} --transformer-postprocess {post!r} "
        f"--transformer-postprocess-top {top!r} is not supported: expected post-norm "
        "('', 'dan', '') or pre-norm ('n', 'da', 'n')")
  activation = config.get("transformer-ffn-activation", "swish")
  if activation not in ACTIVATIONS:
    raise FormatError(f"{path}: --transformer-ffn-activation {activation!r} is not "
                      f"supported (supported: {', '.join(ACTIVATIONS)})")
  if config.get("enc-depth") is None or config.get("dec-depth") is None:
    raise FormatError(f"{path}: special:model.yml has no enc-depth / dec-depth")
  return dict(pre_norm=pre_norm, activation=ACTIVATIONS[activation],
              encoder_layers=int(config["enc-depth"]), decoder_layers=int(config["dec-depth"]),
              num_heads=int(config["transformer-heads"]),
              d_ff=int(config["transformer-dim-ffn"]), d_model=int(config["dim-emb"]),
              decoder_start="zeros", embedding_scale=True, sinusoidal="halves")


def _marian_arrays(npz, options: dict, path: Path) -> dict[str, np.ndarray]:
  """The npz's weights under CTranslate2's names (`MarianConverter`'s mapping)."""
  names = set(npz.files)
  read: dict[str, np.ndarray] = {}  # each array read from the archive once

  def get(key):
    if key in names and key not in read:
      read[key] = np.asarray(npz[key], np.float32)
    return read.get(key)

  out: dict[str, np.ndarray] = {}

  def need(key):
    value = get(key)
    if value is None:
      raise FormatError(f"{path} has no '{key}': expected a Marian transformer with "
                        f"{options['encoder_layers']}+{options['decoder_layers']} layers")
    return value

  def weight_and_bias(scope, suffix):
    weight = need(f"{scope}_W{suffix}").T  # Marian's [in, out]
    bias = get(f"{scope}_b{suffix}")
    return weight, (bias.reshape(-1) if bias is not None
                    else np.zeros(weight.shape[0], np.float32))

  def linear(target, scope, suffix):
    out[f"{target}/weight"], out[f"{target}/bias"] = weight_and_bias(scope, suffix)

  def norm(target, scope):
    suffix = "_pre" if f"{scope}_ln_scale_pre" in names else ""
    out[f"{target}/gamma"] = need(f"{scope}_ln_scale{suffix}").reshape(-1)
    out[f"{target}/beta"] = need(f"{scope}_ln_bias{suffix}").reshape(-1)

  def attention(target, scope, fused_all):
    parts = {s: weight_and_bias(scope, s) for s in "qkv"}
    groups = [["q", "k", "v"]] if fused_all else [["q"], ["k", "v"]]
    for i, group in enumerate(groups):
      out[f"{target}/linear_{i}/weight"] = np.concatenate([parts[s][0] for s in group])
      out[f"{target}/linear_{i}/bias"] = np.concatenate([parts[s][1] for s in group])
    linear(f"{target}/linear_{len(groups)}", scope, "o")
    norm(f"{target}/layer_norm", f"{scope}_Wo")

  def ffn(target, scope):
    linear(f"{target}/linear_0", scope, "1")
    linear(f"{target}/linear_1", scope, "2")
    norm(f"{target}/layer_norm", f"{scope}_ffn")

  for side in ("encoder", "decoder"):
    emb = get(f"{side}_Wemb")
    emb = emb if emb is not None else need("Wemb")
    out[f"{side}/{'embeddings_0' if side == 'encoder' else 'embeddings'}/weight"] = emb
    if get("Wpos") is not None:
      out[f"{side}/position_encodings/encodings"] = get("Wpos")
    if options["pre_norm"]:
      norm(f"{side}/layer_norm", f"{side}_top")
    for i in range(options[f"{side}_layers"]):
      scope = f"{side}_l{i + 1}"
      attention(f"{side}/layer_{i}/self_attention", f"{scope}_self", True)
      if side == "decoder":
        attention(f"{side}/layer_{i}/attention", f"{scope}_context", False)
      ffn(f"{side}/layer_{i}/ffn", f"{scope}_ffn")
  w = get("decoder_ff_logit_out_W")
  out["decoder/projection/weight"] = (w.T if w is not None else
                                      get("decoder_ff_logit_out_Wt")
                                      if get("decoder_ff_logit_out_Wt") is not None
                                      else out["decoder/embeddings/weight"])
  b = get("decoder_ff_logit_out_b")
  if b is not None:
    out["decoder/projection/bias"] = b.reshape(-1)
  return out


def read_marian(folder: Path) -> Weights:
  """An OPUS-MT release: a folder (or what `unpacked` made of a zip) with decoder.yml."""
  decoder_yml = folder / "decoder.yml"
  if decoder_yml.is_file():
    decoder = yaml.safe_load(decoder_yml.read_text("utf-8")) or {}
    model_path = folder / decoder["models"][0]
    vocab_paths = [folder / v for v in decoder.get("vocabs", [])]
  else:
    npzs = sorted(folder.glob("*.npz"))
    if len(npzs) != 1:
      raise FormatError(f"{folder} has no decoder.yml and {len(npzs)} .npz files: expected "
                        "an OPUS-MT release (decoder.yml naming the model and vocabularies)")
    model_path, vocab_paths = npzs[0], sorted(folder.glob("*vocab*.yml"))
  if not vocab_paths:
    raise FormatError(f"{folder}: no vocab.yml file (decoder.yml's 'vocabs')")
  if not model_path.is_file():
    raise FormatError(f"{model_path} not found: the Marian model (.npz) decoder.yml names")
  try:
    npz = np.load(model_path)
  except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
    raise FormatError(f"{model_path} cannot be read as a Marian .npz (truncated or not a "
                      f"model): {e}") from e
  config = _marian_config(npz, model_path)
  options = check_marian(config, model_path)
  vocabs = [marian_vocab(p) for p in vocab_paths]
  if vocabs[0] != vocabs[-1]:
    raise FormatError(f"{folder}: separate source and target vocabularies "
                      f"({vocab_paths[0].name}, {vocab_paths[-1].name}) are not supported; "
                      "OPUS-MT's releases share one")
  try:
    arrays = _marian_arrays(npz, options, model_path)
  except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
    raise FormatError(f"{model_path} cannot be read (a truncated .npz?): {e}") from e
  source, target = (_read(folder / f"{s}.spm", f"OPUS-MT's {s} SentencePiece model")
                    for s in ("source", "target"))
  card = _opus_readme(folder)
  return Weights("marian", arrays, options, vocabs[0], eos="</s>", unk="<unk>", bos=None,
                 source_spm=source, target_spm=target, languages=card.pop("languages", None),
                 card=card)


def _opus_readme(folder: Path) -> dict[str, Any]:
  """What an OPUS-MT README says: its languages, license, and the score table's text."""
  card: dict[str, Any] = {}
  for name in ("README.md", "README.upstream.md"):
    path = folder / name
    if not path.is_file():
      continue
    text = path.read_text("utf-8", errors="replace")
    card["readme"] = name
    if m := re.search(r"^license:\s*(\S+)", text, re.M | re.I):
      card["license"] = m.group(1)
    src = re.search(r"source language\(s\):\s*([\w ]+)", text)
    tgt = re.search(r"target language\(s\):\s*([\w ]+)", text)
    if src and tgt and len(src.group(1).split()) == 1 and len(tgt.group(1).split()) >= 1:
      card["languages"] = (src.group(1).split()[0], tgt.group(1).split()[0])
    # the first table of scores, its header included
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines)
                  if re.match(r"\|\s*[\w-]+.*\|\s*\d+\.\d", line)), None)
    if first is not None:
      start = first
      while start > 0 and lines[start - 1].startswith("|"):
        start -= 1
      end = first
      while end < len(lines) and lines[end].startswith("|"):
        end += 1
      card["scores"] = lines[start:min(end, start + 42)]
    break
  return card


# ----------------------------------------------------------------------- Hugging Face


HF_ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu_erf",
                  "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu"}


class _TorchUnpickler(pickle.Unpickler):
  """Reads `pytorch_model.bin` (torch's zip of a pickle and raw storages) into numpy
  arrays without torch: the storages and `_rebuild_tensor_v2` are the only torch
  objects such a file holds."""

  DTYPES = {"FloatStorage": np.float32, "HalfStorage": np.float16, "DoubleStorage": np.float64,
            "LongStorage": np.int64, "IntStorage": np.int32, "BoolStorage": np.bool_,
            "ByteStorage": np.uint8}

  def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str):
    super().__init__(io.BytesIO(data))
    self.archive, self.prefix = archive, prefix

  def find_class(self, module, name):
    if module == "torch._utils" and name == "_rebuild_tensor_v2":
      return self.rebuild
    if module == "torch" and name.endswith("Storage"):
      return name
    if module == "collections" and name == "OrderedDict":
      import collections
      return collections.OrderedDict
    raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a state dict")

  def persistent_load(self, pid):
    _, storage_type, key, _, _ = pid
    if storage_type == "BFloat16Storage":
      import ml_dtypes
      dtype = ml_dtypes.bfloat16
    elif storage_type in self.DTYPES:
      dtype = self.DTYPES[storage_type]
    else:
      raise pickle.UnpicklingError(f"unsupported tensor storage {storage_type}")
    return np.frombuffer(self.archive.read(f"{self.prefix}/data/{key}"), dtype)

  @staticmethod
  def rebuild(storage, offset, size, stride, *args):
    item = storage.dtype.itemsize
    return np.lib.stride_tricks.as_strided(storage[offset:], tuple(size),
                                           tuple(s * item for s in stride)).copy()


def read_torch_state(path: Path) -> dict[str, np.ndarray]:
  try:
    with zipfile.ZipFile(path) as archive:
      pkl = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
      prefix = pkl[:-len("/data.pkl")]
      state = _TorchUnpickler(archive.read(pkl), archive, prefix).load()
  except (zipfile.BadZipFile, StopIteration, pickle.UnpicklingError, KeyError, EOFError) as e:
    raise FormatError(f"{path} cannot be read as a torch state dict without torch "
                      f"(truncated, or an old non-zip format): {e}") from e
  return {k: np.asarray(v, np.float32) for k, v in state.items()
          if isinstance(v, np.ndarray)}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
  from safetensors import SafetensorError
  from safetensors.numpy import load
  try:
    return {k: np.asarray(v, np.float32) for k, v in load(path.read_bytes()).items()}
  except (SafetensorError, ValueError) as e:
    raise FormatError(f"{path} cannot be read (a truncated or damaged safetensors "
                      f"file): {e}") from e


def read_huggingface(folder: Path) -> Weights:
  """A Hugging Face Marian folder (as `save_pretrained` writes it or the Hub holds it)."""
  config = json.loads(_read(folder / "config.json", "the model's configuration"))
  if config.get("model_type") != "marian":
    raise FormatError(f"{folder / 'config.json'}: model_type {config.get('model_type')!r} "
                      "is not supported; Marian models (OPUS-MT) are")
  if config.get("normalize_before") or config.get("add_layernorm_embedding") or (
      config.get("normalize_embedding")):
    raise FormatError(f"{folder / 'config.json'}: normalize_before / layer norm of the "
                      "embeddings are not supported (Marian's layout is post-norm)")
  activation = config.get("activation_function", "swish")
  if activation not in HF_ACTIVATIONS:
    raise FormatError(f"{folder / 'config.json'}: activation_function {activation!r} is not "
                      f"supported (supported: {', '.join(HF_ACTIVATIONS)})")
  if config.get("encoder_attention_heads") != config.get("decoder_attention_heads") or (
      config.get("encoder_ffn_dim") != config.get("decoder_ffn_dim")):
    raise FormatError(f"{folder / 'config.json'}: the encoder and decoder differ in heads or "
                      "feed-forward width; one value of each is supported")
  if (folder / "model.safetensors").is_file():
    state = read_safetensors(folder / "model.safetensors")
  elif (folder / "pytorch_model.bin").is_file():
    state = read_torch_state(folder / "pytorch_model.bin")
  else:
    raise FormatError(f"{folder}: neither model.safetensors nor pytorch_model.bin")
  state = {k.removeprefix("model."): v for k, v in state.items()}
  vocab_path = folder / "vocab.json"
  vocab_map = json.loads(_read(vocab_path, "the id vocabulary"))
  if (folder / "target_vocab.json").is_file() or config.get("separate_vocabs"):
    raise FormatError(f"{folder}: separate source and target vocabularies (target_vocab.json) "
                      "are not supported; one id vocabulary is")
  vocab = _by_id(vocab_map, vocab_path)
  pad = config.get("pad_token_id", len(vocab) - 1)
  if vocab[pad] != "<pad>" or pad != len(vocab) - 1:
    raise FormatError(f"{vocab_path}: expected <pad> as the last id ({len(vocab) - 1}), as "
                      "Marian's conversion adds it; found "
                      f"{vocab[pad]!r} at {pad}")
  if config.get("decoder_start_token_id", pad) != pad:
    raise FormatError(f"{folder / 'config.json'}: decoder_start_token_id must be the pad "
                      "token (Marian's decoder starts from a zero vector)")
  d = config["d_model"]
  options = dict(pre_norm=False, activation=HF_ACTIVATIONS[activation],
                 encoder_layers=config["encoder_layers"], decoder_layers=config["decoder_layers"],
                 num_heads=config["encoder_attention_heads"], d_ff=config["encoder_ffn_dim"],
                 d_model=d, decoder_start="zeros",
                 embedding_scale=bool(config.get("scale_embedding", True)),
                 sinusoidal="halves", max_len=int(config.get("max_position_embeddings", 512)))
  arrays = _hf_arrays(state, options, folder)
  # The <pad> row is Hugging Face's decoder start, which a zero vector replaces (as
  # CTranslate2's conversion does): the model's own tokens remain.
  for key in ("encoder/embeddings_0/weight", "decoder/embeddings/weight",
              "decoder/projection/weight", "decoder/projection/bias"):
    if key in arrays and arrays[key].shape[0] == len(vocab):
      arrays[key] = arrays[key][:-1]
  tokenizer_config = {}
  if (folder / "tokenizer_config.json").is_file():
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text("utf-8"))
  languages = None
  if tokenizer_config.get("source_lang") and tokenizer_config.get("target_lang"):
    languages = (tokenizer_config["source_lang"], tokenizer_config["target_lang"])
  card = _opus_readme(folder)
  card.pop("languages", None)
  if name := config.get("_name_or_path"):
    card["name"] = name
  source, target = (_read(folder / f"{s}.spm", f"the {s} SentencePiece model")
                    for s in ("source", "target"))
  return Weights("huggingface", arrays, options, vocab[:-1], eos=vocab[config.get(
      "eos_token_id", 0)], unk="<unk>", bos=None, source_spm=source, target_spm=target,
                 languages=languages, card=card)


def _by_id(mapping: dict[str, int], path: Path) -> list[str]:
  tokens = [None] * len(mapping)
  for token, i in mapping.items():
    if not isinstance(i, int) or not 0 <= i < len(tokens) or tokens[i] is not None:
      raise FormatError(f"{path}: the ids are not 0 to {len(tokens) - 1}, once each "
                        f"({token!r}: {i!r})")
    tokens[i] = token
  return tokens


def _hf_arrays(state: dict[str, np.ndarray], options: dict, folder: Path
               ) -> dict[str, np.ndarray]:
  out: dict[str, np.ndarray] = {}

  def need(key):
    if key not in state:
      raise FormatError(f"{folder}: the weights have no '{key}' (expected "
                        f"{options['encoder_layers']}+{options['decoder_layers']} layers of "
                        "a Marian model)")
    return state[key]

  def linear(target, scope):
    out[f"{target}/weight"] = need(f"{scope}.weight")
    out[f"{target}/bias"] = need(f"{scope}.bias")

  def norm(target, scope):
    out[f"{target}/gamma"], out[f"{target}/beta"] = need(f"{scope}.weight"), need(f"{scope}.bias")

  def fuse(target, scopes):
    out[f"{target}/weight"] = np.concatenate([need(f"{s}.weight") for s in scopes])
    out[f"{target}/bias"] = np.concatenate([need(f"{s}.bias") for s in scopes])

  shared = state.get("shared.weight")
  for side in ("encoder", "decoder"):
    emb = state.get(f"{side}.embed_tokens.weight", shared)
    if emb is None:
      need(f"{side}.embed_tokens.weight")
    out[f"{side}/{'embeddings_0' if side == 'encoder' else 'embeddings'}/weight"] = emb
    if f"{side}.embed_positions.weight" in state:
      out[f"{side}/position_encodings/encodings"] = state[f"{side}.embed_positions.weight"]
    for i in range(options[f"{side}_layers"]):
      s, t = f"{side}.layers.{i}", f"{side}/layer_{i}"
      fuse(f"{t}/self_attention/linear_0", [f"{s}.self_attn.{p}_proj" for p in "qkv"])
      linear(f"{t}/self_attention/linear_1", f"{s}.self_attn.out_proj")
      norm(f"{t}/self_attention/layer_norm", f"{s}.self_attn_layer_norm")
      if side == "decoder":
        linear(f"{t}/attention/linear_0", f"{s}.encoder_attn.q_proj")
        fuse(f"{t}/attention/linear_1", [f"{s}.encoder_attn.{p}_proj" for p in "kv"])
        linear(f"{t}/attention/linear_2", f"{s}.encoder_attn.out_proj")
        norm(f"{t}/attention/layer_norm", f"{s}.encoder_attn_layer_norm")
      linear(f"{t}/ffn/linear_0", f"{s}.fc1")
      linear(f"{t}/ffn/linear_1", f"{s}.fc2")
      norm(f"{t}/ffn/layer_norm", f"{s}.final_layer_norm")
  head = state.get("lm_head.weight")
  out["decoder/projection/weight"] = head if head is not None else out["decoder/embeddings/weight"]
  if "final_logits_bias" in state:
    out["decoder/projection/bias"] = state["final_logits_bias"].reshape(-1)
  return out


# ------------------------------------------------------------------------ CTranslate2

# CTranslate2's DataType enum (include/ctranslate2/types.h), as its model.bin stores it.
CT2_DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
# common_spec.Activation, as model.bin stores it.
CT2_ACTIVATIONS = {0: "relu", 1: "gelu", 2: "swish", 3: "gelu_erf", 4: "gelu_sigmoid"}


def read_ct2_binary(path: Path) -> dict[str, np.ndarray]:
  """The variables of a CTranslate2 `model.bin` (binary versions 3 to 6), aliases
  resolved, as stored (quantized weights keep their `weight_scale`)."""
  data = _read(path, "the CTranslate2 model")
  pos = 0

  def take(fmt):
    nonlocal pos
    values = struct.unpack_from("<" + fmt, data, pos)
    pos += struct.calcsize("<" + fmt)
    return values

  def string():
    nonlocal pos
    (n,) = take("H")
    s = data[pos:pos + n - 1].decode("utf-8")
    pos += n
    return s

  try:
    (version,) = take("I")
    if not 3 <= version <= 6:
      raise FormatError(f"{path}: CTranslate2 binary version {version} is not supported "
                        "(3 to 6 are)")
    spec = string()
    if spec != "TransformerSpec":
      raise FormatError(f"{path}: a CTranslate2 {spec}; encoder-decoder TransformerSpec "
                        "models are supported")
    take("I")  # the spec's revision
    (count,) = take("I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(count):
      name = string()
      (rank,) = take("B")
      shape = take("I" * rank) if rank else ()
      (dtype_id,) = take("B")
      (nbytes,) = take("I")
      if pos + nbytes > len(data):
        raise FormatError(f"{path} is truncated: variable {name!r} needs {nbytes} bytes, "
                          f"{len(data) - pos} are left")
      if CT2_DTYPES[dtype_id] == "bfloat16":
        import ml_dtypes
        dtype = ml_dtypes.bfloat16
      else:
        dtype = np.dtype(CT2_DTYPES[dtype_id])
      variables[name] = np.frombuffer(data, dtype, int(np.prod(shape, dtype=np.int64)),
                                      pos).reshape(shape)
      pos += nbytes
    (aliases,) = take("I")
    for _ in range(aliases):
      alias, target = string(), string()
      variables[alias] = variables[target]
      if f"{target}_scale" in variables:  # a quantized weight shared (tied embeddings)
        variables[f"{alias}_scale"] = variables[f"{target}_scale"]
  except struct.error as e:
    raise FormatError(f"{path} is truncated or not a CTranslate2 model.bin: {e}") from e
  return variables


def dequantized(variables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """float32 weights: int8 / int16 divided by their `weight_scale` (per row for int8, as
  CTranslate2 quantizes), float16 / bfloat16 widened."""
  out = {}
  for name, value in variables.items():
    if name.endswith("/weight_scale") or name.endswith("/weight_zero"):
      continue
    scale = variables.get(name[:-len("weight")] + "weight_scale") if name.endswith(
        "weight") else None
    if scale is not None and value.dtype in (np.int8, np.int16):
      scale = np.asarray(scale, np.float32)
      value = value.astype(np.float32) / (scale.reshape(-1, 1) if scale.ndim else scale)
    out[name] = np.asarray(value, np.float32) if value.ndim else value
  return out


def _scalar(variables, name, default=None):
  value = variables.get(name)
  return default if value is None else value.reshape(()).item()


def _ct2_vocab(folder: Path) -> list[str]:
  for name in ("shared_vocabulary", "target_vocabulary", "source_vocabulary"):
    if (folder / f"{name}.json").is_file():
      source = folder / "source_vocabulary.json"
      if name == "target_vocabulary" and source.is_file() and (
          json.loads(source.read_text("utf-8")) != json.loads(
              (folder / f"{name}.json").read_text("utf-8"))):
        raise FormatError(f"{folder}: separate source and target vocabularies are not "
                          "supported; a shared one is")
      return json.loads((folder / f"{name}.json").read_text("utf-8"))
    if (folder / f"{name}.txt").is_file():
      return (folder / f"{name}.txt").read_text("utf-8").splitlines()
  raise FormatError(f"{folder}: no CTranslate2 vocabulary (shared_vocabulary.json or .txt)")


def read_ctranslate2(folder: Path, spm_model: Path | None = None) -> Weights:
  """A CTranslate2 model directory; `spm_model`: its SentencePiece model where it is not
  beside model.bin (sentencepiece.model, spm.model, or source.spm and target.spm)."""
  raw = read_ct2_binary(folder / "model.bin")
  config = json.loads(_read(folder / "config.json", "the CTranslate2 model's config"))
  for name in ("encoder/alibi", "decoder/alibi", "encoder/multi_query_attention",
               "decoder/multi_query_attention", "encoder/embeddings_merge"):
    if _scalar(raw, name, 0):
      raise FormatError(f"{folder / 'model.bin'}: {name} is not supported")
  if any(re.search(r"(relative_position|layernorm_embedding|/embeddings_1/)", n) for n in raw):
    raise FormatError(f"{folder / 'model.bin'}: relative positions, several source features "
                      "or a layer norm of the embeddings are not supported")
  rotary = _rotary(raw, folder / "model.bin")
  arrays = dequantized(raw)
  layers = lambda side: len({m.group(1) for n in arrays
                             if (m := re.match(rf"{side}/layer_(\d+)/", n))})
  pre_norm = [bool(_scalar(raw, f"{s}/pre_norm", 1)) for s in ("encoder", "decoder")]
  scale = [bool(_scalar(raw, f"{s}/scale_embeddings", 1)) for s in ("encoder", "decoder")]
  activation = [_scalar(raw, f"{s}/activation", 0) for s in ("encoder", "decoder")]
  heads = [_scalar(raw, f"{s}/num_heads") for s in ("encoder", "decoder")]
  if len(set(pre_norm)) > 1 or len(set(scale)) > 1 or len(set(activation)) > 1 or (
      len(set(heads)) > 1):
    raise FormatError(f"{folder / 'model.bin'}: the encoder and decoder differ in norm "
                      "placement, embedding scale, activation or heads; one of each is "
                      "supported")
  if activation[0] not in CT2_ACTIVATIONS:
    raise FormatError(f"{folder / 'model.bin'}: activation {activation[0]} is not supported "
                      f"(supported: {', '.join(CT2_ACTIVATIONS.values())})")
  if heads[0] is None:
    raise FormatError(f"{folder / 'model.bin'}: no encoder/num_heads (a model of "
                      "CTranslate2 before 2.0?)")
  emb = arrays["encoder/embeddings_0/weight"]
  options = dict(pre_norm=pre_norm[0], activation=CT2_ACTIVATIONS[activation[0]],
                 encoder_layers=layers("encoder"), decoder_layers=layers("decoder"),
                 num_heads=int(heads[0]), d_model=emb.shape[1],
                 d_ff=arrays["encoder/layer_0/ffn/linear_0/weight"].shape[0],
                 embedding_scale=scale[0],
                 decoder_start="zeros" if _scalar(raw, "decoder/start_from_zero_embedding", 0)
                 else "bos")
  if rotary:
    options["positional"] = "rotary"
  if config.get("layer_norm_epsilon"):
    options["layer_norm_epsilon"] = float(config["layer_norm_epsilon"])
  vocab = _ct2_vocab(folder)
  source_spm, target_spm = _spm_beside(folder, spm_model)
  start = config.get("decoder_start_token", "<s>")
  if options["decoder_start"] == "bos" and start not in vocab:
    raise FormatError(f"{folder / 'config.json'}: decoder_start_token {start!r} is not in the "
                      "vocabulary")
  if config.get("add_source_bos"):
    raise FormatError(f"{folder / 'config.json'}: add_source_bos (a start token before each "
                      "source) is not supported")
  languages = None
  training, decoding = {}, {}
  if (folder / "seq2seq.json").is_file():
    # an export of this package: its run's languages, numerics, regularisation and search
    exported = json.loads((folder / "seq2seq.json").read_text("utf-8"))["config"]
    languages = (exported["data"].get("src_lang"), exported["data"].get("tgt_lang"))
    options["max_len"] = exported["model"].get("max_len", DEFAULT_MAX_LEN)
    options |= {k: exported["model"][k] for k in ("dropout", "attention_dropout", "dtype",
                                                  "matmul_dtype") if k in exported["model"]}
    if "label_smoothing" in exported.get("train", {}):
      training["label_smoothing"] = exported["train"]["label_smoothing"]
    decoding = dict(exported.get("decode", {}))
  return Weights("ctranslate2", arrays, options, vocab, eos=config.get("eos_token", "</s>"),
                 unk=config.get("unk_token", "<unk>"),
                 bos=start if options["decoder_start"] == "bos" else None,
                 source_spm=source_spm, target_spm=target_spm,
                 source_eos=bool(config.get("add_source_eos", False)), languages=languages,
                 training=training, decoding=decoding)


def _rotary(raw: dict[str, np.ndarray], path: Path) -> bool:
  """Whether every self-attention rotates its queries and keys as this package's rotary
  positions do (all dimensions, pairs (i, i + K/2), base 10000); other rotations refused."""
  layers = {n.rsplit("/", 1)[0] for n in raw if n.endswith("/self_attention/rotary_dim")}
  if not layers:
    return False
  selves = {m.group(0) for n in raw if (m := re.match(r"(en|de)coder/layer_\d+/self_attention", n))}
  for layer in sorted(selves):
    dim, interleave = _scalar(raw, f"{layer}/rotary_dim"), _scalar(raw, f"{layer}/rotary_interleave", 0)
    base = _scalar(raw, f"{layer}/rotary_base", 10000.0)
    if layer not in layers or dim != 0 or interleave or base != 10000.0:
      raise FormatError(f"{path}: {layer} rotates {'no' if layer not in layers else dim} "
                        f"dimensions (interleaved {bool(interleave)}, base {base}); rotary "
                        "positions over all of every self-attention's dimensions, pairs "
                        "(i, i + K/2), base 10000 are supported")
  return True


def _spm_beside(folder: Path, given: Path | None) -> tuple[bytes, bytes]:
  if given is not None:
    joint = _read(given, "the SentencePiece model given")
    return joint, joint
  for base in (folder, folder.parent):
    for name in ("sentencepiece.model", "spm.model"):
      if (base / name).is_file():
        joint = (base / name).read_bytes()
        return joint, joint
    if (base / "source.spm").is_file() and (base / "target.spm").is_file():
      return (base / "source.spm").read_bytes(), (base / "target.spm").read_bytes()
  raise FormatError(f"{folder}: no SentencePiece model beside model.bin (sentencepiece.model, "
                    "spm.model, or source.spm and target.spm); give one with --spm-model. "
                    "Models tokenized otherwise (BPE with subword-nmt) are not supported")
