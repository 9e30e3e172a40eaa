"""Models of other tools' formats with random weights, written as those tools write them:
an OPUS-MT release in Marian's format (Marian's key names, `special:model.yml`,
`vocab.yml`, `decoder.yml`, `source.spm`/`target.spm`), the same weights as a Hugging
Face Marian folder (`transformers`' names in `model.safetensors`), and CTranslate2 models
built with its spec API. Used by the import tests and `bench/import_models.py`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import sentencepiece as spm
import yaml

ROOT = Path(__file__).resolve().parents[1]
SHARED_MODELS = ROOT.parent / "shared" / "models"


def train_spm(folder: Path, name: str, lines: list[str], vocab_size: int) -> bytes:
  """A SentencePiece model with Marian's special ids (<unk> 0, <s> 1, </s> 2)."""
  out = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out,
                                 vocab_size=vocab_size, unk_id=0, bos_id=1, eos_id=2,
                                 pad_id=-1, hard_vocab_limit=False, num_threads=1,
                                 minloglevel=2)
  (folder / name).write_bytes(out.getvalue())
  return out.getvalue()


def sample_lines(lang: str, n: int = 400) -> list[str]:
  path = ROOT / "data" / "sample" / f"train.{lang}"
  return path.read_text("utf-8").splitlines()[:n]


def yaml_token(token: str) -> str:
  """A token as Marian writes it in vocab.yml (quoted where YAML needs it)."""
  return json.dumps(token, ensure_ascii=False)


def marian_weights(rng: np.random.Generator, vocab: int, d: int, ffn: int, enc: int, dec: int,
                   pre_norm: bool = False, tied: bool = True) -> dict[str, np.ndarray]:
  """Random weights under Marian's names: W [in, out], biases and norms [1, n]."""
  w = {}
  normal = lambda *shape, s=None: rng.normal(0, s or shape[0] ** -0.5, shape).astype(np.float32)
  row = lambda n, mean=0.0: (mean + rng.normal(0, 0.1, (1, n))).astype(np.float32)
  suffix = "_pre" if pre_norm else ""
  if tied:
    w["Wemb"] = normal(vocab, d, s=0.5)
  else:
    w["encoder_Wemb"], w["decoder_Wemb"] = normal(vocab, d, s=0.5), normal(vocab, d, s=0.5)
    w["decoder_ff_logit_out_W"] = normal(d, vocab)
  w["decoder_ff_logit_out_b"] = row(vocab)

  def attention(scope):
    for p in "qkvo":
      w[f"{scope}_W{p}"], w[f"{scope}_b{p}"] = normal(d, d), row(d)
    w[f"{scope}_Wo_ln_scale{suffix}"], w[f"{scope}_Wo_ln_bias{suffix}"] = row(d, 1.0), row(d)

  def ffn_layer(scope):
    w[f"{scope}_W1"], w[f"{scope}_b1"] = normal(d, ffn), row(ffn)
    w[f"{scope}_W2"], w[f"{scope}_b2"] = normal(ffn, d), row(d)
    w[f"{scope}_ffn_ln_scale{suffix}"], w[f"{scope}_ffn_ln_bias{suffix}"] = row(d, 1.0), row(d)

  for side, layers in (("encoder", enc), ("decoder", dec)):
    for i in range(1, layers + 1):
      attention(f"{side}_l{i}_self")
      if side == "decoder":
        attention(f"{side}_l{i}_context")
      ffn_layer(f"{side}_l{i}_ffn")
    if pre_norm:
      w[f"{side}_top_ln_scale"], w[f"{side}_top_ln_bias"] = row(d, 1.0), row(d)
  return w


def marian_config(d: int, heads: int, ffn: int, enc: int, dec: int, activation: str,
                  pre_norm: bool = False, tied: bool = True, **changes) -> dict:
  config = {"type": "transformer", "dim-emb": d, "enc-depth": enc, "dec-depth": dec,
            "transformer-heads": heads, "transformer-dim-ffn": ffn,
            "transformer-ffn-activation": activation, "transformer-ffn-depth": 2,
            "transformer-preprocess": "n" if pre_norm else "",
            "transformer-postprocess": "da" if pre_norm else "dan",
            "transformer-postprocess-top": "n" if pre_norm else "",
            "transformer-postprocess-emb": "d", "transformer-decoder-autoreg": "self-attention",
            "transformer-guided-alignment-layer": "last", "transformer-no-projection": False,
            "tied-embeddings-all": tied, "right-left": False, "max-length": 512}
  config.update(changes)
  return config


def write_marian(folder: Path, weights: dict[str, np.ndarray], config: dict,
                 tokens: list[str], source_spm: bytes, target_spm: bytes,
                 readme: str | None = None) -> Path:
  """An OPUS-MT release folder: opus.npz, opus.vocab.yml, decoder.yml, *.spm."""
  folder.mkdir(parents=True, exist_ok=True)
  blob = yaml.safe_dump(config).encode() + b"\x00"
  np.savez(folder / "opus.npz", **weights,
           **{"special:model.yml": np.frombuffer(blob, np.int8)})
  (folder / "opus.vocab.yml").write_text(
      "".join(f"{yaml_token(t)}: {i}\n" for i, t in enumerate(tokens)), "utf-8")
  (folder / "decoder.yml").write_text(yaml.safe_dump(
      {"models": ["opus.npz"], "vocabs": ["opus.vocab.yml", "opus.vocab.yml"],
       "beam-size": 4}), "utf-8")
  (folder / "source.spm").write_bytes(source_spm)
  (folder / "target.spm").write_bytes(target_spm)
  if readme:
    (folder / "README.md").write_text(readme, "utf-8")
  return folder


def marian_vocabulary(source_spm: bytes, target_spm: bytes, extra: list[str] = ()) -> list[str]:
  """OPUS-MT's joint vocabulary: </s> 0, <unk> 1, then the pieces of both models."""
  tokens = ["</s>", "<unk>", *extra]
  for proto in (source_spm, target_spm):
    sp = spm.SentencePieceProcessor(model_proto=proto)
    for i in range(sp.get_piece_size()):
      piece = sp.id_to_piece(i)
      if not sp.is_control(i) and not sp.is_unknown(i) and piece not in tokens:
        tokens.append(piece)
  return tokens


ISO_639_3 = {"en": "eng", "de": "deu", "fr": "fra"}


def small_marian(folder: Path, seed: int = 0, activation: str = "swish", pre_norm=False,
                 tied=True, separate_spm=True, d=32, heads=4, ffn=64, layers=(2, 2),
                 langs=("en", "de")) -> Path:
  """A small OPUS-MT-style release (en-de by default) trained on nothing: random weights,
  tokenizers of the sample's text."""
  folder.mkdir(parents=True, exist_ok=True)
  source = train_spm(folder, "source.spm", sample_lines(langs[0]), 300)
  target = (train_spm(folder, "target.spm", sample_lines(langs[1]), 300) if separate_spm
            else source)
  tokens = marian_vocabulary(source, target)
  rng = np.random.default_rng(seed)
  weights = marian_weights(rng, len(tokens), d, ffn, *layers, pre_norm=pre_norm, tied=tied)
  config = marian_config(d, heads, ffn, *layers, activation, pre_norm, tied)
  readme = (f"# opus-small\n\n* source language(s): {ISO_639_3[langs[0]]}\n"
            f"* target language(s): {ISO_639_3[langs[1]]}\n"
            "license: CC-BY-4.0\n\n| testset | BLEU | chr-F |\n|---|---|---|\n"
            "| newstest2019-ende.eng.deu | 12.3 | 0.456 |\n")
  return write_marian(folder, weights, config, tokens, source, target, readme)


def huggingface_from_marian(marian: Path, folder: Path) -> Path:
  """The release's weights as a Hugging Face Marian folder, under `transformers`' names
  (torch Linear weights [out, in]; <pad> added as the last id, a zero row)."""
  from safetensors.numpy import save_file
  npz = np.load(marian / "opus.npz")
  config = yaml.safe_load(npz["special:model.yml"].tobytes().rstrip(b"\x00"))
  tokens = [line.rsplit(": ", 1) for line in
            (marian / "opus.vocab.yml").read_text("utf-8").splitlines()]
  vocab = {json.loads(t): int(i) for t, i in tokens}
  pad = len(vocab)
  vocab["<pad>"] = pad
  add_row = lambda x: np.concatenate([x, np.zeros((1,) + x.shape[1:], x.dtype)])
  state = {}
  tied = "Wemb" in npz.files
  emb = add_row(npz["Wemb"] if tied else npz["decoder_Wemb"])
  if tied:
    state["model.shared.weight"] = emb
  else:
    state["model.encoder.embed_tokens.weight"] = add_row(npz["encoder_Wemb"])
    state["model.decoder.embed_tokens.weight"] = emb
    state["lm_head.weight"] = add_row(npz["decoder_ff_logit_out_W"].T)
  state["final_logits_bias"] = add_row(npz["decoder_ff_logit_out_b"].T).T

  def linear(name, scope, p):
    state[f"{name}.weight"] = np.ascontiguousarray(npz[f"{scope}_W{p}"].T)
    state[f"{name}.bias"] = npz[f"{scope}_b{p}"].reshape(-1)

  def norm(name, key):
    state[f"{name}.weight"] = npz[f"{key}_ln_scale"].reshape(-1)
    state[f"{name}.bias"] = npz[f"{key}_ln_bias"].reshape(-1)

  for side, depth in (("encoder", config["enc-depth"]), ("decoder", config["dec-depth"])):
    for i in range(depth):
      s, m = f"model.{side}.layers.{i}", f"{side}_l{i + 1}"
      for p in "qkv":
        linear(f"{s}.self_attn.{p}_proj", f"{m}_self", p)
      linear(f"{s}.self_attn.out_proj", f"{m}_self", "o")
      norm(f"{s}.self_attn_layer_norm", f"{m}_self_Wo")
      if side == "decoder":
        for p in "qkv":
          linear(f"{s}.encoder_attn.{p}_proj", f"{m}_context", p)
        linear(f"{s}.encoder_attn.out_proj", f"{m}_context", "o")
        norm(f"{s}.encoder_attn_layer_norm", f"{m}_context_Wo")
      linear(f"{s}.fc1", f"{m}_ffn", "1")
      linear(f"{s}.fc2", f"{m}_ffn", "2")
      norm(f"{s}.final_layer_norm", f"{m}_ffn_ffn")
  folder.mkdir(parents=True, exist_ok=True)
  save_file({k: np.ascontiguousarray(v, np.float32) for k, v in state.items()},
            str(folder / "model.safetensors"))
  act = {"swish": "swish", "relu": "relu", "gelu": "gelu"}[config["transformer-ffn-activation"]]
  hf_config = {
      "model_type": "marian", "architectures": ["MarianMTModel"], "d_model": config["dim-emb"],
      "encoder_layers": config["enc-depth"], "decoder_layers": config["dec-depth"],
      "encoder_attention_heads": config["transformer-heads"],
      "decoder_attention_heads": config["transformer-heads"],
      "encoder_ffn_dim": config["transformer-dim-ffn"],
      "decoder_ffn_dim": config["transformer-dim-ffn"], "activation_function": act,
      "vocab_size": pad + 1, "decoder_vocab_size": pad + 1, "pad_token_id": pad,
      "decoder_start_token_id": pad, "eos_token_id": vocab["</s>"], "scale_embedding": True,
      "normalize_embedding": False, "static_position_embeddings": True,
      "max_position_embeddings": 512, "share_encoder_decoder_embeddings": tied,
      "tie_word_embeddings": tied, "_name_or_path": "test/opus-mt-small"}
  (folder / "config.json").write_text(json.dumps(hf_config, indent=1))
  (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
  (folder / "tokenizer_config.json").write_text(json.dumps(
      {"source_lang": "en", "target_lang": "de", "tokenizer_class": "MarianTokenizer"}))
  for name in ("source.spm", "target.spm"):
    (folder / name).write_bytes((marian / name).read_bytes())
  return folder


def opennmt_ctranslate2(folder: Path, seed: int = 0, d=32, heads=4, ffn=64, layers=(2, 2),
                        activation: str = "relu", quantization: str = "float32",
                        source_eos: bool = False) -> Path:
  """An Argos-style model: OpenNMT-py's pre-norm Transformer with a joint SentencePiece
  model and <unk> <blank> <s> </s> first, sources read without EOS (`source_eos`), built
  with CTranslate2's spec API (random weights, position tables OpenNMT-py's: sines then
  cosines)."""
  import ctranslate2
  from ctranslate2.specs import common_spec, transformer_spec
  folder.mkdir(parents=True, exist_ok=True)
  joint = train_spm(folder, "sentencepiece.model", sample_lines("en") + sample_lines("de"), 400)
  sp = spm.SentencePieceProcessor(model_proto=joint)
  tokens = ["<unk>", "<blank>", "<s>", "</s>"] + [
      sp.id_to_piece(i) for i in range(sp.get_piece_size())
      if not sp.is_control(i) and not sp.is_unknown(i)]
  act = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}[activation]
  spec = transformer_spec.TransformerSpec.from_config(layers, heads, pre_norm=True,
                                                      activation=act)
  rng = np.random.default_rng(seed)
  normal = lambda *shape, s=None: rng.normal(0, s or shape[-1] ** -0.5, shape).astype(np.float32)
  vec = lambda n, mean=0.0: (mean + rng.normal(0, 0.1, n)).astype(np.float32)
  half = d // 2
  inv = np.exp(-np.log(10000.0) * np.arange(0, d, 2) / d)
  pos = np.arange(1024)[:, None] * inv
  table = np.concatenate([np.sin(pos), np.cos(pos)], axis=1).astype(np.float32)
  assert table.shape[1] == 2 * half
  emb = normal(len(tokens), d, s=0.5)
  spec.encoder.embeddings[0].weight = emb
  spec.decoder.embeddings.weight = emb
  spec.decoder.projection.weight = emb
  spec.decoder.projection.bias = vec(len(tokens))
  spec.encoder.position_encodings.encodings = table
  spec.decoder.position_encodings.encodings = table
  spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = True

  def linear(s, n_out, n_in):
    s.weight, s.bias = normal(n_out, n_in), vec(n_out)

  def norm(s):
    s.gamma, s.beta = vec(d, 1.0), vec(d)

  for stack in (spec.encoder, spec.decoder):
    norm(stack.layer_norm)
    for layer in stack.layer:
      linear(layer.self_attention.linear[0], 3 * d, d)
      linear(layer.self_attention.linear[1], d, d)
      norm(layer.self_attention.layer_norm)
      if hasattr(layer, "attention"):
        linear(layer.attention.linear[0], d, d)
        linear(layer.attention.linear[1], 2 * d, d)
        linear(layer.attention.linear[2], d, d)
        norm(layer.attention.layer_norm)
      linear(layer.ffn.linear_0, ffn, d)
      linear(layer.ffn.linear_1, d, ffn)
      norm(layer.ffn.layer_norm)
  spec.config.add_source_eos = source_eos
  spec.config.layer_norm_epsilon = 1e-6
  spec.register_source_vocabulary(tokens)
  spec.register_target_vocabulary(tokens)
  spec.validate()
  spec.optimize(quantization=quantization)
  model = folder / "model"
  model.mkdir(parents=True, exist_ok=True)
  spec.save(str(model))
  assert ctranslate2.contains_model(str(model))
  return model
