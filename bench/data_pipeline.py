"""Input pipeline at WMT scale: a synthetic corpus of millions of pairs, encoded and batched.

  python bench/data_pipeline.py [--pairs 5000000] [--workdir /tmp/seq2seq-data-bench] [--keep]

Each phase runs in its own process, so each reports its own peak resident memory:
1. generate: a synthetic parallel corpus written as plain train.{en,de} files, each pair
   drawn from Multi30k's training set: its length pair, and words sampled by frequency
   from Multi30k's English and German vocabularies (never committed; deleted at the end
   unless --keep). val.{en,de} are Multi30k's own.
2. prepare: the steps of `corpus.prepare` (what train.py does before the first
   update), each timed: the text files streamed into an on-disk `datasets` table, the
   pairs cleaned (`seq2seq.data.cleaning`, its filters and their report), SentencePiece
   trained on a sample of `--spm-sentences` drawn from the whole corpus, both sides
   encoded by one streaming pass into memory-mapped id arrays.
3. iterate: the encoded corpus memory-mapped again (as a resumed run sees it) and one
   epoch of training batches built (`TrainBatches`, `--max-tokens` per batch).
4. train: the `small` preset's training steps on batches of that pipeline (the commonest
   batch shape, after compilation), for the ratio batch production / training speed.
"""

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from common import MULTI30K, add_results_flag, machine, peak_rss_mib, report


def du_mib(path: Path) -> float:
  return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def config(args):
  from seq2seq.config import Config, DataConfig, ModelConfig, TrainConfig
  data = DataConfig(dir=str(Path(args.workdir) / "corpus"), max_tokens=args.max_tokens,
                    spm_max_sentences=args.spm_sentences, val_split="val")
  return Config(model=ModelConfig(vocab_size=args.vocab_size), data=data, train=TrainConfig())


# --------------------------------------------------------------------------- phases


def generate(args) -> dict:
  from seq2seq.data.textfiles import read_lines
  t0 = time.time()
  src = [s.split() for s in read_lines(Path(args.multi30k) / "train.en.gz")]
  tgt = [s.split() for s in read_lines(Path(args.multi30k) / "train.de.gz")]
  rng = np.random.default_rng(0)
  out = Path(args.workdir) / "corpus"
  out.mkdir(parents=True, exist_ok=True)
  for split in ("val",):
    for lang in ("en", "de"):
      shutil.copy(Path(args.multi30k) / f"{split}.{lang}.gz", out / f"{split}.{lang}.gz")
  vocab = {}
  for side, sentences in (("en", src), ("de", tgt)):
    words, counts = np.unique(np.array([w for s in sentences for w in s], dtype=object),
                              return_counts=True)
    vocab[side] = (words, counts / counts.sum())
  lengths = np.array([(len(s), len(t)) for s, t in zip(src, tgt)])
  chunk = 100_000
  with open(out / "train.en", "w", encoding="utf-8") as fe, \
       open(out / "train.de", "w", encoding="utf-8") as fd:
    for start in range(0, args.pairs, chunk):
      n = min(chunk, args.pairs - start)
      pair_lengths = lengths[rng.integers(0, len(lengths), n)]
      for side, f, column in (("en", fe, 0), ("de", fd, 1)):
        words, p = vocab[side]
        drawn = words[rng.choice(len(words), int(pair_lengths[:, column].sum()), p=p)]
        text = np.empty(2 * len(drawn), object)  # word, separator, word, ...
        text[0::2], text[1::2] = drawn, " "
        text[2 * np.cumsum(pair_lengths[:, column]) - 1] = "\n"  # after each line's last word
        f.write("".join(text.tolist()))
  return {"phase": "generate", "pairs": args.pairs, "seconds": time.time() - t0,
          "text_mib": du_mib(out), "peak_rss_mib": peak_rss_mib()}


def prepare(args) -> dict:
  """The steps of `corpus.prepare`, each timed."""
  from seq2seq.data import corpus, data_source, tokenizer
  cfg = config(args)
  t = {}
  t0 = time.time()
  data_source.load_split(cfg.data, "train")
  t["to_datasets_s"] = time.time() - t0
  t["peak_rss_mib_after_datasets"] = peak_rss_mib()
  t0 = time.time()
  ds = corpus.training_pairs(cfg)  # the table loaded again (cached), then cleaned
  t["clean_s"] = time.time() - t0
  t["cleaned_pairs"] = len(ds)
  t0 = time.time()
  sample = corpus.tokenizer_sample(ds, cfg.data.spm_max_sentences, cfg.data.seed)
  tok = tokenizer.train(sample, cfg.model.vocab_size, max_sentences=len(sample))
  del sample
  t["tokenizer_s"] = time.time() - t0
  t["peak_rss_mib_after_tokenizer"] = peak_rss_mib()
  Path(args.workdir, "spm.model").write_bytes(tok.model_proto)
  t0 = time.time()
  encoded = corpus.encode_dataset(tok, ds, ids_dir(args))
  t["encode_s"] = time.time() - t0
  return {"phase": "prepare", **t, "pairs": len(encoded),
          "encode_sentences_per_s": 2 * len(encoded) / t["encode_s"],
          "pieces": int(encoded.src.offsets[-1] + encoded.tgt.offsets[-1]),
          "ids_mib": du_mib(ids_dir(args)),
          "datasets_cache_mib": du_mib(Path(os.environ["HF_DATASETS_CACHE"])),
          "peak_rss_mib": peak_rss_mib()}


def ids_dir(args) -> Path:
  return Path(args.workdir) / "ids"


def iterate(args) -> dict:
  from seq2seq.data import corpus, input_pipeline
  cfg = config(args)
  t0 = time.time()
  encoded = corpus.encode_dataset(None, None, ids_dir(args))  # memory-mapped
  batches = input_pipeline.TrainBatches(encoded, cfg.data)
  order = batches.epoch_batches(0)
  plan_s = time.time() - t0
  t0 = time.time()
  tgt_tokens = 0
  for idx in order:
    b = batches.make_batch(idx)
    tgt_tokens += int((b.tgt != 0).sum())
  seconds = time.time() - t0
  return {"phase": "iterate", "open_and_plan_epoch_s": plan_s, "batches": len(order),
          "seconds": seconds, "batches_per_s": len(order) / seconds,
          "tgt_tokens_per_s": tgt_tokens / seconds, "peak_rss_mib": peak_rss_mib()}


def train(args) -> dict:
  import jax

  from seq2seq.config import PRESETS
  from seq2seq.data import corpus, input_pipeline
  from seq2seq.model.transformer import Model
  from seq2seq.training.train_step import DataParallelSteps
  cfg = config(args)
  model_cfg = dataclasses.replace(PRESETS["small"], vocab_size=args.vocab_size)
  encoded = corpus.encode_dataset(None, None, ids_dir(args))
  batches = input_pipeline.TrainBatches(encoded, cfg.data)
  host = [batches.make_batch(i) for i in batches.epoch_batches(0)[:400]]
  shapes = [b.shape for b in host]
  common = max(set(shapes), key=shapes.count)
  host = [b for b in host if b.shape == common]
  steps = DataParallelSteps(cfg, Model(model_cfg))
  state = steps.init_state()
  state, m = steps.train_step(state, steps.put_batch(host[0]))  # compile
  jax.block_until_ready(m)
  t0 = time.time()
  n = min(len(host), args.train_steps)
  for b in host[:n]:
    state, m = steps.train_step(state, steps.put_batch(b))
  jax.block_until_ready(m)
  seconds = time.time() - t0
  return {"phase": "train", "preset": "small", "shape": str(common), "steps": n,
          "batches_per_s": n / seconds, "peak_rss_mib": peak_rss_mib()}


PHASES = {"generate": generate, "prepare": prepare, "iterate": iterate, "train": train}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--pairs", type=int, default=5_000_000)
  p.add_argument("--workdir", default="/tmp/seq2seq-data-bench")
  p.add_argument("--multi30k", default=str(MULTI30K))
  p.add_argument("--vocab-size", type=int, default=8000)
  p.add_argument("--spm-sentences", type=int, default=1_000_000,
                 help="data.spm_max_sentences: sentences sampled to train SentencePiece")
  p.add_argument("--max-tokens", type=int, default=4096, help="tokens per training batch")
  p.add_argument("--train-steps", type=int, default=20)
  p.add_argument("--keep", action="store_true", help="keep the corpus and caches")
  p.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
  add_results_flag(p)
  args = p.parse_args()
  if args.phase:
    print(json.dumps(PHASES[args.phase](args)))
    return
  if not (Path(args.multi30k) / "train.en.gz").exists():
    sys.exit(f"Multi30k not found at {args.multi30k} (--multi30k DIR)")
  work = Path(args.workdir)
  if work.exists():
    shutil.rmtree(work)
  env = dict(os.environ, HF_DATASETS_CACHE=str(work / "hf_datasets"))
  results = {}
  try:
    for phase in PHASES:
      proc = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--phase", phase],
                            env=env, capture_output=True, text=True)
      if proc.returncode:
        sys.exit(f"phase {phase} failed:\n{proc.stderr[-3000:]}")
      results[phase] = json.loads(proc.stdout.strip().splitlines()[-1])
      print(json.dumps(results[phase]), flush=True)
  finally:
    if not args.keep:
      shutil.rmtree(work, ignore_errors=True)
  ratio = results["iterate"]["batches_per_s"] / results["train"]["batches_per_s"]
  report(args.results, {"pairs": args.pairs, "max_tokens": args.max_tokens,
          "encode_sentences_per_s": results["prepare"]["encode_sentences_per_s"],
          "prepare_seconds": {k: results["prepare"][k]
                              for k in ("to_datasets_s", "clean_s", "tokenizer_s", "encode_s")},
          "disk_mib": {"text": results["generate"]["text_mib"],
                       "ids": results["prepare"]["ids_mib"],
                       "datasets_cache": results["prepare"]["datasets_cache_mib"]},
          "batches_per_s": results["iterate"]["batches_per_s"],
          "small_train_batches_per_s": results["train"]["batches_per_s"],
          "batching_over_training": ratio,
          "peak_rss_mib": {k: v["peak_rss_mib"] for k, v in results.items()}, **machine()})


if __name__ == "__main__":
  main()
