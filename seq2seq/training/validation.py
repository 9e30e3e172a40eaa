"""Validation during training: loss, accuracy and greedy BLEU of the run's parameters."""

from __future__ import annotations

from typing import Iterator

import jax
import numpy as np
import sacrebleu

from seq2seq.config import Config
from seq2seq.data import corpus, input_pipeline
from seq2seq.decoding.translator import Translator
from seq2seq.training import distributed
from seq2seq.training.train_step import DataParallelSteps


class Validation:
  """Validation loss and greedy BLEU of a run's parameters. With several processes,
  process p decodes sentences p, p + P, ... and all gather the result, so every process
  computes the same BLEU and takes the same decisions."""

  def __init__(self, cfg: Config, steps: DataParallelSteps, translator: Translator,
               val_corpus: corpus.EncodedCorpus, refs: list[str]):
    self.steps, self.translator, self.corpus = steps, translator, val_corpus
    self.lengths = input_pipeline.LengthBuckets.from_config(cfg.data, cfg.model.max_len)
    n = cfg.train.eval_max_sentences or len(val_corpus)
    # Several directions: the first n of each, and BLEU per direction.
    self.names = val_corpus.names
    rows = (np.arange(min(n, len(val_corpus))) if val_corpus.direction is None else
            np.concatenate([np.flatnonzero(val_corpus.direction == k)[:n]
                            for k in range(len(self.names))]))
    self.sources = [val_corpus.src[i] for i in rows]
    self.refs = [refs[i] for i in rows]
    self.direction = None if val_corpus.direction is None else val_corpus.direction[rows]

  def loss_batches(self) -> Iterator[input_pipeline.Batch]:
    """Batches of 64 rows, this process's rows of each on its devices."""
    for batch in input_pipeline.eval_batches(self.corpus, 64, self.lengths,
                                             self.steps.num_devices):
      yield self.steps.put_batch(input_pipeline.local_rows(batch, jax.process_index(),
                                                           jax.process_count()))

  def my_sources(self) -> list[np.ndarray]:
    return self.sources[jax.process_index()::jax.process_count()]

  def lower(self, params) -> Iterator[tuple[str, jax.stages.Lowered]]:
    """Its programs (the loss of each batch shape, the greedy search of each), lowered:
    compiled before the first update, a search that cannot compile fails before training."""
    seen = set()
    for batch in self.loss_batches():
      if (shape := (batch.src.shape, batch.tgt.shape)) not in seen:
        seen.add(shape)
        yield (f"validation loss {batch.src.shape[0]}x{batch.tgt.shape[1]}",
               self.steps.eval_step.lower(params, batch))
    for lowered in self.translator.lower_searches(
        self.my_sources(), params=distributed.local_copy(params), beam_size=1):
      yield "validation search", lowered

  def loss(self, params) -> dict[str, float]:
    totals: dict[str, float] = {}
    for batch in self.loss_batches():
      for k, v in jax.device_get(self.steps.eval_step(params, batch)).items():
        totals[k] = totals.get(k, 0.0) + float(v)
    n = max(totals["tokens"], 1.0)
    return {"loss": totals["loss"] / n, "nll": totals["nll"] / n,
            "accuracy": totals["correct"] / n}

  def translate(self, params) -> list[str]:
    found = self.translator.translate_ids(self.my_sources(),
                                          params=distributed.local_copy(params), beam_size=1)
    gathered = distributed.gather_texts([self.translator.detokenize(h[0][0]) for h in found])
    hyps = [""] * len(self.sources)
    for p, texts in enumerate(gathered):
      hyps[p::jax.process_count()] = texts
    return hyps

  def bleu(self, hyps: list[str]) -> dict[str, float]:
    """{"bleu": corpus BLEU}; with several directions, each direction's
    ("bleu_en-de", ...) and "bleu", their mean (what picks the best checkpoint)."""
    if self.direction is None:
      return {"bleu": sacrebleu.corpus_bleu(hyps, [self.refs]).score}
    scores = {}
    for k, name in enumerate(self.names):
      rows = np.flatnonzero(self.direction == k)
      scores[f"bleu_{name}"] = sacrebleu.corpus_bleu(
          [hyps[i] for i in rows], [[self.refs[i] for i in rows]]).score
    return {"bleu": float(np.mean(list(scores.values()))), **scores}
