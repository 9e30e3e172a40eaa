"""The engine contract (seq2seq/decoding/engine.py, engines.py): both engines implement it,
and the server, documents, the command line and evaluation use it and nothing else: each
runs here over an engine that fails on any other attribute. Alignment comes batched and
compiled, the same whatever the batch, and equal to the model's own cross-attention."""

import ast
import io
import sys

import numpy as np
import pytest

from seq2seq.decoding.engine import Alignment, Engine, EngineLimits
from seq2seq.decoding.engine_io import SearchSettings
from seq2seq.decoding.translator import Translator
from seq2seq.vocab import BOS_ID

from helpers import ROOT, SAMPLE

CONTRACT = frozenset(name for name in vars(Engine) if not name.startswith("_"))
SOURCES = ["A young man is running in the park.", "Two dogs are playing in the snow.",
           "A woman in a red dress sings on a stage.", "Three children are sitting on a bench."]


class ContractOnly:
  """An engine seen through its contract: any other attribute fails the test."""

  def __init__(self, engine):
    object.__setattr__(self, "_engine", engine)
    object.__setattr__(self, "used", set())

  def __getattr__(self, name):
    if name not in CONTRACT:
      raise AssertionError(f"{name!r} is not in the Engine contract ({sorted(CONTRACT)})")
    self.used.add(name)
    return getattr(self._engine, name)

  def __setattr__(self, name, value):
    raise AssertionError(f"set {name!r}: the contract has no attribute to set")


@pytest.fixture(scope="module")
def engine(trained_run):
  return Translator.load(trained_run)


def test_both_engines_implement_the_contract(engine, trained_run, tmp_path):
  from seq2seq.decoding.engines import load_engine
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  ct2 = load_engine(export_ctranslate2(trained_run, tmp_path / "ct2", "best"), "ctranslate2")
  for e in (engine, ct2):
    assert isinstance(e, Engine)
    assert e.directions == (("en", "de"),)
    assert isinstance(e.limits, EngineLimits) and isinstance(e.defaults, SearchSettings)
    assert e.describe()["languages"] == {"source": "en", "target": "de"}
    assert e.translate(SOURCES[:2], beam_size=2) == e.translate(
        SOURCES[:2], e.defaults.changed(beam_size=2))
    found = e.align(SOURCES[:1], [[5, 6, 7]])[0]
    assert isinstance(found, Alignment) and len(found.target_spans) == 3
  assert engine.limits.glossary and engine.limits.attention
  assert not ct2.limits.glossary and ct2.align(SOURCES[:1], [[5]])[0].weights is None
  assert isinstance(load_engine(trained_run), Translator)
  with pytest.raises(ValueError, match="ensembles need the JAX engine"):
    load_engine([trained_run, trained_run], "ctranslate2")


def test_alignment_is_the_model_s_cross_attention_whatever_the_batch(engine):
  hyps = engine.translate(SOURCES, nbest=1)
  ids = [h[0].ids for h in hyps]
  together = engine.align(SOURCES, ids)
  for source, target, found in zip(SOURCES, ids, together):
    alone = engine.align([source], [target], batch_size=1)[0]
    np.testing.assert_allclose(found.weights, alone.weights, rtol=1e-5, atol=1e-6)
    src = engine.encode([source])[0]
    probs = engine.model.cross_attention(engine.params, src[None],
                                         np.array([[BOS_ID, *target]], np.int32))
    eager = np.asarray(probs[-1, 0].mean(axis=0))  # [T + 1, S + 1], EOS included
    np.testing.assert_allclose(found.weights, eager, rtol=1e-4, atol=1e-5)
    assert found.weights.shape == (len(target) + 1, len(src))
    assert np.allclose(found.weights.sum(axis=1), 1.0, atol=1e-4)
    assert found.source_pieces[-1] == found.target_pieces[-1] == "</s>"
    # each span covers its piece's text: the source's pieces end where it ends
    assert found.source_spans[-1][1] == len(source)


def test_the_server_uses_the_contract_only(engine, tmp_path):
  from starlette.testclient import TestClient

  from seq2seq.serving.http_server import create_app
  seen = ContractOnly(engine)
  with TestClient(create_app(seen, info={"engine": "jax"})) as client:
    for body in ({"text": SOURCES[0], "nbest": 2, "beam_size": 2},
                 {"texts": SOURCES[:2], "prefixes": ["Ein", ""]},
                 {"text": SOURCES[0], "attention": True},
                 {"text": SOURCES[1], "glossary": {"dogs": "Hunde"}},
                 {"text": SOURCES[0], "sampling": {"seed": 1}}):
      got = client.post("/translate", json=body)
      assert got.status_code == 200, (body, got.text)
    for body in ({"q": SOURCES[:2], "source": "en", "target": "de", "alternatives": 1},
                 {"q": "<p>A <b>young</b> man.</p>", "source": "auto", "target": "de",
                  "format": "html"}):
      assert client.post("/translate", json=body).status_code == 200
    assert client.post("/translate", json={"text": "x" * 400}).status_code == 422
    assert client.get("/languages").json()[0]["targets"] == ["de"]
    assert client.post("/detect", json={"q": "A dog."}).status_code == 200
    assert client.get("/frontend/settings").status_code == 200
    assert client.get("/health").json()["status"] == "ready"
    got = client.post("/translate_file", data={"source": "en", "target": "de"},
                      files={"file": ("a.md", b"A **young** man is running.\n")})
    assert got.status_code == 200, got.text
  assert {"translate", "defaults", "limits", "check", "align", "directions"} <= seen.used


def test_documents_use_the_contract_only(engine, tmp_path):
  from seq2seq.documents import translate_document
  page = tmp_path / "page.md"
  page.write_text("# A *young* man\n\nTwo dogs are **playing** in the snow. A man runs.\n")
  seen = ContractOnly(engine)
  assert translate_document(seen, page, progress=False) == translate_document(
      engine, page, progress=False)
  assert "align" in seen.used


def test_the_command_line_and_evaluation_use_the_contract_only(engine, trained_run, tmp_path,
                                                                monkeypatch):
  from seq2seq.cli import evaluate, translate
  from seq2seq.decoding import engines
  monkeypatch.setattr(engines, "load_engine", lambda *a, **k: ContractOnly(
      Translator.load(trained_run, **k)))
  src, out = tmp_path / "in.en", tmp_path / "out.de"
  src.write_text("".join(s + "\n" for s in SOURCES))
  translate.main(["--workdir", str(trained_run), "--input", str(src), "--output", str(out),
                  "--beam", "2", "--nbest", "2"])
  assert len(out.read_text().splitlines()) == 2 * len(SOURCES)
  translate.main(["--workdir", str(trained_run), "--input", str(src), "--output", str(out),
                  "--score", "--references", str(src)])
  page = tmp_path / "page.md"
  page.write_text("A *young* man is running.\n")
  translate.main(["--workdir", str(trained_run), "--input", str(page), "--output",
                  str(tmp_path / "seite.md")])
  monkeypatch.setattr(sys, "stdout", io.StringIO())
  evaluate.main(["--workdir", str(trained_run), "--src", str(SAMPLE / "test.en"),
                 "--ref", str(SAMPLE / "test.de"), "--output", str(tmp_path / "hyp.de")])
  assert "BLEU" in sys.stdout.getvalue()


def test_no_module_above_decoding_names_an_engine_s_class():
  """The server, documents and the command line import the contract and `load_engine`,
  never an engine's module."""
  for folder in ("serving", "documents", "cli"):
    for path in sorted((ROOT / "seq2seq" / folder).glob("*.py")):
      for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
          assert node.module not in ("seq2seq.decoding.translator",
                                     "seq2seq.decoding.ct2_engine"), path


def test_target_spans_read_off_the_pieces_are_those_of_each_prefix_s_text(engine):
  from seq2seq.data.textfiles import read_lines
  lines = read_lines(SAMPLE / "test.de")[:40] + ["Über 3 € — naïve Café", "x\u2581y  z"]
  for ids in engine.tokenizer.encode(lines) + [h[0].ids for h in engine.translate(
      read_lines(SAMPLE / "test.en")[:20], nbest=1)]:
    ends = [len(engine.detokenize(ids[:i + 1])) for i in range(len(ids))]
    slow = [(ends[i - 1] if i else 0, end) for i, end in enumerate(ends)]
    assert engine.target_spans(ids, engine.tokenizer.pieces(ids)) == slow, ids
