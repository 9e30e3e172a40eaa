"""The training loop: a smoke run, an overfit, checkpoint averaging, validation compiled
ahead, TensorBoard. Stopping and resuming are in test_resume.py."""

import dataclasses
import shutil

import jax
import numpy as np
import pytest
import sacrebleu

from seq2seq import numerics
from seq2seq.data import data_source, input_pipeline, tokenizer
from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.translator import Translator
from seq2seq.numerics import speed_probe
from seq2seq.rundir import checkpoint, run_files
from seq2seq.training import metrics
from seq2seq.training.compiling import BackgroundCompiler
from seq2seq.training.trainer import Trainer, resolve_precision, train

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
      sacrebleu.corpus_bleu(best.translate(val_src, beam_size=1), [val_ref]).score, abs=1e-9)
  for name in ("config.json", "spm.model", "metrics.jsonl", "train.log", "curves.png"):
    assert (trained_run / name).exists(), name
  cfg = run_files.load_config(trained_run)
  assert cfg.train.max_steps == 300  # the command-line override reached the run
  for name in ("best", "latest"):
    params, meta = checkpoint.load_params(trained_run, name, cfg.model)
    assert meta["step"] in (150, 300)
  assert "Best validation BLEU" in (trained_run / "train.log").read_text()


# With the recipe's bfloat16 matmul operands; float32 training is every other run's.
@pytest.mark.slow
@pytest.mark.parametrize("matmul_dtype", ["bfloat16"])
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
  name = data_source.corpus_id(cfg.data, "train", cfg.model.vocab_size)
  tokenizer.load_or_train(tmp_path / "run", name, lambda: sample, 400, "unigram", 10**6)
  summary = train(cfg, tmp_path / "run")
  last = [r for r in metrics.read(tmp_path / "run") if r["kind"] == "train"][-1]
  assert last["loss"] < 0.05, last
  assert Translator.load(tmp_path / "run", "latest").translate(src) == tgt
  assert summary["best_bleu"] == pytest.approx(100.0)


def test_average_checkpoints(trained_run, tmp_path):
  # On a copy: the shared run stays as trained (other tests expect no 'averaged' in it).
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  cfg = run_files.load_config(run)
  # --upto: what the run would have averaged had it stopped at that step
  run_cli("-m", "seq2seq.cli.average", "--workdir", run, "--last", "2", "--upto", "250")
  assert checkpoint.load_params(run, "averaged", cfg.model)[1]["averaged_steps"] == [
      100, 200]
  early = run_cli("-m", "seq2seq.cli.average", "--workdir", run, "--upto", "50", check=False)
  assert early.returncode != 0 and b"at or before step 50" in early.stderr
  run_cli("-m", "seq2seq.cli.average", "--workdir", run, "--last", "2")
  averaged, meta = checkpoint.load_params(run, "averaged", cfg.model)
  steps = meta["averaged_steps"]
  assert steps == [200, 300]
  a, _ = checkpoint.load_params(run, str(run / "checkpoints/latest/200"), cfg.model)
  b, _ = checkpoint.load_params(run, str(run / "checkpoints/latest/300"), cfg.model)
  for x, y, z in zip(*(jax.tree_util.tree_leaves(t) for t in (averaged, a, b))):
    np.testing.assert_allclose(x, (y + z) / 2, rtol=1e-6)
  assert Translator.load(run, "averaged").translate(["A dog is running."])[0]


@pytest.mark.slow
def test_programs_compiled_while_training_are_not_compiled_again(tmp_path, untraced):
  # The trainer compiles its programs (an update per batch shape, the validation's loss
  # and greedy search per shape) on threads, from the state's shapes alone, the first
  # batch's first; the loop's updates and a validation after them, with the parameters
  # the loop made, then trace, lower and compile nothing.
  cfg = tiny_config(SAMPLE, eval_max_sentences=0)  # all 100 sentences: several shapes
  trainer = Trainer(cfg, tmp_path / "run")
  batches = input_pipeline.TrainBatches(trainer.train_corpus, cfg.data)
  real = {}
  for b in batches.epoch_batches(0):
    batch = batches.make_batch(b)
    real.setdefault(batch.shape, batch)
  templates = batches.templates()
  # the first batch of a shape that is not the first template's: it must come first
  first = next(b for shape, b in real.items() if shape != templates[0].shape)
  events = []
  record = lambda name, seconds, **kw: events.append(name)
  jax.monitoring.register_event_duration_secs_listener(record)
  try:
    compiler = trainer.start_compiling(templates, [first])
    assert compiler.wait_all() > 0
    names = list(compiler.futures)
    assert names[0] == trainer.steps.program_names(first, 1)[0] and len(real) >= 2
    assert any(n.startswith("validation loss") for n in names), names
    assert "validation search" in names and names[-1].startswith("validation"), names
    # The control: lowering them traced each one.
    assert events.count("/jax/core/compile/jaxpr_trace_duration") >= len(names)
    events.clear()
    for batch in real.values():
      trainer.state, m = trainer.steps.update(trainer.state, [batch])
      assert np.isfinite(float(m["loss"]))
    scores = trainer.validation.loss(trainer.state.params)
    hyps = trainer.validation.translate(trainer.state.params)
  finally:
    jax.monitoring.unregister_event_duration_listener(record)
  assert np.isfinite(scores["loss"]) and len(hyps) == 100
  compiling = [e for e in events if e.startswith("/jax/core/compile/")]
  assert not compiling, compiling


def test_a_compiler_waits_for_the_program_asked_for_and_reports_failures(caplog):
  import logging
  import threading
  caplog.set_level(logging.INFO, logger="seq2seq.train")
  release = threading.Event()

  class Slow:
    def __init__(self, fail=False):
      self.fail = fail
    def compile(self):
      release.wait(10)
      if self.fail:
        raise RuntimeError("no memory")

  compiler = BackgroundCompiler([("a", Slow()), ("b", Slow(fail=True))], workers=2)
  waited = threading.Thread(target=compiler.wait, args=("a",))
  waited.start()
  waited.join(0.3)
  assert waited.is_alive()  # "a" is still compiling, and the log says it is waited for
  assert any(r.getMessage().startswith("waiting for a to compile") for r in caplog.records)
  release.set()
  waited.join(5)
  assert not waited.is_alive()
  compiler.wait("no such program")  # returns at once: nothing to wait for
  with pytest.raises(RuntimeError, match="no memory"):
    compiler.wait("b")
  with pytest.raises(RuntimeError, match="no memory"):
    compiler.wait_all()


@pytest.mark.slow
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


@pytest.mark.slow
def test_automatic_precision_is_timed_once_and_kept_by_the_run(tmp_path, monkeypatch):
  """model.matmul_dtype="auto": the run takes the timed choice, saves it with its config,
  and a resumed run keeps it even where the timing would now choose otherwise."""
  base = tiny_config(SAMPLE)
  cfg = dataclasses.replace(base, model=dataclasses.replace(base.model, matmul_dtype="auto"))
  numerics.clear_cache()
  monkeypatch.setattr(speed_probe, "fastest_operand_dtype",
                      lambda backend, use="training": ("bfloat16", "timed"))
  assert resolve_precision(cfg, tmp_path / "new").model.matmul_dtype == "bfloat16"
  run = Trainer(cfg, tmp_path / "run")  # what train() builds before its first update
  assert run.steps.model.numerics.operand_dtype == "bfloat16"
  run.save()
  assert run_files.load_config(tmp_path / "run").model.matmul_dtype == "bfloat16"
  # Resuming where the timing would now choose float32: the run's choice stands (and
  # check_resumable would refuse another model config).
  numerics.clear_cache()
  monkeypatch.setattr(speed_probe, "fastest_operand_dtype",
                      lambda backend, use="training": ("float32", "timed"))
  assert resolve_precision(cfg, tmp_path / "run").model.matmul_dtype == "bfloat16"
  assert resolve_precision(cfg, tmp_path / "other").model.matmul_dtype == "float32"
  assert resolve_precision(base, tmp_path / "new") is base  # an explicit dtype stays
