"""Training step with the loss's accuracy from argmax against from a max, in one process.

  python bench/loss_argmax_ab.py [PRESET ROWS LENGTH]      # default: compact 128 16

The loss counts the tokens whose label has the largest logit (`loss._is_top`, a max
reduction). Before, it compared `argmax(logits)` with the label, which XLA:CPU runs as a
variadic (value, index) reduction over the `[tokens, vocab]` logits. Builds jitted
training steps of the recipe's model (rotary positions, bfloat16 matmul operands) with
each form on the same random batch, then times them alternately, 10 rounds of 3 steps.
Prints each variant's median and minimum milliseconds per step and every round.
"""

import sys

import jax.numpy as jnp

from seq2seq import loss

from common import alternate, summary, training_steps

RECIPE_MODEL = {"positional": "rotary", "matmul_dtype": "bfloat16"}


def _argmax_is_top(logits_NV, label_logit_N):
  """The previous form: argmax of the logits equals the label (found by its logit)."""
  top_N = jnp.take_along_axis(logits_NV, jnp.argmax(logits_NV, axis=-1)[..., None],
                              axis=-1)[..., 0]
  return (top_N == label_logit_N).astype(jnp.float32)


def main():
  preset, rows, length = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3])) if len(
      sys.argv) > 1 else ("compact", 128, 16)
  max_form = loss._is_top
  variants = {}
  for name, form in (("argmax", _argmax_is_top), ("max", max_form)):
    loss._is_top = form  # read when the step is traced, inside training_steps
    variants[name] = training_steps(preset, rows, length, model=RECIPE_MODEL)
  loss._is_top = max_form
  for name, s in alternate(variants).items():
    print(f"{preset} {rows}x{length} accuracy by {name}, per step: "
          f"{summary([x / 3 for x in s])}")


if __name__ == "__main__":
  main()
