"""The recipe's training step with `layers.LayerNorm`'s own gradient against Haiku's
`hk.LayerNorm` differentiated by JAX, in one process.

  python bench/layer_norm_ab.py [PRESET ROWS LENGTH]       # default: compact 128 16

Builds both jitted steps on the same random batch with the Multi30k recipe's model
(rotary positions, bfloat16 matmul operands, dropout 0.2, label smoothing 0.2, the loss
512 tokens at a time), then times them alternately, 10 rounds of 3 steps each. Prints
each variant's median and minimum milliseconds per step and every round.
"""

import argparse

import haiku as hk
import jax.numpy as jnp

from seq2seq import layers

from common import alternate, summary, training_steps


def haiku_layer_norm(self, x):
  """`layers.LayerNorm.__call__` as it was: `hk.LayerNorm`, gradient by autodiff."""
  ln = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, name="ln")
  return ln(x.astype(jnp.float32)).astype(x.dtype)


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("preset", nargs="?", default="compact")
  p.add_argument("rows", nargs="?", type=int, default=128)
  p.add_argument("length", nargs="?", type=int, default=16)
  args = p.parse_args()
  model = {"positional": "rotary", "matmul_dtype": "bfloat16", "dropout": 0.2}
  build = lambda: training_steps(args.preset, args.rows, args.length, model=model,
                                 loss_chunk=512, label_smoothing=0.2)
  ours = layers.LayerNorm.__call__
  layers.LayerNorm.__call__ = haiku_layer_norm
  variants = {"hk.LayerNorm": build()}
  layers.LayerNorm.__call__ = ours
  variants["layers.layer_norm"] = build()
  for name, s in alternate(variants).items():
    print(f"{args.preset} {args.rows}x{args.length} {name}, per step: "
          f"{summary([x / 3 for x in s])}")


if __name__ == "__main__":
  main()
