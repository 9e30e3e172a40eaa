"""Scores of translations against references with sacreBLEU (BLEU and chrF, with signatures).

BLEU is sacreBLEU's default (13a tokenization of detokenized text, cased), so it equals
the `sacrebleu` command line tool on the same files. `lowercase_tokenized_bleu` also
gives BLEU on lowercased Moses-tokenized text, the way many Multi30k papers report it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import sacrebleu

from seq2seq.data.textfiles import one_line


class ScoreError(ValueError):
  """Hypotheses and references cannot be compared."""


def score(hypotheses: Sequence[str], references: Sequence[str],
          lowercase_tokenized: bool = False, lang: str = "de") -> dict:
  """sacreBLEU BLEU and chrF (and optionally lowercased tokenized BLEU) of aligned lines."""
  if len(hypotheses) != len(references):
    raise ScoreError(f"{len(hypotheses)} hypotheses but {len(references)} references: "
                     "they must be aligned line by line")
  bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
  b = bleu.corpus_score(list(hypotheses), [list(references)])
  c = chrf.corpus_score(list(hypotheses), [list(references)])
  result = {"bleu": b.score, "bleu_signature": str(bleu.get_signature()),
            "bleu_text": str(b), "chrf": c.score, "chrf_signature": str(chrf.get_signature()),
            "sentences": len(hypotheses)}
  if lowercase_tokenized:
    result["bleu_lc_tok"] = lowercase_tokenized_bleu(hypotheses, references, lang)
  return result


def lowercase_tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str],
                             lang: str = "de") -> float:
  """BLEU on lowercased, Moses-tokenized text (multi-bleu.perl style)."""
  from sacremoses import MosesTokenizer
  mt = MosesTokenizer(lang=lang)
  prep = lambda s: mt.tokenize(s.lower(), return_str=True, escape=False)
  bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True)
  return bleu.corpus_score([prep(h) for h in hypotheses],
                           [[prep(r) for r in references]]).score


def sentence_scores(hypotheses: Sequence[str], references: Sequence[str]) -> list[dict]:
  """Per-sentence sacreBLEU BLEU (with effective-order smoothing) and chrF, for error analysis."""
  bleu = sacrebleu.metrics.BLEU(effective_order=True)
  chrf = sacrebleu.metrics.CHRF()
  return [{"bleu": bleu.sentence_score(h, [r]).score, "chrf": chrf.sentence_score(h, [r]).score}
          for h, r in zip(hypotheses, references)]


def write_sentence_level(path: Path, sources, hypotheses, references) -> None:
  """A TSV: line, BLEU, chrF, source (or empty), hypothesis, reference."""
  rows = ["line\tbleu\tchrf\tsource\thypothesis\treference"]
  sources = sources if sources is not None else [""] * len(hypotheses)
  for i, (sc, src, h, r) in enumerate(zip(sentence_scores(hypotheses, references), sources,
                                          hypotheses, references), 1):
    rows.append(f"{i}\t{sc['bleu']:.2f}\t{sc['chrf']:.2f}\t{one_line(src)}\t{one_line(h)}\t"
                f"{one_line(r)}")
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("\n".join(rows) + "\n", encoding="utf-8")
