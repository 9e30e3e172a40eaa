"""Translate text with a trained model: the `Translator` Python API.

    from seq2seq import Translator
    t = Translator.load("runs/multi30k")
    t.translate(["A dog runs."], beam_size=5)

Sentences are sorted by length and decoded in length-bucketed batches of fixed row
count (a handful of compiled shapes), then returned in the input order.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Sequence

import jax
import numpy as np

from seq2seq import checkpoint, decode
from seq2seq.config import Config, DecodeConfig, ModelConfig
from seq2seq.input_pipeline import bucket_length, encode_texts, split_lines
from seq2seq.model import Model
from seq2seq.tokenizer import EOS_ID, PAD_ID, Tokenizer

log = logging.getLogger(__name__)

# Padded source lengths for decoding batches.
DECODE_BUCKETS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


@dataclasses.dataclass
class Hypothesis:
  text: str
  score: float
  ids: list[int]


class Translator:
  """A model, its parameters and tokenizer, with compiled search functions reused across calls."""

  def __init__(self, model_cfg: ModelConfig, params, tokenizer: Tokenizer,
               decode_cfg: DecodeConfig = DecodeConfig()):
    if tokenizer.vocab_size != model_cfg.vocab_size:
      raise checkpoint.CheckpointError(
          f"tokenizer has {tokenizer.vocab_size} pieces but the model's embedding has "
          f"{model_cfg.vocab_size} rows: the tokenizer does not belong to this checkpoint")
    self.model_cfg, self.params, self.tokenizer = model_cfg, params, tokenizer
    self.decode_cfg = decode_cfg
    self.model = Model(model_cfg)
    self._search = jax.jit(
        functools.partial(decode.translate_ids, self.model),
        static_argnames=("beam_size", "alpha", "max_len_a", "max_len_b", "max_steps"))

  @classmethod
  def load(cls, workdir: str | os.PathLike, checkpoint_name: str = "best",
           **decode_overrides) -> "Translator":
    """Loads a run directory written by train.py (config, tokenizer, parameters)."""
    cfg: Config = checkpoint.load_config(workdir)
    tok = checkpoint.load_tokenizer(workdir)
    params, _ = checkpoint.load_params(workdir, checkpoint_name, cfg.model)
    decode_cfg = dataclasses.replace(cfg.decode, **decode_overrides)
    return cls(cfg.model, params, tok, decode_cfg)

  def encode(self, texts: Sequence[str], line_numbers: Sequence[int] | None = None
             ) -> list[np.ndarray]:
    """Source ids with EOS; lines longer than the model's maximum are truncated, with a
    warning that names the line (1-based, `line_numbers[i]` for `texts[i]` if given)."""
    ids = encode_texts(self.tokenizer, texts)
    limit = self.model_cfg.max_len
    for i, x in enumerate(ids):
      if len(x) > limit:
        number = line_numbers[i] if line_numbers is not None else i + 1
        log.warning("line %d: %d pieces exceed the model's maximum of %d; translating "
                    "only the first %d", number, len(x), limit, limit - 1)
        ids[i] = np.concatenate([x[:limit - 1], [EOS_ID]]).astype(np.int32)
    return ids

  def translate_ids(self, src_ids: Sequence[np.ndarray], params=None, beam_size: int | None = None,
                    alpha: float | None = None, batch_size: int | None = None,
                    ) -> list[list[tuple[np.ndarray, float]]]:
    """Searches each id sequence; returns, per input, the W hypotheses (ids, score) best first."""
    c = self.decode_cfg
    beam_size = c.beam_size if beam_size is None else beam_size
    alpha = c.alpha if alpha is None else alpha
    batch_size = batch_size or c.batch_size
    params = self.params if params is None else params
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    results: list = [None] * len(src_ids)
    for start in range(0, len(order), batch_size):
      chunk = order[start:start + batch_size]
      length = bucket_length(max(len(src_ids[i]) for i in chunk), DECODE_BUCKETS)
      src = np.full((batch_size, length), PAD_ID, np.int32)
      src[:, 0] = EOS_ID  # filler rows: a one-token source, discarded below
      for row, i in enumerate(chunk):
        src[row, :] = PAD_ID
        src[row, :len(src_ids[i])] = src_ids[i]
      max_steps = decode.max_steps_for(length, c.max_len_a, c.max_len_b, self.model_cfg.max_len)
      seqs, scores = self._search(params, src, beam_size=beam_size, alpha=float(alpha),
                                  max_len_a=c.max_len_a, max_len_b=c.max_len_b,
                                  max_steps=max_steps)
      seqs, scores = np.asarray(seqs), np.asarray(scores)
      for row, i in enumerate(chunk):
        results[i] = [(seqs[row, k], float(scores[row, k])) for k in range(seqs.shape[1])]
    return results

  def translate(self, texts: Sequence[str], beam_size: int | None = None,
                alpha: float | None = None, nbest: int = 0, batch_size: int | None = None):
    """Translates each text. Empty or whitespace-only texts translate to "".

    Returns:
      A list of strings; with `nbest=N > 0`, a list of N `Hypothesis` per input, best first.
    """
    texts = list(texts)
    beam = self.decode_cfg.beam_size if beam_size is None else beam_size
    if nbest > max(beam, 1):
      raise ValueError(f"nbest={nbest} needs a beam of at least {nbest} (beam_size={beam})")
    nonempty = [i for i, t in enumerate(texts) if t.strip()]
    ids = self.encode([texts[i] for i in nonempty], [i + 1 for i in nonempty]) if nonempty else []
    found = self.translate_ids(ids, beam_size=beam, alpha=alpha, batch_size=batch_size)
    hyps: list[list[Hypothesis]] = [[Hypothesis("", 0.0, [])] for _ in texts]
    for i, options in zip(nonempty, found):
      hyps[i] = [Hypothesis(self._detok(seq), score, self._cut(seq)) for seq, score in options]
    if nbest:
      return [h[:nbest] for h in hyps]
    return [h[0].text for h in hyps]

  @staticmethod
  def _cut(seq: np.ndarray) -> list[int]:
    seq = [int(t) for t in seq]
    return seq[:seq.index(EOS_ID)] if EOS_ID in seq else [t for t in seq if t != PAD_ID]

  def _detok(self, seq: np.ndarray) -> str:
    return self.tokenizer.decode([self._cut(seq)])[0]


# --------------------------------------------------------------------- attention plot


def plot_attention(translator: Translator, text: str, path: str | os.PathLike,
                   beam_size: int = 1) -> str:
  """Translates one sentence and writes a heatmap of its cross-attention (last decoder
  layer, mean over heads; source pieces x target pieces), like Joey NMT's plots."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  src = translator.encode([text])[0]
  hyp = translator.translate_ids([src], beam_size=beam_size, batch_size=1)[0][0][0]
  out = translator._cut(hyp) + [EOS_ID]
  tgt_in = np.array([[2] + out[:-1]], np.int32)  # BOS + output
  probs = translator.model.cross_attention(translator.params, src[None], tgt_in)
  weights = np.asarray(probs[-1, 0].mean(axis=0))  # [T, S]
  src_pieces, tgt_pieces = translator.tokenizer.pieces(src), translator.tokenizer.pieces(out)
  fig, ax = plt.subplots(figsize=(max(4, 0.45 * len(src_pieces)), max(3, 0.4 * len(tgt_pieces))))
  ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
  ax.set_xticks(range(len(src_pieces)), src_pieces, rotation=90)
  ax.set_yticks(range(len(tgt_pieces)), tgt_pieces)
  ax.set_xlabel("source")
  ax.set_ylabel("translation")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return translator._detok(hyp)


# ------------------------------------------------------------------------------ CLI


def _read_input(stream, strict: bool) -> list[str]:
  """Lines of a byte stream; only '\\n' ends a line, so the output count always matches."""
  return split_lines(stream.read(), "input", strict)


def _one_line(text: str) -> str:
  # Byte fallback could decode a newline piece: keep one output line per input line.
  return " ".join(text.splitlines())


def main(argv=None) -> None:
  import argparse
  import sys

  from seq2seq.train_lib import enable_compilation_cache, quiet_libraries

  parser = argparse.ArgumentParser(
      description="Translate lines (stdin -> stdout by default) with a trained run.")
  parser.add_argument("--workdir", required=True, help="run directory written by train.py")
  parser.add_argument("--checkpoint", default="best",
                      help="best, latest, averaged, or a checkpoint step directory")
  parser.add_argument("--beam", type=int, default=None, help="beam size (1 = greedy)")
  parser.add_argument("--alpha", type=float, default=None, help="length penalty exponent")
  parser.add_argument("--nbest", type=int, default=0,
                      help="write N hypotheses per line as 'LINE ||| text ||| score'")
  parser.add_argument("--batch-size", type=int, default=None)
  parser.add_argument("--input", default="-", help="input file (default: stdin)")
  parser.add_argument("--output", default="-", help="output file (default: stdout)")
  parser.add_argument("--strict", action="store_true",
                      help="reject invalid UTF-8 instead of replacing it")
  parser.add_argument("--interactive", action="store_true",
                      help="translate each line as it is typed")
  parser.add_argument("--attention-plot", default=None, metavar="FILE.png",
                      help="translate one sentence and plot its cross-attention")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
  quiet_libraries()
  enable_compilation_cache()
  try:
    translator = Translator.load(args.workdir, args.checkpoint)
  except (checkpoint.CheckpointError, ValueError) as e:
    sys.exit(f"error: {e}")
  beam = translator.decode_cfg.beam_size if args.beam is None else args.beam
  opts = dict(beam_size=beam, alpha=args.alpha, batch_size=args.batch_size)

  if args.interactive:
    for line in sys.stdin:
      print(_one_line(translator.translate([line.rstrip("\n")], **opts)[0]), flush=True)
    return
  src = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
  try:
    lines = _read_input(src, args.strict)
  except ValueError as e:
    sys.exit(f"error: {args.input if args.input != '-' else 'stdin'}: {e}")
  if args.attention_plot:
    if len(lines) != 1:
      sys.exit(f"error: --attention-plot takes exactly one input line, got {len(lines)}")
    print(_one_line(plot_attention(translator, lines[0], args.attention_plot, beam)))
    log.info("wrote %s", args.attention_plot)
    return
  out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
  if args.nbest:
    for number, hyps in enumerate(translator.translate(lines, nbest=args.nbest, **opts), 1):
      for h in hyps:
        out.write(f"{number} ||| {_one_line(h.text)} ||| {h.score:.4f}\n")
  else:
    for text in translator.translate(lines, **opts):
      out.write(_one_line(text) + "\n")
  out.flush()
