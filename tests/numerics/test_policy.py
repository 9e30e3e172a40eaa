"""The numerics policy: one resolver, its choices and reasons, and the model computing with
the object it returns."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq import numerics
from seq2seq.config import PRESETS
from seq2seq.model import Model, shift_right
from seq2seq.numerics import Numerics, speed_probe

TINY = PRESETS["tiny"]
SRC = np.array([[5, 6, 7, 2, 0], [8, 9, 2, 0, 0]], np.int32)
TGT = np.array([[10, 11, 2, 0], [12, 2, 0, 0]], np.int32)


@pytest.fixture(autouse=True)
def fresh_resolver():
  numerics.clear_cache()
  yield
  numerics.clear_cache()


def test_a_backend_without_rounded_products_falls_back_to_float32(monkeypatch, caplog):
  # A backend that cannot run the products gets float32 operands and a warning, not a
  # crash at the first update; the model computes exactly as a float32 one.
  monkeypatch.setattr(speed_probe, "rounded_products_unsupported",
                      lambda dtype, backend: "no kernel")
  with caplog.at_level("WARNING"):
    chosen = numerics.resolve("bfloat16")
  assert chosen.operand_dtype == "float32" and chosen.why == "no kernel"
  assert "model.matmul_dtype=bfloat16" in caplog.text and "no kernel" in caplog.text
  model = Model(dataclasses.replace(TINY, matmul_dtype="bfloat16"))
  assert model.numerics == Numerics("float32")
  params = model.init(jax.random.PRNGKey(0), SRC, shift_right(TGT))
  np.testing.assert_array_equal(model.apply(params, SRC, shift_right(TGT)),
                                Model(TINY).apply(params, SRC, shift_right(TGT)))


def test_automatic_precision_takes_the_timed_dtype_and_logs_it_once(monkeypatch, caplog):
  monkeypatch.setattr(speed_probe, "fastest_operand_dtype",
                      lambda backend, use="training": ("bfloat16", f"{use} timed"))
  with caplog.at_level("INFO"):
    first = numerics.resolve("auto")
    again = numerics.resolve("auto")
  assert first == again == Numerics("bfloat16") and first.why == "training timed"
  assert caplog.text.count("model.matmul_dtype=auto: bfloat16 operands (training timed)") == 1
  assert Model(dataclasses.replace(TINY, matmul_dtype="auto")).numerics.operand_dtype \
      == "bfloat16"


def test_decoding_takes_the_dtype_timed_for_decoding(monkeypatch, caplog):
  # A model trained with bfloat16 (or automatic) operands decodes with the dtype timed
  # faster for decoding, and says why; one trained with float32 keeps float32.
  for timed in ("float32", "bfloat16"):
    numerics.clear_cache()
    monkeypatch.setattr(speed_probe, "fastest_operand_dtype",
                        lambda backend, use, timed=timed: (timed, f"{use} timed"))
    for dtype in ("bfloat16", "auto"):
      with caplog.at_level("INFO"):
        assert numerics.resolve(dtype, use="decoding").operand_dtype == timed
      assert f"decoding with {timed} matmul operands (trained with {dtype}): decoding timed" \
          in caplog.text
    assert numerics.resolve("float32", use="decoding") == Numerics("float32")


def test_unknown_dtypes_and_uses_are_refused():
  with pytest.raises(ValueError, match="matmul_dtype must be"):
    numerics.resolve("float16")
  with pytest.raises(ValueError, match="use must be one of"):
    numerics.resolve("float32", use="serving")


def test_the_residual_stream_is_the_identity_on_every_backend():
  """In inference and in a training trace (`training_residuals`), on every backend."""
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 4, 8))
  params = {"w": jnp.full((2, 2), 0.25)}
  for backend in ("cpu", "gpu"):
    policy = Numerics("float32", backend)
    f = lambda v, policy=policy: (policy.residual_stream(v * 2.0) ** 2).sum()

    def training(v, policy=policy, f=f):
      with policy.training_residuals(params):
        return f(v)
    for g in (f, training):
      np.testing.assert_array_equal(jax.jit(g)(x), (4 * x * x).sum())
      np.testing.assert_allclose(jax.grad(g)(x), 8 * x, rtol=1e-6)


def test_only_a_training_trace_on_the_cpu_puts_residuals_in_buffers_of_their_own():
  x = jnp.ones((2, 3))
  params = {"w": jnp.full((2, 2), 0.25)}
  conditional = lambda text: "stablehlo.case" in text or "stablehlo.if" in text  # noqa: E731

  def lowered(policy, train):
    def f(v, p):
      if not train:
        return policy.residual_stream(v)
      with policy.training_residuals(p):
        return policy.residual_stream(v)
    return jax.jit(f).lower(x, params).as_text()
  assert conditional(lowered(Numerics("float32", "cpu"), True))
  assert not conditional(lowered(Numerics("float32", "cpu"), False))
  assert not conditional(lowered(Numerics("float32", "gpu"), True))


def test_a_shared_table_is_the_identity_on_every_backend():
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 1, 8))
  for backend in ("cpu", "gpu"):
    policy = Numerics("float32", backend)
    f = lambda v, policy=policy: (policy.shared_table(jnp.cos(v)) * v).sum()
    np.testing.assert_allclose(jax.jit(f)(x), (jnp.cos(x) * x).sum(), rtol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(x), jnp.cos(x) - x * jnp.sin(x), rtol=1e-5,
                               atol=1e-6)
