"""Minimum Bayes risk (MBR) choice against the beam's best, on the validation set.

  python bench/tune_mbr.py --workdir RUN_DIR [--checkpoint averaged] [--beams 5,10]
      [--alpha 1.3] [--samples 0] [--temperature 1.0] [--top-p 1.0]

Decodes the run's validation split once per beam size, keeping every beam's finished
hypotheses (and, with --samples N, N random samples per sentence), then scores, with
sacreBLEU and lowercased tokenized BLEU, the beam's best and the MBR choice for each
utility and weighting (seq2seq/decoding/mbr.py). With samples, the hypotheses are the beam's and
the samples, and the samples are the pseudo-references (uniform weights, an unbiased
estimate of the expected utility under the model). Only validation data is read.
"""

import argparse
import itertools
import time

import numpy as np
import sacrebleu

from seq2seq.data import data_source
from seq2seq.decoding import mbr
from seq2seq.decoding.engine_io import Sampling
from seq2seq.decoding.translator import Translator
from seq2seq.rundir import run_files
from seq2seq.runtime import setup_cli_logging
from seq2seq.scoring import lowercase_tokenized_bleu

from common import add_results_flag, machine, report


def scored(name: str, hyps: list[str], refs: list[str], seconds: float) -> dict:
  row = {"system": name, "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
         "bleu_lc_tok": round(lowercase_tokenized_bleu(hyps, refs), 2),
         "seconds": round(seconds, 1)}
  print(row, flush=True)
  return row


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--beams", default="5,10")
  p.add_argument("--alpha", type=float, default=None, help="default: the run's")
  p.add_argument("--samples", type=int, default=0)
  p.add_argument("--temperature", type=float, default=1.0)
  p.add_argument("--top-p", type=float, default=1.0)
  add_results_flag(p)
  args = p.parse_args()
  setup_cli_logging()
  cfg = run_files.load_config(args.workdir)
  ds = data_source.load_split(cfg.data, cfg.data.val_split)
  sources, refs = list(ds["src"]), list(ds["tgt"])
  translator = Translator.load(args.workdir, args.checkpoint)
  alpha = translator.settings(alpha=args.alpha).alpha
  samples, sample_seconds = None, 0.0
  if args.samples:
    t = time.perf_counter()
    draws = translator.translate(sources, nbest=args.samples, sampling=Sampling(
        temperature=args.temperature, top_p=args.top_p))
    samples = [[h.text for h in d] for d in draws]
    sample_seconds = time.perf_counter() - t
    print(f"{args.samples} samples per sentence in {sample_seconds:.0f} s", flush=True)
  rows = []
  for beam in (int(x) for x in args.beams.split(",")):
    t = time.perf_counter()
    nbest = translator.translate(sources, beam_size=beam, alpha=alpha, nbest=beam)
    search = time.perf_counter() - t
    rows.append(dict(scored(f"beam {beam}, best", [h[0].text for h in nbest], refs, search),
                     beam=beam))
    for utility, weights in itertools.product(mbr.UTILITIES, mbr.WEIGHTS):
      t = time.perf_counter()
      chosen = [h[mbr.choose([x.text for x in h], [x.score for x in h], utility, weights)].text
                for h in nbest]
      rows.append(dict(scored(f"beam {beam}, MBR {utility} {weights}", chosen, refs,
                              search + time.perf_counter() - t), beam=beam))
    if samples is not None:
      for utility in mbr.UTILITIES:
        t = time.perf_counter()
        matrix = mbr.bleu_matrix if utility == "bleu" else mbr.chrf_matrix
        chosen = []
        for h, s in zip(nbest, samples):
          pool = [x.text for x in h] + s
          chosen.append(pool[int(np.argmax(matrix(pool, s).mean(axis=1)))])
        rows.append(dict(scored(f"beam {beam} + {args.samples} samples, MBR {utility}",
                                chosen, refs, search + sample_seconds + time.perf_counter() - t),
                         beam=beam))
  report(args.results, {"benchmark": "tune_mbr", "workdir": args.workdir, "checkpoint": args.checkpoint,
          "split": cfg.data.val_split, "alpha": alpha, "samples": args.samples,
          "temperature": args.temperature, "top_p": args.top_p, "results": rows,
          "best": max(rows, key=lambda r: r["bleu"]), **machine()})


if __name__ == "__main__":
  main()
