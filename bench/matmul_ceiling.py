"""This machine's jitted matmul throughput, the ceiling for every other figure.

  python bench/matmul_ceiling.py [--n 2048] [--repeats 20] [--shapes 2048x128x512,...]

`--shapes MxKxN,...` also times `[M, K] x [K, N]` products of those sizes (the model's
own matmuls are much smaller than the square one) in every operand/product dtype.
"""

import argparse
import time

import jax
import jax.numpy as jnp

from common import add_results_flag, machine, report


def measure(n: int, dtype, repeats: int, product_dtype=None, shape=None) -> float:
  """GFLOP/s of an n x n matmul (or `shape` = (M, K, N)) of `dtype` operands, its
  products in `product_dtype` (default: `dtype`)."""
  m, k, n_out = shape or (n, n, n)
  a = jax.random.normal(jax.random.PRNGKey(0), (m, k), dtype)
  b = jax.random.normal(jax.random.PRNGKey(1), (k, n_out), dtype)
  f = jax.jit(lambda x, y: jax.lax.dot(x, y, preferred_element_type=product_dtype))
  f(a, b).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(a, b).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2 * m * k * n_out / best / 1e9


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--n", type=int, default=2048)
  p.add_argument("--repeats", type=int, default=20)
  p.add_argument("--shapes", default="", help="comma-separated MxKxN products to time too")
  add_results_flag(p)
  args = p.parse_args()
  kinds = {"float32": (jnp.float32, None), "bfloat16": (jnp.bfloat16, None),
           "bfloat16_to_float32": (jnp.bfloat16, jnp.float32)}
  shapes = {}
  for spec in filter(None, args.shapes.split(",")):
    shape = tuple(int(x) for x in spec.split("x"))
    shapes[spec] = {f"{kind}_gflops": round(measure(0, dtype, args.repeats, out, shape), 1)
                    for kind, (dtype, out) in kinds.items()}
  result = {"benchmark": "matmul_ceiling", "n": args.n,
            "float32_gflops": round(measure(args.n, jnp.float32, args.repeats), 1),
            "bfloat16_gflops": round(measure(args.n, jnp.bfloat16, args.repeats), 1),
            # bfloat16 operands, float32 products: what model.matmul_dtype="bfloat16"
            # runs (on CPUs with AMX or AVX-512 BF16, XLA:CPU's fast path; bfloat16
            # products are not)
            "bfloat16_to_float32_gflops": round(
                measure(args.n, jnp.bfloat16, args.repeats, jnp.float32), 1),
            **({"shapes": shapes} if shapes else {}), **machine()}
  report(args.results, result)


if __name__ == "__main__":
  main()
