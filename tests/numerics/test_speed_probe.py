"""The machine probe: which operand dtype runs faster here, timed once per machine."""

import json

import jax
import pytest

from seq2seq.numerics import speed_probe


def test_fastest_operand_dtype_times_both_and_names_its_reason(monkeypatch, tmp_path):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  speed_probe.fastest_operand_dtype.cache_clear()
  dtype, why = speed_probe.fastest_operand_dtype()
  assert dtype in ("float32", "bfloat16")
  assert "ms with bfloat16 operands" in why and "ms with float32" in why
  # Decoding's products are timed apart from training's, and named so.
  dtype, why = speed_probe.fastest_operand_dtype(use="decoding")
  assert dtype in ("float32", "bfloat16") and why.startswith("a decoding step's products")
  # A backend without the rounded products keeps float32, saying why.
  speed_probe.fastest_operand_dtype.cache_clear()
  monkeypatch.setattr(speed_probe, "rounded_products_unsupported", lambda dtype, backend: "no kernel")
  assert speed_probe.fastest_operand_dtype() == (
      "float32", f"this {jax.default_backend()} backend does not run them (no kernel)")
  speed_probe.fastest_operand_dtype.cache_clear()


def test_the_operand_dtype_is_timed_once_per_machine(monkeypatch, tmp_path):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  monkeypatch.setattr(speed_probe, "layer_product_seconds",
                      lambda backend, use: {"float32": 0.002, "bfloat16": 0.004})
  monkeypatch.setattr(speed_probe, "rounded_products_unsupported", lambda dtype, backend: None)
  speed_probe.fastest_operand_dtype.cache_clear()
  assert speed_probe.fastest_operand_dtype()[0] == "float32"
  known = json.loads((tmp_path / "seq2seq" / "operand_dtype.json").read_text())
  assert list(known.values()) == [["float32", speed_probe.fastest_operand_dtype()[1]]]
  # Another process on this machine reads the answer instead of timing again.
  monkeypatch.setattr(speed_probe, "layer_product_seconds",
                      lambda backend, use: pytest.fail("timed"))
  speed_probe.fastest_operand_dtype.cache_clear()
  dtype, why = speed_probe.fastest_operand_dtype()
  assert dtype == "float32" and why.endswith("timed before on this machine")
  # Another machine (here: another JAX version) times anew.
  monkeypatch.setattr(speed_probe.jax, "__version__", "0.0.0")
  speed_probe.fastest_operand_dtype.cache_clear()
  with pytest.raises(pytest.fail.Exception, match="timed"):
    speed_probe.fastest_operand_dtype()
  speed_probe.fastest_operand_dtype.cache_clear()


def test_decoding_does_not_take_operands_whose_rows_depend_on_the_batch(monkeypatch, tmp_path):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  monkeypatch.setattr(speed_probe, "rounded_products_unsupported", lambda dtype, backend: None)
  monkeypatch.setattr(speed_probe, "layer_product_seconds",
                      lambda backend, use: {"float32": 0.004, "bfloat16": 0.001})
  monkeypatch.setattr(speed_probe, "rows_disagree", lambda dtype, backend: "row 17 differs")
  speed_probe.fastest_operand_dtype.cache_clear()
  dtype, why = speed_probe.fastest_operand_dtype(use="decoding")
  assert dtype == "float32" and "depend on the batch here: row 17 differs" in why
  # training takes the faster one: a training batch is not a translation's
  assert speed_probe.fastest_operand_dtype(use="training")[0] == "bfloat16"
  speed_probe.fastest_operand_dtype.cache_clear()


def test_this_machine_s_rows_agree_with_either_operand_dtype():
  # What the policy relies on, here: ops.matmul pads calls so that no row count compared
  # gives a row another product (the failure names the CPU class).
  for dtype in ("float32", "bfloat16"):
    if dtype == "bfloat16" and speed_probe.rounded_products_unsupported(
        dtype, jax.default_backend()):
      continue
    assert speed_probe.rows_disagree(dtype) is None
  assert speed_probe.cpu_class().rsplit(", ", 1)[1] in (
      "AMX", "AVX-512 BF16", "AVX-512", "AVX2", "no AVX2")
