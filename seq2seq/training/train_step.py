"""The training and evaluation steps: pure functions of (state, batch), and their jitted,
data-parallel form over a mesh of every device of every process.

"Step" means one optimizer update. With `train.grad_accum_steps = k` an update adds up
the gradients of the summed loss over k micro-batches and divides by their target
tokens, so it equals one update over a batch holding all of their rows (up to float
rounding). Dropout keys are `fold_in(fold_in(key, step), micro_batch)`, so a resumed run
makes the same updates as one that was not interrupted.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Any, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from seq2seq.config import Config, TrainConfig
from seq2seq.data.input_pipeline import Batch
from seq2seq.model.transformer import Model, shift_right
from seq2seq.training import distributed
from seq2seq.training.loss import SUM_KEYS, loss_sums, output_loss_sums
from seq2seq.training.optimizer import DECAYS_TO_ZERO, learning_rate_schedule, make_optimizer

log = logging.getLogger("seq2seq.train")


class TrainState(NamedTuple):
  step: jnp.ndarray  # [] int32: optimizer updates done
  params: Any
  opt_state: Any


def dropout_scale(step, ramp_steps: int):
  """The factor on the dropout rates at update `step` (traced): a linear ramp from 0 to 1
  over the first `ramp_steps` updates, then 1; None without a ramp."""
  if not ramp_steps:
    return None
  return jnp.minimum(jnp.asarray(step, jnp.float32) / ramp_steps, 1.0)


def loss_and_grads(model: Model, cfg: TrainConfig, params, batch: Batch, step, rng):
  """Gradient of the summed label-smoothed loss of `batch`, and its sums (`SUM_KEYS`)."""

  def loss_fn(p):
    args = dict(rng=rng, is_training=True, src_segments_BS=batch.src_segments,
                tgt_segments_BT=batch.tgt_segments,
                dropout_scale=dropout_scale(step, cfg.dropout_ramp_steps))
    tgt_in = shift_right(batch.tgt, batch.tgt_segments)
    if cfg.loss_chunk:
      x, w, b = model.apply_features(p, batch.src, tgt_in, **args)
      sums = output_loss_sums(x, w, b, batch.tgt, cfg.label_smoothing, cfg.loss_chunk,
                              model.numerics.operand_dtype, model.cfg.output_bias)
    else:
      sums = loss_sums(model.apply(p, batch.src, tgt_in, **args), batch.tgt,
                       cfg.label_smoothing, model.cfg.output_bias)
    return sums["loss"], sums

  return jax.grad(loss_fn, has_aux=True)(params)


def apply_gradients(optimizer: optax.GradientTransformation, schedule: optax.Schedule,
                    state: TrainState, grad_sums, sums) -> tuple[TrainState, dict]:
  """One optimizer update from summed gradients and loss sums (divided by the tokens). A
  non-finite loss or gradient leaves the state untouched; the host stops the run."""
  grads = jax.tree_util.tree_map(lambda g: g / jnp.maximum(sums["tokens"], 1.0), grad_sums)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  grad_norm = optax.tree.norm(grads)
  ok = jnp.isfinite(sums["loss"]) & jnp.isfinite(grad_norm)
  keep = lambda new, old: jax.tree_util.tree_map(lambda n, o: jnp.where(ok, n, o), new, old)
  new_state = TrainState(state.step + 1, keep(params, state.params),
                         keep(opt_state, state.opt_state))
  return new_state, dict(sums, grad_norm=grad_norm, finite=ok, lr=schedule(state.step))


def train_step(model: Model, optimizer: optax.GradientTransformation,
               schedule: optax.Schedule, cfg: TrainConfig, base_key: jax.Array,
               state: TrainState, batch: Batch) -> tuple[TrainState, dict]:
  """One update on one batch: (new state, metrics: the loss sums, grad_norm, finite, lr)."""
  rng = jax.random.fold_in(jax.random.fold_in(base_key, state.step), 0)
  grads, sums = loss_and_grads(model, cfg, state.params, batch, state.step, rng)
  return apply_gradients(optimizer, schedule, state, grads, {k: sums[k] for k in SUM_KEYS})


def add_micro_batch(model: Model, cfg: TrainConfig, base_key: jax.Array, acc, params,
                    batch: Batch, step, micro) -> tuple[Any, dict]:
  """(gradient sums, loss sums) `acc` plus those of micro-batch `micro` of update `step`."""
  rng = jax.random.fold_in(jax.random.fold_in(base_key, step), micro)
  grads, sums = loss_and_grads(model, cfg, params, batch, step, rng)
  acc_grads, acc_sums = acc
  return (jax.tree_util.tree_map(jnp.add, acc_grads, grads),
          {k: acc_sums[k] + sums[k] for k in SUM_KEYS})


def initial_state(model: Model, optimizer: optax.GradientTransformation, key: jax.Array
                  ) -> TrainState:
  """The state at step 0: new parameters from `key` and the optimizer's initial state."""
  dummy = jnp.ones((1, 8), jnp.int32)
  params = model.init(key, dummy, dummy)
  return TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))


def eval_step(model: Model, smoothing: float, params, batch: Batch) -> dict:
  """The loss sums of one batch, teacher-forced, without dropout."""
  logits = model.apply(params, batch.src, shift_right(batch.tgt))
  return loss_sums(logits, batch.tgt, smoothing, model.cfg.output_bias)


class Programs(NamedTuple):
  """The jitted steps of one (model, training config, devices), with their optimizer and
  mesh: see `jitted_programs`."""

  optimizer: optax.GradientTransformation
  mesh: Mesh
  initial_state: Any
  train_step: Any
  add_micro_batch: Any
  apply_gradients: Any
  eval_step: Any
  zero_sums: Any


# The training settings the steps read; the others (the loop's: max_minutes, log_every,
# checkpoint_every, grad_accum_steps, ...) change no program. `max_steps` is read only by
# a linear or cosine decay that ends at it. tests/training/test_train_step.py traces the
# steps with a config that records what is read, so this list cannot fall behind.
STEP_FIELDS = ("seed", "optimizer", "learning_rate", "warmup_steps", "lr_schedule",
               "decay_steps", "b1", "b2", "eps", "weight_decay", "clip_norm",
               "dropout_ramp_steps", "label_smoothing", "loss_chunk", "ema_decay")


def step_settings(cfg: TrainConfig) -> TrainConfig:
  """`cfg` with every field the steps do not read at its default: runs that differ only
  in the loop's settings (a test's max_steps, a resume's time limit) share their programs."""
  kept = set(STEP_FIELDS)
  if cfg.lr_schedule in DECAYS_TO_ZERO and not cfg.decay_steps:
    kept.add("max_steps")
  defaults = TrainConfig()
  return dataclasses.replace(defaults, **{f: getattr(cfg, f) for f in kept})


@functools.lru_cache(maxsize=8)
def jitted_programs(model: Model, cfg: TrainConfig, devices: tuple) -> Programs:
  """The steps jitted over a 1-D "data" mesh of `devices`, once per process for equal
  arguments (`Model.__eq__`, `step_settings`): a second `Trainer` of the same run (a
  resume, the next stage of a recipe) reuses what the first traced and compiled."""
  optimizer, schedule = make_optimizer(cfg), learning_rate_schedule(cfg)
  mesh = Mesh(np.array(devices), ("data",))
  replicated = NamedSharding(mesh, P())
  key = jax.random.PRNGKey(cfg.seed)
  out2 = (replicated, replicated)
  return Programs(
      optimizer, mesh,
      # One program: run eagerly, the initializers' ~100 operations were each compiled
      # on their own (seconds of a tiny run's start on 2 cores).
      initial_state=jax.jit(functools.partial(initial_state, model, optimizer, key),
                            out_shardings=replicated),
      train_step=jax.jit(functools.partial(train_step, model, optimizer, schedule, cfg, key),
                         donate_argnums=0, out_shardings=out2),
      add_micro_batch=jax.jit(functools.partial(add_micro_batch, model, cfg, key),
                              donate_argnums=0, out_shardings=out2),
      apply_gradients=jax.jit(functools.partial(apply_gradients, optimizer, schedule),
                              donate_argnums=0, out_shardings=out2),
      eval_step=jax.jit(functools.partial(eval_step, model, cfg.label_smoothing),
                        out_shardings=replicated),
      # Zeroed gradient and loss sums, made on the devices (replicated over every process).
      zero_sums=jax.jit(
          lambda params: (jax.tree_util.tree_map(jnp.zeros_like, params),
                          {k: jnp.zeros((), jnp.float32) for k in SUM_KEYS}),
          out_shardings=replicated))


class DataParallelSteps:
  """`train_step`, `add_micro_batch` + `apply_gradients`, and `eval_step`, jitted over a
  1-D "data" mesh of every device of every process (`jax.devices()`): batches split by
  rows, the state replicated."""

  def __init__(self, cfg: Config, model: Model, devices=None):
    if cfg.train.loss_chunk < 0:
      raise ValueError(f"train.loss_chunk must be >= 0 (0 = all logits at once), got "
                       f"{cfg.train.loss_chunk}")
    self.cfg, self.model = cfg, model
    (self.optimizer, self.mesh, self.initial_state, self.train_step, self.add_micro_batch,
     self.apply_gradients, self.eval_step, self.zero_sums) = jitted_programs(
         model, step_settings(cfg.train), tuple(devices or jax.devices()))
    self.batch_sharding = NamedSharding(self.mesh, P("data"))
    self.replicated = NamedSharding(self.mesh, P())

  @property
  def num_devices(self) -> int:
    return self.mesh.devices.size

  def init_state(self) -> TrainState:
    """A new run's state (from `train.seed`), replicated over the mesh."""
    return self.initial_state()

  def replicated_shapes(self, tree):
    """The shapes and dtypes of `tree`'s arrays, each replicated over the mesh."""
    return jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.replicated), tree)

  def put_batch(self, batch: Batch) -> Batch:
    """This process's rows of a global batch (all of it with one process) -> global
    device arrays with rows split across the mesh."""
    rows = batch.src.shape[0] * jax.process_count()
    return distributed.global_batch(batch, self.batch_sharding, rows)

  def update(self, state: TrainState, batches: list[Batch]) -> tuple[TrainState, dict]:
    """One optimizer update over the micro-batches `batches` (host batches)."""
    if len(batches) == 1:
      return self.train_step(state, self.put_batch(batches[0]))
    acc = self.zero_sums(state.params)
    for micro, batch in enumerate(batches):
      acc = self.add_micro_batch(acc, state.params, self.put_batch(batch), state.step, micro)
    return self.apply_gradients(state, *acc)

  def lower_updates(self, state: TrainState, templates: list[Batch], micro_batches: int = 1
                    ) -> Iterator[tuple[str, jax.stages.Lowered]]:
    """(name, program) of the update for each batch shape of `templates`, traced and
    lowered (with micro-batches: their gradient, the zeroed sums and the update)."""
    if micro_batches == 1:
      for b in templates:
        yield self.program_names(b, 1)[0], self.train_step.lower(state, self.put_batch(b))
      return
    acc = self.replicated_shapes(jax.eval_shape(self.zero_sums, state.params))
    for b in templates:
      yield self.program_names(b, 2)[0], self.add_micro_batch.lower(
          acc, state.params, self.put_batch(b), state.step, 0)
    yield "zeroed sums", self.zero_sums.lower(state.params)
    yield "update", self.apply_gradients.lower(state, *acc)

  @staticmethod
  def program_names(batch: Batch, micro_batches: int) -> list[str]:
    """The names `lower_updates` gives the programs an update of `batch`'s shape runs."""
    shape = "x".join(map(str, batch.src.shape[:1] + batch.tgt.shape[1:]))
    if micro_batches == 1:
      return [f"update {shape}"]
    return [f"gradient {shape}", "zeroed sums", "update"]
