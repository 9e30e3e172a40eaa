"""Typed configs (model, data, train, decode) and model presets.

The dataclasses are the single source of truth for every field and its default.
Config files under `configs/` start from `default_config()` (an
`ml_collections.ConfigDict` built from these dataclasses, locked so that a typo
is an error) and change what they need; `Config.from_dict` turns the result back
into typed objects that the library consumes.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Callable

import ml_collections

# Options removed in 0.2.0 (docs/training.md, "Which options exist"), with the value that
# meant "off". A run directory written before keeps loading when it left them off.
REMOVED_OPTIONS = {
    "model": {"word_dropout": 0.0, "drop_path": 0.0, "glu": False, "norm": "layer",
              "fix_norm": False, "qk_norm": 0.0},
    "data": {"sampling_sides": "both", "bidirectional_epochs": 0},
    "train": {"cooldown": 0.0, "muon_momentum": 0.95, "muon_rms": 0.2, "rdrop_alpha": 0.0,
              "batch_parts": 1},
}
REMOVED_VALUES = {"optimizer": ("muon", "schedule_free")}


def require(section: str, obj: Any, fields: str, ok: Callable[[Any], bool],
            expected: str) -> None:
  """Raises a ValueError naming `section.field` for each of `fields` whose value is not ok."""
  for field in fields.split():
    value = getattr(obj, field)
    if isinstance(value, bool) or not ok(value):
      raise ValueError(f"{section}.{field}={value!r}: expected {expected}")


POSITIVE = (lambda v: isinstance(v, int) and v >= 1, "an integer >= 1")
COUNT = (lambda v: isinstance(v, int) and v >= 0, "an integer >= 0")
NON_NEGATIVE = (lambda v: math.isfinite(v) and v >= 0, "a number >= 0")
FRACTION = (lambda v: 0 <= v < 1, "a number from 0 to 1, 1 excluded")


# Feed-forward activations: relu; gelu (the tanh form, jax.nn.gelu's default), gelu_erf
# (the exact form), gelu_sigmoid (x sigmoid(1.702 x), Marian's); swish (x sigmoid(x)).
ACTIVATIONS = ("relu", "gelu", "gelu_erf", "gelu_sigmoid", "swish")
SINUSOIDS = ("interleaved", "halves", "tensor2tensor")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Transformer encoder-decoder hyper-parameters."""

  vocab_size: int = 8000  # joint source/target SentencePiece vocabulary
  d_model: int = 256  # D: residual stream width
  num_heads: int = 4  # H: attention heads (key width K = D / H)
  d_ff: int = 1024  # F: feed-forward hidden width
  encoder_layers: int = 3  # encoder layers
  decoder_layers: int = 3  # decoder layers
  dropout: float = 0.1  # residual, embedding and feed-forward dropout
  attention_dropout: float = 0.0  # dropout on attention probabilities
  max_len: int = 256  # longest sequence (pieces, EOS included) the model sees
  # "sinusoidal" or "learned" (added to the embeddings), or "rotary" (RoPE, Su et al. 2021:
  # queries and keys of every self-attention rotated by their positions; needs an even K).
  positional: str = "sinusoidal"  # sinusoidal, learned or rotary
  activation: str = "relu"  # feed-forward activation: one of ACTIVATIONS
  pre_norm: bool = True  # layer norm before each sub-layer (False: after, as in Vaswani)
  tied_embeddings: bool = True  # one embedding for source, target and output layer
  # The variants of models trained elsewhere (seq2seq/rundir/importing.py reads them from
  # Marian, Hugging Face and CTranslate2 models); the defaults are this package's own.
  # Sinusoid table: "interleaved" (sin, cos alternating, frequencies 10000^(-2i/D): Vaswani
  # et al.), "halves" (sines then cosines, the same frequencies: Hugging Face's Marian,
  # CTranslate2's OPUS-MT tables), "tensor2tensor" (sines then cosines, frequencies
  # 10000^(-i/(D/2-1)): tensor2tensor, Marian, fairseq, CTranslate2's built-in table).
  sinusoidal: str = "interleaved"  # sinusoid layout and frequencies (positional=sinusoidal)
  embedding_scale: bool = True  # token embeddings times sqrt(D) (Vaswani et al.)
  output_bias: bool = False  # tied output layer with a bias (an untied one always has one)
  # The decoder's first input: the BOS token's embedding, or "zeros" (positions only): a
  # Marian model starts from a zero vector.
  decoder_start: str = "bos"  # "bos" or "zeros"
  layer_norm_epsilon: float = 1e-5  # added to the variance in every layer norm
  dtype: str = "float32"  # compute dtype, "float32" or "bfloat16"; params stay float32
  # The dtype every matmul's operands are rounded to, forward and backward: "bfloat16"
  # keeps activations, layer norm, softmax and the products float32 (bfloat16 x bfloat16
  # -> float32, which CPUs with AMX or AVX-512 BF16 run faster than float32;
  # docs/experiments.md has the measurements).
  matmul_dtype: str = "float32"  # float32, bfloat16 operands (float32 products), or auto

  def __post_init__(self):
    require("model", self, "vocab_size d_model num_heads d_ff encoder_layers decoder_layers",
            *POSITIVE)
    require("model", self, "max_len", lambda v: isinstance(v, int) and v >= 2,
            "an integer >= 2 (a piece and EOS)")
    if self.d_model % self.num_heads:
      raise ValueError(
          f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
    if self.positional not in ("sinusoidal", "learned", "rotary"):
      raise ValueError("positional must be 'sinusoidal', 'learned' or 'rotary', "
                       f"got {self.positional!r}")
    if self.positional == "rotary" and self.head_dim % 2:
      raise ValueError(f"positional='rotary' needs an even head width, got "
                       f"d_model / num_heads = {self.head_dim}")
    for field, values in (("activation", ACTIVATIONS), ("sinusoidal", SINUSOIDS),
                          ("decoder_start", ("bos", "zeros"))):
      if getattr(self, field) not in values:
        raise ValueError(f"model.{field}={getattr(self, field)!r}: expected one of "
                         f"{', '.join(values)}")
    require("model", self, "layer_norm_epsilon", lambda v: 0 < v < 1, "a number in (0, 1)")
    if self.dtype not in ("float32", "bfloat16"):
      raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")
    if self.matmul_dtype not in ("float32", "bfloat16", "auto"):
      raise ValueError("matmul_dtype must be 'float32', 'bfloat16' or 'auto', got "
                       f"{self.matmul_dtype!r}")
    require("model", self, "dropout attention_dropout", *FRACTION)

  @property
  def head_dim(self) -> int:
    return self.d_model // self.num_heads


# ModelConfig fields that change how the model trains or computes, not the shapes or
# meaning of its parameters: a fine-tuning run may change them, an export ignores them.
NOT_ARCHITECTURE = ("dropout", "attention_dropout", "dtype", "matmul_dtype")


PRESETS: dict[str, ModelConfig] = {
    # For tests and the demo: compiles in seconds, trains on data/ in a minute.
    "tiny": ModelConfig(vocab_size=512, d_model=64, num_heads=2, d_ff=128,
                        encoder_layers=2, decoder_layers=2, max_len=128),
    # Multi30k recipe (configs/multi30k.py): the shape of Wu et al.'s (2021) text-only
    # `transformer_tiny`, d 128 and 4+4 layers: cheaper per target token than `small`,
    # so an hour on 2 CPU cores buys more epochs (docs/experiments.md).
    "compact": ModelConfig(d_model=128, num_heads=4, d_ff=512,
                           encoder_layers=4, decoder_layers=4),
    "small": ModelConfig(d_model=256, num_heads=4, d_ff=1024,
                         encoder_layers=3, decoder_layers=3),
    # Vaswani et al. (2017) Transformer base.
    "base": ModelConfig(vocab_size=32000, d_model=512, num_heads=8, d_ff=2048,
                        encoder_layers=6, decoder_layers=6),
}


# Padded lengths of the Multi30k recipe's batches: fine steps where its sentences are
# (10-30 pieces) keep the padding low.
MULTI30K_BUCKETS = (8, 10, 12, 14, 16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 100, 128, 256)
# Cleaning filters of the training pairs, in the order they apply (seq2seq/data/cleaning.py).
CLEAN_FILTERS = ("empty", "long", "ratio", "copy", "nontext", "duplicate")
# Any corpus: each boundary at most 1.5x the one below (1.25x from 20 up).
BUCKETS = (8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 100, 128, 160, 200, 256)


# A language code of data.directions: ISO 639-1 or 639-3 in lower case, with an optional
# region or script after "_" ("-" separates a direction's two codes).
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(_[A-Za-z0-9]{2,8})?")


def check_language(where: str, code: str) -> None:
  if not LANGUAGE_CODE.fullmatch(code):
    raise ValueError(f"{where}: {code!r} is not a language code (expected ISO 639-1 or "
                     "639-3 in lower case, such as en, de, fr or fur, with an optional "
                     "region or script after '_', such as pt_BR or zh_Hant)")


def check_boundaries(name: str, b: tuple[int, ...]) -> None:
  """Length-bucket boundaries must be increasing integers >= 2."""
  if not b or any(not isinstance(x, int) or x < 2 for x in b) or list(b) != sorted(set(b)):
    raise ValueError(f"{name}={b!r}: expected increasing integers >= 2")


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Where the parallel text comes from, how it is cleaned, tokenized and batched."""

  # Where the text is (docs/data.md): a path per split, else a folder (`dir`) or a Hub
  # data set (`hub`), one of the two. A command-line override of `dir` or `hub` replaces
  # a source the config file set through the other (cli.apply_overrides).
  train_path: str = ""  # training pairs: FILE.tsv, FILE.jsonl (.gz too) or SRC_FILE,TGT_FILE
  val_path: str = ""  # validation pairs, the same forms; none: held out of training
  test_path: str = ""  # test pairs for evaluate.py, the same forms
  dir: str = ""  # a folder of {split}.{lang}, {split}.tsv or {split}.jsonl files (.gz too)
  hub: str = ""  # Hugging Face data set name or a `save_to_disk` folder, e.g. "wmt14"
  hub_config: str = ""  # Hub data set config, e.g. "de-en"
  hub_splits: str = ""  # Hub names of our splits, 'ours=theirs,...' (docs/data.md)
  # Fields of a Hub data set or JSON Lines record; "" finds them: columns named by the
  # languages, a dictionary holding both ("translation.en"), or source/target, src/tgt.
  src_field: str = ""  # field of the source text; dotted for nested, e.g. "translation.en"
  tgt_field: str = ""  # field of the target text; "" finds both
  src_lang: str = "en"  # source language code (file suffix, field name)
  tgt_lang: str = "de"  # target language code
  # Several directions in one model (docs/multilingual.md), e.g. "en-de,de-en,en-fr":
  # each read from the source above as src_lang/tgt_lang are; the target language is
  # given to the model as a token (`<2de>`) before the source. "" = src_lang-tgt_lang only.
  directions: str = ""  # directions of a multilingual run, e.g. en-de,de-en,en-fr
  # A direction of n pairs is drawn with probability proportional to n ** (1 / T) per
  # epoch: 1 = as in the data, larger flattens towards uniform (small pairs oversampled).
  temperature: float = 5.0  # multilingual: sampling temperature of the directions
  train_split: str = "train"  # split trained on
  val_split: str = "val"  # split validated on; missing: held out of the training pairs
  test_split: str = "test"  # split evaluate.py scores by default
  # Without a validation split, this many cleaned training pairs (at most a tenth), drawn
  # with `heldout_seed`, are held out for validation and written to WORKDIR/heldout.jsonl.
  heldout_pairs: int = 1000  # validation pairs held out when there is no validation split
  heldout_seed: int = 0  # seed of the held-out draw
  # Filters of the training pairs, applied in order before the vocabulary is trained
  # (seq2seq/data/cleaning.py; the counts and examples go to WORKDIR/data_report.json).
  clean: str = "empty,long,ratio,copy,nontext,duplicate"  # cleaning filters; "" = none
  clean_max_chars: int = 1000  # 'long': characters of a side
  clean_max_ratio: float = 3.0  # 'ratio': longer / shorter side, characters + 10 each
  clean_min_letters: float = 0.5  # 'nontext': letters among a side's non-space characters
  spm_model_type: str = "unigram"  # "unigram" or "bpe"; its size is model.vocab_size
  # An existing SentencePiece model (.model written by seq2seq) to use instead of training
  # one; with train.init_from the source run's model is used.
  spm_model: str = ""  # an existing SentencePiece model to use
  spm_max_sentences: int = 2_000_000  # sentences sampled to train SentencePiece
  max_train_len: int = 100  # longer training pairs (pieces, EOS included) are dropped
  max_tokens: int = 4096  # token budget of one global training batch (padded rows x length), all devices together
  # Padded lengths of training batches: one compiled shape each.
  bucket_boundaries: tuple[int, ...] = BUCKETS  # padded lengths of batches
  # > 0: pack several training pairs into rows of this many pieces per side (segment
  # masks keep them apart): one compiled shape, and less padding than the buckets'
  # (docs/experiments.md). Pairs longer than this are dropped, like those over max_train_len.
  pack_length: int = 0  # pieces per packed row; 0 = length buckets
  # Subword regularization (Kudo 2018; BPE-dropout, Provilkov et al. 2020): every epoch
  # segmented anew, a pure function of (seed, epoch); unigram: smoothing, smaller is more
  # random; BPE: the merge drop rate. Holds the training text in memory (docs/data.md).
  sampling_alpha: float = 0.0  # subword sampling; 0 = off
  sampling_nbest: int = -1  # unigram: sample from the n best segmentations; -1 = all
  seed: int = 0  # shuffling seed
  cache_dir: str = ""  # where encoded corpora are cached; "" = WORKDIR/cache

  def __post_init__(self):
    require("data", self, "max_tokens spm_max_sentences", *POSITIVE)
    require("data", self, "max_train_len", lambda v: isinstance(v, int) and v >= 2,
            "an integer >= 2 (a piece and EOS)")
    require("data", self, "pack_length seed heldout_seed", *COUNT)
    require("data", self, "heldout_pairs clean_max_chars", *POSITIVE)
    require("data", self, "clean_max_ratio", lambda v: v >= 1, "a number >= 1")
    require("data", self, "clean_min_letters", lambda v: 0 <= v <= 1, "a number from 0 to 1")
    if unknown := set(self.clean.replace(" ", "").split(",")) - {"", *CLEAN_FILTERS}:
      raise ValueError(f"data.clean={self.clean!r}: unknown filter(s) {', '.join(sorted(unknown))}"
                       f"; filters: {', '.join(CLEAN_FILTERS)}")
    check_boundaries("data.bucket_boundaries", self.bucket_boundaries)
    if self.spm_model_type not in ("unigram", "bpe"):
      raise ValueError(f"data.spm_model_type={self.spm_model_type!r}: expected 'unigram' "
                       "or 'bpe'")
    self.direction_pairs()  # validates the format
    require("data", self, "temperature", lambda v: math.isfinite(v) and v > 0,
            "a number > 0")
    if self.multilingual and (given := [f for f in ("train_path", "val_path", "test_path")
                                        if getattr(self, f)]):
      raise ValueError(f"data.directions reads each direction from data.dir or data.hub "
                       f"(SPLIT.SRC and SPLIT.TGT); data.{given[0]} names one pair's files")
    if self.dir and self.hub:
      raise ValueError(f"data.dir={self.dir!r} and data.hub={self.hub!r} are both set; "
                       "give one (--config.data.hub= reads the folder)")
    if (self.src_field == "") != (self.tgt_field == ""):
      raise ValueError(f"data.src_field={self.src_field!r}, data.tgt_field="
                       f"{self.tgt_field!r}: give both, or neither to find them")
    self.hub_split("train")  # validates the format
    if self.sampling_alpha < 0 or (self.spm_model_type == "bpe" and self.sampling_alpha >= 1):
      raise ValueError(f"data.sampling_alpha={self.sampling_alpha}: expected 0 (off) or "
                       "> 0 (unigram), in (0, 1) for a BPE model")
    if self.sampling_nbest == 0 or self.sampling_nbest < -1:
      raise ValueError(f"data.sampling_nbest={self.sampling_nbest}: expected -1 (all "
                       "segmentations) or a positive count")

  @property
  def multilingual(self) -> bool:
    """Whether the run declares its directions (a language token before each source)."""
    return bool(self.directions.strip())

  def direction_pairs(self) -> tuple[tuple[str, str], ...]:
    """The (source, target) pairs trained: `directions`, else (src_lang, tgt_lang)."""
    if not self.multilingual:
      return ((self.src_lang, self.tgt_lang),)
    pairs = []
    for item in (x.strip() for x in self.directions.split(",")):
      src, sep, tgt = item.partition("-")
      if not sep:
        raise ValueError(f"data.directions={self.directions!r}: expected 'src-tgt,...' "
                         f"such as 'en-de,de-en', got {item!r}")
      for lang in (src, tgt):
        check_language(f"data.directions: {item!r}", lang)
      if src == tgt:
        raise ValueError(f"data.directions: {item!r} translates a language into itself")
      if (src, tgt) in pairs:
        raise ValueError(f"data.directions: {item!r} is given twice")
      pairs.append((src, tgt))
    return tuple(pairs)

  def languages(self) -> tuple[str, ...]:
    """Every language of the run's directions, in order of first appearance."""
    return tuple(dict.fromkeys(lang for pair in self.direction_pairs() for lang in pair))

  def for_direction(self, src: str, tgt: str) -> "DataConfig":
    """This source read for one direction, as a run of that pair alone reads it; a Hub
    config may name the pair, e.g. `hub_config="{src}-{tgt}"` (wmt19's "de-en")."""
    config = self.hub_config.format(src=src, tgt=tgt) if "{" in self.hub_config else \
        self.hub_config
    return dataclasses.replace(self, src_lang=src, tgt_lang=tgt, hub_config=config)

  def hub_split(self, split: str) -> str:
    """The Hub data set's name for one of our split names (see `hub_splits`)."""
    renames = {}
    for item in filter(None, (x.strip() for x in self.hub_splits.split(","))):
      ours, sep, theirs = item.partition("=")
      if not sep or not ours.strip() or not theirs.strip():
        raise ValueError(f"data.hub_splits={self.hub_splits!r}: expected 'ours=theirs,...', "
                         f"got {item!r}")
      renames[ours.strip()] = theirs.strip()
    return renames.get(split, split)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Optimisation, schedule, validation and checkpointing."""

  seed: int = 0  # parameter init and dropout
  optimizer: str = "adam"  # "adam", or "adamw" (decoupled weight_decay)
  learning_rate: float = 1e-3  # peak learning rate, reached at the end of warmup
  warmup_steps: int = 4000  # linear warmup from 0 to learning_rate, then lr_schedule
  # After warmup: "inverse_sqrt" (Vaswani et al.), "linear" / "cosine" decay to 0 at
  # decay_steps (0 = max_steps), as fairseq's polynomial_decay / cosine schedulers, or
  # "constant".
  lr_schedule: str = "inverse_sqrt"  # inverse_sqrt, linear, cosine or constant
  decay_steps: int = 0  # linear/cosine: updates to reach 0; 0 = max_steps
  b1: float = 0.9  # Adam's beta1
  b2: float = 0.98  # Adam's beta2
  eps: float = 1e-9  # Adam's epsilon
  weight_decay: float = 0.0  # with adamw
  clip_norm: float = 1.0  # global gradient-norm clipping; 0 turns it off
  # Curriculum ("late") dropout (Morerio et al. 2017; Liu et al. 2023): every dropout rate
  # rises linearly from 0 to its configured value over the first N updates.
  dropout_ramp_steps: int = 0  # dropout rises from 0 over these updates; 0 = off
  label_smoothing: float = 0.1  # label smoothing of the training loss
  # Tokens per chunk of the output layer + loss (`loss.output_loss_sums`): the [tokens,
  # vocab] logits are never held whole; with bfloat16 operands 512 is also faster for
  # `compact` (docs/experiments.md).
  loss_chunk: int = 0  # output layer + loss this many tokens at a time; 0 = all
  grad_accum_steps: int = 1  # micro-batches per optimizer update
  max_steps: int = 100_000  # optimizer updates
  max_minutes: float = 0.0  # stop after this much training wall time; 0 = no limit
  log_every: int = 100  # steps between log lines / metrics.jsonl records
  eval_every: int = 1000  # steps between validations (loss, accuracy, BLEU)
  eval_max_sentences: int = 0  # validation sentences decoded for BLEU; 0 = all
  checkpoint_every: int = 1000  # steps between "latest" checkpoints
  keep_checkpoints: int = 3  # latest checkpoints kept
  early_stopping_patience: int = 0  # validations without a new best BLEU; 0 = off
  average_last: int = 0  # at the end, average the last K checkpoints into "averaged"
  # Keep an exponential moving average of the parameters, ema <- d * ema + (1 - d) *
  # params after every update (fairseq's --ema-decay), written to "ema" at the end; 0 = off.
  ema_decay: float = 0.0  # moving average of the parameters; 0 = off
  tensorboard: bool = False  # also log to WORKDIR/tensorboard (needs the [tensorboard] extra)
  tensorboard_examples: int = 3  # validation translations shown as text at each validation
  # Fine-tuning: start from another run's parameters (and its SentencePiece model), with a
  # fresh optimiser and step counter. The architecture must match the source run's.
  init_from: str = ""  # source run directory
  init_checkpoint: str = "best"  # best, averaged, ema, latest, or a checkpoint step directory
  # Divergence: training stops, saving nothing more, when an update's loss per target token
  # is not finite, exceeds twice a uniform guess's (2 ln vocab_size), or (from the 100th
  # update on) exceeds this many times its running level, the moving average of the
  # updates before it over ~100 updates (docs/training.md, "When training diverges").
  divergence_factor: float = 2.0  # stop when the loss exceeds this x its running level; 0 = off

  def __post_init__(self):
    require("train", self, "max_steps grad_accum_steps log_every eval_every checkpoint_every "
            "keep_checkpoints", *POSITIVE)
    require("train", self, "seed warmup_steps decay_steps dropout_ramp_steps loss_chunk "
            "eval_max_sentences early_stopping_patience average_last tensorboard_examples",
            *COUNT)
    require("train", self, "eps", lambda v: math.isfinite(v) and v > 0, "a number > 0")
    require("train", self, "learning_rate weight_decay clip_norm max_minutes", *NON_NEGATIVE)
    require("train", self, "b1 b2 label_smoothing ema_decay", *FRACTION)
    require("train", self, "divergence_factor", lambda v: v == 0 or 1 < v < math.inf,
            "0 (off) or a number > 1")
    if self.average_last > self.keep_checkpoints:
      raise ValueError(f"train.average_last={self.average_last} averages the last "
                       f"{self.average_last} checkpoints, but train.keep_checkpoints="
                       f"{self.keep_checkpoints} keeps only {self.keep_checkpoints}")
    if self.weight_decay and self.optimizer == "adam":
      raise ValueError(f"train.weight_decay={self.weight_decay} needs train.optimizer="
                       "'adamw' (Adam has no decoupled weight decay)")
    end, warmup = self.decay_steps or self.max_steps, max(self.warmup_steps, 1)
    if self.lr_schedule in ("linear", "cosine") and end <= warmup:
      raise ValueError(f"train.lr_schedule={self.lr_schedule!r} decays to 0 at step {end} "
                       "(train.decay_steps, else train.max_steps), which must come after "
                       f"the {warmup} warmup steps")
    if self.optimizer in REMOVED_VALUES.get("optimizer", ()):
      raise ValueError(f"train.optimizer={self.optimizer!r} was removed in 0.2.0 "
                       "(docs/experiments.md lists its result); use 'adam' or 'adamw'")
    if self.optimizer not in ("adam", "adamw"):
      raise ValueError(f"train.optimizer must be 'adam' or 'adamw', got {self.optimizer!r}")
    if self.lr_schedule not in ("inverse_sqrt", "linear", "cosine", "constant"):
      raise ValueError("train.lr_schedule must be 'inverse_sqrt', 'linear', 'cosine' or "
                       f"'constant', got {self.lr_schedule!r}")


# What decodes a trained model: JAX (a run directory) or CTranslate2 (an export of one).
ENGINES = ("jax", "ctranslate2")
# When beam search ends a sentence (decode.beam_search's `stop`).
BEAM_STOPS = ("exact", "current", "count")
# decode.ct2_threads: a mode by name or inter_threads x intra_threads
CT2_THREADS = r"throughput|latency|[1-9][0-9]*x[1-9][0-9]*"
# Why translate.py and evaluate.py refuse --beam-stop with --engine ctranslate2.
BEAM_STOP_CT2_ERROR = ("--beam-stop needs the JAX engine (CTranslate2 has its own rule: a "
                       "sentence ends once beam-size hypotheses have, as --beam-stop count)")


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
  """Search settings used by validation, evaluate.py and translate.py."""

  beam_size: int = 1  # 1 = greedy
  alpha: float = 0.6  # GNMT length penalty ((5 + len) / 6) ** alpha; 0 = raw log-prob
  # When beam search ends a sentence: "exact" (its best results are those of a search to
  # the length limit), "current" (live beams bounded at the current length) or "count"
  # (once W hypotheses have ended, fairseq's and CTranslate2's rule); the last two are
  # faster with a large alpha, and results may differ. decode.beam_search explains them.
  beam_stop: str = "exact"  # exact, current or count
  max_len_a: float = 1.5  # output length limit: a * source_length + b
  max_len_b: int = 10  # see max_len_a
  batch_size: int = 64  # sentences per decoding batch
  # Batches searched at once, each on its own thread: XLA:CPU runs most of a search step
  # on one core, so a second batch in flight uses the other (docs/experiments.md, "Decoding").
  workers: int = 2  # batches searched at once, on threads
  # A batch shrinks as its sentences finish: once the unfinished fit in a quarter of its
  # rows it goes on with those, down to this many rows (0: never; docs/experiments.md, Decoding).
  min_rows: int = 8  # a batch shrinks to this many rows; 0 = never
  # Padded source lengths of decoding batches (with model.max_len the last): one compiled
  # search each, so coarser than training's buckets: a search compiles for seconds per
  # program on 2 cores, and padding costs it little (docs/translating.md, "Speed and
  # precision").
  length_buckets: tuple[int, ...] = (16, 32, 64, 128)  # padded source lengths of batches
  # Compiled searches kept in memory: XLA:CPU keeps each program's HLO, tens of MB a
  # program on the recipe's model (docs/experiments.md, decode_memory.py); beyond this
  # many, the least recently used is dropped and loaded again from the caches if needed.
  programs: int = 8  # compiled searches kept in memory; 0 = all
  # Minimum Bayes risk: "" (off: the beam's best hypothesis), "bleu" or "chrf": of the
  # beam's W finished hypotheses, the one that agrees most with the others under that
  # utility, each weighted by `mbr_weights`: "model" (softmax of the beam scores) or
  # "uniform" (seq2seq/decoding/mbr.py; docs/translating.md).
  mbr: str = ""  # minimum Bayes risk: '', bleu or chrf
  mbr_weights: str = "model"  # MBR weights: model or uniform
  # A model of several directions, a pair it was not trained on (zero-shot): the search
  # writes only pieces that the target language's training text holds (a piece of
  # English alone cannot come out in French), against the off-target output that
  # zero-shot translation is known for (docs/multilingual.md).
  zero_shot_pieces: bool = True  # zero-shot: only the target language's pieces
  # The CTranslate2 engine's threads, as CTranslate2 advises: "throughput" (one batch per
  # core at once, one thread each: inter_threads = cores, intra_threads = 1), "latency"
  # (one batch at a time on every core) or "INTERxINTRA" (e.g. "2x1"). The JAX engine
  # ignores it (its batches at once are `workers`).
  ct2_threads: str = "throughput"  # CTranslate2: throughput, latency or INTERxINTRA

  def __post_init__(self):
    require("decode", self, "beam_size batch_size workers", *POSITIVE)
    if not re.fullmatch(CT2_THREADS, self.ct2_threads):
      raise ValueError(f"decode.ct2_threads={self.ct2_threads!r}: expected throughput, "
                       "latency or INTERxINTRA (positive counts, e.g. 2x1)")
    require("decode", self, "max_len_b min_rows programs", *COUNT)
    require("decode", self, "alpha max_len_a", *NON_NEGATIVE)
    check_boundaries("decode.length_buckets", self.length_buckets)
    for field, allowed in (("beam_stop", BEAM_STOPS), ("mbr", ("", "bleu", "chrf")),
                           ("mbr_weights", ("model", "uniform"))):
      if getattr(self, field) not in allowed:
        raise ValueError(f"decode.{field}={getattr(self, field)!r}: expected one of "
                         f"{', '.join(map(repr, allowed))}")


@dataclasses.dataclass(frozen=True)
class Config:
  model: ModelConfig = ModelConfig()
  data: DataConfig = DataConfig()
  train: TrainConfig = TrainConfig()
  decode: DecodeConfig = DecodeConfig()

  def __post_init__(self):
    for field in ("max_train_len", "pack_length"):
      if getattr(self.data, field) > self.model.max_len:
        raise ValueError(f"data.{field}={getattr(self.data, field)} exceeds model.max_len="
                         f"{self.model.max_len}, the longest sequence the model takes")

  @classmethod
  def from_dict(cls, d: Any) -> "Config":
    """Builds typed configs from a (nested) dict or ConfigDict; unknown keys are errors."""
    if isinstance(d, ml_collections.ConfigDict):
      d = d.to_dict()
    d = dict(d)
    if "spm_vocab_size" in d.get("data", {}):  # run directories written before 0.2
      d["data"] = {k: v for k, v in d["data"].items() if k != "spm_vocab_size"}
    d = drop_removed_options(d)
    sections = {}
    for f in dataclasses.fields(cls):
      sub_cls = f.type if isinstance(f.type, type) else globals()[f.type]
      sub = dict(d.get(f.name, {}))
      known = {g.name: g for g in dataclasses.fields(sub_cls)}
      unknown = sorted(set(sub) - set(known))
      if unknown:
        raise ValueError(f"unknown config field(s) {', '.join(f'{f.name}.{u}' for u in unknown)};"
                         f" known {f.name} fields: {', '.join(known)}")
      for k, v in list(sub.items()):
        if isinstance(v, list):
          sub[k] = tuple(v)
      sections[f.name] = sub_cls(**sub)
    extra = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
    if extra:
      raise ValueError(f"unknown config section(s): {', '.join(extra)}")
    return cls(**sections)

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def drop_removed_options(d: dict[str, Any]) -> dict[str, Any]:
  """`d` without the removed options it leaves off; one that it turns on is an error."""
  d = dict(d)
  for section, removed in REMOVED_OPTIONS.items():
    sub = dict(d.get(section, {}))
    for name, off in removed.items():
      if name in sub:
        value = sub.pop(name)
        if value != off:
          raise ValueError(f"{section}.{name}={value!r}: this option was removed in 0.2.0 "
                           "(docs/experiments.md lists its result on Multi30k); a run that uses "
                           "it needs seq2seq 0.1")
    if section in d:
      d[section] = sub
  return d


def field_help() -> dict[str, dict[str, str]]:
  """{section: {field: its line's comment}} from this file's source, for --help."""
  import inspect
  import re
  helps: dict[str, dict[str, str]] = {}
  for section in dataclasses.fields(Config):
    cls = section.default.__class__
    helps[section.name] = {}
    for line in inspect.getsource(cls).splitlines()[1:]:
      line = line.strip()
      m = re.match(r"(\w+): [^=]+=.*?#\s*(.*)$", line)
      if m and m.group(1) in {f.name for f in dataclasses.fields(cls)}:
        helps[section.name][m.group(1)] = m.group(2)
  return helps


def default_config(preset: str = "small") -> ml_collections.ConfigDict:
  """The defaults as a locked ConfigDict (a misspelt override is an error)."""
  if preset not in PRESETS:
    raise ValueError(f"unknown model preset {preset!r}; presets: {', '.join(PRESETS)}")
  cfg = Config(model=PRESETS[preset])
  return ml_collections.ConfigDict(cfg.to_dict(), type_safe=True).lock()
