"""Export to CTranslate2: the converted model computes what the JAX model computes."""

import dataclasses
import json

import jax
import numpy as np
import pytest
import sacrebleu

from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.engines import load_engine
from seq2seq.decoding.translator import Translator
from seq2seq.rundir import ctranslate2_model, run_files
from seq2seq.training.trainer import Trainer, train

from conftest import run_cli
from helpers import SAMPLE, TEST_SEED, tiny_config

pytest.importorskip("ctranslate2", reason="CTranslate2 is the optional [ctranslate2] extra")

SOURCES = read_lines(SAMPLE / "test.en")
REFERENCES = read_lines(SAMPLE / "test.de")


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
  """The trained tiny run exported as float32 and int8."""
  root = tmp_path_factory.mktemp("ct2")
  return {q: ctranslate2_model.export_ctranslate2(trained_run, root / q, quantization=q)
          for q in ("float32", "int8")}


def _assert_same_outputs(jax_t, sources, a, b, beam):
  """The engines' n-best lists `a`, `b` (JAX, CTranslate2; `nbest=beam`) agree.

  Only sentences both engines finish within the JAX engine's per-sentence length limit
  are compared: CTranslate2 takes one limit per call, the longest sentence's, so a loop
  of a briefly trained model runs on in it (in greedy search the shorter output is then a
  prefix of the longer). Of those, greedy gives the same output for at least 99 % (a
  float32 near-tie may send one elsewhere); beam search for at least 95 %, as the two
  searches differ in which candidates ending in EOS they keep, and where the best
  outputs differ, one engine's best is in the other's n-best. Every hypothesis both
  engines found has one score in both."""
  c, finished = jax_t.decode_cfg, []
  for src, xs, ys in zip(jax_t.encode(sources), a, b):
    limit = min(int(c.max_len_a * (len(src) - 1) + c.max_len_b), jax_t.model_cfg.max_len)
    x, y = list(xs[0].ids), list(ys[0].ids)
    if len(x) < limit and len(y) < limit:  # each ended with EOS
      finished.append(x == y)
      nbest_x = {tuple(h.ids): h.score for h in xs}
      nbest_y = {tuple(h.ids): h.score for h in ys}
      assert beam == 1 or tuple(y) in nbest_x or tuple(x) in nbest_y, (xs, ys)
      both = sorted(nbest_x.keys() & nbest_y.keys())
      np.testing.assert_allclose([nbest_x[h] for h in both], [nbest_y[h] for h in both],
                                 atol=2e-3)
    elif beam == 1:
      shorter, longer = sorted([x, y], key=len)
      assert longer[:len(shorter)] == shorter, (x, y)
  assert len(finished) >= 0.9 * len(sources)
  assert np.mean(finished) >= (0.99 if beam == 1 else 0.95)


@pytest.mark.parametrize("beam", [1, 4])
def test_float32_outputs_equal_the_jax_engine(trained_run, exported, beam):
  jax_t = Translator.load(trained_run)
  ct2_t = load_engine(exported["float32"], "ctranslate2")
  # alpha 0: both rank hypotheses by log-probability (their length penalties differ)
  a = jax_t.translate(SOURCES, beam_size=beam, alpha=0.0, nbest=beam)
  b = ct2_t.translate(SOURCES, beam_size=beam, alpha=0.0, nbest=beam)
  _assert_same_outputs(jax_t, SOURCES, a, b, beam)


def test_ctranslate2_mbr_choice_is_among_its_beam(exported):
  """decode.mbr with the CTranslate2 engine: each output is mbr.choose's pick of that
  engine's own W hypotheses."""
  from seq2seq.decoding import mbr
  plain = load_engine(exported["float32"], "ctranslate2")
  chosen = load_engine(exported["float32"], "ctranslate2", mbr="bleu")
  nbest = plain.translate(SOURCES[:30], beam_size=4, nbest=4)
  for hyps, text in zip(nbest, chosen.translate(SOURCES[:30], beam_size=4)):
    assert text == hyps[mbr.choose([h.text for h in hyps], [h.score for h in hyps])].text


def test_forced_scores_equal_the_jax_engine(trained_run, exported):
  jax_t = Translator.load(trained_run)
  ct2_t = load_engine(exported["float32"], "ctranslate2")
  a, b = jax_t.score(SOURCES, REFERENCES), ct2_t.score(SOURCES, REFERENCES)
  assert [x.tokens for x in a] == [x.tokens for x in b]
  np.testing.assert_allclose([x.logprob for x in a], [x.logprob for x in b], rtol=1e-4,
                             atol=1e-3)


def test_int8_bleu_is_within_a_point_of_float32(exported):
  # the same search (CTranslate2's, the run's alpha) on both: only the weights differ
  best = {q: [n[0] for n in load_engine(path, "ctranslate2").translate(
              SOURCES, beam_size=4, nbest=1)] for q, path in exported.items()}
  bleu = {q: sacrebleu.corpus_bleu([h.text for h in hyps], [REFERENCES]).score
          for q, hyps in best.items()}
  # quantization changed the model (its scores; on some CPUs not a single output line)...
  scores = {q: np.array([h.score for h in hyps]) for q, hyps in best.items()}
  assert np.abs(scores["int8"] - scores["float32"]).max() > 1e-3
  assert abs(bleu["int8"] - bleu["float32"]) <= 1.0  # ...but not the quality


# Every option away from the tiny preset's (pre-norm, tied, sinusoidal, ReLU, float32,
# which the other tests export) in two runs: each run costs a training's compilation.
@pytest.mark.parametrize("option", [
    dict(pre_norm=False, tied_embeddings=False, positional="learned", activation="gelu"),
    dict(positional="rotary", matmul_dtype="bfloat16")])
@pytest.mark.slow
def test_every_architecture_option_converts(tmp_path, option):
  # A run saved before its first update (no update or validation program is compiled
  # for the option), every weight moved off its initial value (norms and biases
  # included), so that a weight converted to the wrong place changes the scores.
  cfg = tiny_config(SAMPLE)
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **option))
  run = Trainer(cfg, tmp_path / "run")
  leaves, tree = jax.tree_util.tree_flatten(run.state.params)
  keys = jax.random.split(jax.random.PRNGKey(0), len(leaves))
  run.state = run.state._replace(params=jax.tree_util.tree_unflatten(tree, [
      x + 0.05 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)]))
  run.save()
  out = ctranslate2_model.export_ctranslate2(tmp_path / "run", tmp_path / "ct2", checkpoint_name="latest")
  jax_t = Translator.load(tmp_path / "run", "latest")
  ct2_t = load_engine(out, "ctranslate2")
  sources, targets = SOURCES[:16], REFERENCES[:16]
  # bfloat16 matmul operands are a compute setting of the JAX engine; the exported float32
  # weights score within its rounding.
  rtol = 2e-2 if option.get("matmul_dtype") == "bfloat16" else 1e-4
  np.testing.assert_allclose([x.logprob for x in jax_t.score(sources, targets)],
                             [x.logprob for x in ct2_t.score(sources, targets)], rtol=rtol,
                             atol=1e-3)
  # Argos and LibreTranslate hand CTranslate2 inputs up to 1,024 pieces, past the model's
  # max_len: the exported position table holds them (no "No position encodings ...").
  import ctranslate2
  tokens = ct2_t.tokenizer.pieces(ct2_t.tokenizer.encode([" ".join(SOURCES[:40])])[0])
  assert cfg.model.max_len < len(tokens) <= ctranslate2_model.POSITION_ROWS
  found = ctranslate2.Translator(str(out)).translate_batch(
      [tokens], beam_size=2, max_input_length=ctranslate2_model.POSITION_ROWS, max_decoding_length=64)
  assert found[0].hypotheses[0]


@pytest.fixture(scope="module")
def rotary_run(tmp_path_factory):
  """The tiny model with rotary positions trained 300 updates, and its float32 export."""
  root = tmp_path_factory.mktemp("rotary")
  cfg = tiny_config(SAMPLE, max_steps=300, checkpoint_every=100, seed=TEST_SEED)
  train(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, positional="rotary")),
        root / "run")
  return root / "run", ctranslate2_model.export_ctranslate2(root / "run", root / "ct2", "latest")


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_rotary_outputs_equal_the_jax_engine(rotary_run, beam):
  # Rotary positions in search: each new decoder query and key is rotated by its step,
  # in both engines (forced scores of whole targets are compared above).
  run, out = rotary_run
  jax_t = Translator.load(run, "latest")
  a = jax_t.translate(SOURCES, beam_size=beam, alpha=0.0, nbest=beam)
  b = load_engine(out, "ctranslate2").translate(SOURCES, beam_size=beam, alpha=0.0,
                                                          nbest=beam)
  _assert_same_outputs(jax_t, SOURCES, a, b, beam)


def test_options_without_a_conversion_are_refused_by_name():
  @dataclasses.dataclass(frozen=True)
  class Future(type(tiny_config(SAMPLE).model)):
    rotary: bool = True
  with pytest.raises(ctranslate2_model.ExportError, match="rotary"):
    ctranslate2_model.check_supported(Future())
  cfg = dataclasses.replace(tiny_config(SAMPLE).model)
  object.__setattr__(cfg, "positional", "alibi")  # what a newer config could hold
  with pytest.raises(ctranslate2_model.ExportError, match="positional='alibi'"):
    ctranslate2_model.check_supported(cfg)


def test_the_export_records_its_source(trained_run, exported):
  info = json.loads((exported["int8"] / ctranslate2_model.EXPORT_FILE).read_text())
  assert info["quantization"] == "int8" and info["checkpoint"] == "best"
  assert info["spm_fingerprint"] == run_files.load_tokenizer(trained_run).fingerprint()
  assert (exported["int8"] / "spm.model").read_bytes() == (trained_run / "spm.model").read_bytes()


def test_cli_export_then_translate_with_either_engine(trained_run, tmp_path):
  out = tmp_path / "ct2"
  run_cli("-m", "seq2seq.cli.export", "--workdir", trained_run, "--format", "ctranslate2",
          "--output", out)
  again = run_cli("-m", "seq2seq.cli.export", "--workdir", trained_run, "--output", out,
                  check=False)
  assert again.returncode != 0 and b"--force" in again.stderr
  text = "".join(s + "\n" for s in SOURCES[:12]).encode()
  jax_out = run_cli("translate.py", "--workdir", trained_run, "--beam", "1", input_bytes=text)
  ct2_out = run_cli("translate.py", "--engine", "ctranslate2", "--workdir", out, "--beam", "1",
                    input_bytes=text)
  assert ct2_out.stdout == jax_out.stdout
  # the other modes of translate.py work with the engine too
  pairs = "".join(f"{s}\t{t}\n" for s, t in zip(SOURCES[:5], REFERENCES[:5])).encode()
  scored = run_cli("translate.py", "--engine", "ctranslate2", "--workdir", out, "--score",
                   input_bytes=pairs).stdout.decode().splitlines()
  assert len(scored) == 5 and all(float(line.split("\t")[0]) < 0 for line in scored)
  prefixed = run_cli("translate.py", "--engine", "ctranslate2", "--workdir", out, "--prefix",
                     "--beam", "2", input_bytes=f"{SOURCES[0]}\tZwei Katzen\n".encode())
  assert prefixed.stdout.decode().startswith("Zwei Katzen")
  nbest = run_cli("translate.py", "--engine", "ctranslate2", "--workdir", out, "--beam", "3",
                  "--nbest", "3", input_bytes=text[:text.index(b"\n") + 1])
  assert [line.split(" ||| ")[0] for line in nbest.stdout.decode().splitlines()] == ["0"] * 3


def test_a_folder_that_is_neither_run_nor_export_is_refused(trained_run, tmp_path):
  (tmp_path / "config.json").write_text("{}")  # a config without checkpoints: no run
  proc = run_cli("translate.py", "--engine", "ctranslate2", "--workdir", tmp_path,
                 input_bytes=b"A dog.\n", check=False)
  assert proc.returncode != 0 and b"seq2seq-export" in proc.stderr
  with pytest.raises(ValueError, match="ensembles need the JAX engine"):
    load_engine([trained_run, trained_run], "ctranslate2")


def test_evaluate_scores_an_export_like_its_run(trained_run, exported):
  args = ("--src", SAMPLE / "test.en", "--ref", SAMPLE / "test.de", "--beam", "1")
  jax_run = run_cli("evaluate.py", "--workdir", trained_run, *args)
  ct2_run = run_cli("evaluate.py", "--engine", "ctranslate2", "--workdir", exported["float32"],
                    *args)
  last_json = lambda proc: json.loads(proc.stdout.decode().strip().splitlines()[-1])
  a, b = last_json(jax_run), last_json(ct2_run)
  assert b["engine"] == "ctranslate2" and b["bleu"] == pytest.approx(a["bleu"], abs=0.5)
  assert not (exported["float32"] / "evaluations.jsonl").exists()  # an export is not a run


@pytest.fixture(scope="module")
def exported_directions(trained_multilingual, tmp_path_factory):
  """The tiny multilingual run exported whole and as its en→fr direction alone."""
  root = tmp_path_factory.mktemp("ct2-directions")
  return {"all": ctranslate2_model.export_ctranslate2(trained_multilingual, root / "all"),
          "en-fr": ctranslate2_model.export_ctranslate2(trained_multilingual, root / "en-fr",
                                                        direction=("en", "fr"))}


@pytest.mark.parametrize("direction", [("en", "fr"), ("de", "en")])
def test_an_export_of_every_direction_translates_each_as_the_jax_engine(
    trained_multilingual, exported_directions, direction):
  jax_t = Translator.load(trained_multilingual).for_direction(*direction)
  ct2_t = load_engine(exported_directions["all"], "ctranslate2")
  assert ct2_t.directions == jax_t.directions
  ct2_t = ct2_t.for_direction(*direction)
  sources = read_lines(SAMPLE / f"test.{direction[0]}")
  a = jax_t.translate(sources, beam_size=1, alpha=0.0, nbest=1)
  b = ct2_t.translate(sources, beam_size=1, alpha=0.0, nbest=1)
  _assert_same_outputs(jax_t, sources, a, b, 1)


def test_an_export_of_one_direction_has_ctranslate2_add_its_token(
    trained_multilingual, exported_directions):
  import ctranslate2
  one = exported_directions["en-fr"]
  config = json.loads((one / "config.json").read_text())
  assert config["add_source_bos"] and config["bos_token"] == "<2fr>"
  jax_t = Translator.load(trained_multilingual).for_direction("en", "fr")
  ct2_t = load_engine(one, "ctranslate2")
  assert ct2_t.directions == (("en", "fr"),)
  a = jax_t.translate(SOURCES, beam_size=1, alpha=0.0, nbest=1)
  _assert_same_outputs(jax_t, SOURCES, a, ct2_t.translate(SOURCES, beam_size=1, alpha=0.0,
                                                          nbest=1), 1)
  # as Argos calls it, with the text's pieces alone: what the export of every direction
  # says with the token given
  pieces = [jax_t.tokenizer.pieces(ids) for ids in jax_t.tokenizer.encode(SOURCES[:6])]
  options = dict(beam_size=1, max_decoding_length=40)
  alone = ctranslate2.Translator(str(one)).translate_batch(pieces, **options)
  given = ctranslate2.Translator(str(exported_directions["all"])).translate_batch(
      [["<2fr>", *p] for p in pieces], **options)
  assert [r.hypotheses for r in alone] == [r.hypotheses for r in given]
  with pytest.raises(ctranslate2_model.ExportError,
                     match="does not translate en-cs: it was trained on en-de"):
    ctranslate2_model.export_ctranslate2(trained_multilingual, one.parent / "cs",
                                         direction=("en", "cs"))


def test_threads_follow_ctranslate2s_advice_and_change_no_translation(exported):
  """The engine's default is CTranslate2's advice for throughput (a worker per core, one
  thread each); latency and an explicit INTERxINTRA are taken as given; the translations
  of a call of many batches are the same whatever the threads."""
  from seq2seq.decoding.ct2_engine import ThreadPlan, usable_cores
  cores = usable_cores()
  default = load_engine(exported["float32"], "ctranslate2")
  assert (default.threads.inter, default.threads.intra) == (cores, 1)
  assert default.translator.num_translators == cores
  assert default.limits.parallel_batches == cores
  assert default.describe()["threads"] == {"mode": "throughput", "inter_threads": cores,
                                           "intra_threads": 1}
  outputs = default.translate(SOURCES, beam_size=2, batch_size=8)
  for spec, (inter, intra) in (("latency", (1, cores)), ("2x1", (2, 1)), ("1x1", (1, 1))):
    engine = load_engine(exported["float32"], "ctranslate2", ct2_threads=spec)
    assert (engine.threads.inter, engine.threads.intra) == (inter, intra)
    assert engine.translator.num_translators == inter
    assert engine.translate(SOURCES, beam_size=2, batch_size=8) == outputs, spec
  assert ThreadPlan.of("throughput", 16) == ThreadPlan("throughput", 16, 1)
  assert ThreadPlan.of("latency", 16) == ThreadPlan("latency", 1, 16)
  assert ThreadPlan.of("4x2", 16) == ThreadPlan("fixed", 4, 2)
  for bad in ("fast", "0x2", "2x", "x1", "2*1"):
    with pytest.raises(ValueError, match="throughput, latency or INTERxINTRA"):
      dataclasses.replace(default.decode_cfg, ct2_threads=bad)


def test_the_ctranslate2_engine_runs_straight_from_a_run_directory(trained_run, tmp_path):
  """`--engine ctranslate2` on a run: its checkpoint exported once into RUN/exports (again
  only when that checkpoint changes), translating as an export of it does."""
  import shutil
  run = tmp_path / "run"
  shutil.copytree(trained_run, run)
  engine = load_engine(run, "ctranslate2")
  exported_to = run / "exports" / "ctranslate2-best"
  assert (exported_to / "model.bin").is_file()
  by_hand = load_engine(ctranslate2_model.export_ctranslate2(run, tmp_path / "by-hand"),
                        "ctranslate2")
  assert engine.translate(SOURCES[:12], beam_size=2) == by_hand.translate(SOURCES[:12],
                                                                         beam_size=2)
  written = (exported_to / "model.bin").stat().st_mtime_ns
  load_engine(run, "ctranslate2")
  assert (exported_to / "model.bin").stat().st_mtime_ns == written  # not exported again
  load_engine(run, "ctranslate2", "latest")
  assert (run / "exports" / "ctranslate2-latest" / "model.bin").is_file()
  proc = run_cli("translate.py", "--engine", "ctranslate2", "--workdir", run,
                 input_bytes="\n".join(SOURCES[:3]).encode() + b"\n")
  assert proc.stdout.decode().splitlines() == by_hand.translate(SOURCES[:3])
