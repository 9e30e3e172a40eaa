"""One sentence's cross-attention: the weights of a translation, and their heatmap."""

from __future__ import annotations

import os

import numpy as np

from seq2seq.decoding.engine import Engine


def attention(engine: Engine, text: str, beam_size: int = 1
              ) -> tuple[str, list[str], list[str], np.ndarray]:
  """Translates one sentence: (translation, source pieces, target pieces, cross-attention
  weights [target, source], mean over the decoder's layers and heads; EOS included)."""
  hyp = engine.translate([text], beam_size=beam_size, batch_size=1, nbest=1,
                         split_sentences=False)[0][0]
  found = engine.align([text], [hyp.ids])[0]
  if found.weights is None:
    raise ValueError("attention needs the JAX engine: this engine returns none")
  return hyp.text, found.source_pieces, found.target_pieces, found.weights


def plot_attention(engine: Engine, text: str, path: str | os.PathLike,
                   beam_size: int = 1) -> str:
  """Translates one sentence and writes a heatmap of its cross-attention (mean over the
  decoder's layers and heads; source pieces x target pieces), like Joey NMT's plots."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  translation, src_pieces, tgt_pieces, weights = attention(engine, text, beam_size)
  fig, ax = plt.subplots(figsize=(max(4, 0.45 * len(src_pieces)), max(3, 0.4 * len(tgt_pieces))))
  ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
  ax.set_xticks(range(len(src_pieces)), src_pieces, rotation=90)
  ax.set_yticks(range(len(tgt_pieces)), tgt_pieces)
  ax.set_xlabel("source")
  ax.set_ylabel("translation")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return translation
