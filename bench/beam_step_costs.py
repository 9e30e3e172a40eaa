"""Where a beam-search step goes: its parts timed alone, in one process, alternating.

  python bench/beam_step_costs.py --workdir RUN_DIR [--checkpoint averaged] \
      [--sentences 64] [--beam 5] [--rounds 5] [--compare-ctranslate2]

For `--sentences` x `--beam` hypotheses (a decoding batch) of the run's model, each
variant runs 20 steps in a `fori_loop` and reports milliseconds per step:
- `model L=N`: `Model.decode_step` over a self-attention cache of N positions;
- `+ whole reorder` / `+ origins reorder`: the same, with the cache reordered with the
  beams: every position moved into its hypothesis' row after each step
  (`kv_cache.settled`), or as the model does it, only the table of the rows that hold
  each position, which the next step's attention reads them from (`Model.reorder_cache`,
  `kv_cache`; the steps start at position 0, so 1-3 blocks);
- `search only`: `decode.beam_search` over the model's vocabulary with constant logits
  (no model; EOS never chosen, so it runs every step): the search's own work, mostly
  the log-sum-exp and the grouped top-k over `[rows, vocab]`;
- `log-sum-exp`, `top_k_rows`, `lax.top_k`: those parts alone on `[rows, vocab]`;
  `jnp.argmax` and `argmax_rows` (greedy search's choice) likewise.

With `--compare-ctranslate2`, the checkpoint is exported to CTranslate2 (float32, one
thread per core) and a whole CTranslate2 beam step is timed on the same sources and
hypotheses: `translate_batch` forced to decode exactly 1 and exactly 1 + 20 positions
(`min_decoding_length = max_decoding_length`, so no hypothesis ends early), the
difference over 20. It holds everything CTranslate2 does per step (decoder, output
layer, softmax, top-k, cache reorder); the JAX step to set against it is
`model L=32 + origins reorder` plus `search only`.
"""

import argparse
import os
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from seq2seq.decoding import decode
from seq2seq.decoding.translator import Translator
from seq2seq.model import kv_cache
from seq2seq.numerics import row_select
from seq2seq.rundir import ctranslate2_model
from seq2seq.vocab import BOS_ID, EOS_ID, PAD_ID

from common import alternate, machine, report

STEPS = 20


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--sentences", type=int, default=64)
  p.add_argument("--beam", type=int, default=5)
  p.add_argument("--source-length", type=int, default=24)
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--compare-ctranslate2", action="store_true",
                 help="also time a CTranslate2 float32 beam step on the same hypotheses")
  args = p.parse_args()
  translator = Translator.load(args.workdir, args.checkpoint)
  model, params = translator.model, translator.params
  B, W, V = args.sentences, args.beam, translator.model_cfg.vocab_size
  R = B * W
  src = np.random.default_rng(0).integers(4, V, (B, args.source_length)).astype(np.int32)

  def model_steps(length: int, reorder):
    @jax.jit
    def run(params, src):
      cache, source = model.init_cache(params, model.encode(params, src), src, length, W)

      def body(i, carry):
        ids, cache = carry
        logits, cache = model.decode_step(params, ids, cache, source)
        ids = jnp.argmax(logits, -1).astype(jnp.int32)
        if reorder is not None:  # a parent within each sentence's beams, from the ids
          cache = reorder(cache, (jnp.arange(R) // W) * W + ids % W)
        return ids, cache
      return jax.lax.fori_loop(0, STEPS, body, (jnp.full((R,), BOS_ID, jnp.int32), cache))[0]
    return lambda: run(params, src).block_until_ready()

  logits = jax.random.normal(jax.random.PRNGKey(1), (R, V)).at[:, EOS_ID].set(-1e4)

  @jax.jit
  def search_only(logits):
    step = lambda ids, cache, source: (logits + (ids[:, None] % 3) * 1e-3, cache)
    return decode.beam_search(step, {"unused": jnp.zeros((R, 1))},
                              jnp.full((B,), STEPS, jnp.int32), STEPS, W, 1.0, bos_id=BOS_ID,
                              eos_id=EOS_ID, pad_id=PAD_ID, nbest=1)[1]

  def part(fn):
    @jax.jit
    def run(x):
      def body(i, acc):
        return acc + fn(x + acc * 1e-6)
      return jax.lax.fori_loop(0, STEPS, body, jnp.zeros((R, 1)))
    return lambda: run(logits).block_until_ready()

  def whole_reorder(cache, parents_R):  # every position moved into its hypothesis' row now
    return kv_cache.settled(kv_cache.reorder(cache, parents_R), W)

  variants = {}
  for length in (16, 32, 64):
    variants[f"model L={length}"] = model_steps(length, None)
    variants[f"model L={length} + whole reorder"] = model_steps(length, whole_reorder)
    variants[f"model L={length} + origins reorder"] = model_steps(length, model.reorder_cache)
  variants["search only"] = lambda: search_only(logits).block_until_ready()
  variants["log-sum-exp"] = part(lambda x: jax.nn.logsumexp(x, -1, keepdims=True))
  variants["top_k_rows"] = part(lambda x: row_select.top_k_rows(x, 2 * W)[0][:, :1])
  variants["lax.top_k"] = part(lambda x: jax.lax.top_k(x, 2 * W)[0][:, :1])
  variants["jnp.argmax"] = part(lambda x: jnp.argmax(x, -1)[:, None].astype(x.dtype))
  variants["argmax_rows"] = part(lambda x: row_select.argmax_rows(x)[:, None].astype(x.dtype))
  if args.compare_ctranslate2:
    tmp = tempfile.TemporaryDirectory()
    path = ctranslate2_model.export_ctranslate2(args.workdir, Path(tmp.name) / "float32", args.checkpoint)
    ct2 = ctranslate2_model.import_ctranslate2().Translator(str(path), device="cpu", compute_type="float32",
                                                  intra_threads=os.cpu_count())
    pieces = [translator.tokenizer.pieces(row) for row in src]

    def ct2_positions(n: int):
      return lambda: ct2.translate_batch(pieces, beam_size=W, min_decoding_length=n,
                                         max_decoding_length=n, max_batch_size=B)
    variants["ctranslate2 1 position"] = ct2_positions(1)
    variants[f"ctranslate2 {1 + STEPS} positions"] = ct2_positions(1 + STEPS)
  for run in variants.values():
    run()  # compile
  seconds = alternate(variants, args.rounds)
  ms = {name: round(float(np.median(s)) / STEPS * 1e3, 2) for name, s in seconds.items()}
  if args.compare_ctranslate2:
    one, many = ms.pop("ctranslate2 1 position"), ms.pop(f"ctranslate2 {1 + STEPS} positions")
    # ms holds each variant's time over STEPS: these two are whole searches.
    ms["ctranslate2 beam step"] = round(many - one, 2)
    ms["jax beam step (L=32)"] = round(ms["model L=32 + origins reorder"] + ms["search only"],
                                       2)
  for name, value in ms.items():
    print(f"{name:32s} {value:7.2f} ms per step")
  report({"benchmark": "beam_step_costs", "hypotheses": R, "vocab": V,
          "ms_per_step_median": ms, **machine()})


if __name__ == "__main__":
  main()
