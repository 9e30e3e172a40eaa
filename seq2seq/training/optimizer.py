"""The optimizer: Adam or AdamW with warmup and a decay schedule, gradient clipping, and
an optional moving average of the parameters (fairseq's --ema-decay)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from seq2seq.config import TrainConfig

DECAYS_TO_ZERO = ("linear", "cosine")  # the schedules that end at decay_steps or max_steps


def learning_rate_schedule(cfg: TrainConfig) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then `cfg.lr_schedule`: decay with 1/sqrt(step)
  (Vaswani et al.), linear or cosine decay to 0 at `decay_steps` (0 = `max_steps`), or
  none ("constant")."""
  warmup = max(cfg.warmup_steps, 1)

  def schedule(count):
    step = count + 1.0
    if cfg.lr_schedule == "inverse_sqrt":
      decay = jnp.sqrt(warmup / step)
    elif cfg.lr_schedule == "constant":
      decay = 1.0
    else:  # DECAYS_TO_ZERO: the only schedules that read max_steps
      end = cfg.decay_steps or cfg.max_steps  # after warmup (TrainConfig checks)
      left = jnp.clip((end - step) / (end - warmup), 0.0, 1.0)  # 1 -> 0 after warmup
      decay = left if cfg.lr_schedule == "linear" else 0.5 * (1.0 - jnp.cos(jnp.pi * left))
    return cfg.learning_rate * jnp.minimum(step / warmup, decay)

  return schedule


class EmaState(NamedTuple):
  ema: Any  # the moving average of the parameters after each update


def track_ema(decay: float) -> optax.GradientTransformation:
  """The last link of an optimizer chain: passes the updates through and keeps an
  exponential moving average of the parameters they produce, starting from the initial
  parameters (Polyak averaging). Its state is saved and resumed with the optimizer's;
  `ema_params(opt_state)` reads it."""
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


def ema_params(opt_state):
  """The moving average kept by `track_ema` in an optimizer state (None without one)."""
  return optax.tree_utils.tree_get(opt_state, "ema")


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
  """clip -> Adam / AdamW (the schedule's learning rate) -> moving average, as configured."""
  schedule = learning_rate_schedule(cfg)
  if cfg.optimizer == "adam":
    opt = optax.adam(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)
  else:
    opt = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                      weight_decay=cfg.weight_decay)
  if cfg.clip_norm > 0:
    opt = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), opt)
  if cfg.ema_decay:
    opt = optax.chain(opt, track_ema(cfg.ema_decay))
  return opt
