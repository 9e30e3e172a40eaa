"""Tune beam size, length penalty and output length limit on the validation set.

  python bench/tune_decoding.py --workdir RUN_DIR [--checkpoint averaged]
      [--beams 4,5,8] [--alphas 0.6,1.0] [--len-a 1.5] [--beam-stops exact,current]

Decodes the run's validation split once per setting and prints sacreBLEU for each, with
the output/reference length ratio and brevity penalty behind it, best last, with a JSON
line. Only validation data is read: the test split is for the end.
"""

import argparse
import itertools
import time

import sacrebleu

from seq2seq.data import data_source
from seq2seq.decoding.translator import Translator
from seq2seq.rundir import run_files
from seq2seq.runtime import setup_cli_logging
from seq2seq.scoring import lowercase_tokenized_bleu

from common import add_results_flag, machine, report


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--workdir", required=True)
  p.add_argument("--checkpoint", default="averaged")
  p.add_argument("--beams", default="4,5,8")
  p.add_argument("--alphas", default="0.6,1.0")
  p.add_argument("--len-a", default="1.5", help="output limits a * source length + b")
  p.add_argument("--beam-stops", default="exact",
                 help="when beam search ends a sentence (decode.beam_search's stop)")
  add_results_flag(p)
  args = p.parse_args()
  setup_cli_logging()
  cfg = run_files.load_config(args.workdir)
  ds = data_source.load_split(cfg.data, cfg.data.val_split)
  sources, refs = list(ds["src"]), list(ds["tgt"])
  rows = []
  for len_a, stop in itertools.product((float(x) for x in args.len_a.split(",")),
                                       args.beam_stops.split(",")):
    translator = Translator.load(args.workdir, args.checkpoint, max_len_a=len_a,
                                 beam_stop=stop)
    for beam, alpha in itertools.product((int(x) for x in args.beams.split(",")),
                                         (float(x) for x in args.alphas.split(","))):
      t = time.perf_counter()
      hyps = translator.translate(sources, beam_size=beam, alpha=alpha)
      score = sacrebleu.corpus_bleu(hyps, [refs])
      rows.append({"beam": beam, "alpha": alpha, "max_len_a": len_a, "beam_stop": stop,
                   "bleu": round(score.score, 2), "length_ratio": round(score.ratio, 3),
                   "bp": round(score.bp, 3),
                   "bleu_lc_tok": round(lowercase_tokenized_bleu(hyps, refs), 2),
                   "seconds": round(time.perf_counter() - t, 1)})
      print(rows[-1], flush=True)
  best = max(rows, key=lambda r: r["bleu"])
  report(args.results, {"benchmark": "tune_decoding", "workdir": args.workdir, "checkpoint": args.checkpoint,
          "split": cfg.data.val_split, "results": rows, "best": best, **machine()})


if __name__ == "__main__":
  main()
