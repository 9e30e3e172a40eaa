"""The training step: gradient accumulation, the dropout ramp, two devices, packed rows,
compiling ahead."""

import dataclasses
import json
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.config import TrainConfig
from seq2seq.data import corpus, data_source, input_pipeline, tokenizer
from seq2seq.data.input_pipeline import Batch
from seq2seq.model.transformer import Model, shift_right
from seq2seq.training.compiling import compile_ahead
from seq2seq.training.loss import loss_sums
from seq2seq.training.optimizer import DECAYS_TO_ZERO, learning_rate_schedule
from seq2seq.training.train_step import (
  STEP_FIELDS,
  DataParallelSteps,
  TrainState,
  dropout_scale,
  jitted_programs,
)

from conftest import xla_flags
from helpers import SAMPLE, tiny_config


@pytest.mark.slow
def test_accumulated_update_equals_one_batch_of_all_rows():
  # Two micro-batches of one update give the parameters of one batch holding both
  # (dropout off; the loss is token-weighted over the whole update).
  # Adam's eps is raised from 1e-9: with it, a near-zero gradient (1e-9 against 2e-9 from
  # float rounding) still gives a full-size update, which would compare rounding noise.
  base = tiny_config(SAMPLE, eps=1e-3)
  cfg = dataclasses.replace(base, model=dataclasses.replace(base.model, dropout=0.0))
  rng = np.random.default_rng(0)
  src = rng.integers(4, 400, (8, 12)).astype(np.int32)
  tgt = rng.integers(4, 400, (8, 10)).astype(np.int32)
  src[::3, 7:] = 0
  tgt[1:4, 4:] = 0  # 22 target tokens in the first micro-batch, 40 in the second
  whole = DataParallelSteps(cfg, Model(cfg.model))
  accum_cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, grad_accum_steps=2))
  split = DataParallelSteps(accum_cfg, Model(cfg.model))
  a, b = whole.init_state(), split.init_state()
  for _ in range(3):
    a, ma = whole.update(a, [Batch(src, tgt)])
    b, mb = split.update(b, [Batch(src[:4], tgt[:4]), Batch(src[4:], tgt[4:])])
  assert int(a.step) == int(b.step) == 3
  assert float(ma["tokens"]) == float(mb["tokens"])
  np.testing.assert_allclose(float(ma["loss"]), float(mb["loss"]), rtol=1e-5)
  np.testing.assert_allclose(float(ma["grad_norm"]), float(mb["grad_norm"]), rtol=1e-4)
  for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
    np.testing.assert_allclose(x, y, atol=2e-6, rtol=1e-4)


@pytest.mark.slow
def test_dropout_ramp_starts_without_dropout_and_reaches_the_configured_rate():
  """train.dropout_ramp_steps=4: update 0 is the dropout-free model's update, update 2 is
  neither, and from update 4 on it is the unramped model's, from the same state."""
  base = tiny_config(SAMPLE)
  with_rate = lambda rate, ramp: dataclasses.replace(
      base, model=dataclasses.replace(base.model, dropout=rate),
      train=dataclasses.replace(base.train, dropout_ramp_steps=ramp))
  ramped, plain, none = (DataParallelSteps(c, Model(c.model)) for c in (
      with_rate(0.3, 4), with_rate(0.3, 0), with_rate(0.0, 0)))
  rng = np.random.default_rng(1)
  batch = Batch(rng.integers(4, 400, (8, 12)).astype(np.int32),
                rng.integers(4, 400, (8, 10)).astype(np.int32))
  # a fresh (identical) state per update: the step donates the one it is given
  at = lambda step: ramped.init_state()._replace(step=jnp.asarray(step, jnp.int32))
  loss = lambda steps, step: float(steps.update(at(step), [batch])[1]["loss"])
  assert loss(ramped, 0) == pytest.approx(loss(none, 0), rel=1e-6)
  assert loss(ramped, 4) == pytest.approx(loss(plain, 4), rel=1e-6)
  assert loss(ramped, 9) == pytest.approx(loss(plain, 9), rel=1e-6)
  assert loss(ramped, 2) not in (pytest.approx(loss(plain, 2)), pytest.approx(loss(none, 2)))
  assert [float(dropout_scale(s, 4)) for s in (0, 1, 2, 4, 100)] == [0.0, 0.25, 0.5, 1, 1]
  assert dropout_scale(3, 0) is None
  with pytest.raises(ValueError, match=r"dropout_ramp_steps=-1: expected an integer >= 0"):
    TrainConfig(dropout_ramp_steps=-1)


@pytest.mark.slow
def test_two_devices_match_one(tmp_path):
  script = textwrap.dedent("""
    import dataclasses, json
    import jax, numpy as np
    from seq2seq.config import PRESETS, Config, DataConfig
    from seq2seq.model.transformer import Model
    from seq2seq.data.input_pipeline import Batch
    from seq2seq.training.train_step import DataParallelSteps as Steps
    assert len(jax.devices()) == 2
    cfg = Config(model=dataclasses.replace(PRESETS["tiny"], encoder_layers=1, decoder_layers=1))
    rng = np.random.default_rng(0)
    src = rng.integers(4, 500, (8, 12)).astype(np.int32); src[::3, 7:] = 0
    tgt = rng.integers(4, 500, (8, 10)).astype(np.int32); tgt[1::2, 6:] = 0
    tgt[6:] = 0  # padding rows carry no loss
    out = {}
    for n in (1, 2):
      steps = Steps(cfg, Model(cfg.model), devices=jax.devices()[:n])
      state = steps.init_state()
      for _ in range(3):
        state, m = steps.train_step(state, steps.put_batch(Batch(src, tgt)))
      out[n] = (jax.device_get(state.params), float(m["loss"]))
    leaves = zip(jax.tree_util.tree_leaves(out[1][0]), jax.tree_util.tree_leaves(out[2][0]))
    diff = max(float(np.abs(a - b).max()) for a, b in leaves)
    print(json.dumps({"diff": diff, "loss1": out[1][1], "loss2": out[2][1]}))
  """)
  env = {"XLA_FLAGS": xla_flags(2), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
  proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result["diff"] < 1e-5, result
  assert result["loss1"] == pytest.approx(result["loss2"], rel=1e-5)


def test_steps_of_equal_settings_share_their_jitted_programs():
  """A second trainer of one run (a resume, a recipe's next stage) reuses the programs the
  first traced; any setting the programs hold gives programs of their own."""
  cfg = tiny_config(SAMPLE)
  a, b = (DataParallelSteps(cfg, Model(cfg.model)) for _ in range(2))
  assert a.train_step is b.train_step and a.eval_step is b.eval_step
  reseeded = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seed=1))
  assert DataParallelSteps(reseeded, Model(cfg.model)).train_step is not a.train_step
  smaller = dataclasses.replace(cfg.model, d_ff=cfg.model.d_ff // 2)
  assert DataParallelSteps(cfg, Model(smaller)).train_step is not a.train_step
  # The loop's settings hold no program; max_steps does once a linear decay ends there.
  looped = dataclasses.replace(cfg.train, max_steps=99, log_every=7, checkpoint_every=5,
                               max_minutes=3.0, grad_accum_steps=2)
  assert DataParallelSteps(dataclasses.replace(cfg, train=looped),
                           Model(cfg.model)).train_step is a.train_step
  linear = [dataclasses.replace(cfg, train=dataclasses.replace(
      cfg.train, lr_schedule="linear", max_steps=n)) for n in (30, 40)]
  assert len({DataParallelSteps(c, Model(cfg.model)).train_step for c in linear}) == 2


class Recording:
  """A training config that records which of its fields are read."""

  def __init__(self, cfg: TrainConfig):
    self._cfg, self.read = cfg, set()

  def __getattr__(self, name):
    self.read.add(name)
    return getattr(self._cfg, name)


def test_the_steps_read_only_the_fields_that_key_their_programs():
  """`step_settings` keys the shared programs by STEP_FIELDS: tracing every step with
  every option on (and each schedule) reads no other field, so two configs that differ
  elsewhere do build the same programs."""
  cfg = tiny_config(SAMPLE)
  model = Model(cfg.model)
  every_option = dataclasses.replace(
      cfg.train, optimizer="adamw", weight_decay=0.01, ema_decay=0.9, dropout_ramp_steps=5,
      loss_chunk=16, clip_norm=1.0)
  recorded = Recording(every_option)
  programs = jitted_programs.__wrapped__(model, recorded, tuple(jax.devices()[:1]))
  ids = jax.ShapeDtypeStruct((2, 8), jnp.int32)
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), ids, ids)
  state = TrainState(jax.ShapeDtypeStruct((), jnp.int32), params,
                     jax.eval_shape(programs.optimizer.init, params))
  batch = Batch(ids, ids)
  jax.eval_shape(programs.train_step, state, batch)
  acc = jax.eval_shape(programs.zero_sums, params)
  jax.eval_shape(programs.add_micro_batch, acc, params, batch, state.step, 1)
  jax.eval_shape(programs.apply_gradients, state, *acc)
  jax.eval_shape(programs.eval_step, params, batch)
  jax.eval_shape(programs.initial_state)
  assert recorded.read <= set(STEP_FIELDS), recorded.read - set(STEP_FIELDS)
  assert {"seed", "loss_chunk", "ema_decay", "label_smoothing"} <= recorded.read
  for schedule in ("inverse_sqrt", "constant", "linear", "cosine"):
    recorded = Recording(dataclasses.replace(cfg.train, lr_schedule=schedule, max_steps=50))
    jax.eval_shape(learning_rate_schedule(recorded), jnp.int32(3))
    decays_to_max_steps = {"max_steps"} if schedule in DECAYS_TO_ZERO else set()
    assert recorded.read <= set(STEP_FIELDS) | decays_to_max_steps, (schedule, recorded.read)


@pytest.mark.slow
def test_packed_batch_has_the_loss_of_its_pairs_alone():
  # The training step's loss on a packed batch equals the loss of the same pairs each
  # in its own padded row (dropout off, so both are deterministic).
  cfg = tiny_config(SAMPLE)
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dropout=0.0),
                            data=dataclasses.replace(cfg.data, pack_length=48))
  ds = data_source.load_split(cfg.data, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), vocab_size=400)
  encoded = corpus.encode_dataset(tok, ds)
  batches = input_pipeline.TrainBatches(encoded, cfg.data)
  rows = batches.epoch_batches(0)[0]
  packed = batches.make_batch(rows)
  assert max(len(r) for r in rows) > 1  # rows really hold several pairs
  model = Model(cfg.model)
  params = model.init(jax.random.PRNGKey(0), packed.src[:1], packed.tgt[:1])
  logits = model.apply(params, packed.src, shift_right(packed.tgt, packed.tgt_segments),
                       src_segments_BS=packed.src_segments, tgt_segments_BT=packed.tgt_segments)
  got = loss_sums(logits, packed.tgt, 0.1)
  pairs = [i for r in rows for i in r]
  alone = input_pipeline.pad_batch([encoded.src[i] for i in pairs], [encoded.tgt[i] for i in pairs],
                                   len(pairs), 48, 48)
  want = loss_sums(model.apply(params, alone.src, shift_right(alone.tgt)), alone.tgt, 0.1)
  assert float(got["tokens"]) == float(want["tokens"])
  np.testing.assert_allclose(float(got["loss"]), float(want["loss"]), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("accum,pack", [(1, 0), (2, 0), (1, 48)])
def test_compiled_ahead_shapes_need_no_compilation_in_the_loop(accum, pack, untraced):
  # After `compile_ahead` on the templates of an epoch's shapes, the updates on that
  # epoch's real batches (one of each bucket's shape) neither trace, lower nor compile.
  cfg = tiny_config(SAMPLE, grad_accum_steps=accum)
  cfg = dataclasses.replace(cfg, data=dataclasses.replace(
      cfg.data, pack_length=pack, max_tokens=256, bucket_boundaries=(20, 32, 48)))
  ds = data_source.load_split(cfg.data, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), vocab_size=400)
  batches = input_pipeline.TrainBatches(corpus.encode_dataset(tok, ds), cfg.data)
  templates = batches.templates()
  real = [batches.make_batch(b) for b in batches.epoch_batches(0)]
  assert {b.shape for b in real} == {t.shape for t in templates}
  assert len(templates) == 1 if pack else len(templates) > 2
  assert all((t.src == 0).all() and (t.tgt == 0).all() for t in templates)
  steps = DataParallelSteps(cfg, Model(cfg.model))
  state = steps.init_state()
  events = []
  record = lambda name, seconds, **kw: events.append(name)
  jax.monitoring.register_event_duration_secs_listener(record)
  try:
    assert compile_ahead(steps.lower_updates(state, templates, accum), workers=2) > 0
    traced = events.count("/jax/core/compile/jaxpr_trace_duration")
    assert traced >= len(templates) + 2 * (accum > 1)  # the control: tracing is seen
    events.clear()
    for batch in {b.shape: b for b in real}.values():
      state, m = steps.update(state, [batch] * accum)
      assert np.isfinite(float(m["loss"]))
  finally:
    jax.monitoring.unregister_event_duration_listener(record)
  compiling = [e for e in events if e.startswith("/jax/core/compile/")]
  assert not compiling, compiling
