"""The readers of other tools' models (seq2seq/rundir/model_formats.py): what they read
from each format, and every malformed source refused by name with nothing left behind."""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import foreign_models as fm  # noqa: E402

from seq2seq.rundir import checkpoint, importing, run_files  # noqa: E402
from seq2seq.rundir.model_formats import FormatError, marian_vocab  # noqa: E402

pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def release(tmp_path_factory):
  return fm.small_marian(tmp_path_factory.mktemp("opus") / "release")


def params_of(run):
  return checkpoint.load_params(run, "best", run_files.load_config(run).model)[0]


def test_a_marian_vocabulary_reads_as_marian_writes_it(tmp_path):
  tokens = ["</s>", "<unk>", "\u2581a", ":", "'", '"', "#", "\u2581\"x\""]
  path = tmp_path / "vocab.yml"
  path.write_text("".join(f"{fm.yaml_token(t)}: {i}\n" for i, t in enumerate(tokens)))
  assert marian_vocab(path) == tokens
  path.write_text("</s>: 0\n<unk>: 2\n")
  with pytest.raises(FormatError, match="without gaps"):
    marian_vocab(path)


def test_a_truncated_npz_is_named_and_leaves_no_run(release, tmp_path):
  broken = tmp_path / "broken"
  shutil.copytree(release, broken)
  data = (broken / "opus.npz").read_bytes()
  (broken / "opus.npz").write_bytes(data[:len(data) // 2])
  with pytest.raises(FormatError, match="opus.npz"):
    importing.import_model(broken, tmp_path / "run")
  assert not (tmp_path / "run").exists()
  assert not list(tmp_path.glob("run.importing-*"))


def test_a_vocabulary_of_another_model_is_named(release, tmp_path):
  broken = tmp_path / "broken"
  shutil.copytree(release, broken)
  lines = (broken / "opus.vocab.yml").read_text().splitlines()
  (broken / "opus.vocab.yml").write_text("\n".join(lines[:-5]) + "\n")
  with pytest.raises(FormatError, match="does not belong to these weights"):
    importing.import_model(broken, tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_a_missing_tokenizer_is_named(release, tmp_path):
  broken = tmp_path / "broken"
  shutil.copytree(release, broken)
  (broken / "target.spm").unlink()
  with pytest.raises(FormatError, match="target.spm"):
    importing.import_model(broken, tmp_path / "run")


@pytest.mark.parametrize("option, value, message", [
    ("right-left", True, "right-left"),
    ("transformer-decoder-autoreg", "rnn", "transformer-decoder-autoreg"),
    ("type", "s2s", "--type"),
    ("transformer-ffn-activation", "tanh", "transformer-ffn-activation"),
])
def test_unsupported_architectures_are_refused_by_name(tmp_path, option, value, message):
  release = tmp_path / "release"
  source = fm.train_spm(tmp_path, "s.spm", fm.sample_lines("en"), 200)
  tokens = fm.marian_vocabulary(source, source)
  weights = fm.marian_weights(np.random.default_rng(0), len(tokens), 16, 32, 1, 1)
  config = fm.marian_config(16, 2, 32, 1, 1, "swish", **{option: value})
  fm.write_marian(release, weights, config, tokens, source, source)
  with pytest.raises(FormatError, match=message):
    importing.import_model(release, tmp_path / "run")


def test_a_truncated_model_bin_is_named(tmp_path):
  model = fm.opennmt_ctranslate2(tmp_path / "onmt")
  data = (model / "model.bin").read_bytes()
  (model / "model.bin").write_bytes(data[:len(data) // 3])
  with pytest.raises(FormatError, match="model.bin"):
    importing.import_model(model, tmp_path / "run", src_lang="en", tgt_lang="de")
  assert not (tmp_path / "run").exists()


def test_something_else_is_refused_with_what_is_expected(tmp_path):
  (tmp_path / "notes.txt").write_text("hello")
  with pytest.raises(FormatError, match="OPUS-MT release"):
    importing.import_model(tmp_path, tmp_path / "run")




def test_a_pytorch_model_bin_written_by_transformers_reads_without_torch(tmp_path):
  """transformers' own `pytorch_model.bin` (fixtures/marian-transformers, the model of
  small_marian(seed=7)) imports to the parameters of the same model's safetensors."""
  fixture = Path(__file__).parent / "fixtures" / "marian-transformers"
  hf = fm.huggingface_from_marian(fm.small_marian(tmp_path / "release", seed=7),
                                  tmp_path / "hf")
  safe = importing.import_model(hf, tmp_path / "from-safetensors")
  (hf / "model.safetensors").unlink()
  for name in ("pytorch_model.bin", "config.json"):
    shutil.copy(fixture / name, hf / name)
  torch_run = importing.import_model(hf, tmp_path / "from-torch")
  a, b = params_of(safe), params_of(torch_run)
  assert a.keys() == b.keys()
  assert all(np.array_equal(a[k][n], b[k][n]) for k in a for n in a[k])
  truncated = (hf / "pytorch_model.bin").read_bytes()
  (hf / "pytorch_model.bin").write_bytes(truncated[:len(truncated) // 2])
  with pytest.raises(FormatError, match="pytorch_model.bin"):
    importing.import_model(hf, tmp_path / "broken")
