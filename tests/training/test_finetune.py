"""Fine-tuning: train.init_from starts from another run; data.spm_model reuses a vocabulary."""

import dataclasses

import jax
import numpy as np
import pytest

from seq2seq.data import tokenizer
from seq2seq.data.textfiles import read_lines
from seq2seq.rundir import checkpoint
from seq2seq.training import metrics
from seq2seq.training.trainer import Trainer, train

from helpers import SAMPLE, tiny_config, write_corpus

pytestmark = pytest.mark.slow  # each test trains, kills or restarts processes


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
  """The tiny model trained on the sample corpus for a while."""
  workdir = tmp_path_factory.mktemp("source") / "run"
  train(tiny_config(SAMPLE, max_steps=150, checkpoint_every=150, log_every=50), workdir)
  return workdir


@pytest.fixture(scope="module")
def in_domain(tmp_path_factory):
  """A small new corpus: sentences of the sample's test split, unseen in its training."""
  src, tgt = read_lines(SAMPLE / "test.en"), read_lines(SAMPLE / "test.de")
  directory = tmp_path_factory.mktemp("in_domain")
  write_corpus(directory, "train", src[:60], tgt[:60])
  write_corpus(directory, "val", src[60:80], tgt[60:80])
  return directory


def fine_tune_config(data_dir, source, **overrides):
  settings = dict(max_steps=30, warmup_steps=5, learning_rate=1e-3, init_from=str(source),
                  init_checkpoint="latest")
  return tiny_config(data_dir, **(settings | overrides))


def train_losses(workdir):
  return [r["loss"] for r in metrics.read(workdir) if r["kind"] == "train"]


def test_fine_tuning_starts_from_the_source_and_lowers_the_new_loss(source_run, in_domain,
                                                                     tmp_path):
  train(fine_tune_config(in_domain, source_run), tmp_path / "ft")
  # The same run from scratch, with the source's vocabulary (data.spm_model).
  scratch = fine_tune_config(in_domain, source_run, init_from="")
  scratch = dataclasses.replace(scratch, data=dataclasses.replace(
      scratch.data, spm_model=str(source_run / tokenizer.MODEL_FILE)))
  train(scratch, tmp_path / "scratch")
  ft, fresh = train_losses(tmp_path / "ft"), train_losses(tmp_path / "scratch")
  assert ft[0] < 0.6 * fresh[0], (ft[0], fresh[0])  # starts where the source model is
  assert np.mean(ft[-5:]) < np.mean(ft[:5])  # and learns the new data
  assert (tmp_path / "ft" / "spm.model").read_bytes() == (source_run / "spm.model").read_bytes()
  assert (tmp_path / "scratch" / "spm.model").read_bytes() == (source_run /
                                                               "spm.model").read_bytes()


def test_resuming_a_fine_tuning_run_is_exact(source_run, in_domain, tmp_path):
  cfg = lambda steps: fine_tune_config(in_domain, source_run, max_steps=steps)
  train(cfg(20), tmp_path / "straight")
  train(cfg(10), tmp_path / "resumed")
  train(cfg(20), tmp_path / "resumed")  # resumes from its own step 10, not the source
  params = lambda d: checkpoint.load_params(d, "latest", cfg(20).model)[0]
  for x, y in zip(jax.tree_util.tree_leaves(params(tmp_path / "straight")),
                  jax.tree_util.tree_leaves(params(tmp_path / "resumed"))):
    np.testing.assert_array_equal(x, y)
  assert train_losses(tmp_path / "straight") == train_losses(tmp_path / "resumed")


def test_another_architecture_or_source_is_refused(source_run, in_domain, tmp_path):
  cfg = fine_tune_config(in_domain, source_run)
  wider = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, d_ff=256))
  with pytest.raises(checkpoint.CheckpointError, match=r"model.d_ff 128 there, 256 here"):
    train(wider, tmp_path / "a")
  # Dropout and matmul precision are not architecture: a fine-tuning run may change them.
  # The run is built (where a refusal comes from) and starts from the source's parameters.
  more_dropout = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dropout=0.3,
                                                                    matmul_dtype="bfloat16"))
  started = Trainer(more_dropout, tmp_path / "b").state
  source = checkpoint.load_params(source_run, "latest", cfg.model)[0]
  assert int(started.step) == 0
  for x, y in zip(jax.tree_util.tree_leaves(started.params), jax.tree_util.tree_leaves(source),
                  strict=True):
    np.testing.assert_array_equal(x, y)
  with pytest.raises(checkpoint.CheckpointError, match="is not a run directory"):
    train(fine_tune_config(in_domain, tmp_path), tmp_path / "c")
  missing = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, init_from=""),
                                data=dataclasses.replace(cfg.data, spm_model="/no/such.model"))
  with pytest.raises(tokenizer.TokenizerMismatchError, match="/no/such.model does not exist"):
    train(missing, tmp_path / "d")
