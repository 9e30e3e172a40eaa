"""The optimizer: learning-rate schedules and the moving average of the parameters."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seq2seq.config import TrainConfig
from seq2seq.training.optimizer import ema_params, learning_rate_schedule, make_optimizer


def test_schedule_warms_up_then_decays():
  sched = learning_rate_schedule(TrainConfig(learning_rate=1e-3, warmup_steps=100))
  assert float(sched(0)) == pytest.approx(1e-5)
  assert float(sched(99)) == pytest.approx(1e-3)
  assert float(sched(399)) == pytest.approx(5e-4)


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_decaying_schedules_reach_zero_at_decay_steps(kind):
  cfg = TrainConfig(learning_rate=1e-3, warmup_steps=100, lr_schedule=kind, decay_steps=1100,
                    max_steps=5000)
  sched = jax.jit(learning_rate_schedule(cfg))
  assert float(sched(99)) == pytest.approx(1e-3)
  assert float(sched(599)) == pytest.approx(5e-4)  # half way (cosine too, by symmetry)
  rates = [float(sched(s)) for s in range(99, 1200, 50)]
  assert all(a >= b for a, b in zip(rates, rates[1:])) and rates[-1] == 0.0
  assert float(sched(1099)) == pytest.approx(0.0, abs=1e-12)
  # without decay_steps the decay ends at max_steps
  no_end = learning_rate_schedule(dataclasses.replace(cfg, decay_steps=0))
  assert float(no_end(4999)) == pytest.approx(0.0, abs=1e-12)
  assert float(no_end(4000)) > 0.0


def test_schedule_options_are_checked():
  with pytest.raises(ValueError, match="'inverse_sqrt', 'linear', 'cosine' or 'constant'"):
    TrainConfig(lr_schedule="step")
  with pytest.raises(ValueError, match="must come after the 100 warmup steps"):
    TrainConfig(warmup_steps=100, lr_schedule="linear", decay_steps=50)


def test_moving_average_of_the_parameters_after_each_update():
  """ema_k = d * ema_(k-1) + (1 - d) * params_k from ema_0 = the initial parameters; the
  updates themselves are those of the optimizer without it."""
  cfg = TrainConfig(learning_rate=0.1, warmup_steps=1, clip_norm=0.0, ema_decay=0.75)
  with_ema = make_optimizer(cfg)
  without = make_optimizer(dataclasses.replace(cfg, ema_decay=0.0))
  params = {"w": jnp.array([1.0, -2.0, 3.0])}
  state, plain_state = with_ema.init(params), without.init(params)
  expected = params["w"]
  for k in range(3):
    grads = {"w": jnp.array([0.5, 1.0, -1.5]) * (k + 1)}
    updates, state = with_ema.update(grads, state, params)
    plain, plain_state = without.update(grads, plain_state, params)
    np.testing.assert_array_equal(updates["w"], plain["w"])
    params = optax.apply_updates(params, updates)
    expected = 0.75 * expected + 0.25 * params["w"]
    np.testing.assert_allclose(ema_params(state)["w"], expected, rtol=1e-6)
  assert ema_params(plain_state) is None
  with pytest.raises(ValueError, match=r"train.ema_decay=1.0: expected a number from 0 to 1"):
    make_optimizer(dataclasses.replace(cfg, ema_decay=1.0))


def test_adamw_is_adam_with_decoupled_weight_decay():
  """AdamW's update is Adam's minus learning rate x weight_decay x the parameter."""
  cfg = TrainConfig(optimizer="adamw", learning_rate=0.1, warmup_steps=1, clip_norm=0.0,
                    weight_decay=0.05)
  adamw, adam = make_optimizer(cfg), make_optimizer(dataclasses.replace(cfg, optimizer="adam", weight_decay=0.0))
  params = {"w": jnp.array([1.0, -2.0, 3.0])}
  grads = {"w": jnp.array([0.5, 1.0, -1.5])}
  got, _ = adamw.update(grads, adamw.init(params), params)
  plain, _ = adam.update(grads, adam.init(params), params)
  lr = float(learning_rate_schedule(cfg)(0))
  np.testing.assert_allclose(got["w"], plain["w"] - lr * 0.05 * params["w"], rtol=1e-6)
