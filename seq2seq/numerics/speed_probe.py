"""The machine probe: which operand dtype this machine multiplies faster, timed once per
machine and kept in a JSON cache, and whether a backend runs rounded products at all.

  rounded_products_unsupported(...)   why a backend cannot run rounded products, or None
  rows_disagree(dtype)                why a row's product depends on the rows beside it, or None
  layer_product_seconds()             training's or decoding's products timed per operand dtype
  fastest_operand_dtype()             float32 or bfloat16 operands, timed on this machine
  cpu_class()                         this CPU's model and class (AMX, AVX-512 BF16, ...)

`seq2seq.numerics.resolve` is its one caller in the package.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from seq2seq.numerics.ops import matmul

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def rounded_products_unsupported(dtype: str, backend: str) -> str | None:
  """Why `backend` cannot run a matmul of `dtype` operands with float32 products, or
  None if it can. XLA:CPU runs it in a library kernel (oneDNN / XNNPACK) and rejects it
  at run time where none takes it ("Unsupported element type for DotThunk"); the probe
  runs once per dtype and backend."""
  x = jax.device_put(np.ones((1, 8, 8), jnp.dtype(dtype)), jax.devices(backend)[0])
  product = jax.jit(lambda a, b: jax.lax.dot_general(
      a, b, (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.float32))
  try:
    product(x, x).block_until_ready()
  except Exception as e:  # noqa: BLE001 (XLA's runtime error names no finer class)
    return str(e).splitlines()[-1][-200:]
  return None


# Row counts whose products `rows_disagree` compares with the same rows of a 320-row
# call: a lone row, the searches' fewest (2), and the tails that AMX's bfloat16 kernels
# computed otherwise (16k + 1, 16k + 2) before `ops.MATMUL_ROW_MULTIPLE`.
_AGREEMENT_ROWS = (1, 2, 3, 5, 17, 18, 33, 63, 65, 100, 129, 130)
_AGREEMENT_SHAPES = ((128, 512), (512, 128), (128, 384))


@functools.lru_cache(maxsize=None)
def rows_disagree(dtype: str, backend: str | None = None) -> str | None:
  """Why `ops.matmul` with `dtype` operands gives a row another product depending on how
  many rows share the call (so that a sentence's translation would depend on its batch),
  or None where every row count compared gives the same rows bit for bit. Compares the
  decoding model's shapes at `_AGREEMENT_ROWS` with a 320-row call (a second or two)."""
  backend = backend or jax.default_backend()
  device = jax.devices(backend)[0]
  key_x, key_w = jax.random.split(jax.random.PRNGKey(0))
  for k_in, n_out in _AGREEMENT_SHAPES:
    x = jax.device_put(jax.random.normal(key_x, (320, k_in)), device)
    w = jax.device_put(jax.random.normal(key_w, (k_in, n_out)).astype(dtype), device)
    product = jax.jit(lambda x, w: matmul(x, w, dtype))
    full = np.asarray(product(x, w))
    for rows in _AGREEMENT_ROWS:
      if not np.array_equal(np.asarray(product(x[:rows], w)), full[:rows]):
        return (f"a {k_in}x{n_out} product of {rows} rows differs from the same rows "
                f"among 320 ({cpu_class()})")
  return None


@functools.lru_cache(maxsize=None)
def layer_product_seconds(backend: str | None = None, use: str = "training"
                          ) -> dict[str, float]:
  """{operand dtype: seconds} of the products of the Multi30k recipe's model (width 128,
  feed-forward 512) for `use`, best of 5 rounds taken in turns, once per process; only
  the dtypes this backend runs. "training": a layer's products for 2,048 tokens, forward
  and backward. "decoding": one decoder step (4 layers, self-attention over 64 cached
  positions each) and the output layer (8,000 pieces), forward, for 64 and for 320 rows
  (a greedy batch, a beam-5 one), as decoding runs it: the weights rounded once, outside
  the step, the attention products in float32 under either dtype (`kv_cache.attend`)."""
  if use not in ("training", "decoding"):
    raise ValueError(f"use must be 'training' or 'decoding', got {use!r}")
  backend = backend or jax.default_backend()
  dtypes = ["float32"] + ([] if rounded_products_unsupported("bfloat16", backend)
                          else ["bfloat16"])
  device = jax.devices(backend)[0]
  shapes = ((2048, 128), (128, 512), (512, 128)) if use == "training" else (
      (64, 128), (320, 128), (128, 384), (128, 128), (128, 512), (512, 128), (128, 8000)
      ) + ((64, 4, 64, 32),) * 4 + ((320, 4, 64, 32),) * 4  # each layer's 64 cached keys
  arrays = [jax.device_put(jax.random.normal(k, s), device)
            for k, s in zip(jax.random.split(jax.random.PRNGKey(0), len(shapes)), shapes)]
  inputs = {d: arrays if use == "training" else  # decoding's weights (2-6) rounded once
            [a.astype(d) if 2 <= i <= 6 else a for i, a in enumerate(arrays)] for d in dtypes}

  def program(dtype):
    def loss(x, w1, w2):
      h = jax.nn.relu(matmul(x, w1, dtype))
      return jnp.sum(matmul(h, w2, dtype) * x)

    def decoder_step(x64, x320, qkv, square, w1, w2, out, *caches):
      def step(h, caches_BHLK):
        # Per layer: self-attention over 64 positions (the keys stand in for the values),
        # projections, the feed-forward; then the output layer.
        for cache_BHLK in caches_BHLK:
          h = matmul(h, qkv, dtype)[:, :128]
          q_BTHK = h.reshape(h.shape[0], 1, 4, 32)
          probs_BHTL = jax.nn.softmax(jnp.einsum("bthk,bhlk->bhtl", q_BTHK, cache_BHLK))
          h = jnp.einsum("bhtl,bhlk->bhtk", probs_BHTL, cache_BHLK).reshape(h.shape)
          for _ in range(3):
            h = matmul(h, square, dtype)
          h = matmul(jax.nn.relu(matmul(h, w1, dtype)), w2, dtype)
        return jnp.sum(matmul(h, out, dtype))
      return step(x64, caches[:4]) + step(x320, caches[4:])
    run = jax.jit(jax.grad(loss, argnums=(0, 1, 2)) if use == "training" else decoder_step)
    jax.block_until_ready(run(*inputs[dtype]))  # compile
    return run

  runs = {d: program(d) for d in dtypes}
  best = {d: float("inf") for d in runs}
  for _ in range(5):
    for d, run in runs.items():
      t = time.perf_counter()
      for _ in range(3):
        jax.block_until_ready(run(*inputs[d]))
      best[d] = min(best[d], (time.perf_counter() - t) / 3)
  return best


def _cpu_info() -> tuple[str, set[str]]:
  """This CPU's model name and flags from /proc/cpuinfo ("", {} where there is none)."""
  try:
    with open("/proc/cpuinfo") as f:
      info = f.read().splitlines()
  except OSError:
    return "", set()
  model = next((x.split(":", 1)[1].strip() for x in info if x.startswith("model name")), "")
  flags = set(next((x.split(":", 1)[1].split() for x in info if x.startswith("flags")), []))
  return model, flags


# The classes of x86 CPU that multiply bfloat16 differently, most capable first.
_CPU_CLASSES = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512 BF16"),
                ("avx512f", "AVX-512"), ("avx2", "AVX2"))


def cpu_class() -> str:
  """This CPU's model and class, e.g. "Intel(R) Xeon(R) Processor, AMX": the class
  (AMX, AVX-512 BF16, AVX-512, AVX2) decides which kernels multiply its products, which
  is what a figure or a failing test on it should name."""
  model, flags = _cpu_info()
  kind = next((name for flag, name in _CPU_CLASSES if flag in flags), "no AVX2")
  return f"{model or 'unknown CPU'}, {kind}"


def _machine_key(backend: str) -> str:
  """The backend, JAX's version and, on a CPU, its model and the flags that decide how
  fast it multiplies bfloat16: what makes two machines time the same."""
  key = f"{backend}|jax {jax.__version__}"
  if backend == "cpu":
    model, flags = _cpu_info()
    if model or flags:
      key += f"|{model}|{' '.join(sorted(flags & {f for f, _ in _CPU_CLASSES}))}"
  return key


def faster_operand_dtype(seconds: dict[str, float]) -> tuple[str, float]:
  """(dtype, float32's seconds over bfloat16's) from `layer_product_seconds`: float32
  unless bfloat16 is at least 5 % faster."""
  ratio = seconds["float32"] / seconds["bfloat16"]
  return ("bfloat16" if ratio >= 1.05 else "float32"), ratio


@functools.lru_cache(maxsize=None)
def fastest_operand_dtype(backend: str | None = None, use: str = "training") -> tuple[str, str]:
  """("bfloat16" or "float32", why): the operand dtype whose products for `use`
  ("training" or "decoding", `layer_product_seconds`) run faster here. bfloat16 operands
  pay only where the CPU multiplies them in hardware (AMX, AVX-512 BF16), and in
  training's large products more than in decoding's small ones: elsewhere XLA converts
  them and float32 is faster (`faster_operand_dtype`). For decoding, bfloat16 is also
  ruled out where a row's product depends on the rows beside it (`rows_disagree`): a
  translation must not depend on its batch. The answer is kept per machine
  and use (`_machine_key`) in $XDG_CACHE_HOME/seq2seq/operand_dtype.json (~/.cache), so
  that a later process (a translation, a server start) times nothing.
  """
  backend = backend or jax.default_backend()
  if why := rounded_products_unsupported("bfloat16", backend):
    return "float32", f"this {backend} backend does not run them ({why})"
  path = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                      "seq2seq", "operand_dtype.json")
  # A probe that times something new gets a new name: no answer of its predecessor is kept.
  key = _machine_key(backend) + {"training": "", "decoding": "|decoding 3"}[use]
  try:
    with open(path) as f:
      known = json.load(f)
  except (OSError, ValueError):
    known = {}
  if isinstance(known.get(key), list) and len(known[key]) == 2:
    return known[key][0], f"{known[key][1]}, timed before on this machine"
  log.info("timing %s's products with float32 and bfloat16 operands on this machine "
           "(once; a few seconds)", use)
  disagree = rows_disagree("bfloat16", backend) if use == "decoding" else None
  if disagree is not None:
    dtype, why = "float32", f"bfloat16 products depend on the batch here: {disagree}"
  else:
    best = layer_product_seconds(backend, use)
    dtype, ratio = faster_operand_dtype(best)
    what = "a layer's products" if use == "training" else "a decoding step's products"
    why = (f"{what} took {best['bfloat16'] * 1e3:.2f} ms with bfloat16 operands "
           f"and {best['float32'] * 1e3:.2f} ms with float32 ({ratio:.2f}x)")
  try:  # a cache that cannot be written only costs the next process the timing
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
      json.dump({**known, key: [dtype, why]}, f, indent=1)
    os.replace(tmp, path)
  except OSError:
    pass
  return dtype, why
