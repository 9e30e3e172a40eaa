"""A sentence splitter in MiniSBD's format, shipped inside the Argos packages we export.

Argos Translate, and LibreTranslate on it, cut every text into sentences before
translating it. By default they use MiniSBD (LibreTranslate's ONNX port of Stanza's
tokenizer), which downloads a model per language on first use unless the package holds
one in `minisbd/*.onnx`. A server that cannot reach GitHub then answers every request
with a 500. The export writes this splitter there, so that an installed package needs no
download.

The model is rules, not weights: an ONNX graph that MiniSBD's own code runs as it runs
its models (the same inputs, `units` [B, T] character ids and `features` [B, T, F], and
the same output, logits [B, T, 5] over "inside a token", "end of token", "end of
sentence" and two multi-word-token classes it never predicts). A sentence ends at the
last of a run of `.`, `!` or `?` (or at a closing quote right after one) when white
space follows and then an upper-case letter, a digit or an opening quote or bracket, and
the word before the period is not a single letter or one of the source language's
abbreviations that the package's own splitter (`sentencex`, as `seq2seq.decoding.sentences`
uses it) also keeps whole. Paragraphs (blank lines) are cut by MiniSBD itself. This
cuts the ordinary text that our own engine cuts in the same places; where sentencex
knows more (a rarer abbreviation, a lower-case sentence start) the two may differ.

Abbreviations reach the graph through MiniSBD's dictionary features: the package's
lexicon lists each abbreviation with its period, MiniSBD marks a character where the
characters before it spell a lexicon word, and the graph checks that a word boundary
precedes the match.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import sentencex

# MiniSBD's classes: 0 inside a token, 1 end of token, 2 end of sentence, 3 and 4
# multi-word tokens (never predicted here).
NUM_CLASSES = 5

TERMINATORS = ".!?"  # not "…": sentencex goes on after it
CLOSING_QUOTES = "\"'”’»"
OPENING = "\"'“„«‘([¿¡" + "0123456789"
SPACE = " "  # MiniSBD turns every white space into " " before it looks up a character
PAD, UNK = "<PAD>", "<UNK>"
# The characters the graph tells apart (ids in this order); any other is <UNK>.
UNITS = [PAD, UNK] + sorted(set(TERMINATORS + CLOSING_QUOTES + OPENING + SPACE))

# Candidates tested against sentencex at export: the ones it keeps whole before a name
# become the package's lexicon (with every single letter, for initials).
ABBREVIATIONS = (
    "mr mrs ms dr prof st jr sr vs etc e.g i.e inc ltd co no nr fig p.m a.m u.s u.k jan "
    "feb mar apr jun jul aug sep sept oct nov dec mt ave approx dept gen col capt lt sgt "
    "rev hon vol pp ed eds al cf ca z.b bzw usw ggf u.a d.h s.o vgl evtl inkl geb "
    "hr fr str abs abb bd"
).split()


def abbreviations(language: str) -> list[str]:
  """The words (with their period, lower case) after which no sentence ends in
  `language`: every single letter, and each candidate abbreviation that sentencex does
  not cut after in 'We met Dr. Miller there.'"""
  kept = [a for a in ABBREVIATIONS
          if len(list(sentencex.segment(language, f"We met {a.capitalize()}. Miller there.")))
          == 1]
  return [f"{c}." for c in "abcdefghijklmnopqrstuvwxyz"] + [f"{a}." for a in kept]


def write(path: str | Path, language: str) -> Path:
  """Writes the splitter for `language` as an ONNX model MiniSBD loads from `path`."""
  import onnx  # the export's optional dependency (seq2seq[ctranslate2])

  lexicon = sorted(set(abbreviations(language)))
  model = _graph(lexicon)
  vocab = {"lang": language, "idx": 0, "cutoff": 0, "lower": False,
           "_unit2id": {u: i for i, u in enumerate(UNITS)}, "_id2unit": UNITS}
  window = max(len(w) for w in lexicon) - 1
  config = {"feat_funcs": ["capitalized"], "use_dictionary": True, "num_dict_feat": window,
            "max_seqlen": 1000, "batch_size": 1, "skip_newline": False, "no_ssplit": False}
  for key, value in (("lang_code", language), ("config", json.dumps(config)),
                     ("vocab", json.dumps(vocab)), ("lexicon", json.dumps(lexicon)),
                     ("producer", "seq2seq: rules, see seq2seq/rundir/minisbd_splitter.py")):
    entry = model.metadata_props.add()
    entry.key, entry.value = key, value
  onnx.checker.check_model(model)
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  onnx.save(model, str(path))
  return path


def _graph(lexicon: list[str]):
  """The rules as an ONNX graph over MiniSBD's inputs (see the module docstring)."""
  import onnx
  from onnx import TensorProto, helper

  window = max(len(w) for w in lexicon) - 1
  num_features = 1 + 2 * window  # capitalized, forward dictionary, backward dictionary
  nodes, inits = [], []
  counter = iter(range(10**6))

  def const(value, dtype=np.float32):
    name = f"c{next(counter)}"
    inits.append(onnx.numpy_helper.from_array(np.asarray(value, dtype), name))
    return name

  def op(kind, *inputs, **attrs):
    name = f"t{next(counter)}"
    nodes.append(helper.make_node(kind, list(inputs), [name], **attrs))
    return name

  def table(chars):  # [B, T] float: 1 where the unit is one of `chars`
    return op("Gather", const([1.0 if u in chars else 0.0 for u in UNITS]), "units")

  def shift(x_BT, k, fill):  # x_BT[:, t + k], `fill` past either end
    pads = [0, max(-k, 0), 0, max(k, 0)]
    padded = op("Pad", x_BT, const(pads, np.int64), const(fill))
    start, end = (k, np.iinfo(np.int64).max) if k > 0 else (0, k)
    return op("Slice", padded, const([start], np.int64), const([end], np.int64),
              const([1], np.int64))

  def either(*xs):
    return op("Max", *xs)

  def both(*xs):
    out = xs[0]
    for x in xs[1:]:
      out = op("Mul", out, x)
    return out

  def no(x):
    return op("Sub", const(1.0), x)

  def feature(i):  # features[:, :, i] as [B, T]
    return op("Gather", "features", const(i, np.int64), axis=2)

  term, close = table(TERMINATORS), table(CLOSING_QUOTES)
  space, pad, opening = table(SPACE), table(PAD), table(OPENING)
  capitalized = feature(0)
  # the last of a run of terminators, or a closing quote right after one
  last_term = both(term, no(shift(term, 1, 0.0)), no(shift(close, 1, 0.0)))
  quote_end = both(close, shift(term, -1, 0.0), no(shift(close, 1, 0.0)))
  # MiniSBD's backward feature w: the w + 1 characters ending here spell a lexicon word;
  # it counts where a word boundary (space, start, opening) comes right before them.
  abbreviation = either(const(0.0), *[
      both(feature(1 + window + w - 1),
           shift(either(space, pad, opening), -(w + 1), 1.0))
      for w in range(1, window + 1)])
  starts_next = either(capitalized, opening)
  followed = either(shift(pad, 1, 1.0),
                    both(shift(space, 1, 0.0), shift(starts_next, 2, 0.0)))
  sentence_end = both(either(both(last_term, no(abbreviation)), quote_end), followed)
  token_end = either(shift(space, 1, 1.0), shift(pad, 1, 1.0))
  logits = op("Concat", *[op("Unsqueeze", x, const([2], np.int64)) for x in (
      op("Add", op("Mul", pad, const(0.0)), const(0.5)),  # inside a token
      token_end,
      op("Mul", sentence_end, const(2.0)),
      op("Sub", op("Mul", pad, const(0.0)), const(1.0)),
      op("Sub", op("Mul", pad, const(0.0)), const(1.0)))], axis=2)
  nodes.append(helper.make_node("Identity", [logits], ["logits"]))
  graph = helper.make_graph(
      nodes, "seq2seq_sentence_rules",
      [helper.make_tensor_value_info("units", TensorProto.INT64, ["B", "T"]),
       helper.make_tensor_value_info("features", TensorProto.FLOAT, ["B", "T", num_features])],
      [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "T", NUM_CLASSES])],
      initializer=inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
