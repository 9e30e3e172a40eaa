"""Training: optimizer and schedule, loss, jitted train/eval steps, and the loop.

The loop is resumable exactly: parameters, optimizer state, step, data position and
best validation BLEU are checkpointed, and dropout keys are `fold_in(key, step)`, so an
interrupted run that is restarted makes the same updates as one that was not.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import sacrebleu
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from seq2seq import checkpoint, input_pipeline, metrics, tokenizer
from seq2seq.config import Config, TrainConfig
from seq2seq.model import Model, shift_right
from seq2seq.tokenizer import PAD_ID
from seq2seq.translator import Translator

log = logging.getLogger("seq2seq.train")


class TrainState(NamedTuple):
  step: jnp.ndarray  # [] int32: optimizer updates done (micro-steps with accumulation)
  params: Any
  opt_state: Any


# ------------------------------------------------------------------- optimisation


def learning_rate_schedule(cfg: TrainConfig) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then decay with 1/sqrt(step) (Vaswani et al.)."""
  warmup = max(cfg.warmup_steps, 1)

  def schedule(count):
    step = count + 1.0
    return cfg.learning_rate * jnp.minimum(step / warmup, jnp.sqrt(warmup / step))

  return schedule


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
  schedule = learning_rate_schedule(cfg)
  if cfg.optimizer == "adam":
    opt = optax.adam(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps)
  elif cfg.optimizer == "adamw":
    opt = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                      weight_decay=cfg.weight_decay)
  else:
    raise ValueError(f"train.optimizer must be 'adam' or 'adamw', got {cfg.optimizer!r}")
  if cfg.clip_norm > 0:
    opt = optax.chain(optax.clip_by_global_norm(cfg.clip_norm), opt)
  if cfg.grad_accum_steps > 1:
    # Averages the micro-batch gradients and applies one update every k calls.
    opt = optax.MultiSteps(opt, every_k_schedule=cfg.grad_accum_steps)
  return opt


def loss_sums(logits_BTV: jnp.ndarray, labels_BT: jnp.ndarray, smoothing: float
              ) -> dict[str, jnp.ndarray]:
  """Label-smoothed cross entropy summed over non-pad tokens, without a one-hot `[B, T, V]`.

  With smoothing e the target distribution is (1 - e) on the label plus e / V on every
  piece, so loss = -(1 - e) log p(label) - e * mean_v log p(v).
  """
  logits_BTV = logits_BTV.astype(jnp.float32)
  lse_BT = jax.nn.logsumexp(logits_BTV, axis=-1)
  label_logit_BT = jnp.take_along_axis(logits_BTV, labels_BT[..., None], axis=-1)[..., 0]
  nll_BT = lse_BT - label_logit_BT
  smooth_BT = lse_BT - jnp.mean(logits_BTV, axis=-1)
  loss_BT = (1.0 - smoothing) * nll_BT + smoothing * smooth_BT
  weight_BT = (labels_BT != PAD_ID).astype(jnp.float32)
  correct_BT = (jnp.argmax(logits_BTV, axis=-1) == labels_BT).astype(jnp.float32)
  return {"loss": jnp.sum(loss_BT * weight_BT), "nll": jnp.sum(nll_BT * weight_BT),
          "tokens": jnp.sum(weight_BT), "correct": jnp.sum(correct_BT * weight_BT)}


class Steps:
  """Jitted train and eval steps, data-parallel over a 1-D "data" mesh of all devices."""

  def __init__(self, cfg: Config, model: Model, devices=None):
    self.cfg, self.model = cfg, model
    self.optimizer = make_optimizer(cfg.train)
    self.mesh = Mesh(np.array(devices or jax.devices()), ("data",))
    self.batch_sharding = NamedSharding(self.mesh, P("data"))
    self.replicated = NamedSharding(self.mesh, P())
    self.base_key = jax.random.PRNGKey(cfg.train.seed)
    self.train_step = jax.jit(self._train_step, donate_argnums=0,
                              out_shardings=(self.replicated, self.replicated))
    self.eval_step = jax.jit(self._eval_step, out_shardings=self.replicated)

  @property
  def num_devices(self) -> int:
    return self.mesh.devices.size

  def init_state(self) -> TrainState:
    dummy = jnp.ones((1, 8), jnp.int32)
    params = self.model.init(jax.random.PRNGKey(self.cfg.train.seed), dummy, dummy)
    state = TrainState(jnp.zeros((), jnp.int32), params, self.optimizer.init(params))
    return jax.device_put(state, self.replicated)

  def put_batch(self, batch: input_pipeline.Batch):
    """Host numpy batch -> device arrays with rows split across the mesh: (src, tgt),
    plus (src_segments, tgt_segments) for a packed batch."""
    arrays = (batch.src, batch.tgt)
    if batch.src_segments is not None:
      arrays += (batch.src_segments, batch.tgt_segments)
    return tuple(jax.device_put(a, self.batch_sharding) for a in arrays)

  def _train_step(self, state: TrainState, src_BS, tgt_BT, src_segments_BS=None,
                  tgt_segments_BT=None):
    rng = jax.random.fold_in(self.base_key, state.step)
    smoothing = self.cfg.train.label_smoothing

    def loss_fn(params):
      logits = self.model.apply(params, src_BS, shift_right(tgt_BT, tgt_segments_BT),
                                rng=rng, is_training=True, src_segments_BS=src_segments_BS,
                                tgt_segments_BT=tgt_segments_BT)
      sums = loss_sums(logits, tgt_BT, smoothing)
      return sums["loss"] / jnp.maximum(sums["tokens"], 1.0), sums

    grads, sums = jax.grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    grad_norm = optax.tree.norm(grads)
    # A non-finite loss or gradient leaves the state untouched; the host stops the run.
    ok = jnp.isfinite(sums["loss"]) & jnp.isfinite(grad_norm)
    keep = lambda new, old: jax.tree_util.tree_map(lambda n, o: jnp.where(ok, n, o), new, old)
    new_state = TrainState(state.step + 1, keep(params, state.params),
                           keep(opt_state, state.opt_state))
    metrics_ = dict(sums, grad_norm=grad_norm, finite=ok,
                    lr=learning_rate_schedule(self.cfg.train)(
                        state.step // self.cfg.train.grad_accum_steps))
    return new_state, metrics_

  def _eval_step(self, params, src_BS, tgt_BT):
    logits = self.model.apply(params, src_BS, shift_right(tgt_BT))
    return loss_sums(logits, tgt_BT, self.cfg.train.label_smoothing)


# ------------------------------------------------------------------------- data


def cache_dir(cfg: Config, workdir: Path) -> Path:
  return Path(cfg.data.cache_dir) if cfg.data.cache_dir else workdir / "cache"


def prepare_data(cfg: Config, workdir: Path):
  """Tokenizer (trained or reused) and the encoded training and validation corpora."""
  train_ds = input_pipeline.drop_empty(input_pipeline.load_split(cfg.data, cfg.data.train_split))
  corpus = input_pipeline.corpus_id(cfg.data, cfg.data.train_split)
  tok = tokenizer.load_or_train(
      workdir, corpus, lambda: list(train_ds["src"]) + list(train_ds["tgt"]),
      cfg.data.spm_vocab_size, cfg.data.spm_model_type, cfg.data.spm_max_sentences)
  if tok.vocab_size != cfg.model.vocab_size:
    raise tokenizer.TokenizerMismatchError(
        f"tokenizer has {tok.vocab_size} pieces but model.vocab_size={cfg.model.vocab_size}")
  cache = cache_dir(cfg, workdir)
  train = input_pipeline.encode_dataset(
      tok, train_ds, cache / f"{cfg.data.train_split}-{corpus}-{tok.fingerprint()}.npz")
  val_ds = input_pipeline.load_split(cfg.data, cfg.data.val_split)
  val_id = input_pipeline.corpus_id(cfg.data, cfg.data.val_split)
  val = input_pipeline.encode_dataset(
      tok, val_ds, cache / f"{cfg.data.val_split}-{val_id}-{tok.fingerprint()}.npz")
  log.info("data: %d training pairs, %d validation pairs, %d pieces",
           len(train), len(val), tok.vocab_size)
  return tok, train, val, list(val_ds["tgt"])


# ------------------------------------------------------------------------ loop


def evaluate_loss(steps: Steps, params, corpus, cfg: Config) -> dict[str, float]:
  totals: dict[str, float] = {}
  for batch in input_pipeline.eval_batches(corpus, 64, cfg.model.max_len,
                                           cfg.data.bucket_boundaries, steps.num_devices):
    sums = jax.device_get(steps.eval_step(params, *steps.put_batch(batch)))
    for k, v in sums.items():
      totals[k] = totals.get(k, 0.0) + float(v)
  n = max(totals["tokens"], 1.0)
  return {"loss": totals["loss"] / n, "nll": totals["nll"] / n, "accuracy": totals["correct"] / n}


def bleu(hypotheses: list[str], references: list[str]) -> float:
  return sacrebleu.corpus_bleu(hypotheses, [references]).score


def check_resumable(workdir: Path, cfg: Config) -> None:
  """A run directory may be resumed with other train/decode settings, never another model."""
  path = workdir / checkpoint.CONFIG_FILE
  if not path.exists():
    return
  old = checkpoint.load_config(workdir)
  for section in ("model", "data"):
    if getattr(old, section) != getattr(cfg, section):
      a, b = dataclasses.asdict(getattr(old, section)), dataclasses.asdict(getattr(cfg, section))
      diff = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
      raise checkpoint.CheckpointError(
          f"{workdir} holds a run with other {section} settings {diff} (saved, new); "
          "use a new --workdir")


def quiet_libraries() -> None:
  """Orbax and JAX log every checkpoint step and backend probe at INFO through absl."""
  from absl import logging as absl_logging
  absl_logging.set_verbosity(absl_logging.WARNING)
  for name in ("absl", "jax", "orbax", "matplotlib"):
    logging.getLogger(name).setLevel(logging.WARNING)


def enable_compilation_cache() -> None:
  """Persists compiled XLA programs across processes (resumes, translate, tests).

  Each padded shape costs about 10 s of XLA compilation on this 2-core CPU; the cache
  directory is $SEQ2SEQ_XLA_CACHE or ~/.cache/seq2seq/xla ("" turns it off).
  """
  path = os.environ.get("SEQ2SEQ_XLA_CACHE", str(Path.home() / ".cache" / "seq2seq" / "xla"))
  if path:
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def setup_logging(workdir: Path) -> None:
  fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
  from absl import logging as absl_logging
  root = logging.getLogger()
  root.setLevel(logging.INFO)
  root.removeHandler(absl_logging.get_absl_handler())  # ours print the same records
  for h in list(root.handlers):
    if getattr(h, "_seq2seq", False):
      root.removeHandler(h)
  for h in (logging.StreamHandler(sys.stderr), logging.FileHandler(workdir / "train.log")):
    h.setFormatter(fmt)
    h._seq2seq = True
    root.addHandler(h)


def _fmt_time(seconds: float) -> str:
  seconds = int(seconds)
  return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def train(cfg: Config, workdir: str | os.PathLike, devices=None) -> dict[str, Any]:
  """Trains (or resumes) the run in `workdir`. Returns a summary dict."""
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  quiet_libraries()
  setup_logging(workdir)
  enable_compilation_cache()
  check_resumable(workdir, cfg)
  tok, train_corpus, val_corpus, val_refs = prepare_data(cfg, workdir)
  checkpoint.save_config(workdir, cfg)

  model = Model(cfg.model)
  steps = Steps(cfg, model, devices)
  state = steps.init_state()
  ckpt = checkpoint.Checkpointer(workdir, cfg.train.keep_checkpoints)
  meta = {"epoch": 0, "batch_index": 0, "best_bleu": -1.0, "best_step": 0,
          "evals_without_improvement": 0, "elapsed": 0.0}
  restored = ckpt.restore_latest(state.params, state.opt_state)
  if restored is not None:
    params, opt_state, meta = restored
    state = jax.device_put(TrainState(jnp.asarray(meta["step"], jnp.int32), params, opt_state),
                           steps.replicated)
    metrics.truncate_after(workdir, meta["step"])
    log.info("resumed from step %d (epoch %d, batch %d)", meta["step"], meta["epoch"],
             meta["batch_index"])
  step = int(state.step)
  micro = cfg.train.grad_accum_steps
  total_micro_steps = cfg.train.max_steps * micro
  if step >= total_micro_steps:
    log.info("already trained for %d steps (train.max_steps=%d)", step // micro,
             cfg.train.max_steps)

  batches = input_pipeline.TrainBatches(train_corpus, cfg.data, steps.num_devices)
  stream = input_pipeline.prefetch(batches.iterate(meta["epoch"], meta["batch_index"]))
  translator = Translator(cfg.model, state.params, tok, cfg.decode)
  val_src = val_corpus.src
  if cfg.train.eval_max_sentences:
    val_src = val_src[:cfg.train.eval_max_sentences]
    val_refs = val_refs[:cfg.train.eval_max_sentences]
  writer = metrics.MetricsWriter(workdir)

  def save_latest():
    ckpt.save_latest(step, state.params, state.opt_state, dict(meta, step=step))

  def validate():
    t0 = time.time()
    scores = evaluate_loss(steps, state.params, val_corpus, cfg)
    hyps = [translator._detok(h[0][0]) for h in
            translator.translate_ids(val_src, params=state.params, beam_size=1)]
    scores["bleu"] = bleu(hyps, val_refs)
    improved = scores["bleu"] > meta["best_bleu"]
    if improved:
      meta.update(best_bleu=scores["bleu"], best_step=step // micro, evals_without_improvement=0)
      ckpt.save_best(step, state.params, dict(meta, step=step, bleu=scores["bleu"]))
    else:
      meta["evals_without_improvement"] += 1
    writer.write({"kind": "val", "step": step // micro, "elapsed": elapsed(), **scores})
    log.info("validation at step %d: loss %.3f, accuracy %.3f, BLEU %.2f%s (%.1fs)",
             step // micro, scores["loss"], scores["accuracy"], scores["bleu"],
             " (new best)" if improved else "", time.time() - t0)
    metrics.plot(workdir)
    return scores

  start = time.time()
  elapsed = lambda: meta["elapsed"] + time.time() - start
  window = {"loss": 0.0, "tokens": 0.0, "correct": 0.0, "time": time.time(), "src": 0.0}
  pending = None  # metrics of the previous step, read a step late so dispatch never waits
  stop_reason = "max_steps"

  def account(m, position):
    m = jax.device_get(m)
    if not bool(m["finite"]):
      raise FloatingPointError(
          f"non-finite loss or gradient at step {position}: loss sum {float(m['loss'])}, "
          f"gradient norm {float(m['grad_norm'])}; the update was not applied and no "
          "checkpoint was written with it. Lower train.learning_rate or raise "
          "train.warmup_steps.")
    window["loss"] += float(m["loss"])
    window["tokens"] += float(m["tokens"])
    window["correct"] += float(m["correct"])
    return m

  try:
    while step < total_micro_steps:
      epoch, index, batch = next(stream)
      state, m = steps.train_step(state, *steps.put_batch(batch))
      step += 1
      if pending is not None:
        account(*pending)
      pending = (m, step)
      meta.update(epoch=epoch, batch_index=index)
      update = step // micro
      last = step >= total_micro_steps
      if step % micro == 0 and (update % cfg.train.log_every == 0 or last):
        mm = account(*pending)
        pending = None
        now = time.time()
        rate = window["tokens"] / max(now - window["time"], 1e-9)
        remaining = (total_micro_steps - step) / micro
        per_step = (now - window["time"]) / cfg.train.log_every
        eta = remaining * per_step
        if cfg.train.max_minutes:
          eta = min(eta, cfg.train.max_minutes * 60 - elapsed())
        loss = window["loss"] / max(window["tokens"], 1.0)
        writer.write({"kind": "train", "step": update, "epoch": epoch, "loss": loss,
                      "accuracy": window["correct"] / max(window["tokens"], 1.0),
                      "lr": float(mm["lr"]), "grad_norm": float(mm["grad_norm"]),
                      "tgt_tokens_per_s": rate, "elapsed": elapsed()})
        log.info("step %d epoch %d loss %.3f lr %.2e %.0f tgt tok/s elapsed %s eta %s",
                 update, epoch, loss, float(mm["lr"]), rate, _fmt_time(elapsed()),
                 _fmt_time(max(eta, 0)))
        window.update(loss=0.0, tokens=0.0, correct=0.0, time=time.time())
      if step % micro == 0 and (update % cfg.train.eval_every == 0 or last):
        if pending is not None:
          account(*pending)
          pending = None
        validate()
        patience = cfg.train.early_stopping_patience
        if patience and meta["evals_without_improvement"] >= patience:
          stop_reason = f"early stopping after {patience} validations without a new best BLEU"
          break
      if step % micro == 0 and update % cfg.train.checkpoint_every == 0:
        meta["elapsed"], start = elapsed(), time.time()
        save_latest()
      if cfg.train.max_minutes and elapsed() >= cfg.train.max_minutes * 60:
        stop_reason = f"time limit of {cfg.train.max_minutes} minutes"
        break
    if pending is not None:
      account(*pending)
  except KeyboardInterrupt:
    stop_reason = "interrupted"
    log.warning("interrupted at step %d; saving the latest checkpoint", step // micro)
  meta["elapsed"], start = elapsed(), time.time()
  save_latest()
  ckpt.close()
  if cfg.train.average_last > 1:
    checkpoint.average(workdir, cfg.train.average_last, cfg.model)
  summary = {"step": step // micro, "stop_reason": stop_reason, "best_bleu": meta["best_bleu"],
             "best_step": meta["best_step"],
             "best_checkpoint": str(workdir / "checkpoints" / "best"),
             "elapsed_minutes": meta["elapsed"] / 60}
  log.info("stopped at step %d (%s). Best validation BLEU %.2f at step %d: %s",
           summary["step"], stop_reason, meta["best_bleu"], meta["best_step"],
           summary["best_checkpoint"])
  return summary


# ------------------------------------------------------------------------ CLI


def maybe_initialize_distributed() -> None:
  """Multi-host: join the cluster when the environment describes one."""
  if os.environ.get("JAX_COORDINATOR_ADDRESS") or os.environ.get("SLURM_NTASKS", "1") != "1":
    jax.distributed.initialize()


def main(argv=None) -> None:
  from absl import app, flags
  from ml_collections import config_flags

  config_flags.DEFINE_config_file(
      "config", None, "Config file: a .py with get_config(), or configs/yaml.py:FILE.yaml. "
      "Override any field with --config.SECTION.FIELD=VALUE.", lock_config=True)
  flags.DEFINE_string("workdir", None, "Run directory (created; re-running resumes).")
  flags.mark_flags_as_required(["config", "workdir"])

  def run(_):
    quiet_libraries()
    maybe_initialize_distributed()
    try:
      cfg = Config.from_dict(flags.FLAGS.config)
      summary = train(cfg, flags.FLAGS.workdir)
    except (input_pipeline.DataError, checkpoint.CheckpointError, tokenizer.TokenizerMismatchError,
            FloatingPointError, ValueError) as e:
      logging.getLogger("seq2seq").error("%s", e)
      print(f"error: {e}", file=sys.stderr)
      sys.exit(1)
    print(json.dumps(summary))

  app.run(run, argv=argv)
