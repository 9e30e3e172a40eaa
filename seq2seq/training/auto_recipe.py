"""`--config auto`: a recipe chosen for the corpus, the training minutes and the machine.

`plan` turns three measurements into settings by the table `RULES` (docs/recipe.md, "The
automatic recipe"): the training pairs (after cleaning) and their mean target length,
the minutes (`train.max_minutes`, 60 when not given), and the machine's speed: one
update of the `compact` model at 2,048 tokens, compiled and timed here (`time_update`),
from which it estimates the updates the minutes buy. A field given on the command line
is never changed; a resumed run reuses the plan saved in its directory (`recipe.json`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from seq2seq import numerics
from seq2seq.config import NOT_ARCHITECTURE, PRESETS, Config, DataConfig, ModelConfig
from seq2seq.data import corpus, multilingual, training_data
from seq2seq.data.input_pipeline import Batch, LengthBuckets, rows_for
from seq2seq.model import flops
from seq2seq.model.transformer import Model
from seq2seq.rundir import run_files
from seq2seq.runtime import write_atomic
from seq2seq.training import distributed
from seq2seq.training.train_step import DataParallelSteps

log = logging.getLogger("seq2seq.train")

PLAN_FILE = "recipe.json"
DEFAULT_MINUTES = 60.0
TIMED_TOKENS = 2048  # the timed update's batch: the recipe's
# How the constants below were fitted, on which runs: docs/experiments.md, "The automatic
# recipe's constants".
UPDATE_FACTOR = 1.24  # a run's seconds per update over the timed one's, length buckets
PACKED_UPDATE_FACTOR = 1.17  # the same with packed rows (`data.pack_length`)
COMPILE_SHARE = 0.7  # update seconds lost per second of compiling, per update program
NOMINAL_UPDATE_SECONDS = 0.25  # the first plan's guess, before the timing
CHARS_PER_PIECE = 4.4  # a joint unigram vocabulary of ~8,000 pieces on English/German
REAL_FRACTION = 0.86  # real (unpadded) tokens of a bucketed batch
PACKED_REAL_FRACTION = 0.92  # of a packed one
PACK_QUANTILE = 99.95  # packed rows hold every pair up to this quantile of lengths


@dataclasses.dataclass
class Measurements:
  pairs: int  # training pairs after cleaning
  mean_target_chars: float  # mean characters of a target sentence
  minutes: float  # train.max_minutes
  update_seconds: float  # a compact update of TIMED_TOKENS, timed on this machine
  compile_seconds: float = 0.0  # that update's compilation (less from a warm cache)
  buckets: int = 0  # update programs of the training batches: one per length bucket, or 1 packed
  word_types: int = 1_000_000  # distinct space-separated words of both sides (sampled)
  long_pair_chars: float = 0.0  # a long pair: the PACK_QUANTILE of its longer side's
  # characters (sampled); 0: not measured, length buckets instead of packed rows
  pack_length: int = 0  # the timed run's packed rows (data.pack_length); 0: buckets
  directions: int = 1  # data.directions: several in one model
  sentences: int = 0  # distinct sentences of all languages (0: both sides of every pair)


def _round_to(x: float, step: int) -> int:
  return int(step * round(x / step))


def typical_pieces(m: Measurements) -> int:
  """Pieces of a typical target sentence, its end included."""
  return max(int(m.mean_target_chars / CHARS_PER_PIECE) + 1, 2)


def packed_row_length(m: Measurements) -> int:
  """Pieces per packed row: a long pair's (`long_pair_chars`, in pieces by
  CHARS_PER_PIECE, its end included) rounded up to a multiple of 8, within 16 and the
  longest pair that training keeps by default (`data.max_train_len`, 100: longer ones are
  left out with buckets too); 0 where no length was measured (length buckets)."""
  if not m.long_pair_chars:
    return 0
  pieces = 8 * math.ceil((m.long_pair_chars / CHARS_PER_PIECE + 1) / 8)
  return min(max(pieces, 16), DataConfig().max_train_len)


def update_factor(pack_length: int) -> float:
  """A run's seconds per update over the timed update's: packed rows or length buckets."""
  return PACKED_UPDATE_FACTOR if pack_length else UPDATE_FACTOR


def estimated_updates(m: Measurements, preset: str | ModelConfig, max_tokens: int) -> int:
  """Updates that `m.minutes` buy for `preset` (a name, or a model's config) at
  `max_tokens` per batch: the timed update scaled by the model's operations, less what
  compiling the run costs."""
  typical = typical_pieces(m)
  model = PRESETS[preset] if isinstance(preset, str) else preset
  cost = (flops.train_flops(model, typical, typical)
          / flops.train_flops(PRESETS["compact"], typical, typical))
  seconds = m.update_seconds * update_factor(m.pack_length) * cost * max_tokens / TIMED_TOKENS
  compiling = COMPILE_SHARE * m.compile_seconds * m.buckets * cost
  return max(int((m.minutes * 60 - compiling) / seconds), 1)


def planned_epochs(m: Measurements, updates: int, max_tokens: int) -> float:
  pieces = m.pairs * (m.mean_target_chars / CHARS_PER_PIECE + 1)
  real = PACKED_REAL_FRACTION if m.pack_length else REAL_FRACTION
  return updates * max_tokens * real / pieces


@dataclasses.dataclass(frozen=True)
class Basis:
  """What the rules read: the measurements and what follows from them."""
  m: Measurements
  preset: str  # compact, small or base
  max_tokens: int
  updates: int  # the updates the minutes buy
  epochs: float
  source: ModelConfig | None = None  # a fine-tuning run's model (train.init_from's)
  source_smoothing: float = 0.1  # and its label smoothing

  @property
  def model(self) -> ModelConfig:
    return self.source or PRESETS[self.preset]

  @property
  def small_data(self) -> bool:  # the recipe's regularisation: `compact`, below 300,000 pairs
    return self.preset == "compact"


def choose_preset(m: Measurements) -> str:
  """`compact`; `small` from 300,000 pairs where the minutes buy 20,000 of its updates;
  `base` from 3 million pairs and 100,000 updates."""
  if m.pairs >= 3_000_000 and estimated_updates(m, "base", 4096) >= 100_000:
    return "base"
  if m.pairs >= 300_000 and estimated_updates(m, "small", 4096) >= 20_000:
    return "small"
  return "compact"


def vocabulary(b: Basis) -> int:
  """8,000 x sqrt(sentences / 58,000) (a pair: two sentences; several directions: each
  language's distinct sentences), to 1,000, within 2,000-32,000, and at most twice the
  corpus's distinct words (SentencePiece cannot make more pieces than a corpus has)."""
  sentences = b.m.sentences or 2 * b.m.pairs
  vocab = min(max(_round_to(8000 * math.sqrt(sentences / 58_000), 1000), 2000), 32_000)
  return min(vocab, max(100 * (2 * b.m.word_types // 100), 100))


def checkpoint_every(b: Basis) -> int:
  return min(max(_round_to(b.updates / 100, 25), 100), 1000)


def warmup(b: Basis) -> int:
  low, high = (200, 800) if b.small_data else (800, 4000)
  return min(max(_round_to(b.updates / 5, 25), low), high)


# The rules: each setting, how it follows from the measurements, and why. docs/recipe.md
# shows them as a table with what each was measured on; docs/experiments.md how.
RULES: tuple[tuple[str, Callable[[Basis], Any], str], ...] = (
    ("model.d_model", lambda b: b.model.d_model, "the `{preset}` preset ({preset_rule})"),
    ("model.num_heads", lambda b: b.model.num_heads, "the `{preset}` preset"),
    ("model.d_ff", lambda b: b.model.d_ff, "the `{preset}` preset"),
    ("model.encoder_layers", lambda b: b.model.encoder_layers, "the `{preset}` preset"),
    ("model.decoder_layers", lambda b: b.model.decoder_layers, "the `{preset}` preset"),
    ("model.vocab_size", vocabulary,
     "8,000 x sqrt(sentences / 58,000) within 2,000-32,000: 8,000 was best on 29,000 pairs"),
    ("model.positional", lambda b: "rotary", "more learned per update than sinusoidal"),
    ("model.matmul_dtype", lambda b: "auto", "bfloat16 operands where this CPU runs them faster"),
    ("model.dropout", lambda b: 0.2 if b.small_data else 0.1,
     "0.2 for `compact` on small corpora, 0.1 for larger models; {epochs:.0f} planned epochs"),
    ("train.label_smoothing", lambda b: 0.2 if b.small_data else 0.1, "as dropout"),
    ("train.dropout_ramp_steps", lambda b: max(_round_to(0.3 * b.updates, 25), 3000),
     "30 % of the planned updates, at least 3,000"),
    ("data.sampling_alpha", lambda b: 0.5 if b.m.pairs <= 500_000 else 0.0,
     "subword sampling up to 500,000 pairs (it holds the text in memory)"),
    ("data.max_tokens", lambda b: b.max_tokens, "2,048 for `compact`, 4,096 for larger models"),
    ("data.pack_length", lambda b: packed_row_length(b.m),
     "rows of several pairs, long enough for " + str(PACK_QUANTILE) + " % of them: one "
     "update program, so the first minutes train at full speed"),
    ("train.loss_chunk", lambda b: 512, "the same loss, faster"),
    ("train.learning_rate", lambda b: round(4e-3 * math.sqrt(128 / b.model.d_model), 5),
     "4e-3 at width 128, scaled by 1 / sqrt(width)"),
    ("train.warmup_steps", warmup, "a fifth of the planned updates, within bounds"),
    ("train.lr_schedule", lambda b: "inverse_sqrt", "linear decay tied, at a fixed length"),
    ("train.max_steps", lambda b: 1_000_000, "the minutes end the run"),
    ("train.max_minutes", lambda b: b.m.minutes, "the time given"),
    ("train.checkpoint_every", checkpoint_every,
     "a hundredth of the planned updates, 100-1,000 (a save costs ~0.5 s)"),
    ("train.keep_checkpoints", lambda b: 10, "the last 10 are averaged"),
    ("train.average_last", lambda b: 10, "averaging 5, 20, 30 or 40 tied or lost"),
    ("train.eval_every",
     lambda b: checkpoint_every(b) * max(round(b.updates / 6 / checkpoint_every(b)), 1),
     "about 6 validations per run, at checkpoints"),
    ("train.eval_max_sentences",
     lambda b: 0 if b.m.directions == 1 else max(1200 // b.m.directions // 50 * 50, 100),
     "one direction: all of validation; several: about 1,200 sentences in all"),
    ("decode.beam_size", lambda b: 5, "beams 8 and 12 tied at up to 2.4x the time"),
    ("decode.alpha", lambda b: 1.3, "tuned on Multi30k val; bench/tune_decoding.py tunes yours"),
)

PRESET_RULES = {"compact": "below 300,000 pairs, or too few updates for a larger model",
                "small": "300,000 pairs or more and 20,000 updates in the time",
                "base": "3 million pairs or more and 100,000 updates in the time"}


def plan(m: Measurements) -> tuple[dict[str, Any], dict[str, str]]:
  """({"section.field": value}, {"section.field": why}) for the measurements, by RULES."""
  preset = choose_preset(m)
  max_tokens = 2048 if preset == "compact" else 4096
  updates = estimated_updates(m, preset, max_tokens)
  basis = Basis(m, preset, max_tokens, updates, planned_epochs(m, updates, max_tokens))
  facts = {"preset": preset, "preset_rule": PRESET_RULES[preset], "epochs": basis.epochs}
  return ({name: value(basis) for name, value, _ in RULES},
          {name: why.format(**facts) for name, _, why in RULES})


# A fine-tuning run (`train.init_from`, a run trained here or imported): the source's
# architecture, and the settings of training on from a trained model instead of those of
# a run from scratch; the other rules as they are.
FINE_TUNE_RULES: tuple[tuple[str, Callable[[Basis], Any], str], ...] = (
    ("train.learning_rate", lambda b: round(1e-4 * math.sqrt(512 / b.model.d_model), 7),
     "1e-4 at width 512, scaled by 1 / sqrt(width): a trained model's, not a new one's"),
    ("train.warmup_steps", lambda b: min(max(_round_to(b.updates / 20, 25), 25), 500),
     "a twentieth of the planned updates, 25-500"),
    ("train.lr_schedule", lambda b: "constant", "a short run from a trained model"),
    ("train.dropout_ramp_steps", lambda b: 0, "the model is trained: dropout from the start"),
    ("model.dropout", lambda b: b.source.dropout, "the source's (OPUS-MT's and Argos's: 0.1)"),
    ("train.label_smoothing", lambda b: b.source_smoothing, "the source's"),
    ("data.sampling_alpha", lambda b: 0.0, "the segmentation the model was trained on"),
    ("data.max_tokens", lambda b: 2048, "2,048: a few hundred updates in the minutes"),
)


def plan_fine_tune(m: Measurements, source_cfg: Config
                   ) -> tuple[dict[str, Any], dict[str, str]]:
  """`plan` for a run that starts from the parameters of the run of `source_cfg`."""
  source = source_cfg.model
  max_tokens = 2048
  updates = estimated_updates(m, source, max_tokens)
  basis = Basis(m, "compact", max_tokens, updates, planned_epochs(m, updates, max_tokens),
                source, source_cfg.train.label_smoothing)
  facts = {"preset": "source", "preset_rule": "train.init_from's", "epochs": basis.epochs}
  rules = {name: (value, why) for name, value, why in RULES if not name.startswith("model.")
           or name in ("model.matmul_dtype",)}
  rules.update({name: (value, why) for name, value, why in FINE_TUNE_RULES})
  choices = {name: value(basis) for name, (value, _) in rules.items()}
  reasons = {name: why.format(**facts) for name, (_, why) in rules.items()}
  for f in dataclasses.fields(ModelConfig):
    if f.name not in NOT_ARCHITECTURE:
      choices[f"model.{f.name}"] = getattr(source, f.name)
      reasons[f"model.{f.name}"] = "train.init_from's architecture"
  return choices, reasons


def measure_corpus(cfg: Config, workdir: Path) -> tuple[int, float, int, float, int]:
  """(training pairs after cleaning (every direction's); of up to 20,000 of them, the mean
  target characters, the distinct words of both sides and the PACK_QUANTILE of the
  longer side's characters; the distinct sentences of each language, summed, for
  several directions (0 for one))."""
  ds = training_data.training_pairs(cfg, workdir)
  sentences = 0
  if cfg.data.multilingual:  # a reversed direction repeats its pair's sentences
    seen: dict[str, set] = {}
    start = 0
    for (src, tgt), n in zip(cfg.data.direction_pairs(), direction_sizes(cfg, workdir)):
      part = ds.select(range(start, start + n))
      seen.setdefault(src, set()).update(map(hash, part["src"]))
      seen.setdefault(tgt, set()).update(map(hash, part["tgt"]))
      start += n
    sentences = sum(len(x) for x in seen.values())
  rows = np.random.default_rng([cfg.data.seed, 3]).choice(len(ds), min(len(ds), 20_000),
                                                          replace=False)
  sample = ds.select(np.sort(rows))
  words = {w for side in ("src", "tgt") for text in sample[side] for w in text.split()}
  longer = [max(len(a), len(b)) for a, b in zip(sample["src"], sample["tgt"])]
  return (len(ds), float(np.mean([len(t) for t in sample["tgt"]])), len(words),
          float(np.percentile(longer, PACK_QUANTILE)), sentences)


def direction_sizes(cfg: Config, workdir: Path) -> list[int]:
  """The cleaned training pairs of each direction (cached by cleaning: read again cheaply)."""
  return [len(corpus.training_split(c, workdir).train)
          for c in multilingual.direction_configs(cfg).values()]


def time_update(cfg: Config, length: int, rounds: int = 10) -> tuple[float, float]:
  """(seconds of one update, seconds its program took to compile) of `cfg`'s model and
  training settings, on a batch of `data.max_tokens` pieces padded to `length` (the
  trainer's batch of that bucket, or with `data.pack_length` its packed batch, `length`
  then being the row's length) of made-up ids and parameters: the fastest of `rounds`
  updates after a first one (the first few after compiling can run much slower than
  the rest; docs/experiments.md, "The automatic recipe's constants").
  The program is the one the trainer runs for that shape (`train_step.jitted_programs`),
  so a run of these settings in this process does not compile it again."""
  devices = jax.local_devices()
  steps = DataParallelSteps(cfg, Model(cfg.model), devices)
  rng = np.random.default_rng(0)

  def made_up(x: jax.ShapeDtypeStruct) -> jax.Array:
    value = (rng.normal(0.0, 0.02, x.shape) if jnp.issubdtype(x.dtype, jnp.floating)
             else np.zeros(x.shape))
    return jax.device_put(value.astype(x.dtype), steps.replicated)

  state = jax.tree_util.tree_map(made_up, jax.eval_shape(steps.initial_state))
  rows = rows_for(length, cfg.data.max_tokens, len(devices))
  ids = lambda: rng.integers(4, cfg.model.vocab_size, (rows, length), dtype=np.int32)
  segments = lambda: np.ones((rows, length), np.int32)  # a pair per row: the same shapes
  batch = Batch(ids(), ids(), *((segments(), segments()) if cfg.data.pack_length else ()))
  batch = jax.device_put(batch, steps.batch_sharding)
  start = time.perf_counter()
  steps.train_step.lower(state, batch).compile()
  compile_seconds = time.perf_counter() - start
  seconds = []
  for _ in range(rounds + 1):
    start = time.perf_counter()
    state, metrics = steps.train_step(state, batch)
    jax.block_until_ready(metrics)
    seconds.append(time.perf_counter() - start)
  return min(seconds[1:]), compile_seconds


def _choose(cfg: ml_collections.ConfigDict, name: str, value: Any) -> None:
  """Sets the field `name` ("section.field") of `cfg` to `value`, in the field's type."""
  section, field = name.split(".")
  kind = type(cfg[section][field])
  cfg[section][field] = kind(value) if kind is not tuple else tuple(value)


def _with_choices(cfg: ml_collections.ConfigDict, choices: dict[str, Any], given: set[str]
                  ) -> ml_collections.ConfigDict:
  """A copy of `cfg` with the choices that the command line did not give."""
  out = cfg.copy_and_resolve_references()
  for name, value in choices.items():
    if name not in given:
      _choose(out, name, value)
  return out


def measure_speed(cfg: ml_collections.ConfigDict, given: set[str], m: Measurements
                  ) -> Measurements:
  """`m` with the speed measured: a `compact` update of TIMED_TOKENS with the settings a
  first plan gives (`NOMINAL_UPDATE_SECONDS`), at the bucket of a typical pair. Process
  0 times it; every process takes its figures. Where the final plan keeps the first
  one's warmup and dropout ramp, the run trains with the program timed here; otherwise
  the timing cost one compilation more."""
  first, _ = plan(dataclasses.replace(m, update_seconds=NOMINAL_UPDATE_SECONDS))
  timed = _with_choices(cfg, first, given)
  compact = PRESETS["compact"]
  for field in ("d_model", "num_heads", "d_ff", "encoder_layers", "decoder_layers"):
    timed.model[field] = getattr(compact, field)
  timed.data.max_tokens = TIMED_TOKENS
  if timed.model.matmul_dtype == "auto":  # as the trainer resolves it (resolve_precision)
    timed.model.matmul_dtype = numerics.resolve("auto").operand_dtype
  timed = Config.from_dict(timed)
  buckets = LengthBuckets.from_config(timed.data, timed.data.max_train_len)
  length = timed.data.pack_length or buckets.length_for(typical_pieces(m))
  update = compile_ = 0.0
  if distributed.is_primary():
    update, compile_ = time_update(timed, length)
  # process 0's figures, in microseconds
  update, compile_ = (distributed.agree_int(int(x * 1e6)) / 1e6 for x in (update, compile_))
  return dataclasses.replace(m, update_seconds=update, compile_seconds=compile_,
                             buckets=1 if timed.data.pack_length else len(buckets.boundaries),
                             pack_length=timed.data.pack_length)


def complete(cfg: ml_collections.ConfigDict, given: set[str], workdir: Path) -> None:
  """Sets every field the plan chooses that the command line did not give."""
  path = Path(workdir) / PLAN_FILE
  if path.is_file():
    saved = json.loads(path.read_text())
    choices, reasons, summary = saved["choices"], saved["reasons"], "this run's plan"
  else:
    minutes = cfg.train.max_minutes if "train.max_minutes" in given else DEFAULT_MINUTES
    typed = Config.from_dict(cfg)
    pairs, chars, words, long_chars, sentences = measure_corpus(typed, Path(workdir))
    m = measure_speed(cfg, given, Measurements(
        pairs, chars, minutes, NOMINAL_UPDATE_SECONDS, word_types=words,
        long_pair_chars=long_chars, directions=len(typed.data.direction_pairs()),
        sentences=sentences))
    if cfg.train.init_from:
      choices, reasons = plan_fine_tune(m, run_files.load_config(cfg.train.init_from))
    else:
      choices, reasons = plan(m)
    updates = estimated_updates(m, "compact", TIMED_TOKENS)
    summary = (f"{pairs:,} pairs" + (f" in {m.directions} directions ({sentences:,} distinct "
                                     "sentences)" if m.directions > 1 else "")
               + f" of {chars:.0f} target characters on average, "
               f"{minutes:g} minutes, a compact update of {TIMED_TOKENS:,} tokens in "
               f"{m.update_seconds:.3f} s (its program compiled in {m.compile_seconds:.1f} "
               f"s, {m.buckets} update programs): about {updates:,} compact updates, "
               f"{planned_epochs(m, updates, TIMED_TOKENS):.0f} epochs")
    if distributed.is_primary():
      path.parent.mkdir(parents=True, exist_ok=True)
      write_atomic(path, json.dumps({"measurements": dataclasses.asdict(m),
                                     "planned_updates": updates, "choices": choices,
                                     "reasons": reasons}, indent=1))
  log.info("--config auto: %s", summary)
  for name, value in choices.items():
    if name in given:
      section, field = name.split(".")
      log.info("  %s=%r (given)", name, cfg[section][field])
      continue
    _choose(cfg, name, value)
    log.info("  %s=%r: %s", name, value, reasons[name])
