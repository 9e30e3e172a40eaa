"""Training: optimizer and schedule, loss, jitted train/eval steps, and the loop.

"Step" means one optimiser update everywhere: in `train.max_steps`, log lines,
metrics.jsonl, checkpoint names and the schedule. With `train.grad_accum_steps = k` an
update is computed from k micro-batches.

The loop is resumable exactly: parameters, optimizer state, step, data position and
best validation BLEU are checkpointed, and dropout keys are `fold_in(fold_in(key,
step), micro-batch)`, so an interrupted run that is restarted makes the same updates
as one that was not.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import sacrebleu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from seq2seq import (
  checkpoint,
  distributed,
  input_pipeline,
  layers,
  metrics,
  model_card,
  presets,
  runtime,
  tokenizer,
)
from seq2seq.config import NOT_ARCHITECTURE, Config, TrainConfig
from seq2seq.loss import SUM_KEYS, loss_sums, output_loss_sums, rdrop_loss_sums
from seq2seq.model import Model, shift_right
from seq2seq.translator import Translator

log = logging.getLogger("seq2seq.train")


class TrainState(NamedTuple):
  step: jnp.ndarray  # [] int32: optimiser updates done
  params: Any
  opt_state: Any


# ------------------------------------------------------------------- optimisation


def learning_rate_schedule(cfg: TrainConfig) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then `cfg.lr_schedule`: decay with 1/sqrt(step)
  (Vaswani et al.), linear or cosine decay to 0 at `decay_steps` (0 = `max_steps`), or
  none ("constant", for schedule-free training)."""
  warmup = max(cfg.warmup_steps, 1)
  end = cfg.decay_steps or cfg.max_steps
  if cfg.lr_schedule not in ("inverse_sqrt", "linear", "cosine", "constant"):
    raise ValueError("train.lr_schedule must be 'inverse_sqrt', 'linear', 'cosine' or "
                     f"'constant', got {cfg.lr_schedule!r}")
  if cfg.lr_schedule in ("linear", "cosine") and end <= warmup:
    raise ValueError(f"train.lr_schedule={cfg.lr_schedule!r} decays to 0 at step {end} "
                     f"(train.decay_steps, else train.max_steps), which must come after "
                     f"the {warmup} warmup steps")

  def schedule(count):
    step = count + 1.0
    if cfg.lr_schedule == "inverse_sqrt":
      decay = jnp.sqrt(warmup / step)
    elif cfg.lr_schedule == "constant":
      decay = 1.0
    else:
      left = jnp.clip((end - step) / (end - warmup), 0.0, 1.0)  # 1 -> 0 after warmup
      decay = left if cfg.lr_schedule == "linear" else 0.5 * (1.0 - jnp.cos(jnp.pi * left))
    return cfg.learning_rate * jnp.minimum(step / warmup, decay)

  return schedule


def cooldown_scale(step: int, start: int, end: int) -> float:
  """Factor on the learning rate of update `step` (0-based) under a cooldown from `start`
  to `end`: 1 before `start`, then linearly down to 0 at `end`; 1 without one (end 0)."""
  if end <= 0 or step < start:
    return 1.0
  return max(0.0, (end - step) / max(end - start, 1))


class EmaState(NamedTuple):
  ema: Any  # the moving average of the parameters after each update


def track_ema(decay: float) -> optax.GradientTransformation:
  """The last link of an optimizer chain: passes the updates through and keeps an
  exponential moving average of the parameters they produce, starting from the initial
  parameters (Polyak averaging; fairseq's --ema-decay). Its state is saved and resumed
  with the optimizer's; `ema_params(opt_state)` reads it."""
  if not 0 < decay < 1:
    raise ValueError(f"train.ema_decay must be between 0 and 1 (0 = off), got {decay}")

  def init(params):
    return EmaState(jax.tree_util.tree_map(jnp.array, params))

  def update(updates, state, params=None):
    new_params = optax.apply_updates(params, updates)
    ema = jax.tree_util.tree_map(lambda e, p: decay * e + (1.0 - decay) * p, state.ema,
                                 new_params)
    return updates, EmaState(ema)

  return optax.GradientTransformation(init, update)


def scale_by_cooldown() -> optax.GradientTransformationExtraArgs:
  """Multiplies the updates by the extra argument `lr_scale` (the cooldown's factor, given
  by the host at every update). Placed after Adam, whose update is linear in the learning
  rate, this scales the learning rate; stateless, so the schedule stays a function of the
  step and the factor of the host's `cooldown_scale`."""

  def init(params):
    del params
    return optax.EmptyState()

  def update(updates, state, params=None, *, lr_scale=1.0, **extra_args):
    del params, extra_args
    return jax.tree_util.tree_map(lambda u: u * lr_scale, updates), state

  return optax.GradientTransformationExtraArgs(init, update)


def ema_params(opt_state):
  """The moving average kept by `track_ema` in an optimizer state (None without one)."""
  return optax.tree_utils.tree_get(opt_state, "ema")


class ScheduleFreeState(NamedTuple):
  count: jax.Array  # updates so far
  z: Any  # the base optimizer's iterate (the parameters hold the average x)
  weight_sum: jax.Array  # sum of the averaging weights so far
  max_lr: jax.Array  # the largest learning rate so far
  base: Any  # the base optimizer's state


def schedule_free(base: optax.GradientTransformation, schedule: optax.Schedule,
                  b1: float, weight_lr_power: float = 2.0) -> optax.GradientTransformation:
  """Schedule-free learning (Defazio et al. 2024, "The Road Less Scheduled") around
  `base`, an optimizer without momentum whose updates include the learning rate:

      y = b1 x + (1 - b1) z            the gradient is taken at y (`gradient_point`)
      z <- z + base_update(grad(y))
      x <- (1 - c) x + c z,  c = w_t / sum of w up to t,  w_t = (max lr so far) ^ power

  Unlike optax.contrib.schedule_free, whose parameters are y, the parameters here are the
  average x, the point to evaluate: validation, every checkpoint, averaging and decoding
  read them unchanged, and the state (x, z) resumes exactly. The update this returns is
  the change of x; `update(grads, state, params)` takes x as `params`."""

  def init(params):  # distinct arrays throughout: the training step donates its state
    return ScheduleFreeState(jnp.zeros((), jnp.int32), jax.tree_util.tree_map(jnp.array, params),
                             jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32),
                             base.init(params))

  def update(updates, state, params=None):
    lr = jnp.asarray(schedule(state.count), jnp.float32)
    max_lr = jnp.maximum(state.max_lr, lr)
    weight = max_lr ** weight_lr_power
    weight_sum = state.weight_sum + weight
    c = jnp.where(weight_sum > 0, weight / jnp.maximum(weight_sum, 1e-38), 0.0)
    y = _interpolate(params, state.z, b1)
    steps, base_state = base.update(updates, state.base, y)
    z = optax.apply_updates(state.z, steps)
    x_steps = jax.tree_util.tree_map(lambda x, z_: c * (z_ - x), params, z)
    return x_steps, ScheduleFreeState(state.count + 1, z, weight_sum, max_lr, base_state)

  return optax.GradientTransformation(init, update)


def gradient_point(opt_state, params, b1: float):
  """Where schedule-free training takes the gradient: b1 x + (1 - b1) z, x being `params`;
  `params` themselves without a schedule-free state in `opt_state`."""
  z = optax.tree_utils.tree_get(opt_state, "z")
  return params if z is None else _interpolate(params, z, b1)


def _interpolate(x, z, b1: float):
  """b1 x + (1 - b1) z, leaf by leaf: schedule-free's gradient point y."""
  return jax.tree_util.tree_map(lambda xi, zi: b1 * xi + (1.0 - b1) * zi, x, z)


def muon_labels(params):
  """Which optimiser updates each parameter: Muon the weight matrices of the dense layers
  (`w`: the attention projections and the feed-forward layers), Adam the rest: the
  embedding table (also the output layer; a row is updated only where its token occurs),
  learned positions, biases and layer norms, as in Jordan et al.'s and Liu et al.'s Muon."""
  return {module: {name: "muon" if name == "w" else "adam" for name in leaves}
          for module, leaves in params.items()}


def muon(cfg: TrainConfig, schedule: optax.Schedule, adam: optax.GradientTransformation
         ) -> optax.GradientTransformation:
  """Muon (momentum `muon_momentum`, Nesterov, orthogonalised by five Newton-Schulz
  iterations; Jordan et al. 2024) on the dense weight matrices, `adam` on the rest. A Muon
  update of an m x n matrix is scaled by `muon_rms` * sqrt(max(m, n)), which gives it the
  root mean square `muon_rms`, that of a typical Adam update (Liu et al. 2025), so both
  share `learning_rate` and its schedule; `weight_decay` (decoupled) applies to both."""
  rms = optax.stateless(lambda updates, params: jax.tree_util.tree_map(
      lambda u: u * cfg.muon_rms * max(u.shape) ** 0.5, updates))
  orthogonalised = optax.chain(
      optax.contrib.scale_by_muon(beta=cfg.muon_momentum, weight_dimension_numbers=lambda u:
                                  jax.tree_util.tree_map(
                                      lambda _: optax.contrib.MuonDimensionNumbers(), u)),
      rms,
      optax.add_decayed_weights(cfg.weight_decay), optax.scale_by_learning_rate(schedule))
  return optax.partition({"muon": orthogonalised, "adam": adam}, muon_labels)


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
  schedule = learning_rate_schedule(cfg)
  if cfg.optimizer == "adam":
    opt = optax.adam(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)
  elif cfg.optimizer in ("adamw", "muon"):
    opt = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                      weight_decay=cfg.weight_decay)
    if cfg.optimizer == "muon":
      opt = muon(cfg, schedule, adam=opt)
  elif cfg.optimizer == "schedule_free":
    if cfg.cooldown:
      raise ValueError("train.optimizer='schedule_free' averages the iterates instead of "
                       "cooling the learning rate down: set train.cooldown=0")
    # AdamW without momentum (b1 0): schedule-free's interpolation takes momentum's place.
    opt = schedule_free(optax.adamw(schedule, b1=0.0, b2=cfg.b2, eps=cfg.eps,
                                    weight_decay=cfg.weight_decay), schedule, cfg.b1)
  else:
    raise ValueError(f"train.optimizer must be 'adam', 'adamw', 'muon' or 'schedule_free', "
                     f"got {cfg.optimizer!r}")
  if cfg.clip_norm > 0:
    opt = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), opt)
  if cfg.cooldown:  # only then, so that other runs keep their optimizer state's layout
    opt = optax.chain(opt, scale_by_cooldown())
  if cfg.ema_decay:
    opt = optax.chain(opt, track_ema(cfg.ema_decay))
  return opt


class Steps:
  """Jitted training and evaluation steps, data-parallel over a 1-D "data" mesh of every
  device of every process (`jax.devices()`).

  One update sees `train.grad_accum_steps` micro-batches. Their gradients of the summed
  loss are added up and divided by their total target tokens, so an update over k
  micro-batches equals one over a batch holding all of their rows (up to float
  rounding). With one micro-batch, gradient and update are one jitted program.
  """

  def __init__(self, cfg: Config, model: Model, devices=None):
    self.cfg, self.model = cfg, model
    if cfg.train.loss_chunk < 0:
      raise ValueError(f"train.loss_chunk must be >= 0 (0 = all logits at once), got "
                       f"{cfg.train.loss_chunk}")
    self.optimizer = make_optimizer(cfg.train)
    self.schedule = learning_rate_schedule(cfg.train)
    self.mesh = Mesh(np.array(devices or jax.devices()), ("data",))
    self.batch_sharding = NamedSharding(self.mesh, P("data"))
    self.replicated = NamedSharding(self.mesh, P())
    self.base_key = jax.random.PRNGKey(cfg.train.seed)
    replicated2 = (self.replicated, self.replicated)
    self.train_step = jax.jit(self._train_step, donate_argnums=0, out_shardings=replicated2)
    self._grads = jax.jit(self._grads_added, donate_argnums=0, out_shardings=replicated2)
    self._apply = jax.jit(self._apply_update, donate_argnums=0,
                          out_shardings=replicated2)
    self.eval_step = jax.jit(self._eval_step, out_shardings=self.replicated)
    # Schedule-free training takes the gradient away from the parameters (with
    # micro-batches, computed once per update by this program).
    self.schedule_free = cfg.train.optimizer == "schedule_free"
    self._gradient_point = jax.jit(
        lambda opt_state, params: gradient_point(opt_state, params, cfg.train.b1),
        out_shardings=self.replicated)
    # Zeroed gradient and loss sums, made on the devices (replicated over every process).
    self._zero_sums = jax.jit(
        lambda params: (jax.tree_util.tree_map(jnp.zeros_like, params),
                        {k: jnp.zeros((), jnp.float32) for k in SUM_KEYS}),
        out_shardings=self.replicated)

  @property
  def num_devices(self) -> int:
    return self.mesh.devices.size

  def init_state(self) -> TrainState:
    dummy = jnp.ones((1, 8), jnp.int32)
    params = self.model.init(jax.random.PRNGKey(self.cfg.train.seed), dummy, dummy)
    state = TrainState(jnp.zeros((), jnp.int32), params, self.optimizer.init(params))
    return jax.device_put(state, self.replicated)

  def put_batch(self, batch: input_pipeline.Batch) -> input_pipeline.Batch:
    """This process's rows of a global batch (all of it with one process) -> global
    device arrays with rows split across the mesh."""
    rows = batch.src.shape[0] * jax.process_count()
    return distributed.global_batch(batch, self.batch_sharding, rows)

  def update(self, state: TrainState, batches: list[input_pipeline.Batch],
             lr_scale: float = 1.0):
    """One optimiser update over the micro-batches `batches` (host batches), with the
    schedule's learning rate times `lr_scale` (the cooldown's factor)."""
    scale = np.float32(lr_scale)
    if len(batches) == 1:
      return self.train_step(state, self.put_batch(batches[0]), scale)
    acc = self._zero_sums(state.params)
    at = (self._gradient_point(state.opt_state, state.params) if self.schedule_free
          else state.params)
    for micro, batch in enumerate(batches):
      acc = self._grads(acc, at, self.put_batch(batch), state.step, micro)
    return self._apply(state, *acc, scale)

  def compile_ahead(self, state: TrainState, templates: list[input_pipeline.Batch],
                    micro_batches: int = 1, workers: int | None = None,
                    also: Iterable[jax.stages.Lowered] = ()) -> float:
    """Compiles the update for every batch shape in `templates`, and the programs `also`
    yields (the trainer's: its validation), before training starts; returns the seconds
    it took. Tracing and lowering run here, one program after another, while XLA
    compiles the programs already lowered on `workers` threads (default: one per CPU
    core). The executables land in `jit`'s own cache, so the loop's first update of each
    shape runs at once (on 2 cores: 14 shapes in 153 s instead of 207 s one at a time as
    the loop met them). The compilation itself is the bound: neither the overlap with
    lowering nor compiling the validation here instead of at its first call shortened
    the total (bench/README.md, bench/compile_ahead.py)."""
    t0 = time.time()
    workers = workers or os.cpu_count() or 1
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
      compiling = [pool.submit(low.compile) for low in itertools.chain(
          self.lower_updates(state, templates, micro_batches), also)]
      for done in compiling:
        done.result()
    return time.time() - t0

  def lower_updates(self, state: TrainState, templates: list[input_pipeline.Batch],
                    micro_batches: int = 1) -> Iterator[jax.stages.Lowered]:
    """The update for each batch shape of `templates`, traced and lowered (with
    micro-batches: their gradient, plus the zeroed sums and the optimiser step)."""
    if micro_batches == 1:
      scale = np.float32(1.0)
      for b in templates:
        yield self.train_step.lower(state, self.put_batch(b), scale)
      return
    acc = jax.eval_shape(self._zero_sums, state.params)
    acc = jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.replicated), acc)
    for b in templates:
      yield self._grads.lower(acc, state.params, self.put_batch(b), state.step, 0)
    yield self._zero_sums.lower(state.params)
    if self.schedule_free:
      yield self._gradient_point.lower(state.opt_state, state.params)
    yield self._apply.lower(state, *acc, np.float32(1.0))

  def _loss_grads(self, params, batch: input_pipeline.Batch, step, micro):
    """Gradient of the summed label-smoothed loss of one micro-batch, and its sums: of
    the whole batch, or added up over its `train.batch_parts` parts."""
    rng = jax.random.fold_in(jax.random.fold_in(self.base_key, step), micro)
    parts = batch_parts(batch, self.cfg.train.batch_parts, self.num_devices)
    if len(parts) == 1:
      return self._part_loss_grads(params, batch, step, rng)
    # Part i draws its dropout masks from its own key; XLA schedules the parts'
    # programs side by side, so their one-thread ops can share the cores.
    outs = [self._part_loss_grads(params, part, step, jax.random.fold_in(rng, i))
            for i, part in enumerate(parts)]
    grads = jax.tree_util.tree_map(lambda *g: functools.reduce(jnp.add, g),
                                   *(g for g, _ in outs))
    return grads, {k: functools.reduce(jnp.add, (sums[k] for _, sums in outs))
                   for k in outs[0][1]}

  def _part_loss_grads(self, params, batch: input_pipeline.Batch, step, rng):
    """Gradient of the summed label-smoothed loss of `batch`, and its sums."""

    def loss_fn(p):
      args = dict(rng=rng, is_training=True, src_segments_BS=batch.src_segments,
                  tgt_segments_BT=batch.tgt_segments, dropout_scale=self.dropout_scale(step))
      tgt_in = shift_right(batch.tgt, batch.tgt_segments)
      smoothing, chunk = self.cfg.train.label_smoothing, self.cfg.train.loss_chunk
      if self.cfg.train.rdrop_alpha:  # both passes in one batch: distinct dropout masks
        twice = lambda x: None if x is None else jnp.concatenate([x, x])
        args.update(src_segments_BS=twice(batch.src_segments),
                    tgt_segments_BT=twice(batch.tgt_segments))
        logits = self.model.apply(p, twice(batch.src), twice(tgt_in), **args)
        sums = rdrop_loss_sums(logits, batch.tgt, smoothing, self.cfg.train.rdrop_alpha)
      elif chunk:
        x, w, b = self.model.apply_features(p, batch.src, tgt_in, **args)
        sums = output_loss_sums(x, w, b, batch.tgt, smoothing, chunk)
      else:
        sums = loss_sums(self.model.apply(p, batch.src, tgt_in, **args), batch.tgt, smoothing)
      return sums["loss"], sums

    # the chunked loss's own backward pass (`output_loss_sums`) is traced by jax.grad
    # after loss_fn returns: it must see the model's matmul operands too
    with layers.matmul_operands(self.model.matmul_dtype):
      return jax.grad(loss_fn, has_aux=True)(params)

  def dropout_scale(self, step):
    """The factor on the dropout rates at update `step` (traced): a linear ramp from 0 to
    1 over the first train.dropout_ramp_steps updates, then 1; None without a ramp."""
    ramp = self.cfg.train.dropout_ramp_steps
    if not ramp:
      return None
    return jnp.minimum(jnp.asarray(step, jnp.float32) / ramp, 1.0)

  def _grads_added(self, acc, params, batch, step, micro):
    grads, sums = self._loss_grads(params, batch, step, micro)
    acc_grads, acc_sums = acc
    return (jax.tree_util.tree_map(jnp.add, acc_grads, grads),
            {k: acc_sums[k] + sums[k] for k in SUM_KEYS})

  def _apply_update(self, state: TrainState, grad_sums, sums, lr_scale=1.0):
    grads = jax.tree_util.tree_map(lambda g: g / jnp.maximum(sums["tokens"], 1.0), grad_sums)
    extra = {"lr_scale": lr_scale} if self.cfg.train.cooldown else {}
    updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params, **extra)
    params = optax.apply_updates(state.params, updates)
    grad_norm = optax.tree.norm(grads)
    # A non-finite loss or gradient leaves the state untouched; the host stops the run.
    ok = jnp.isfinite(sums["loss"]) & jnp.isfinite(grad_norm)
    keep = lambda new, old: jax.tree_util.tree_map(lambda n, o: jnp.where(ok, n, o), new, old)
    new_state = TrainState(state.step + 1, keep(params, state.params),
                           keep(opt_state, state.opt_state))
    return new_state, dict(sums, grad_norm=grad_norm, finite=ok,
                           lr=self.schedule(state.step) * lr_scale)

  def _train_step(self, state: TrainState, batch: input_pipeline.Batch, lr_scale=1.0):
    at = gradient_point(state.opt_state, state.params, self.cfg.train.b1)
    grads, sums = self._loss_grads(at, batch, state.step, 0)
    return self._apply_update(state, grads, {k: sums[k] for k in SUM_KEYS}, lr_scale)

  def _eval_step(self, params, batch: input_pipeline.Batch):
    logits = self.model.apply(params, batch.src, shift_right(batch.tgt))
    return loss_sums(logits, batch.tgt, self.cfg.train.label_smoothing)


def batch_parts(batch: input_pipeline.Batch, parts: int, devices: int
                ) -> list[input_pipeline.Batch]:
  """`batch` (traced, rows split over `devices`) as up to `parts` batches of about equal
  rows. Every part takes its rows from each device's share of the batch, so no row moves
  between devices; a batch with fewer rows per device than `parts` has fewer parts."""
  per_device = batch.src.shape[0] // devices
  parts = min(parts, per_device)
  if parts <= 1:
    return [batch]
  bounds = [round(i * per_device / parts) for i in range(parts + 1)]

  def part(x, lo, hi):
    x = x.reshape(devices, per_device, *x.shape[1:])[:, lo:hi]
    return x.reshape(devices * (hi - lo), *x.shape[2:])

  return [jax.tree_util.tree_map(lambda x, lo=lo, hi=hi: part(x, lo, hi), batch)
          for lo, hi in zip(bounds, bounds[1:])]


# ------------------------------------------------------------------------- data


def cache_dir(cfg: Config, workdir: Path) -> Path:
  return Path(cfg.data.cache_dir) if cfg.data.cache_dir else workdir / "cache"


def training_pairs(cfg: Config):
  """The training split as a `datasets` table, empty pairs dropped."""
  return input_pipeline.drop_empty(input_pipeline.load_split(cfg.data, cfg.data.train_split))


def prepare_data(cfg: Config, workdir: Path):
  """Tokenizer (trained or reused) and the encoded training and validation corpora.

  The training text is read only when the tokenizer or the encoded ids are not cached
  yet: a resumed run, or a process that joins after process 0 prepared the data, maps
  the ids from the run's cache."""
  vocab_size = cfg.model.vocab_size
  train_ds = functools.cache(lambda: training_pairs(cfg))
  corpus = input_pipeline.corpus_id(cfg.data, cfg.data.train_split, vocab_size)
  given = cfg.data.spm_model
  if cfg.train.init_from:
    given = str(Path(cfg.train.init_from) / tokenizer.MODEL_FILE)
    if cfg.data.spm_model and Path(cfg.data.spm_model).resolve() != Path(given).resolve():
      raise tokenizer.TokenizerMismatchError(
          f"data.spm_model={cfg.data.spm_model} differs from the SentencePiece model of "
          f"train.init_from ({given}); a fine-tuned model keeps its source's vocabulary")
  tok = tokenizer.load_or_train(
      workdir, corpus,
      lambda: input_pipeline.tokenizer_sample(train_ds(), cfg.data.spm_max_sentences,
                                              cfg.data.seed),
      vocab_size, cfg.data.spm_model_type, cfg.data.spm_max_sentences, given)
  if tok.vocab_size != vocab_size:
    raise tokenizer.TokenizerMismatchError(
        f"tokenizer has {tok.vocab_size} pieces but model.vocab_size={vocab_size}")
  cache = cache_dir(cfg, workdir)
  train_ids = cache / f"{cfg.data.train_split}-{corpus}-{tok.fingerprint()}"
  train = input_pipeline.encode_dataset(tok, None if train_ids.is_dir() else train_ds(),
                                        train_ids)
  val_ds = input_pipeline.load_split(cfg.data, cfg.data.val_split)
  val_id = input_pipeline.corpus_id(cfg.data, cfg.data.val_split, vocab_size)
  val = input_pipeline.encode_dataset(
      tok, val_ds, cache / f"{cfg.data.val_split}-{val_id}-{tok.fingerprint()}")
  log.info("data: %d training pairs, %d validation pairs, %d pieces",
           len(train), len(val), tok.vocab_size)
  return tok, train, val, list(val_ds["tgt"])


# ------------------------------------------------------------------------ loop


@dataclasses.dataclass
class Progress:
  """Where a run stands; saved with every checkpoint, so a resumed run continues exactly."""

  step: int = 0  # optimiser updates done (the only unit of "step")
  epoch: int = 0  # epoch of the next batch
  batch_index: int = 0  # index of the next batch within that epoch
  best_bleu: float = -1.0
  best_step: int = 0
  evals_without_improvement: int = 0
  elapsed: float = 0.0  # training wall time in seconds, validation included
  cooldown_start: int = 0  # first update of the learning-rate cooldown (train.cooldown)
  cooldown_end: int = 0  # the update where it reaches 0; 0 = not started

  @classmethod
  def from_meta(cls, meta: dict[str, Any]) -> "Progress":
    return cls(**{f.name: meta[f.name] for f in dataclasses.fields(cls) if f.name in meta})

  def to_meta(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass
class Window:
  """Training figures since the last log line; time spent validating or saving is left
  out, so tokens/s is the training speed."""

  loss: float = 0.0
  tokens: float = 0.0
  correct: float = 0.0
  updates: int = 0
  started: float = dataclasses.field(default_factory=time.time)
  paused: float = 0.0

  def add(self, m: dict[str, Any]) -> None:
    self.loss += float(m["loss"])
    self.tokens += float(m["tokens"])
    self.correct += float(m["correct"])
    self.updates += 1

  def seconds(self) -> float:
    return max(time.time() - self.started - self.paused, 1e-9)


def eval_device_batches(steps: Steps, corpus, lengths: input_pipeline.LengthBuckets
                        ) -> Iterator[input_pipeline.Batch]:
  """The validation loss's batches of 64 rows, this process's rows of each on its devices."""
  for batch in input_pipeline.eval_batches(corpus, 64, lengths, steps.num_devices):
    yield steps.put_batch(input_pipeline.local_rows(batch, jax.process_index(),
                                                    jax.process_count()))


def lower_evaluate_loss(steps: Steps, params, corpus, lengths: input_pipeline.LengthBuckets
                        ) -> Iterator[jax.stages.Lowered]:
  """`evaluate_loss`'s programs, one per distinct batch shape, lowered but not run."""
  seen = set()
  for batch in eval_device_batches(steps, corpus, lengths):
    if (shape := (batch.src.shape, batch.tgt.shape)) not in seen:
      seen.add(shape)
      yield steps.eval_step.lower(params, batch)


def evaluate_loss(steps: Steps, params, corpus, lengths: input_pipeline.LengthBuckets
                  ) -> dict[str, float]:
  totals: dict[str, float] = {}
  for batch in eval_device_batches(steps, corpus, lengths):
    sums = jax.device_get(steps.eval_step(params, batch))
    for k, v in sums.items():
      totals[k] = totals.get(k, 0.0) + float(v)
  n = max(totals["tokens"], 1.0)
  return {"loss": totals["loss"] / n, "nll": totals["nll"] / n, "accuracy": totals["correct"] / n}


def bleu(hypotheses: list[str], references: list[str]) -> float:
  return sacrebleu.corpus_bleu(hypotheses, [references]).score


def differences(old, new, ignore: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
  """{field: (old value, new value)} of two configs of one dataclass, except `ignore`."""
  a, b = dataclasses.asdict(old), dataclasses.asdict(new)
  return {k: (a[k], b[k]) for k in a if a[k] != b[k] and k not in ignore}


def check_resumable(workdir: Path, cfg: Config) -> None:
  """A run directory may be resumed with other train/decode settings, never another model."""
  path = workdir / checkpoint.CONFIG_FILE
  if not path.exists():
    return
  old = checkpoint.load_config(workdir)
  for section in ("model", "data"):
    diff = differences(getattr(old, section), getattr(cfg, section))
    if diff:
      raise checkpoint.CheckpointError(
          f"{workdir} holds a run with other {section} settings {diff} (saved, new); "
          "use a new --workdir")


def check_fine_tune_source(cfg: Config) -> None:
  """train.init_from must be a run whose model has this run's architecture."""
  source = Path(cfg.train.init_from)
  if not (source / checkpoint.CONFIG_FILE).is_file():
    raise checkpoint.CheckpointError(
        f"train.init_from={source} is not a run directory (no {checkpoint.CONFIG_FILE})")
  diff = differences(checkpoint.load_config(source).model, cfg.model, NOT_ARCHITECTURE)
  if diff:
    fields = ", ".join(f"model.{k} {old!r} there, {new!r} here" for k, (old, new) in diff.items())
    raise checkpoint.CheckpointError(
        f"cannot fine-tune from {source}: its architecture differs ({fields})")


def initial_params(cfg: Config):
  """Parameters of train.init_from's checkpoint (train.init_checkpoint)."""
  source = Path(cfg.train.init_from)
  params, meta = checkpoint.load_params(source, cfg.train.init_checkpoint, cfg.model)
  log.info("initialised from %s (%s checkpoint, step %s); fresh optimiser, step 0", source,
           cfg.train.init_checkpoint, meta.get("step", "?"))
  return params


def _fmt_time(seconds: float) -> str:
  seconds = int(seconds)
  return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def check_finite(m: dict[str, Any], step: int) -> None:
  if not bool(m["finite"]):
    raise FloatingPointError(
        f"non-finite loss or gradient at step {step}: loss sum {float(m['loss'])}, "
        f"gradient norm {float(m['grad_norm'])}; the update was not applied and no "
        "checkpoint was written with it. Lower train.learning_rate or raise "
        "train.warmup_steps.")


class Trainer:
  """The state of one run and what the loop does with it: update, log, validate, save."""

  def __init__(self, cfg: Config, workdir: Path, devices=None):
    self.cfg, self.workdir = cfg, workdir
    self.primary = distributed.is_primary()
    check_resumable(workdir, cfg)
    if cfg.train.init_from:
      check_fine_tune_source(cfg)
    # Process 0 trains the tokenizer and encodes the corpus into the run's cache; the
    # others wait for it, then load both from disk.
    if self.primary:
      self.tok, self.train_corpus, self.val_corpus, self.val_refs = prepare_data(cfg, workdir)
      checkpoint.save_config(workdir, cfg)
    distributed.barrier("seq2seq:data")
    if not self.primary:
      self.tok, self.train_corpus, self.val_corpus, self.val_refs = prepare_data(cfg, workdir)
    self.steps = Steps(cfg, Model(cfg.model), devices)
    self.state = self.steps.init_state()
    self.ckpt = checkpoint.Checkpointer(workdir, cfg.train.keep_checkpoints)
    self.progress = Progress()
    self.sigterm: list[int] = []  # set by sigterm_stops_the_loop() while train() runs
    restored = self.ckpt.restore_latest(self.state.params, self.state.opt_state)
    if restored is None and cfg.train.init_from:
      params = initial_params(cfg)
      self.state = jax.device_put(
          TrainState(self.state.step, params, self.steps.optimizer.init(params)),
          self.steps.replicated)
    if restored is not None:
      params, opt_state, meta = restored
      self.progress = Progress.from_meta(meta)
      self.state = jax.device_put(
          TrainState(np.asarray(self.progress.step, np.int32), params, opt_state),
          self.steps.replicated)
      if self.primary:
        metrics.truncate_after(workdir, self.progress.step)
      log.info("resumed from step %d (epoch %d, batch %d)", self.progress.step,
               self.progress.epoch, self.progress.batch_index)
    # Validation pads loss batches and decoding batches to the same lengths.
    self.eval_lengths = input_pipeline.LengthBuckets.from_config(cfg.data, cfg.model.max_len)
    # Validation's greedy batches do not shrink as sentences finish (decode.min_rows):
    # on 1,014 sentences shrinking saves under half a second a validation, while its
    # copies of the decoder step (one per size, 64 / 32 / 16 / 8 rows) cost ~50 s of
    # compilation before the first update on 2 cores (bench/compile_ahead.py).
    # Translations are the same either way.
    self.translator = Translator(cfg.model, self.state.params, self.tok,
                                 dataclasses.replace(cfg.decode, min_rows=0), self.eval_lengths)
    n = cfg.train.eval_max_sentences or len(self.val_corpus)
    self.val_src, self.val_refs = self.val_corpus.src[:n], self.val_refs[:n]
    self.writer = metrics.MetricsWriter(workdir, cfg.train.tensorboard, active=self.primary)
    self.started = time.time()
    self.window = Window()

  def elapsed(self) -> float:
    return self.progress.elapsed + time.time() - self.started

  def log_window(self) -> None:
    w, p = self.window, self.progress
    rate = w.tokens / w.seconds()
    eta = (self.cfg.train.max_steps - p.step) * w.seconds() / max(w.updates, 1)
    if self.cfg.train.max_minutes:
      eta = min(eta, self.cfg.train.max_minutes * 60 - self.elapsed())
    loss = w.loss / max(w.tokens, 1.0)
    m = self.last_metrics
    self.writer.write({"kind": "train", "step": p.step, "epoch": p.epoch, "loss": loss,
                       "accuracy": w.correct / max(w.tokens, 1.0), "lr": float(m["lr"]),
                       "grad_norm": float(m["grad_norm"]), "tgt_tokens_per_s": rate,
                       "elapsed": self.elapsed()})
    log.info("step %d epoch %d loss %.3f lr %.2e %.0f tgt tok/s elapsed %s eta %s",
             p.step, p.epoch, loss, float(m["lr"]), rate, _fmt_time(self.elapsed()),
             _fmt_time(max(eta, 0)))
    self.window = Window()

  def validate(self) -> dict[str, float]:
    t0 = time.time()
    p, params = self.progress, self.state.params
    scores = evaluate_loss(self.steps, params, self.val_corpus, self.eval_lengths)
    hyps = self.translate_validation(params)
    scores["bleu"] = bleu(hyps, self.val_refs)
    if self.writer.tb is not None:
      examples = range(min(self.cfg.train.tensorboard_examples, len(hyps)))
      self.writer.write_text("val/translations", "\n\n".join(
          f"**source** {self.tok.decode([self.val_src[i]])[0]}  \n**output** {hyps[i]}  \n"
          f"**reference** {self.val_refs[i]}" for i in examples), p.step)
    improved = scores["bleu"] > p.best_bleu
    if improved:
      p.best_bleu, p.best_step, p.evals_without_improvement = scores["bleu"], p.step, 0
      self.ckpt.save_best(p.step, params, dict(p.to_meta(), bleu=scores["bleu"]))
    else:
      p.evals_without_improvement += 1
    self.writer.write({"kind": "val", "step": p.step, "elapsed": self.elapsed(), **scores})
    log.info("validation at step %d: loss %.3f, accuracy %.3f, BLEU %.2f%s (%.1fs)",
             p.step, scores["loss"], scores["accuracy"], scores["bleu"],
             " (new best)" if improved else "", time.time() - t0)
    if self.primary:
      metrics.plot(self.workdir)
    self.window.paused += time.time() - t0
    return scores

  def lower_validation(self) -> Iterator[jax.stages.Lowered]:
    """`validate`'s programs (the loss of each batch shape, the greedy search of each),
    lowered for the current parameters. Compiled before the first update, a search that
    cannot compile fails before training, and the first validation does not stop the
    loop for the ~2 minutes (on 2 cores) it spent compiling them; those minutes are now
    spent before the first update instead, so a run's total is unchanged."""
    params = self.state.params
    yield from lower_evaluate_loss(self.steps, params, self.val_corpus, self.eval_lengths)
    yield from self.translator.lower_searches(self.my_val_sources(),
                                              distributed.local_copy(params), beam_size=1)

  def my_val_sources(self) -> list[np.ndarray]:
    """The validation sources this process decodes: sentences p, p + P, p + 2P, ..."""
    return self.val_src[jax.process_index()::jax.process_count()]

  def translate_validation(self, params) -> list[str]:
    """Greedy translations of the validation sources. With several processes, process p
    decodes sentences p, p + P, p + 2P, ... on its own devices and all of them gather the
    result, so every process computes the same BLEU and takes the same decisions."""
    found = self.translator.translate_ids(self.my_val_sources(),
                                          params=distributed.local_copy(params), beam_size=1)
    gathered = distributed.gather_texts([self.translator.detokenize(h[0][0]) for h in found])
    hyps = [""] * len(self.val_src)
    for p, texts in enumerate(gathered):
      hyps[p::jax.process_count()] = texts
    return hyps

  def save(self) -> None:
    t0 = time.time()
    self.progress.elapsed, self.started = self.elapsed(), time.time()
    self.ckpt.save_latest(self.progress.step, self.state.params, self.state.opt_state,
                          self.progress.to_meta())
    self.window.paused += time.time() - t0

  def plan_cooldown(self) -> None:
    """Starts the learning-rate cooldown (train.cooldown) once its share of the run is
    left: of max_minutes, ending at the step the speed so far reaches by the limit, else of
    max_steps. The window is saved with the progress, so a resumed run keeps it."""
    t, p = self.cfg.train, self.progress
    if not t.cooldown or p.cooldown_end:
      return
    if t.max_minutes:
      budget, spent = t.max_minutes * 60, max(self.elapsed(), 1e-9)
      if not distributed.agree(spent >= (1.0 - t.cooldown) * budget):
        return
      end = min(p.step + max(round(p.step * (budget - spent) / spent), 1), t.max_steps)
    else:
      if p.step < round((1.0 - t.cooldown) * t.max_steps):
        return
      end = t.max_steps
    p.cooldown_start, p.cooldown_end = p.step, distributed.agree_int(end)
    log.info("learning-rate cooldown from step %d to 0 at step %d", p.cooldown_start,
             p.cooldown_end)

  def planned_end(self) -> str | None:
    """Why the run has reached the update it was planned to end at, if it has."""
    t, p = self.cfg.train, self.progress
    if p.step >= t.max_steps:
      return f"max_steps={t.max_steps} reached"
    if p.cooldown_end and p.step >= p.cooldown_end:
      return f"learning-rate cooldown ended at step {p.cooldown_end}"
    return None

  def stop_reason(self) -> str | None:
    t, p = self.cfg.train, self.progress
    if end := self.planned_end():
      return end
    if t.early_stopping_patience and p.evals_without_improvement >= t.early_stopping_patience:
      return (f"early stopping after {t.early_stopping_patience} validations without a "
              "new best BLEU")
    # Clocks and signals differ between processes: process 0's decide for all of them.
    timed_out = bool(t.max_minutes) and self.elapsed() >= t.max_minutes * 60
    verdict = distributed.agree_int(2 * bool(self.sigterm) + timed_out)
    if verdict >= 2:
      return "terminated (SIGTERM)"
    if verdict:
      return f"time limit of {t.max_minutes} minutes"
    return None

  def run(self) -> dict[str, Any]:
    t, p = self.cfg.train, self.progress
    sampler = None
    if self.cfg.data.sampling_alpha:  # subword regularization: text needed every epoch
      sampler = input_pipeline.SubwordSampler(self.tok, training_pairs(self.cfg),
                                              self.cfg.data)
    batches = input_pipeline.TrainBatches(self.train_corpus, self.cfg.data,
                                          self.steps.num_devices, sampler)
    # Shapes to compile ahead, read before the prefetching thread re-indexes the corpus.
    templates = batches.templates(jax.process_index(), jax.process_count())
    stream = input_pipeline.prefetch(batches.iterate(p.epoch, p.batch_index,
                                                     jax.process_index(), jax.process_count()))
    reason, first_step = self.stop_reason(), p.step
    if reason:
      log.info("nothing to do: %s", reason)
    else:
      seconds = self.steps.compile_ahead(self.state, templates, t.grad_accum_steps,
                                         also=self.lower_validation())
      log.info("compiled the update for %d batch shapes and the validation in %.1fs",
               len(templates), seconds)
    pending = None  # the previous update's metrics, read after the next is dispatched
    try:
      while reason is None:
        micro = [next(stream) for _ in range(t.grad_accum_steps)]
        self.plan_cooldown()
        scale = cooldown_scale(p.step, p.cooldown_start, p.cooldown_end)
        self.state, m = self.steps.update(self.state, [batch for _, _, batch in micro], scale)
        p.step += 1
        p.epoch, p.batch_index = micro[-1][0], micro[-1][1]
        if pending is not None:
          self.account(*pending)
        pending = (m, p.step)
        if p.step % t.log_every == 0 or p.step % t.eval_every == 0:
          self.account(*pending)
          pending = None
        if p.step % t.log_every == 0:
          self.log_window()
        if p.step % t.eval_every == 0:
          self.validate()
        if p.step % t.checkpoint_every == 0:
          self.save()
        reason = self.stop_reason()
      if pending is not None:
        self.account(*pending)
      if self.window.updates:
        self.log_window()
      if p.step > first_step and self.planned_end() and p.step % t.eval_every:
        self.validate()  # the last update is a candidate for "best" too
    except KeyboardInterrupt:
      reason = "interrupted"
      log.warning("interrupted at step %d; saving the latest checkpoint", p.step)
    self.save()
    self.ckpt.close()
    self.writer.close()
    if t.average_last > 1:
      checkpoint.average(self.workdir, t.average_last, self.cfg.model)
    if t.ema_decay:
      checkpoint.save_params(self.workdir, "ema", p.step,
                             distributed.local_copy(ema_params(self.state.opt_state)),
                             {"ema_decay": t.ema_decay, "step": p.step})
    summary = {"step": p.step, "epoch": p.epoch, "stop_reason": reason,
               "best_bleu": p.best_bleu, "best_step": p.best_step,
               "best_checkpoint": str(self.workdir / "checkpoints" / "best"),
               "elapsed_minutes": p.elapsed / 60}
    log.info("stopped at step %d (%s). Best validation BLEU %.2f at step %d: %s",
             p.step, reason, p.best_bleu, p.best_step, summary["best_checkpoint"])
    if self.primary:
      model_card.record_training(self.workdir, self.cfg, summary)
      model_card.write(self.workdir)
    return summary

  def account(self, m, step: int) -> None:
    m = jax.device_get(m)
    check_finite(m, step)
    self.window.add(m)
    self.last_metrics = m


def train(cfg: Config, workdir: str | os.PathLike, devices=None) -> dict[str, Any]:
  """Trains (or resumes) the run in `workdir`. Returns a summary dict with `stop_reason`."""
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  runtime.quiet_libraries()
  runtime.setup_run_logging(workdir, to_file=distributed.is_primary())
  runtime.enable_compilation_cache()
  with sigterm_stops_the_loop() as sigterm:
    trainer = Trainer(cfg, workdir, devices)
    trainer.sigterm = sigterm
    return trainer.run()


@contextlib.contextmanager
def sigterm_stops_the_loop():
  """SIGTERM (`kill`, a scheduler's notice) stops training the way the time limit does:
  after the update under way, with a checkpoint, the averaged model and the model card,
  so the run resumes exactly. A second SIGTERM kills at once. Yields the list the
  handler appends to. (Ctrl-C does the same through KeyboardInterrupt; a job started in
  the background with `&` ignores SIGINT, so `kill` is how such a run is stopped.)"""
  received: list[int] = []
  if threading.current_thread() is not threading.main_thread():
    yield received  # signal handlers belong to the main thread
    return

  def handler(signum, frame):
    if received:
      signal.signal(signal.SIGTERM, signal.SIG_DFL)
      os.kill(os.getpid(), signal.SIGTERM)
      return
    received.append(signum)
    log.warning("SIGTERM: stopping after this update, with a checkpoint "
                "(a second SIGTERM kills at once)")

  previous = signal.signal(signal.SIGTERM, handler)
  try:
    yield received
  finally:
    signal.signal(signal.SIGTERM, previous)


# ------------------------------------------------------------------------ CLI


def usage(prog: str) -> str:
  """train.py --help: the options, then every config section with its fields and defaults."""
  lines = [
      f"usage: {prog} --config NAME|FILE[:ARG] --workdir DIR [--config.SECTION.FIELD=VALUE ...]",
      "",
      "Train a translation model (re-running the same command resumes from DIR).",
      "",
      f"  --config   a preset ({', '.join(presets.names())}) or a .py file with get_config();",
      "             NAME:ARG passes ARG to get_config (multi30k:FOLDER reads Multi30k there)",
      "  --workdir  run directory: config, tokenizer, checkpoints, metrics.jsonl (created)",
      "  --config.SECTION.FIELD=VALUE",
      "             override one field, e.g. --config.train.max_steps=2000; overriding",
      "             data.dir or data.hub replaces the config's data source",
      "",
      "Multi-process training (one process per host or GPU; README.md, 'Scaling out'):",
      "  --coordinator_address HOST:PORT  --num_processes N  --process_id I",
      "             join a cluster of N processes on JAX's distributed runtime; without",
      "             them, SLURM / Open MPI / Cloud TPU jobs are detected by JAX itself",
      "  --local_device_ids 0,1",
      "             the devices of this host that this process uses (default: all)",
      "",
      "Config sections, fields and their defaults (seq2seq/config.py explains each):",
  ]
  for section in dataclasses.fields(Config):
    fields = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(section.default))
    lines += textwrap.wrap(fields, 96, initial_indent=f"  {section.name}: ",
                           subsequent_indent="    ")
  return "\n".join(lines)


def _resolve_config_flag(argv: list[str]) -> list[str]:
  """`--config NAME` (or =NAME) becomes the path of the shipped preset NAME."""
  argv = list(argv)
  for i, arg in enumerate(argv):
    if arg.startswith("--config="):
      argv[i] = "--config=" + presets.config_file(arg.split("=", 1)[1])
    elif arg == "--config" and i + 1 < len(argv):
      argv[i + 1] = presets.config_file(argv[i + 1])
  return argv


def _replace_data_source(config, argv: list[str]) -> None:
  """A command-line data.dir (or data.hub) replaces the source the config file set."""
  given = {name for name in ("dir", "hub")
           if any(a.startswith(f"--config.data.{name}") for a in argv)}
  if given == {"dir"}:
    config.data.hub = ""
  elif given == {"hub"}:
    config.data.dir = ""


def main(argv=None) -> None:
  from absl import flags
  from ml_collections import config_flags

  argv = sys.argv if argv is None else argv
  prog = Path(argv[0]).name
  if any(a in ("-h", "--help", "-help", "--helpfull") for a in argv[1:]):
    print(usage(prog))
    sys.exit(0)
  config_flags.DEFINE_config_file("config", None, "preset name or config file", lock_config=True)
  flags.DEFINE_string("workdir", None, "run directory (created; re-running resumes)")
  flags.DEFINE_string("coordinator_address", None, "HOST:PORT of process 0's coordinator")
  flags.DEFINE_integer("num_processes", None, "processes in the cluster")
  flags.DEFINE_integer("process_id", None, "this process's index in [0, num_processes)")
  flags.DEFINE_list("local_device_ids", None, "this host's devices that this process uses")
  try:
    argv = _resolve_config_flag(argv)
    flags.FLAGS(argv)
    if flags.FLAGS.config is None or flags.FLAGS.workdir is None:
      raise flags.Error("--config and --workdir are required (--help lists the options)")
    _replace_data_source(flags.FLAGS.config, argv)
    cfg = Config.from_dict(flags.FLAGS.config)
  except (flags.Error, AttributeError, KeyError, ValueError, TypeError) as e:
    # ml_collections reports a misspelt override as AttributeError("'x'\nDid you mean...").
    message = " ".join(str(e).replace("\\n", " ").replace("\\'", "").split())
    if isinstance(e, (AttributeError, KeyError)):
      message = message.strip("'\" ")
    if isinstance(e, AttributeError):
      message = "unknown config field " + message.replace(" Did", ". Did", 1)
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)
  runtime.quiet_libraries()
  f = flags.FLAGS
  try:
    distributed.initialize(f.coordinator_address, f.num_processes, f.process_id,
                           [int(i) for i in f.local_device_ids] if f.local_device_ids else None)
  except ValueError as e:
    print(f"{prog}: error: {e}", file=sys.stderr)
    sys.exit(2)
  try:
    summary = train(cfg, flags.FLAGS.workdir)
  except (input_pipeline.DataError, checkpoint.CheckpointError, tokenizer.TokenizerMismatchError,
          FloatingPointError, ValueError) as e:
    logging.getLogger("seq2seq").error("%s", e)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  if distributed.is_primary():
    print(json.dumps(summary))
