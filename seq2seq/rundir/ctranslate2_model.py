"""A trained run as a CTranslate2 model directory, the C++ inference engine for
Transformer translators: the writer (`export_ctranslate2`) and the reader (`load_export`)
of the format, below both the CTranslate2 engine and the server.

    seq2seq-export --workdir RUN --format ctranslate2 --output DIR [--quantization int8]

DIR is a CTranslate2 model directory (model.bin, config.json, the shared vocabulary)
plus this package's `spm.model` and `seq2seq.json` (the run's config, the checkpoint it
came from, the quantization), so that `translate.py --engine ctranslate2 --workdir DIR`
and `load_engine(DIR, "ctranslate2")` tokenize and detokenize exactly as the
JAX engine does. CTranslate2 is an optional extra: `pip install "seq2seq-haiku[ctranslate2]"`.

The conversion maps each Haiku parameter to the CTranslate2 `TransformerSpec` layer
that computes the same function (weights transposed to CTranslate2's [out, in] layout,
query/key/value fused as CTranslate2 expects). Positions are written as an explicit
table (ours interleave sin/cos; CTranslate2's built-in table does not), so sinusoidal and
learned positions both convert. Every architecture option of `ModelConfig` is listed in
`check_supported`; a value this converter does not know is refused by name.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np

from seq2seq.config import NOT_ARCHITECTURE, SINUSOIDS, Config, ModelConfig
from seq2seq.data.tokenizer import LANGUAGE_TOKEN, MODEL_FILE, Tokenizer
from seq2seq.model.layers import sinusoidal_positions
from seq2seq.rundir import checkpoint, run_files

log = logging.getLogger(__name__)

EXPORT_FILE = "seq2seq.json"  # what the CTranslate2 engine needs besides the model
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16",
                 "int16", "float16", "bfloat16")


# ModelConfig.activation -> CTranslate2's common_spec.Activation (jax.nn.gelu is the tanh form)
ACTIVATIONS = {"relu": "RELU", "gelu": "GELUTanh", "gelu_erf": "GELU",
               "gelu_sigmoid": "GELUSigmoid", "swish": "SWISH"}


class ExportError(ValueError):
  """The run cannot be exported as asked."""


def import_ctranslate2():
  try:
    import ctranslate2
  except ImportError as e:
    raise ExportError("CTranslate2 is not installed: pip install \"seq2seq-haiku[ctranslate2]\" "
                      "(or pip install ctranslate2)") from e
  return ctranslate2


def check_supported(cfg: ModelConfig) -> None:
  """Refuses, by name, any architecture option the conversion does not map."""
  known = {"positional": ("sinusoidal", "learned", "rotary"),
           "activation": tuple(ACTIVATIONS), "sinusoidal": SINUSOIDS,
           "pre_norm": (True, False), "tied_embeddings": (True, False),
           "embedding_scale": (True, False), "output_bias": (True, False),
           "decoder_start": ("bos", "zeros")}
  for field, values in known.items():
    value = getattr(cfg, field)
    if value not in values:
      raise ExportError(f"model option {field}={value!r} has no CTranslate2 conversion "
                        f"(supported: {', '.join(map(repr, values))})")
  mapped = set(known) | set(NOT_ARCHITECTURE) | {
      "vocab_size", "d_model", "num_heads", "d_ff", "encoder_layers", "decoder_layers",
      "max_len", "layer_norm_epsilon"}
  unmapped = {f.name for f in dataclasses.fields(cfg)} - mapped
  if unmapped:
    raise ExportError(f"model options {sorted(unmapped)} are not handled by the "
                      "CTranslate2 conversion (seq2seq/rundir/ctranslate2_model.py)")


def _np(x) -> np.ndarray:
  return np.asarray(x, np.float32)


def _linear(spec, dense: dict) -> None:
  spec.weight = _np(dense["w"]).T  # Haiku [in, out] -> CTranslate2 [out, in]
  spec.bias = _np(dense["b"])


def _fused(spec, denses: list[dict]) -> None:
  spec.weight = np.concatenate([_np(d["w"]).T for d in denses], axis=0)
  spec.bias = np.concatenate([_np(d["b"]) for d in denses])


def _layer_norm(spec, ln: dict) -> None:
  spec.gamma, spec.beta = _np(ln["scale"]), _np(ln["offset"])


def build_spec(cfg: ModelConfig, params, pieces: list[str], source_token: str | None = None,
               source_eos: bool = True):
  """The CTranslate2 `TransformerSpec` of a model, its weights set from `params`."""
  import_ctranslate2()
  from ctranslate2.specs import common_spec, transformer_spec
  check_supported(cfg)
  activation = getattr(common_spec.Activation, ACTIVATIONS[cfg.activation])
  # Rotary positions: every self-attention rotates all K dimensions of its queries and
  # keys, pairs (i, i + K/2) (not interleaved), angles position * 10000^(-2i/K), as
  # layers.rotary; cross-attention is not rotated, in either.
  rotary = (dict(rotary_dim=0, rotary_interleave=False, rotary_base=10000.0)
            if cfg.positional == "rotary" else {})
  spec = transformer_spec.TransformerSpec(
      transformer_spec.TransformerEncoderSpec(cfg.encoder_layers, cfg.num_heads,
                                              pre_norm=cfg.pre_norm, activation=activation,
                                              **rotary),
      transformer_spec.TransformerDecoderSpec(cfg.decoder_layers, cfg.num_heads,
                                              pre_norm=cfg.pre_norm, activation=activation,
                                              **rotary))
  p = lambda name: params[f"transformer/~/{name}"]

  def embedding(name):
    return _np(p(name)["embeddings"])

  # CTranslate2 throws on a position past the table; Argos and LibreTranslate ask for up
  # to POSITION_ROWS. Rows past model.max_len: sinusoids as any row, zeros with rotary,
  # the last learned row repeated (the model never saw such lengths: a translation, not
  # a 500). Inputs within model.max_len read the same rows as before.
  rows = max(cfg.max_len, POSITION_ROWS)

  def positions(name):
    if cfg.positional == "learned":
      learned = _np(p(name)["positions"])
      return np.concatenate([learned, np.repeat(learned[-1:], rows - len(learned), 0)])
    if cfg.positional == "rotary":  # nothing added to the embeddings
      return np.zeros((rows, cfg.d_model), np.float32)
    return sinusoidal_positions(rows, cfg.d_model, cfg.sinusoidal)

  src_name = "shared_embedding" if cfg.tied_embeddings else "src_embedding"
  tgt_name = "shared_embedding" if cfg.tied_embeddings else "tgt_embedding"
  spec.encoder.embeddings[0].weight = embedding(src_name)
  spec.encoder.position_encodings.encodings = positions(src_name)  # zeros with rotary
  spec.decoder.embeddings.weight = embedding(tgt_name)
  if hasattr(spec.decoder, "position_encodings"):  # its decoder has none with rotary
    spec.decoder.position_encodings.encodings = positions(tgt_name)
  spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = cfg.embedding_scale  # x sqrt(D)
  spec.decoder.start_from_zero_embedding = cfg.decoder_start == "zeros"
  if cfg.tied_embeddings:
    spec.decoder.projection.weight = embedding(tgt_name)  # logits = x E^T (+ b)
    if cfg.output_bias:
      spec.decoder.projection.bias = _np(params["transformer"]["output_bias"])
  else:
    _linear(spec.decoder.projection, p("output_projection"))
  if cfg.pre_norm:
    _layer_norm(spec.encoder.layer_norm, p("encoder_norm/ln"))
    _layer_norm(spec.decoder.layer_norm, p("decoder_norm/ln"))

  def attention(spec_att, scope, self_attention):
    q, k, v, o = (p(f"{scope}/~/{n}") for n in ("query", "key", "value", "out"))
    if self_attention:
      _fused(spec_att.linear[0], [q, k, v])
    else:
      _linear(spec_att.linear[0], q)
      _fused(spec_att.linear[1], [k, v])
    _linear(spec_att.linear[-1], o)

  def feed_forward(spec_ff, scope):
    _linear(spec_ff.linear_0, p(f"{scope}/~/feed_forward/~/inner"))
    _linear(spec_ff.linear_1, p(f"{scope}/~/feed_forward/~/outer"))

  for i, layer in enumerate(spec.encoder.layer):
    scope = f"encoder_layer_{i}"
    attention(layer.self_attention, f"{scope}/~/self_attention", True)
    _layer_norm(layer.self_attention.layer_norm, p(f"{scope}/~/res_attention/~/norm/ln"))
    feed_forward(layer.ffn, scope)
    _layer_norm(layer.ffn.layer_norm, p(f"{scope}/~/res_ff/~/norm/ln"))
  for i, layer in enumerate(spec.decoder.layer):
    scope = f"decoder_layer_{i}"
    attention(layer.self_attention, f"{scope}/~/self_attention", True)
    _layer_norm(layer.self_attention.layer_norm, p(f"{scope}/~/res_self/~/norm/ln"))
    attention(layer.attention, f"{scope}/~/cross_attention", False)
    _layer_norm(layer.attention.layer_norm, p(f"{scope}/~/res_cross/~/norm/ln"))
    feed_forward(layer.ffn, scope)
    _layer_norm(layer.ffn.layer_norm, p(f"{scope}/~/res_ff/~/norm/ln"))

  # Our sources end in EOS and targets start from BOS (seq2seq.vocab). One direction of a
  # model of several: CTranslate2 leads each source with its target language's token as
  # its "source BOS" (as OPUS-MT's multilingual models lead theirs with >>fra<<), so that
  # a caller that knows nothing of it (Argos Translate) gets that direction.
  spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = "<unk>", "<s>", "</s>"
  spec.config.decoder_start_token = "<s>"
  spec.config.add_source_bos, spec.config.add_source_eos = False, source_eos
  if source_token is not None:
    spec.config.bos_token, spec.config.add_source_bos = source_token, True
  spec.config.layer_norm_epsilon = cfg.layer_norm_epsilon
  spec.register_source_vocabulary(pieces)
  spec.register_target_vocabulary(pieces)
  return spec


def export_ctranslate2(workdir: str | Path, output: str | Path, checkpoint_name: str = "best",
                       quantization: str = "float32", force: bool = False,
                       direction: tuple[str, str] | None = None) -> Path:
  """Converts a run's checkpoint into a CTranslate2 model directory; returns its path.
  A run of several directions exports all of them (the engine leads each source with
  its token), or with `direction` one, whose token CTranslate2 adds itself."""
  if quantization not in QUANTIZATIONS:
    raise ExportError(f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
  output = Path(output)
  if output.exists() and any(output.iterdir()) and not force:
    raise ExportError(f"{output} exists and is not empty (add --force to replace it)")
  if output.exists() and any(output.iterdir()) and not (output / EXPORT_FILE).is_file():
    raise ExportError(f"{output} is not an export (it has no {EXPORT_FILE}): --force "
                      "replaces an earlier export only; give another --output")
  cfg: Config = run_files.load_config(workdir)
  tok = run_files.load_tokenizer(workdir)
  cfg, source_token = one_direction(cfg, direction, workdir)
  params, meta = checkpoint.load_params(workdir, checkpoint_name, cfg.model)
  pieces = tok.pieces(range(tok.vocab_size))
  spec = build_spec(cfg.model, params, pieces, source_token, tok.source_eos)
  spec.validate()
  spec.optimize(quantization=quantization)
  if output.exists():
    shutil.rmtree(output)
  output.mkdir(parents=True)
  spec.save(str(output))
  tok.write(output)
  info = {"format": "seq2seq-ctranslate2", "source_run": str(Path(workdir).absolute()),
          "checkpoint": checkpoint_name, "step": meta.get("step"),
          "averaged_steps": meta.get("averaged_steps"), "quantization": quantization,
          "spm_fingerprint": tok.fingerprint(), "source_token": source_token,
          "exported": time.strftime("%Y-%m-%d %H:%M:%S"), "config": cfg.to_dict()}
  (output / EXPORT_FILE).write_text(json.dumps(info, indent=2) + "\n")
  log.info("exported %s (%s checkpoint) to %s as CTranslate2 %s", workdir, checkpoint_name,
           output, quantization)
  return output


def is_run(path: str | Path) -> bool:
  """Whether `path` is a training run directory (config.json beside checkpoints/)."""
  path = Path(path)
  return (path / run_files.CONFIG_FILE).is_file() and (path / "checkpoints").is_dir()


def model_config(path: str | Path, engine: str) -> Config:
  """The config of what `engine` loads from `path`: a run's own, or an export's."""
  if engine == "ctranslate2" and not is_run(path):
    return load_export(path)[1]
  return run_files.load_config(path)


def export_of_run(workdir: str | Path, checkpoint_name: str = "best") -> Path:
  """The run's checkpoint as a CTranslate2 model in RUN/exports/ctranslate2-NAME (float32),
  exported on first use and again once that checkpoint has changed (a run still
  training): the CTranslate2 engine straight from a run directory."""
  step = checkpoint.checkpoint_path(workdir, checkpoint_name).resolve()
  source = f"{step} {step.stat().st_mtime_ns}"
  name = checkpoint_name if checkpoint_name in checkpoint.KINDS else step.name
  output = Path(workdir) / "exports" / f"ctranslate2-{name}"
  stamp = output / "source_checkpoint"
  if stamp.is_file() and stamp.read_text() == source:
    return output
  # written beside, then swapped in: a reader never sees half an export
  partial = output.with_name(f"{output.name}.partial-{os.getpid()}")
  export_ctranslate2(workdir, partial, str(step), force=True)
  (partial / "source_checkpoint").write_text(source)
  if output.exists():
    shutil.rmtree(output)
  partial.rename(output)
  return output


def one_direction(cfg: Config, direction: tuple[str, str] | None, workdir
                  ) -> tuple[Config, str | None]:
  """(the config an export of `direction` describes, the language token CTranslate2 then
  adds to each source, if any). None: every direction the run has."""
  if direction is None or (not cfg.data.multilingual
                           and tuple(direction) == (cfg.data.src_lang, cfg.data.tgt_lang)):
    return cfg, None
  src, tgt = direction
  trained = [f"{s}-{t}" for s, t in cfg.data.direction_pairs()]
  if not cfg.data.multilingual or src not in cfg.data.languages() or (
      tgt not in cfg.data.languages()) or src == tgt:
    raise ExportError(f"{workdir} does not translate {src}-{tgt}: it was trained on "
                      f"{', '.join(trained)}")
  if f"{src}-{tgt}" not in trained:
    log.warning("exporting %s-%s, which %s was not trained on (zero-shot)", src, tgt, workdir)
  data = dataclasses.replace(cfg.data.for_direction(src, tgt), directions="")
  return dataclasses.replace(cfg, data=data), LANGUAGE_TOKEN.format(tgt)


# The longest input and output Argos Translate asks of CTranslate2 by default (its
# translator's max_input_length and LibreTranslate's sentence lengths): the export's
# position table holds this many rows at least.
POSITION_ROWS = 1024


def load_export(path: str | Path) -> tuple[dict, Config, Tokenizer]:
  """The export's description, the run's config and its tokenizer."""
  path = Path(path)
  info_path = path / EXPORT_FILE
  if not info_path.exists():
    hint = (" (it is a run directory: export it first with seq2seq-export --format ctranslate2)"
            if (path / run_files.CONFIG_FILE).exists() and (path / "checkpoints").exists()
            else "")
    raise checkpoint.CheckpointError(
        f"{info_path} not found: {path} is not a model written by seq2seq-export{hint}")
  info = json.loads(info_path.read_text())
  return info, Config.from_dict(info["config"]), Tokenizer.load(path / MODEL_FILE)
