"""The XLA:CPU-shaped operations against their plain JAX meaning: dropout masks, the fusion
boundary, bfloat16-operand products and their gradients, layer norm's own gradient."""

import functools

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seq2seq.model import layers
from seq2seq.numerics import Numerics, ops, speed_probe

_NO_ROUNDED_PRODUCTS = speed_probe.rounded_products_unsupported("bfloat16", jax.default_backend())
needs_rounded_products = pytest.mark.skipif(
    _NO_ROUNDED_PRODUCTS is not None,
    reason=f"this backend does not run bfloat16 x bfloat16 -> float32 matmuls: "
           f"{_NO_ROUNDED_PRODUCTS}")
CPU = speed_probe.cpu_class()  # named in the messages of results that depend on it


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_dropout_mask_rate_and_independence(rate):
  shape = (256, 16, 128)
  key = jax.random.PRNGKey(7)
  mask = lambda k: np.asarray(ops.keep_mask(k, rate, shape)).ravel()
  a, b = mask(key), mask(jax.random.fold_in(key, 1))
  n = a.size
  # keep fraction within 5 standard deviations of 1 - rate
  assert abs(a.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n)
  # masks of two keys, and of neighbouring elements (along each axis), are uncorrelated
  for x, y in [(a, b), (a[:-1], a[1:]), (a[:-128], a[128:]), (a[:-2048], a[2048:])]:
    assert abs(np.corrcoef(x, y)[0, 1]) < 5 / np.sqrt(n)
  np.testing.assert_array_equal(a, mask(key))  # deterministic
  np.testing.assert_array_equal(a, mask(jax.random.wrap_key_data(key)))  # typed keys too


def test_dropout_keeps_the_expectation_and_own_buffer_is_the_identity():
  x = jnp.ones((512, 256))
  y = hk.transform(lambda x: layers.dropout(x, 0.25)).apply({}, jax.random.PRNGKey(0), x)
  assert set(np.unique(np.asarray(y)).tolist()) == {0.0, np.float32(1 / 0.75)}
  assert abs(float(y.mean()) - 1.0) < 0.01
  # own_buffer: identity forward and backward, under jit and grad
  token = jnp.float32(3.0)
  f = lambda v: jnp.sum(jnp.sin(ops.own_buffer(v * 2.0, token)))
  v = jax.random.normal(jax.random.PRNGKey(1), (4, 5))
  np.testing.assert_allclose(jax.jit(f)(v), jnp.sum(jnp.sin(v * 2.0)), rtol=1e-6)
  np.testing.assert_allclose(jax.jit(jax.grad(f))(v), 2.0 * jnp.cos(v * 2.0), rtol=1e-6)



@needs_rounded_products
@pytest.mark.parametrize("spec,shape_a,shape_b", [
    ("mk,kn->mn", (6, 8), (8, 5)),  # Dense
    ("nd,vd->nv", (6, 8), (9, 8)),  # the tied output layer
    ("bthk,bshk->bhts", (2, 3, 2, 4), (2, 5, 2, 4)),  # attention scores
    ("bthk,bhsk->bhts", (2, 3, 2, 4), (2, 2, 5, 4)),  # ... over the head-major cache
    ("bhts,bshk->bthk", (2, 2, 3, 5), (2, 5, 2, 4)),  # attention output
    ("bhts,bhsk->bhtk", (2, 2, 3, 5), (2, 2, 5, 4)),  # ... head-major
    # its gradient for the wide operand, "nv,nd->vd", is cheapest with the operands
    # swapped and the small product transposed
    ("nd,vd->nv", (16, 4), (40, 4)),
])
def test_bfloat16_matmul_operands_round_operands_and_cotangents(spec, shape_a, shape_b):
  """With "bfloat16" operands an einsum is the float32 einsum of its operands
  rounded to bfloat16; its gradients are the float32 einsums of the cotangent and the
  other operand, both rounded; all under jit (XLA:CPU rejects some bfloat16 x bfloat16 ->
  float32 matmul layouts at run time)."""
  ka, kb, kg = jax.random.split(jax.random.PRNGKey(0), 3)
  a, b = jax.random.normal(ka, shape_a), jax.random.normal(kb, shape_b)
  rounded = lambda x: x.astype(jnp.bfloat16).astype(jnp.float32)

  @jax.jit
  def got(a, b, g):
    def f(a, b):
      return ops.einsum(spec, a, b, "bfloat16")
    out, vjp = jax.vjp(f, a, b)
    return out, *vjp(g)

  def want(a, b, g):
    out, vjp = jax.vjp(lambda a, b: jnp.einsum(spec, a, b), rounded(a), rounded(b))
    return out, *vjp(rounded(g))

  g = jax.random.normal(kg, jnp.einsum(spec, a, b).shape)
  for x, y in zip(got(a, b, g), want(a, b, g)):
    assert x.dtype == jnp.float32
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
  # the rounding is real: the float32 einsum differs
  assert float(jnp.max(jnp.abs(got(a, b, g)[0] - jnp.einsum(spec, a, b)))) > 1e-3


def test_a_lone_row_is_multiplied_as_in_a_batch():
  # XLA:CPU multiplies a single row by another kernel than two or more; with bfloat16
  # operands it rounds differently there, so a sentence searched alone (greedy, one row)
  # could be translated differently than in a batch. matmul pads a lone row.
  x = jax.random.normal(jax.random.PRNGKey(0), (2, 128))
  w = jax.random.normal(jax.random.PRNGKey(1), (128, 512))
  alone = jax.jit(lambda x: ops.matmul(x, w, "bfloat16"))(x[:1])
  both = jax.jit(lambda x: ops.matmul(x, w, "bfloat16"))(x)
  np.testing.assert_array_equal(alone, both[:1], err_msg=CPU)
  grad = jax.grad(lambda x: ops.matmul(x, w, "bfloat16").sum())(x[:1])
  assert grad.shape == (1, 128)


def test_matmul_pads_to_the_rows_that_agree():
  assert [ops.matmul_rows(n, "bfloat16") for n in (1, 2, 4, 5, 17, 64, 321)] == [
      4, 4, 4, 8, 20, 64, 324]
  assert [ops.matmul_rows(n, "float32") for n in (1, 63, 64, 65, 321)] == [
      64, 64, 64, 65, 321]
  assert ops.matmul_rows(3) == 64  # None: float32


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_row_s_result_does_not_depend_on_how_many_rows_share_the_call(dtype):
  # XLA:CPU runs small matmuls and reductions with other kernels than large ones, which
  # round differently, and on a CPU with AMX computes the last one or two rows of a block
  # of 16 otherwise (row counts 16k + 1, 16k + 2); matmul and rowwise pad the calls, so
  # that a sentence is computed alike alone and in any batch (bit for bit).
  if dtype == "bfloat16" and _NO_ROUNDED_PRODUCTS:
    pytest.skip(_NO_ROUNDED_PRODUCTS)
  key = jax.random.PRNGKey(0)
  counts = (1, 2, 3, 5, 16, 17, 18, 20, 31, 33, 34, 63, 65, 100, 129, 130, 257)
  for k_in, n_out in ((128, 512), (512, 128), (128, 384), (128, 8000)):
    x = jax.random.normal(key, (320, k_in))
    w = jax.random.normal(jax.random.PRNGKey(1), (k_in, n_out))
    f = jax.jit(lambda x, w: ops.matmul(x, w, dtype))
    full = np.asarray(f(x, w))
    for n in counts:
      np.testing.assert_array_equal(f(x[:n], w), full[:n],
                                    err_msg=f"{k_in}x{n_out}, {n} rows, on {CPU}")
  scale, offset = jax.random.normal(key, (2, 128))
  row_functions = {128: lambda x: ops.layer_norm(x, scale, offset), 8: jax.nn.softmax,
                   40: jax.nn.softmax, 72: jax.nn.softmax}
  for d, fn in row_functions.items():
    x = jax.random.normal(jax.random.PRNGKey(d), (640, d)) * 3 + 1
    f = jax.jit(functools.partial(ops.rowwise, fn))
    full = np.asarray(f(x))
    np.testing.assert_allclose(full, fn(x), rtol=1e-6, atol=1e-6)
    for n in counts:
      np.testing.assert_array_equal(f(x[:n]), full[:n], err_msg=f"width {d}, {n} rows, on {CPU}")
  # A layer norm of more rows than XLA:CPU computes alike (4,096 or more): in blocks.
  x = jax.random.normal(key, (2 * ops.LAYER_NORM_ROWS + 100, 128)) * 3 + 1
  norm = jax.jit(lambda x: Numerics.layer_norm(x, scale, offset))
  many = np.asarray(norm(x))
  np.testing.assert_allclose(many, ops.layer_norm(x, scale, offset), rtol=1e-6, atol=1e-6)
  for n in (5, 300, ops.LAYER_NORM_ROWS, ops.LAYER_NORM_ROWS + 1):
    np.testing.assert_array_equal(norm(x[:n]), many[:n],
                                  err_msg=f"layer norm, {n} rows, on {CPU}")


@needs_rounded_products
def test_transposed_weights_are_made_once_before_a_loop_and_multiply_as_any_batch():
  # The output layer's table [V, D] in a decoding loop: the [D, V] copy depends on the
  # weights only, so XLA makes it before the loop (no conditional, the fusion boundary
  # that keeps it a copy, inside the loop's body), and every number of rows then takes
  # the same product, row for row.
  table = jax.random.normal(jax.random.PRNGKey(0), (300, 64))
  x = jax.random.normal(jax.random.PRNGKey(1), (40, 64))
  w = ops.transposed_weights(table, "bfloat16")
  assert w.dtype == jnp.bfloat16
  np.testing.assert_array_equal(w, table.T.astype(jnp.bfloat16))

  def loop(x, table):
    step = lambda i, h: h + ops.matmul(
        h, ops.transposed_weights(table, "bfloat16"), "bfloat16")[:, :64]
    return jax.lax.fori_loop(0, 3, step, x)

  hlo = jax.jit(loop).lower(x, table).compile().as_text()
  entry = next(c for c in hlo.split("\n\n") if c.startswith("ENTRY"))
  assert "while(" in entry and hlo.count("conditional(") == entry.count("conditional(") == 1
  rows = [jax.jit(lambda x: ops.matmul(x, w, "bfloat16"))(x[:n]) for n in (1, 5, 40)]
  np.testing.assert_array_equal(rows[0], rows[2][:1], err_msg=CPU)
  np.testing.assert_array_equal(rows[1], rows[2][:5], err_msg=CPU)
  np.testing.assert_allclose(rows[2], ops.einsum("nd,vd->nv", x, table, "bfloat16"),
                             rtol=1e-5, atol=1e-4)


def test_layer_norm_is_haiku_s_in_value_gradient_and_parameter_names():
  """`layers.LayerNorm` computes `hk.LayerNorm`'s function with its own gradient: the
  same outputs and gradients for x, scale and offset (random non-trivial scale and
  offset), and the same parameter names, so checkpoints of either load in the other."""
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 16)) * 3 + 1
  ours = hk.without_apply_rng(hk.transform(lambda x: layers.LayerNorm(name="norm")(x)))
  class HaikuNorm(hk.Module):  # layers.LayerNorm before it had its own gradient
    def __call__(self, x):
      return hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, name="ln")(x)
  theirs = hk.without_apply_rng(hk.transform(lambda x: HaikuNorm(name="norm")(x)))
  params = ours.init(jax.random.PRNGKey(1), x)
  assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(
      theirs.init(jax.random.PRNGKey(1), x))
  params = jax.tree_util.tree_map(
      lambda v: v + jax.random.normal(jax.random.PRNGKey(2), v.shape), params)
  w = jax.random.normal(jax.random.PRNGKey(3), x.shape)
  loss = lambda f: lambda p, x: jnp.sum(jnp.sin(f.apply(p, x)) * w)
  got = jax.value_and_grad(loss(ours), argnums=(0, 1))(params, x)
  want = jax.value_and_grad(loss(theirs), argnums=(0, 1))(params, x)
  for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_rounded_products_move_the_fewest_elements():
  """A weight gradient contracts over the tokens, the first axis of both operands: one
  of them must be transposed. For the output layer's (`[tokens, vocab]` cotangent,
  `[tokens, d]` input) `_rounded_dot` moves the input and the `[d, vocab]` product
  rather than the cotangent."""
  size = {"c": 512, "v": 8000, "d": 128}
  as_given = ops._transposed_elements("cv", "cd", "vd", size)
  swapped = ops._transposed_elements("cd", "cv", "vd", size)
  assert (as_given, swapped) == (512 * 8000, 512 * 128 + 128 * 8000)
  assert ops._transposed_elements("mk", "kn", "mn",
                                     {"m": 4, "k": 3, "n": 2}) == 0  # already row-major




def test_an_index_summed_within_one_operand_is_refused():
  with pytest.raises(ValueError, match="summed away"):
    ops.einsum("ij,jk->k", jnp.ones((2, 3)), jnp.ones((3, 4)), "bfloat16")
