"""This machine's jitted matmul throughput, the ceiling for every other figure.

  python bench/matmul_ceiling.py [--n 2048] [--repeats 20]
"""

import argparse
import time

import jax
import jax.numpy as jnp

from common import machine, report


def measure(n: int, dtype, repeats: int) -> float:
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), dtype)
  b = jax.random.normal(jax.random.PRNGKey(1), (n, n), dtype)
  f = jax.jit(lambda x, y: x @ y)
  f(a, b).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(a, b).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2 * n ** 3 / best / 1e9


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--n", type=int, default=2048)
  p.add_argument("--repeats", type=int, default=20)
  args = p.parse_args()
  result = {"benchmark": "matmul_ceiling", "n": args.n,
            "float32_gflops": round(measure(args.n, jnp.float32, args.repeats), 1),
            "bfloat16_gflops": round(measure(args.n, jnp.bfloat16, args.repeats), 1),
            **machine()}
  report(result)


if __name__ == "__main__":
  main()
