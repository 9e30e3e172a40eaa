"""The training loop: update, log, validate, checkpoint, stop, resume exactly.

The loop is resumable exactly: parameters, optimizer state, step, data position and
best validation BLEU are checkpointed with every save, and the steps draw dropout keys
from the update count (`train_step`), so an interrupted run that is restarted makes the
same updates as one that was not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np

from seq2seq import numerics, recipes, runtime
from seq2seq.config import NOT_ARCHITECTURE, Config
from seq2seq.data import corpus, input_pipeline, training_data
from seq2seq.decoding.translator import Translator
from seq2seq.model.transformer import Model
from seq2seq.rundir import averaging, checkpoint, lock, model_card, run_files
from seq2seq.training import distributed, metrics
from seq2seq.training.compiling import BackgroundCompiler
from seq2seq.training.optimizer import ema_params
from seq2seq.training.train_step import DataParallelSteps, TrainState
from seq2seq.training.validation import Validation

log = logging.getLogger("seq2seq.train")


@dataclasses.dataclass
class Progress:
  """Where a run stands; saved with every checkpoint, so a resumed run continues exactly."""

  step: int = 0  # optimizer updates done (the only unit of "step")
  epoch: int = 0  # epoch of the next batch
  batch_index: int = 0  # index of the next batch within that epoch
  best_bleu: float = -1.0
  best_step: int = 0
  # several directions: each one's BLEU at the best update (best_bleu is their mean)
  best_bleu_directions: dict = dataclasses.field(default_factory=dict)
  evals_without_improvement: int = 0
  elapsed: float = 0.0  # training wall time in seconds, validation included
  loss_level: float = 0.0  # running level of the loss per token (`check_divergence`)
  loss_updates: int = 0  # updates in it

  @classmethod
  def from_meta(cls, meta: dict[str, Any]) -> "Progress":
    return cls(**{f.name: meta[f.name] for f in dataclasses.fields(cls) if f.name in meta})

  def to_meta(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass
class LogWindow:
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


def differences(old, new, ignore: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
  """{field: (old value, new value)} of two configs of one dataclass, except `ignore`."""
  a, b = dataclasses.asdict(old), dataclasses.asdict(new)
  return {k: (a[k], b[k]) for k in a if a[k] != b[k] and k not in ignore}


def check_resumable(workdir: Path, cfg: Config) -> None:
  """A run directory may be resumed with other train/decode settings, never another model."""
  if not (workdir / run_files.CONFIG_FILE).exists():
    return
  old = run_files.load_config(workdir)
  for section in ("model", "data"):
    if diff := differences(getattr(old, section), getattr(cfg, section)):
      raise checkpoint.CheckpointError(
          f"{workdir} holds a run with other {section} settings {diff} (saved, new); "
          "use a new --workdir")


def check_fine_tune_source(cfg: Config) -> None:
  """train.init_from must be a run whose model has this run's architecture."""
  source = Path(cfg.train.init_from)
  if not (source / run_files.CONFIG_FILE).is_file():
    raise checkpoint.CheckpointError(
        f"train.init_from={source} is not a run directory (no {run_files.CONFIG_FILE})")
  diff = differences(run_files.load_config(source).model, cfg.model, NOT_ARCHITECTURE)
  if diff:
    fields = ", ".join(f"model.{k} {old!r} there, {new!r} here" for k, (old, new) in diff.items())
    raise checkpoint.CheckpointError(
        f"cannot fine-tune from {source}: its architecture differs ({fields})")


def fine_tune_params(cfg: Config):
  """The parameters of train.init_from's checkpoint (train.init_checkpoint)."""
  source = Path(cfg.train.init_from)
  params, meta = checkpoint.load_params(source, cfg.train.init_checkpoint, cfg.model)
  log.info("initialised from %s (%s checkpoint, step %s); fresh optimizer, step 0", source,
           cfg.train.init_checkpoint, meta.get("step", "?"))
  return params


def resolve_precision(cfg: Config, workdir: Path) -> Config:
  """`model.matmul_dtype="auto"` decided once per run, by process 0's timing, and saved
  with the run's config: a resumed run keeps the choice, so its updates stay those of an
  uninterrupted run."""
  if cfg.model.matmul_dtype != "auto":
    return cfg
  why = None  # None: the resolver chose here, and logged why
  if (workdir / run_files.CONFIG_FILE).exists():
    dtype, why = run_files.load_config(workdir).model.matmul_dtype, "this run's choice"
  elif distributed.is_primary():
    dtype = numerics.resolve("auto").operand_dtype
  else:  # process 0 times it; the others take its choice
    dtype, why = "float32", "process 0's timing"
  dtype = ("float32", "bfloat16")[distributed.agree_int(int(dtype == "bfloat16"))]
  if why is not None:
    log.info("model.matmul_dtype=auto: %s operands (%s)", dtype, why)
  return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, matmul_dtype=dtype))


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


class Diverged(FloatingPointError):
  """The loss left its running level (train.divergence_factor); nothing more was saved."""


LEVEL_UPDATES = 100  # the running level averages over about this many updates


def check_divergence(p: Progress, m: dict[str, Any], step: int, cfg: Config,
                     last_saved: int | None) -> None:
  """Stops training (Diverged) when update `step`'s loss per token exceeds twice a uniform
  guess's, or `train.divergence_factor` times its running level (from update 100 on)."""
  factor = cfg.train.divergence_factor
  if not factor:
    return
  loss = float(m["loss"]) / max(float(m["tokens"]), 1.0)
  ceiling = 2 * np.log(cfg.model.vocab_size)
  why = None
  if loss > ceiling:
    why = f"above twice a uniform guess's, {ceiling:.3g}"
  elif p.loss_updates >= LEVEL_UPDATES and loss > factor * p.loss_level:
    why = (f"above {factor:g}x its running level {p.loss_level:.3g} "
           "(train.divergence_factor)")
  if why:
    since = (f"the newest checkpoint, latest/{last_saved}, is the last good state; to go on "
             "from it with a lower learning rate, run the same command with "
             f"--config.train.learning_rate={cfg.train.learning_rate / 2:g}"
             if last_saved is not None else "no checkpoint had been written yet")
    raise Diverged(f"training diverged at update {step}: loss {loss:.4g} per target token, "
                   f"{why}; nothing from this update on was saved: {since}")
  p.loss_updates += 1
  weight = max(1.0 / p.loss_updates, 1.0 / LEVEL_UPDATES)
  p.loss_level += weight * (loss - p.loss_level)


def restore(cfg: Config, workdir: Path, steps: DataParallelSteps
            ) -> tuple[TrainState, Progress, checkpoint.Checkpointer]:
  """The run's state: its latest checkpoint, else train.init_from's parameters, else new."""
  ckpt = checkpoint.Checkpointer(workdir, cfg.train.keep_checkpoints)
  # A resumed or fine-tuned run's state is read into the shapes alone: initializing the
  # parameters compiles every random initializer (seconds on 2 cores) for values unused.
  # Each array is read replicated over the mesh of every process, as the state it resumes.
  params_like = checkpoint.abstract_params(cfg.model)
  restored = ckpt.restore_latest(
      steps.replicated_shapes(params_like),
      steps.replicated_shapes(jax.eval_shape(steps.optimizer.init, params_like)))
  if restored is None:
    if not cfg.train.init_from:
      return steps.init_state(), Progress(), ckpt
    params = fine_tune_params(cfg)
    state = TrainState(np.asarray(0, np.int32), params, steps.optimizer.init(params))
    return jax.device_put(state, steps.replicated), Progress(), ckpt
  params, opt_state, meta = restored
  progress = Progress.from_meta(meta)
  state = jax.device_put(TrainState(np.asarray(progress.step, np.int32), params, opt_state),
                         steps.replicated)
  if distributed.is_primary():
    metrics.truncate_after(workdir, progress.step)
  log.info("resumed from step %d (epoch %d, batch %d)", progress.step, progress.epoch,
           progress.batch_index)
  return state, progress, ckpt


class Trainer:
  """One run: its state and what the loop does with it (update, log, validate, save)."""

  def __init__(self, cfg: Config, workdir: Path, devices=None):
    cfg = resolve_precision(cfg, workdir)
    self.cfg, self.workdir, self.primary = cfg, workdir, distributed.is_primary()
    check_resumable(workdir, cfg)
    if cfg.train.init_from:
      check_fine_tune_source(cfg)
    # Process 0 trains the tokenizer and encodes the corpus into the run's cache; the
    # others wait for it, then load both from disk.
    if self.primary:
      data = training_data.prepare(cfg, workdir)
      run_files.save_config(workdir, cfg)
    distributed.barrier("seq2seq:data")
    if not self.primary:
      data = training_data.prepare(cfg, workdir)
    self.tok, self.train_corpus, val_corpus, val_refs = data
    self.steps = DataParallelSteps(cfg, Model(cfg.model), devices)
    self.state, self.progress, self.ckpt = restore(cfg, workdir, self.steps)
    self.sigterm: list[int] = []  # set by sigterm_stops_the_loop() while train() runs
    # Validation's greedy batches do not shrink as sentences finish (decode.min_rows):
    # on 1,014 sentences shrinking saves under half a second a validation, while its
    # copies of the decoder step (one per size) cost most of a minute of compilation on 2 cores.
    translator = Translator(cfg.model, self.state.params, self.tok,
                            dataclasses.replace(cfg.decode, min_rows=0))
    self.validation = Validation(cfg, self.steps, translator, val_corpus, val_refs)
    self.writer = metrics.MetricsWriter(workdir, cfg.train.tensorboard, active=self.primary)
    self.started, self.window, self.last_metrics = time.time(), LogWindow(), None
    self.compiler: BackgroundCompiler | None = None  # compiling the run's programs (run())

  def elapsed(self) -> float:
    return self.progress.elapsed + time.time() - self.started

  def log_window(self) -> None:
    w, p, m = self.window, self.progress, self.last_metrics
    rate, loss = w.tokens / w.seconds(), w.loss / max(w.tokens, 1.0)
    eta = (self.cfg.train.max_steps - p.step) * w.seconds() / max(w.updates, 1)
    if self.cfg.train.max_minutes:
      eta = min(eta, self.cfg.train.max_minutes * 60 - self.elapsed())
    self.writer.write({"kind": "train", "step": p.step, "epoch": p.epoch, "loss": loss,
                       "accuracy": w.correct / max(w.tokens, 1.0), "lr": float(m["lr"]),
                       "grad_norm": float(m["grad_norm"]), "tgt_tokens_per_s": rate,
                       "elapsed": self.elapsed()})
    log.info("step %d epoch %d loss %.3f lr %.2e %.0f tgt tok/s elapsed %s eta %s", p.step,
             p.epoch, loss, float(m["lr"]), rate, _fmt_time(self.elapsed()),
             _fmt_time(max(eta, 0)))
    self.window = LogWindow()

  def validate(self) -> dict[str, float]:
    if self.compiler is not None:
      self.compiler.wait_all()  # its programs, compiled once
    t0, p, params, v = time.time(), self.progress, self.state.params, self.validation
    scores = v.loss(params)
    hyps = v.translate(params)
    scores.update(v.bleu(hyps))
    if self.writer.tb is not None:
      self.writer.write_text("val/translations", "\n\n".join(
          f"**source** {self.tok.decode([v.sources[i]])[0]}  \n**output** {hyps[i]}  \n"
          f"**reference** {v.refs[i]}"
          for i in range(min(self.cfg.train.tensorboard_examples, len(hyps)))), p.step)
    improved = scores["bleu"] > p.best_bleu
    if improved:
      p.best_bleu, p.best_step, p.evals_without_improvement = scores["bleu"], p.step, 0
      p.best_bleu_directions = {k[5:]: v for k, v in scores.items() if k.startswith("bleu_")}
      self.ckpt.save_best(p.step, params, dict(p.to_meta(), bleu=scores["bleu"]))
    else:
      p.evals_without_improvement += 1
    self.writer.write({"kind": "val", "step": p.step, "elapsed": self.elapsed(), **scores})
    each = "".join(f", {k[5:]} {v:.2f}" for k, v in scores.items() if k.startswith("bleu_"))
    log.info("validation at step %d: loss %.3f, accuracy %.3f, BLEU %.2f%s%s (%.1fs)", p.step,
             scores["loss"], scores["accuracy"], scores["bleu"],
             f" (the mean of{each[1:]})" if each else "",
             " (new best)" if improved else "", time.time() - t0)
    if self.primary:
      metrics.plot(self.workdir)
    self.window.paused += time.time() - t0
    return scores

  def save(self) -> None:
    t0 = time.time()
    self.progress.elapsed, self.started = self.elapsed(), time.time()
    self.ckpt.save_latest(self.progress.step, self.state.params, self.state.opt_state,
                          self.progress.to_meta())
    self.window.paused += time.time() - t0

  def stop_reason(self) -> str | None:
    t, p = self.cfg.train, self.progress
    if p.step >= t.max_steps:
      return f"max_steps={t.max_steps} reached"
    if t.early_stopping_patience and p.evals_without_improvement >= t.early_stopping_patience:
      return (f"early stopping after {t.early_stopping_patience} validations without a "
              "new best BLEU")
    # Clocks and signals differ between processes: process 0's decide for all of them.
    timed_out = bool(t.max_minutes) and self.elapsed() >= t.max_minutes * 60
    verdict = distributed.agree_int(2 * bool(self.sigterm) + timed_out)
    if verdict >= 2:
      return "terminated (SIGTERM)"
    return f"time limit of {t.max_minutes} minutes" if verdict else None

  def record(self, m, step: int) -> None:
    """Reads an update's metrics (a step late, so that the read never stalls dispatch)."""
    m = jax.device_get(m)
    check_finite(m, step)
    check_divergence(self.progress, m, step, self.cfg, self.ckpt.latest.latest_step())
    self.window.add(m)
    self.last_metrics = m

  def run(self) -> dict[str, Any]:
    t, p = self.cfg.train, self.progress
    sampler = None
    if self.cfg.data.sampling_alpha:  # subword regularization: text needed every epoch
      sampler = corpus.SubwordSampler(self.tok, training_data.training_pairs(self.cfg, self.workdir),
                                        self.cfg.data, self.train_corpus)
    batches = input_pipeline.TrainBatches(self.train_corpus, self.cfg.data,
                                          self.steps.num_devices, sampler)
    # Shapes to compile ahead in the order of use, read before the prefetching thread
    # re-indexes the corpus.
    templates = batches.templates(jax.process_index(), jax.process_count(), p.epoch,
                                  p.batch_index)
    stream = input_pipeline.prefetch(batches.iterate(p.epoch, p.batch_index,
                                                     jax.process_index(), jax.process_count()))
    reason, first_step = self.stop_reason(), p.step
    if reason:
      log.info("nothing to do: %s", reason)
    first = [next(stream) for _ in range(t.grad_accum_steps)] if reason is None else []
    stream = itertools.chain(first, stream)
    self.compiler = self.start_compiling(templates, [batch for _, _, batch in first])
    pending = None  # the previous update's metrics, read after the next is dispatched
    try:
      while reason is None:
        micro = [next(stream) for _ in range(t.grad_accum_steps)]
        for name in self.steps.program_names(micro[0][2], t.grad_accum_steps):
          self.compiler.wait(name)
        self.state, m = self.steps.update(self.state, [batch for _, _, batch in micro])
        p.step += 1
        p.epoch, p.batch_index = micro[-1][0], micro[-1][1]
        if pending is not None:
          self.record(*pending)
        pending = (m, p.step)
        if not (p.step % t.log_every and p.step % t.eval_every and p.step % t.checkpoint_every):
          self.record(*pending)  # checked before it is logged, validated or saved
          pending = None
        if p.step % t.log_every == 0:
          self.log_window()
        if p.step % t.eval_every == 0:
          self.validate()
        if p.step % t.checkpoint_every == 0:
          self.save()
        reason = self.stop_reason()
      if pending is not None:
        self.record(*pending)
      if self.window.updates:
        self.log_window()
      if p.step > first_step and p.step >= t.max_steps and p.step % t.eval_every:
        self.validate()  # the last update is a candidate for "best" too
    except KeyboardInterrupt:
      if pending is not None:
        self.record(*pending)
      reason = "interrupted"
      log.warning("interrupted at step %d; saving the latest checkpoint", p.step)
    finally:
      self.compiler.stop()
    self.save()
    return self.finish(reason)

  def start_compiling(self, templates: list, first: list) -> BackgroundCompiler:
    """Compiles the run's programs while it trains: the updates in the order the epoch's
    batches first take their shapes, then the validation's (`compiling`). With several
    processes, every program is compiled before the first update, as each process
    lowers the validation's search from its own copy of the parameters."""
    if first:
      shape = first[0].shape
      templates = sorted(templates, key=lambda b: b.shape != shape)  # stable: it goes first
    accum = self.cfg.train.grad_accum_steps
    if jax.process_count() > 1:
      programs = itertools.chain(self.steps.lower_updates(self.state, templates, accum),
                                 self.validation.lower(self.state.params))
    else:  # shapes only: the loop donates the state's buffers while the thread lowers
      state = jax.tree_util.tree_map(
          lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), self.state)
      programs = itertools.chain(self.steps.lower_updates(state, templates, accum),
                                 self.validation.lower(state.params))
    compiler = BackgroundCompiler(programs if first else iter(()))
    if jax.process_count() > 1:
      compiler.wait_all()
    return compiler

  def finish(self, reason: str) -> dict[str, Any]:
    """Closes the run: averaged and moving-average checkpoints, summary, model card."""
    t, p = self.cfg.train, self.progress
    self.ckpt.close()
    self.writer.close()
    if t.average_last > 1:
      averaging.average(self.workdir, t.average_last, self.cfg.model)
    if t.ema_decay:
      checkpoint.save_params(self.workdir, "ema", p.step,
                             distributed.local_copy(ema_params(self.state.opt_state)),
                             {"ema_decay": t.ema_decay, "step": p.step})
    summary = {"step": p.step, "epoch": p.epoch, "stop_reason": reason,
               "best_bleu": p.best_bleu, "best_step": p.best_step,
               **({"best_bleu_directions": p.best_bleu_directions}
                  if p.best_bleu_directions else {}),
               "best_checkpoint": str(self.workdir / "checkpoints" / "best"),
               "elapsed_minutes": p.elapsed / 60}
    log.info("stopped at step %d (%s). Best validation BLEU %.2f at step %d: %s",
             p.step, reason, p.best_bleu, p.best_step, summary["best_checkpoint"])
    log.info("next: evaluate, translate, serve:\n  %s",
             "\n  ".join(model_card.next_commands(self.workdir, self.cfg)))
    if self.primary:
      model_card.record_training(self.workdir, self.cfg, summary)
      model_card.write(self.workdir)
    return summary


def train(config: Config | str, workdir: str | os.PathLike,
          overrides: dict[str, Any] | None = None, devices=None) -> dict[str, Any]:
  """Trains (or resumes) the run in `workdir`, as `train.py --config CONFIG --workdir
  WORKDIR --config.SECTION.FIELD=VALUE ...` does. `config`: a `Config`, a preset name
  ("tiny", "multi30k", "auto") or a config file's path; `overrides`: {"section.field":
  value}. Returns the summary train.py logs last (`stop_reason`, `best_bleu`,
  `best_checkpoint`, ...)."""
  items = [(name, str(value)) for name, value in (overrides or {}).items()]
  if isinstance(config, str):
    cfg = recipes.training_config(config, items, workdir)
  else:
    tree = ml_collections.ConfigDict(config.to_dict())
    tree.lock()
    recipes.apply_overrides(tree, items)
    cfg = Config.from_dict(tree.to_dict())
  workdir = Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  runtime.quiet_libraries()
  runtime.setup_run_logging(workdir, to_file=distributed.is_primary())
  runtime.enable_compilation_cache()
  # One writer per run directory (process 0 holds the lock for a distributed run).
  writer = lock.training_lock(workdir) if distributed.is_primary() else contextlib.nullcontext()
  with writer, runtime.sigterm_stops_the_loop() as sigterm:
    trainer = Trainer(cfg, workdir, devices)
    trainer.sigterm = sigterm
    return trainer.run()
