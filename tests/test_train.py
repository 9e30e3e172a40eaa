"""Training: smoke run, overfit, accumulation, two devices, the loss and its chunked form,
schedules, moving average, checkpoint averaging, packed rows, TensorBoard. Stopping and
resuming are in test_resume.py."""

import dataclasses
import json
import shutil
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seq2seq import checkpoint, input_pipeline, layers, metrics, tokenizer, train_lib
from seq2seq.config import PRESETS, Config, TrainConfig
from seq2seq.input_pipeline import Batch, read_lines
from seq2seq.loss import SUM_KEYS, output_loss_sums, rdrop_loss_sums
from seq2seq.model import Model, shift_right
from seq2seq.train_lib import Steps, learning_rate_schedule, loss_sums, train
from seq2seq.translator import Translator

from conftest import run_cli
from helpers import SAMPLE, tiny_config, write_corpus


def test_smoke_run_writes_a_loadable_checkpoint_and_metrics(trained_run):
  records = metrics.read(trained_run)
  train_losses = [r["loss"] for r in records if r["kind"] == "train"]
  val = [r for r in records if r["kind"] == "val"]
  assert len(train_losses) == 300 // 25 and train_losses[-1] < 0.5 * train_losses[0]
  assert [r["step"] for r in val] == [150, 300]
  # The best validation BLEU is that of the "best" checkpoint decoding val greedily.
  best = Translator.load(trained_run, "best")
  val_src, val_ref = read_lines(SAMPLE / "val.en"), read_lines(SAMPLE / "val.de")
  assert max(r["bleu"] for r in val) == pytest.approx(
      train_lib.bleu(best.translate(val_src, beam_size=1), val_ref), abs=1e-9)
  for name in ("config.json", "spm.model", "metrics.jsonl", "train.log", "curves.png"):
    assert (trained_run / name).exists(), name
  cfg = checkpoint.load_config(trained_run)
  assert cfg.train.max_steps == 300  # the command-line override reached the run
  for name in ("best", "latest"):
    params, meta = checkpoint.load_params(trained_run, name, cfg.model)
    assert meta["step"] in (150, 300)
  assert "Best validation BLEU" in (trained_run / "train.log").read_text()


@pytest.mark.parametrize("matmul_dtype", ["float32", "bfloat16"])
def test_overfits_a_handful_of_pairs(tmp_path, matmul_dtype):
  src = read_lines(SAMPLE / "train.en")[:6]
  tgt = read_lines(SAMPLE / "train.de")[:6]
  write_corpus(tmp_path / "data", "train", src, tgt)
  write_corpus(tmp_path / "data", "val", src, tgt)
  base = tiny_config(tmp_path / "data", max_steps=250, warmup_steps=30, learning_rate=3e-3,
                      label_smoothing=0.0, checkpoint_every=1000, log_every=50,
                      eval_every=250)
  cfg = dataclasses.replace(base, model=dataclasses.replace(base.model, dropout=0.0,
                                                            matmul_dtype=matmul_dtype),
                            data=dataclasses.replace(base.data, max_tokens=256))
  # Six sentences cannot train a 400-piece vocabulary (byte fallback alone needs 260):
  # store one trained on the whole sample, registered for this corpus, as a user could.
  sample = read_lines(SAMPLE / "train.en") + read_lines(SAMPLE / "train.de")
  corpus = input_pipeline.corpus_id(cfg.data, "train", cfg.model.vocab_size)
  tokenizer.load_or_train(tmp_path / "run", corpus, lambda: sample, 400, "unigram", 10**6)
  summary = train(cfg, tmp_path / "run")
  last = [r for r in metrics.read(tmp_path / "run") if r["kind"] == "train"][-1]
  assert last["loss"] < 0.05, last
  assert Translator.load(tmp_path / "run", "latest").translate(src) == tgt
  assert summary["best_bleu"] == pytest.approx(100.0)


@pytest.mark.parametrize("optimizer", ["adam", "schedule_free"])
def test_accumulated_update_equals_one_batch_of_all_rows(optimizer):
  # Two micro-batches of one update give the parameters of one batch holding both
  # (dropout off; the loss is token-weighted over the whole update), also where the
  # gradient is taken away from the parameters (schedule-free).
  # Adam's eps is raised from 1e-9: with it, a near-zero gradient (1e-9 against 2e-9 from
  # float rounding) still gives a full-size update, which would compare rounding noise.
  base = tiny_config(SAMPLE, eps=1e-3, optimizer=optimizer)
  cfg = dataclasses.replace(base, model=dataclasses.replace(base.model, dropout=0.0))
  rng = np.random.default_rng(0)
  src = rng.integers(4, 400, (8, 12)).astype(np.int32)
  tgt = rng.integers(4, 400, (8, 10)).astype(np.int32)
  src[::3, 7:] = 0
  tgt[1:4, 4:] = 0  # 22 target tokens in the first micro-batch, 40 in the second
  whole = Steps(cfg, Model(cfg.model))
  accum_cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, grad_accum_steps=2))
  split = Steps(accum_cfg, Model(cfg.model))
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


@pytest.mark.parametrize("rows,parts", [(8, 2), (7, 3), (2, 4)])
def test_batch_in_parts_gives_the_update_of_the_whole_batch(rows, parts):
  # train.batch_parts: the parts' gradients, added up in one program, are the whole
  # batch's (dropout off), also for rows that do not divide evenly and for fewer rows
  # than parts (each row then a part of its own).
  base = tiny_config(SAMPLE, eps=1e-3)
  cfg = dataclasses.replace(base, model=dataclasses.replace(base.model, dropout=0.0))
  rng = np.random.default_rng(3)
  src = rng.integers(4, 400, (rows, 12)).astype(np.int32)
  tgt = rng.integers(4, 400, (rows, 10)).astype(np.int32)
  src[::3, 7:] = 0
  tgt[1::2, 4:] = 0
  parted_cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, batch_parts=parts))
  whole, parted = Steps(cfg, Model(cfg.model)), Steps(parted_cfg, Model(cfg.model))
  a, b = whole.init_state(), parted.init_state()
  for _ in range(3):
    a, ma = whole.update(a, [Batch(src, tgt)])
    b, mb = parted.update(b, [Batch(src, tgt)])
  assert float(ma["tokens"]) == float(mb["tokens"]) == float((tgt > 0).sum())
  np.testing.assert_allclose(float(ma["loss"]), float(mb["loss"]), rtol=1e-5)
  for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
    np.testing.assert_allclose(x, y, atol=2e-6, rtol=1e-4)
  assert len(train_lib.batch_parts(Batch(src, tgt), parts, 1)) == min(rows, parts)
  with pytest.raises(ValueError, match="batch_parts=0: expected a number of parts >= 1"):
    TrainConfig(batch_parts=0)


def test_batch_parts_keep_each_devices_rows():
  """With the rows split over 2 devices, every part takes its rows from both devices'
  halves of the batch, so no row changes device."""
  x = np.arange(8)[:, None] * np.ones((1, 3), np.int32)
  got = [p.src[:, 0].tolist() for p in train_lib.batch_parts(Batch(x, x), 2, 2)]
  assert got == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_dropout_ramp_starts_without_dropout_and_reaches_the_configured_rate():
  """train.dropout_ramp_steps=4: update 0 is the dropout-free model's update, update 2 is
  neither, and from update 4 on it is the unramped model's, from the same state."""
  base = tiny_config(SAMPLE)
  with_rate = lambda rate, ramp: dataclasses.replace(
      base, model=dataclasses.replace(base.model, dropout=rate),
      train=dataclasses.replace(base.train, dropout_ramp_steps=ramp))
  ramped, plain, none = (Steps(c, Model(c.model)) for c in (
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
  assert [float(ramped.dropout_scale(s)) for s in (0, 1, 2, 4, 100)] == [0.0, 0.25, 0.5, 1, 1]
  assert plain.dropout_scale(3) is None
  with pytest.raises(ValueError, match="dropout_ramp_steps=-1: expected a number"):
    TrainConfig(dropout_ramp_steps=-1)


def test_two_devices_match_one(tmp_path):
  script = textwrap.dedent("""
    import dataclasses, json
    import jax, numpy as np
    from seq2seq.config import PRESETS, Config, DataConfig
    from seq2seq.model import Model
    from seq2seq.input_pipeline import Batch
    from seq2seq.train_lib import Steps
    assert len(jax.devices()) == 2
    cfg = Config(model=PRESETS["tiny"])
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
  env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu",
         "PATH": "/usr/bin:/bin"}
  proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result["diff"] < 1e-5, result
  assert result["loss1"] == pytest.approx(result["loss2"], rel=1e-5)


def test_label_smoothed_loss_matches_the_one_hot_definition():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 7)).astype(np.float32)
  labels = np.array([[4, 5, 0], [6, 0, 0]])
  sums = loss_sums(logits, labels, 0.1)
  logp = jax.nn.log_softmax(logits)
  target = 0.9 * np.eye(7)[labels] + 0.1 / 7
  per_token = -(target * logp).sum(-1)
  mask = labels != 0
  np.testing.assert_allclose(sums["loss"], per_token[mask].sum(), rtol=1e-5)
  assert sums["tokens"] == 3


def test_loss_counts_a_token_correct_when_its_label_is_the_argmax():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(2, 4, 7)).astype(np.float32)
  top = logits.argmax(-1)
  labels = np.array([[top[0, 0], (top[0, 1] + 1) % 7, top[0, 2], 0],
                     [(top[1, 0] + 3) % 7, top[1, 1], 0, 0]])
  labels = np.where(np.arange(4) < [[3], [2]], np.maximum(labels, 1), 0)  # ids 1..6 real
  want = ((top == labels) & (labels != 0)).sum()
  assert 0 < want < 5
  for sums in (loss_sums(logits, labels, 0.1), jax.jit(loss_sums, static_argnums=2)(
      logits, labels, 0.1)):
    assert float(sums["correct"]) == want


def test_rdrop_loss_adds_the_symmetric_kl_of_the_two_passes():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(4, 3, 7)).astype(np.float32)  # passes 1 and 2 of 2 rows
  labels = np.array([[4, 5, 0], [6, 0, 0]])
  sums = rdrop_loss_sums(logits, labels, 0.1, alpha=5.0)
  one, two = loss_sums(logits[:2], labels, 0.1), loss_sums(logits[2:], labels, 0.1)
  p, q = jax.nn.softmax(logits[:2]), jax.nn.softmax(logits[2:])
  kl = lambda a, b: (a * (np.log(a) - np.log(b))).sum(-1)
  mask = labels != 0
  symmetric = (kl(p, q) + kl(q, p))[mask].sum()
  assert symmetric > 0.1
  np.testing.assert_allclose(sums["loss"], (one["loss"] + two["loss"]) / 2 + 2.5 * symmetric,
                             rtol=1e-5)
  np.testing.assert_allclose(sums["nll"], (one["nll"] + two["nll"]) / 2, rtol=1e-6)
  assert sums["tokens"] == 3
  # two equal passes: no divergence, the loss of one
  same = rdrop_loss_sums(np.concatenate([logits[:2]] * 2), labels, 0.1, alpha=5.0)
  for k in SUM_KEYS:
    np.testing.assert_allclose(same[k], one[k], rtol=1e-6)


@pytest.mark.parametrize("pack", [False, True])
def test_rdrop_update_is_the_plain_update_without_dropout_and_differs_with_it(pack):
  """Without dropout both passes are the same model: the update equals the plain one
  (also with packed rows, whose segments are doubled with the rows). With dropout the
  two passes' masks differ, so the divergence term adds to the loss."""
  base = tiny_config(SAMPLE, eps=1e-3)
  def steps(dropout, alpha):
    cfg = dataclasses.replace(base, model=dataclasses.replace(base.model, dropout=dropout),
                              train=dataclasses.replace(base.train, rdrop_alpha=alpha))
    return Steps(cfg, Model(cfg.model))
  rng = np.random.default_rng(2)
  src = rng.integers(4, 400, (4, 12)).astype(np.int32)
  tgt = rng.integers(4, 400, (4, 10)).astype(np.int32)
  tgt[1:3, 6:] = 0
  segments = lambda x: np.where(x > 0, 1 + (np.arange(x.shape[1]) >= 5), 0).astype(np.int32)
  batch = (Batch(src, tgt, segments(src), segments(tgt)) if pack else Batch(src, tgt))
  def run(s):
    state, m = s.update(s.init_state(), [batch])
    return jax.tree_util.tree_leaves(state.params), m
  (plain, mp), (rdrop, mr) = run(steps(0.0, 0.0)), run(steps(0.0, 5.0))
  assert float(mr["tokens"]) == float(mp["tokens"]) == float((tgt > 0).sum())
  np.testing.assert_allclose(float(mr["loss"]), float(mp["loss"]), rtol=1e-5)
  for x, y in zip(plain, rdrop):
    np.testing.assert_allclose(x, y, atol=2e-6, rtol=1e-4)
  _, m_drop = run(steps(0.3, 0.0))
  _, m_rdrop = run(steps(0.3, 5.0))
  assert float(m_rdrop["loss"]) > float(m_drop["loss"]) + 0.01 * float(mp["tokens"])
  with pytest.raises(ValueError, match="rdrop_alpha=-1.0: expected a weight >= 0"):
    TrainConfig(rdrop_alpha=-1.0)


@pytest.mark.parametrize("tied,dtype,matmul_dtype", [
    (True, "float32", "float32"), (False, "float32", "float32"),
    (True, "bfloat16", "float32"), (True, "float32", "bfloat16")])
def test_chunked_output_loss_equals_the_full_logits(tied, dtype, matmul_dtype):
  """Loss sums and gradients (of every parameter) of `output_loss_sums`, in chunks that
  do not divide the tokens, equal those of `loss_sums` on the full logits."""
  cfg = dataclasses.replace(PRESETS["tiny"], tied_embeddings=tied, dtype=dtype,
                            matmul_dtype=matmul_dtype)
  model = Model(cfg)
  rng = np.random.default_rng(0)
  src = jnp.asarray(rng.integers(4, cfg.vocab_size, (3, 9)))
  tgt = jnp.asarray(rng.integers(4, cfg.vocab_size, (3, 7))).at[1, 4:].set(0)
  params = model.init(jax.random.PRNGKey(0), src, shift_right(tgt))
  key = jax.random.PRNGKey(1)

  def full(p):
    logits = model.apply(p, src, shift_right(tgt), rng=key, is_training=True)
    sums = loss_sums(logits, tgt, 0.1)
    return sums["loss"] + 0.5 * sums["nll"], sums

  def chunked(p):
    x, w, b = model.apply_features(p, src, shift_right(tgt), rng=key, is_training=True)
    sums = output_loss_sums(x, w, b, tgt, 0.1, chunk=4)  # 21 tokens: 6 chunks, 3 padded
    return sums["loss"] + 0.5 * sums["nll"], sums

  (_, want), grads_want = jax.value_and_grad(full, has_aux=True)(params)
  with layers.matmul_operands(matmul_dtype):  # as Steps traces it
    (_, got), grads_got = jax.jit(jax.value_and_grad(chunked, has_aux=True))(params)
  low_precision = "bfloat16" in (dtype, matmul_dtype)
  tol = 3e-2 if low_precision else 1e-4
  for k in SUM_KEYS:
    np.testing.assert_allclose(got[k], want[k], rtol=tol)
  assert got["tokens"] == 18
  with pytest.raises(ValueError, match="train.loss_chunk must be >= 0"):
    Steps(Config(model=cfg, train=TrainConfig(loss_chunk=-1)), model)
  if low_precision:
    return  # bfloat16 gradients of both forms differ by their own rounding: sums only
  # each parameter's gradient, to float rounding relative to its largest element (or to
  # 1 % of the largest of all: the key biases' true gradient is 0, theirs is rounding)
  scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree_util.tree_leaves(grads_want))
  errors = jax.tree_util.tree_map(
      lambda a, b: float(jnp.max(jnp.abs(a - b)) / max(float(jnp.max(jnp.abs(b))), scale / 100)),
      grads_got, grads_want)
  assert max(jax.tree_util.tree_leaves(errors)) < tol, errors


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
    learning_rate_schedule(TrainConfig(lr_schedule="step"))
  with pytest.raises(ValueError, match="must come after the 100 warmup steps"):
    learning_rate_schedule(TrainConfig(warmup_steps=100, lr_schedule="linear", decay_steps=50))


def test_cooldown_scales_the_learning_rate_of_the_update():
  """With train.cooldown the optimizer takes the host's factor: factor 1 gives the updates
  of the optimizer without a cooldown, factor 0.25 a quarter of them (Adam's update is
  linear in the learning rate), and the factor falls linearly from 1 to 0 over the window."""
  cfg = TrainConfig(learning_rate=0.1, warmup_steps=1, cooldown=0.2)
  cooled = train_lib.make_optimizer(cfg)
  plain = train_lib.make_optimizer(dataclasses.replace(cfg, cooldown=0.0))
  params = {"w": jnp.array([1.0, -2.0, 3.0])}
  grads = {"w": jnp.array([0.5, 1.0, -1.5])}
  want, _ = plain.update(grads, plain.init(params), params)
  for scale in (1.0, 0.25):
    got, _ = cooled.update(grads, cooled.init(params), params, lr_scale=scale)
    np.testing.assert_allclose(got["w"], scale * want["w"], rtol=1e-6)
  assert [train_lib.cooldown_scale(s, 60, 100) for s in (0, 59, 60, 80, 99, 100, 120)] == [
      1.0, 1.0, 1.0, 0.5, 1 / 40, 0.0, 0.0]
  assert train_lib.cooldown_scale(500, 0, 0) == 1.0  # no window: no cooldown
  with pytest.raises(ValueError, match="train.cooldown=1.0: expected a fraction"):
    TrainConfig(cooldown=1.0)


def test_time_limited_cooldown_ends_at_the_step_the_clock_predicts(tmp_path, monkeypatch):
  """max_minutes 1 and cooldown 0.25 on a clock where every update takes a second: the
  cooldown starts at 45 s (step 45), is planned to end at step 60 (15 s more at 1 update/s),
  the learning rate falls linearly to 0 over it, and the run stops there."""
  monkeypatch.setattr(train_lib.Trainer, "elapsed", lambda self: float(self.progress.step))
  cfg = tiny_config(SAMPLE, max_steps=1000, max_minutes=1.0, cooldown=0.25, log_every=1,
                    warmup_steps=5, checkpoint_every=1000)
  summary = train(cfg, tmp_path / "run")
  assert summary["step"] == 60 and "cooldown ended at step 60" in summary["stop_reason"]
  lr = {r["step"]: r["lr"] for r in metrics.read(tmp_path / "run") if r["kind"] == "train"}
  sched = learning_rate_schedule(cfg.train)
  for step in (10, 45, 50, 60):  # record of update `step` = schedule(step - 1) x factor
    factor = min(1.0, (60 - (step - 1)) / 15)
    assert lr[step] == pytest.approx(float(sched(step - 1)) * factor, rel=1e-5), step
  meta = checkpoint.load_params(tmp_path / "run", "latest", cfg.model)[1]
  assert (meta["cooldown_start"], meta["cooldown_end"]) == (45, 60)


def test_moving_average_of_the_parameters_after_each_update():
  """ema_k = d * ema_(k-1) + (1 - d) * params_k from ema_0 = the initial parameters; the
  updates themselves are those of the optimizer without it."""
  cfg = TrainConfig(learning_rate=0.1, warmup_steps=1, clip_norm=0.0, ema_decay=0.75)
  with_ema = train_lib.make_optimizer(cfg)
  without = train_lib.make_optimizer(dataclasses.replace(cfg, ema_decay=0.0))
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
    np.testing.assert_allclose(train_lib.ema_params(state)["w"], expected, rtol=1e-6)
  assert train_lib.ema_params(plain_state) is None
  with pytest.raises(ValueError, match="train.ema_decay must be between 0 and 1"):
    train_lib.make_optimizer(dataclasses.replace(cfg, ema_decay=1.0))


def test_schedule_free_keeps_the_evaluation_average_as_the_parameters():
  """train.optimizer=schedule_free follows optax.contrib.schedule_free around AdamW
  without momentum, with the same warmup and weight decay: its parameters are optax's
  evaluation parameters (x), its gradient point is optax's parameters (y)."""
  cfg = TrainConfig(optimizer="schedule_free", learning_rate=0.05, warmup_steps=3,
                    lr_schedule="constant", clip_norm=0.0, weight_decay=0.1, b1=0.9)
  ours = train_lib.make_optimizer(cfg)
  schedule = learning_rate_schedule(cfg)
  # optax weighs update t (from 0) by the schedule at t + 1; ours, as the authors' code,
  # by the rate the update itself takes, the schedule at t.
  ref = optax.contrib.schedule_free(
      optax.adamw(schedule, b1=0.0, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay),
      lambda t: schedule(t - 1), b1=cfg.b1)
  target = jnp.array([0.5, -1.0, 2.0, 0.0])
  grad = lambda p: {"w": 2.0 * (p["w"] - target) * jnp.array([1.0, 3.0, 0.5, 2.0])}
  x = y = {"w": jnp.array([1.0, -2.0, 3.0, 1.0])}
  state, ref_state = ours.init(x), ref.init(y)
  np.testing.assert_allclose(train_lib.gradient_point(state, x, cfg.b1)["w"], y["w"], rtol=1e-6)
  for _ in range(8):
    updates, state = ours.update(grad(train_lib.gradient_point(state, x, cfg.b1)), state, x)
    x = optax.apply_updates(x, updates)
    ref_updates, ref_state = ref.update(grad(y), ref_state, y)
    y = optax.apply_updates(y, ref_updates)
    np.testing.assert_allclose(x["w"], optax.contrib.schedule_free_eval_params(ref_state, y)["w"],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(train_lib.gradient_point(state, x, cfg.b1)["w"], y["w"],
                               rtol=1e-5, atol=1e-6)
  assert float(jnp.abs(x["w"] - target).max()) < 1.0  # it did move toward the minimum
  # Without a schedule-free state the gradient is taken at the parameters.
  plain = train_lib.make_optimizer(dataclasses.replace(cfg, optimizer="adam"))
  assert train_lib.gradient_point(plain.init(x), x, cfg.b1) is x
  with pytest.raises(ValueError, match="set train.cooldown=0"):
    train_lib.make_optimizer(dataclasses.replace(cfg, cooldown=0.2))


def test_muon_orthogonalises_dense_weights_and_leaves_the_rest_to_adam():
  """train.optimizer=muon on the model's own parameters: each dense weight matrix's update
  is its (momentum's) gradient orthogonalised, its singular values close together, with
  root mean square muon_rms x learning rate; embeddings, biases and layer norms get
  exactly the update of Adam(W) with the same settings."""
  cfg = TrainConfig(optimizer="muon", learning_rate=0.01, warmup_steps=1, clip_norm=0.0)
  model_cfg = dataclasses.replace(PRESETS["tiny"], vocab_size=50, max_len=16)
  params = Model(model_cfg).init(jax.random.PRNGKey(0), jnp.ones((2, 5), jnp.int32),
                                 jnp.ones((2, 4), jnp.int32))
  leaves, treedef = jax.tree_util.tree_flatten(params)
  keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
  # Columns of uneven scale (condition ~10), which plain scaling would not orthogonalise.
  grads = jax.tree_util.tree_unflatten(treedef, [
      jax.random.normal(k, x.shape) * jnp.broadcast_to(jnp.linspace(0.3, 3.0, x.shape[-1]),
                                                       x.shape) for k, x in zip(keys, leaves)])
  muon = train_lib.make_optimizer(cfg)
  adam = train_lib.make_optimizer(dataclasses.replace(cfg, optimizer="adamw"))
  got, _ = muon.update(grads, muon.init(params), params)
  want, _ = adam.update(grads, adam.init(params), params)
  dense = 0
  for module, names in params.items():
    for name in names:
      u = np.asarray(got[module][name])
      if name == "w":
        dense += 1
        # Five Newton-Schulz iterations leave the smallest few singular values behind.
        spread = lambda m: np.quantile(np.linalg.svd(m, compute_uv=False), [0.1, 1.0])
        low, high = spread(u)
        assert low / high > 0.5, (module, low, high)
        low, high = spread(np.asarray(grads[module][name]))
        assert low / high < 0.3  # the gradient's were far apart
        assert np.sqrt(np.mean(u ** 2)) == pytest.approx(cfg.muon_rms * 0.01, rel=0.25)
      else:
        np.testing.assert_array_equal(u, want[module][name], err_msg=f"{module}/{name}")
  assert dense >= 8  # the attention projections and feed-forward layers of both stacks
  with pytest.raises(ValueError, match="'adam', 'adamw', 'muon' or 'schedule_free', got 'sgd'"):
    train_lib.make_optimizer(dataclasses.replace(cfg, optimizer="sgd"))


def test_average_checkpoints(trained_run, tmp_path):
  # On a copy: the shared run stays as trained (other tests expect no 'averaged' in it).
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  cfg = checkpoint.load_config(run)
  # --upto: what the run would have averaged had it stopped at that step
  run_cli("-m", "seq2seq.average", "--workdir", run, "--last", "2", "--upto", "250")
  assert checkpoint.load_params(run, "averaged", cfg.model)[1]["averaged_steps"] == [
      100, 200]
  early = run_cli("-m", "seq2seq.average", "--workdir", run, "--upto", "50", check=False)
  assert early.returncode != 0 and b"at or before step 50" in early.stderr
  run_cli("-m", "seq2seq.average", "--workdir", run, "--last", "2")
  averaged, meta = checkpoint.load_params(run, "averaged", cfg.model)
  steps = meta["averaged_steps"]
  assert steps == [200, 300]
  a, _ = checkpoint.load_params(run, str(run / "checkpoints/latest/200"), cfg.model)
  b, _ = checkpoint.load_params(run, str(run / "checkpoints/latest/300"), cfg.model)
  for x, y, z in zip(*(jax.tree_util.tree_leaves(t) for t in (averaged, a, b))):
    np.testing.assert_allclose(x, (y + z) / 2, rtol=1e-6)
  assert Translator.load(run, "averaged").translate(["A dog is running."])[0]


def test_packed_batch_has_the_loss_of_its_pairs_alone():
  # The training step's loss on a packed batch equals the loss of the same pairs each
  # in its own padded row (dropout off, so both are deterministic).
  from seq2seq.model import Model, shift_right
  cfg = tiny_config(SAMPLE)
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dropout=0.0),
                            data=dataclasses.replace(cfg.data, pack_length=48))
  ds = input_pipeline.load_split(cfg.data, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), vocab_size=400)
  corpus = input_pipeline.encode_dataset(tok, ds)
  batches = input_pipeline.TrainBatches(corpus, cfg.data)
  rows = batches.epoch_batches(0)[0]
  packed = batches.make_batch(rows)
  assert max(len(r) for r in rows) > 1  # rows really hold several pairs
  model = Model(cfg.model)
  params = model.init(jax.random.PRNGKey(0), packed.src[:1], packed.tgt[:1])
  logits = model.apply(params, packed.src, shift_right(packed.tgt, packed.tgt_segments),
                       src_segments_BS=packed.src_segments, tgt_segments_BT=packed.tgt_segments)
  got = loss_sums(logits, packed.tgt, 0.1)
  pairs = [i for r in rows for i in r]
  alone = input_pipeline.pad_batch([corpus.src[i] for i in pairs], [corpus.tgt[i] for i in pairs],
                                   len(pairs), 48, 48)
  want = loss_sums(model.apply(params, alone.src, shift_right(alone.tgt)), alone.tgt, 0.1)
  assert float(got["tokens"]) == float(want["tokens"])
  np.testing.assert_allclose(float(got["loss"]), float(want["loss"]), rtol=1e-5)


@pytest.mark.parametrize("accum,pack,optimizer", [(1, 0, "adam"), (2, 0, "adam"),
                                                  (1, 48, "adam"), (2, 0, "schedule_free")])
def test_compiled_ahead_shapes_need_no_compilation_in_the_loop(accum, pack, optimizer):
  # After `compile_ahead` on the templates of an epoch's shapes, the updates on that
  # epoch's real batches (one of each bucket's shape) neither trace, lower nor compile
  # (with micro-batches under schedule-free: nor its gradient point's program).
  cfg = tiny_config(SAMPLE, grad_accum_steps=accum, optimizer=optimizer)
  cfg = dataclasses.replace(cfg, data=dataclasses.replace(
      cfg.data, pack_length=pack, max_tokens=256, bucket_boundaries=(12, 16, 20, 24, 32, 48)))
  ds = input_pipeline.load_split(cfg.data, "train")
  tok = tokenizer.train(list(ds["src"]) + list(ds["tgt"]), vocab_size=400)
  batches = input_pipeline.TrainBatches(input_pipeline.encode_dataset(tok, ds), cfg.data)
  templates = batches.templates()
  real = [batches.make_batch(b) for b in batches.epoch_batches(0)]
  assert {b.shape for b in real} == {t.shape for t in templates}
  assert len(templates) == 1 if pack else len(templates) > 2
  assert all((t.src == 0).all() and (t.tgt == 0).all() for t in templates)
  steps = Steps(cfg, Model(cfg.model))
  state = steps.init_state()
  events = []
  record = lambda name, seconds, **kw: events.append(name)
  jax.monitoring.register_event_duration_secs_listener(record)
  try:
    assert steps.compile_ahead(state, templates, accum, workers=2) > 0
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


def test_validation_compiled_ahead_needs_no_compilation(tmp_path):
  # The trainer compiles its validation's programs (loss and greedy search, one per
  # batch shape) with the update's, for the initial parameters; a validation after an
  # update, with the parameters the loop made, then traces, lowers and compiles nothing.
  cfg = tiny_config(SAMPLE, eval_max_sentences=0)  # all 100 sentences: several shapes
  trainer = train_lib.Trainer(cfg, tmp_path / "run")
  events = []
  record = lambda name, seconds, **kw: events.append(name)
  jax.monitoring.register_event_duration_secs_listener(record)
  try:
    programs = list(trainer.lower_validation())
    assert len(programs) >= 4, len(programs)
    # The control: lowering them traced each one.
    assert events.count("/jax/core/compile/jaxpr_trace_duration") >= len(programs)
    assert trainer.steps.compile_ahead(trainer.state, [], also=programs) > 0
    batches = input_pipeline.TrainBatches(trainer.train_corpus, cfg.data)
    batch = batches.make_batch(batches.epoch_batches(0)[0])
    trainer.state, _ = trainer.steps.update(trainer.state, [batch])
    events.clear()
    scores = train_lib.evaluate_loss(trainer.steps, trainer.state.params, trainer.val_corpus,
                                     trainer.eval_lengths)
    hyps = trainer.translate_validation(trainer.state.params)
  finally:
    jax.monitoring.unregister_event_duration_listener(record)
  assert np.isfinite(scores["loss"]) and len(hyps) == 100
  compiling = [e for e in events if e.startswith("/jax/core/compile/")]
  assert not compiling, compiling


def test_tensorboard_event_files_hold_the_metrics_and_translations(tmp_path):
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
  cfg = tiny_config(SAMPLE, max_steps=20, log_every=5, eval_every=10, tensorboard=True,
                    tensorboard_examples=2)
  train(cfg, tmp_path / "run")
  events = EventAccumulator(str(tmp_path / "run" / metrics.TENSORBOARD_DIR),
                            size_guidance={"tensors": 0, "scalars": 0})
  events.Reload()
  rows = metrics.read(tmp_path / "run")
  for kind, name in [("train", "loss"), ("train", "lr"), ("train", "grad_norm"),
                     ("train", "tgt_tokens_per_s"), ("val", "loss"), ("val", "bleu")]:
    logged = [(r["step"], r[name]) for r in rows if r["kind"] == kind]
    scalars = [(e.step, e.value) for e in events.Scalars(f"{kind}/{name}")]
    assert [s for s, _ in scalars] == [s for s, _ in logged], (kind, name)
    np.testing.assert_allclose([v for _, v in scalars], [v for _, v in logged], rtol=1e-6)
  (tag,) = [t for t in events.Tags()["tensors"] if t.startswith("val/translations")]
  texts = [e.tensor_proto.string_val[0].decode() for e in events.Tensors(tag)]
  assert [e.step for e in events.Tensors(tag)] == [10, 20]
  assert texts[-1].count("**source**") == 2 and "**reference**" in texts[-1]
