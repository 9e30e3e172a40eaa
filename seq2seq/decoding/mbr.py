"""Minimum Bayes risk (MBR) choice among candidate translations of one source.

Beam search returns the hypothesis the model scores highest; MBR returns the candidate
that agrees most with the others: the one with the highest expected utility when every
candidate in turn plays the reference (Kumar & Byrne 2004; Eikema & Aziz 2020;
Freitag et al. 2022). With BLEU as the utility this trades a little model score for
n-grams the candidates share, which is what corpus BLEU rewards.

    expected_utility[i] = sum_j weight[j] * utility(candidate i, reference = candidate j)

Utilities: "bleu" (sentence BLEU on sacreBLEU's 13a tokens, add-one smoothing of the 2-
to 4-gram precisions, Lin & Och 2004) and "chrf" (sacreBLEU's chrF). Weights: "model"
(softmax of the candidates' scores; for beam search these are the length-normalised
log-probabilities) or "uniform" (every candidate one vote). Only text is compared, so
this module imports no model code.
"""

from __future__ import annotations

import collections
import math
from typing import Sequence

import numpy as np

UTILITIES = ("bleu", "chrf")
WEIGHTS = ("uniform", "model")
MAX_ORDER = 4


def _ngrams(tokens: list[str]) -> list[collections.Counter]:
  return [collections.Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
          for n in range(1, MAX_ORDER + 1)]


def bleu_matrix(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
  """U[i, j]: sentence BLEU (0-1) of hypothesis i with reference j."""
  from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
  tokenize = Tokenizer13a()
  cache: dict[str, tuple[int, list[collections.Counter]]] = {}
  for text in (*hypotheses, *references):
    if text not in cache:
      tokens = tokenize(text).split()
      cache[text] = len(tokens), _ngrams(tokens)
  u = np.zeros((len(hypotheses), len(references)))
  for i, h in enumerate(hypotheses):
    hyp_len, hyp_grams = cache[h]
    if hyp_len == 0:
      continue
    for j, r in enumerate(references):
      ref_len, ref_grams = cache[r]
      log_precision = 0.0
      for order in range(MAX_ORDER):
        hyp, ref = hyp_grams[order], ref_grams[order]
        total = max(hyp_len - order, 0)
        matches = sum(min(count, ref[g]) for g, count in hyp.items() if g in ref)
        if order > 0:  # add-one smoothing of the higher orders
          matches, total = matches + 1, total + 1
        if matches == 0:
          log_precision = -math.inf
          break
        log_precision += math.log(matches / total) / MAX_ORDER
      brevity = min(0.0, 1.0 - ref_len / hyp_len)
      u[i, j] = math.exp(log_precision + brevity)
  return u


def chrf_matrix(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
  """U[i, j]: sacreBLEU chrF (0-1) of hypothesis i with reference j."""
  from sacrebleu.metrics import CHRF
  chrf = CHRF()
  return np.array([[chrf.sentence_score(h, [r]).score / 100 for r in references]
                   for h in hypotheses]).reshape(len(hypotheses), len(references))


def check_settings(utility: str, weights: str) -> None:
  """Refuses an unknown utility or weighting by name."""
  if utility not in UTILITIES:
    raise ValueError(f"MBR utility must be one of {', '.join(UTILITIES)}, got {utility!r}")
  if weights not in WEIGHTS:
    raise ValueError(f"MBR weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")


def expected_utility(candidates: Sequence[str], scores: Sequence[float],
                     utility: str = "bleu", weights: str = "model") -> np.ndarray:
  """Each candidate's expected utility against all of them (itself included)."""
  check_settings(utility, weights)
  if len(candidates) != len(scores):
    raise ValueError(f"{len(candidates)} candidates but {len(scores)} scores")
  u = (bleu_matrix if utility == "bleu" else chrf_matrix)(candidates, candidates)
  if weights == "uniform":
    w = np.full(len(candidates), 1.0 / len(candidates))
  else:
    s = np.asarray(scores, np.float64)
    w = np.exp(s - s.max())
    w /= w.sum()
  return u @ w


def choose(candidates: Sequence[str], scores: Sequence[float], utility: str = "bleu",
           weights: str = "model") -> int:
  """Index of the MBR choice; ties go to the earlier candidate (the higher-scored, for
  candidates listed best first, so one candidate or identical ones give index 0)."""
  if not candidates:
    raise ValueError("MBR needs at least one candidate")
  return int(np.argmax(expected_utility(candidates, scores, utility, weights)))


def add_arguments(parser) -> None:
  """translate.py's and evaluate.py's --mbr and --mbr-weights flags."""
  parser.add_argument("--mbr", default=None, choices=UTILITIES,
                      help="minimum Bayes risk: output the beam hypothesis with the highest "
                      "expected BLEU or chrF against the beam's others, instead of the "
                      "best-scored one (needs --beam >= 2; default: the run's decode.mbr)")
  parser.add_argument("--mbr-weights", default=None, choices=WEIGHTS,
                      help="with --mbr: each hypothesis weighs the same (uniform) or by its "
                      "softmaxed beam score (model); default: the run's decode.mbr_weights")


def overrides(args) -> dict:
  """The decode settings that --mbr and --mbr-weights replace."""
  return {k: v for k, v in (("mbr", args.mbr), ("mbr_weights", args.mbr_weights))
          if v is not None}
