"""Models trained elsewhere, imported: each source kind scores every pair as CTranslate2
does on the same model (its own converters and spec API build the reference), greedy
and beam search write the same tokens, and the imported run is a run like any other."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import foreign_models as fm  # noqa: E402

from seq2seq.config import NOT_ARCHITECTURE  # noqa: E402
from seq2seq.decoding.translator import Translator  # noqa: E402
from seq2seq.rundir import checkpoint, importing, run_files  # noqa: E402

ctranslate2 = pytest.importorskip("ctranslate2")
from ctranslate2.converters import OpusMTConverter  # noqa: E402

SOURCES, TARGETS = fm.sample_lines("en", 40)[:12], fm.sample_lines("de", 40)[:12]
TOLERANCE = 1e-4  # per token, float32 against CTranslate2's float32


def pieces(model: Path | bytes, texts):
  sp = (spm.SentencePieceProcessor(model_proto=model) if isinstance(model, bytes)
        else spm.SentencePieceProcessor(model_file=str(model)))
  return [sp.encode(t, out_type=str) for t in texts]


def assert_scores_match(run: Path, reference: Path, src_spm, tgt_spm, sources=SOURCES,
                        targets=TARGETS, lead: list[str] = (), **translator_args):
  """Translator.score of the import against CTranslate2's score_batch, per token."""
  ct2 = ctranslate2.Translator(str(reference))
  expected = ct2.score_batch([list(lead) + p for p in pieces(src_spm, sources)],
                             pieces(tgt_spm, targets))
  ours = Translator.load(run, **translator_args).score(sources, targets)
  for e, o in zip(expected, ours, strict=True):
    assert o.tokens == len(e.log_probs)
    assert abs(o.logprob - sum(e.log_probs)) <= TOLERANCE * o.tokens, (o, sum(e.log_probs))


def assert_searches_match(run: Path, reference: Path, src_spm, tgt_spm, lead=(), tgt_lang=None,
                          beams=(1, 4), sources=SOURCES, limit=11):
  """Greedy and beam 4 (no length normalisation on either side) write the same text.

  A model with random weights never ends its output: cut at the length limit, a beam's
  hypothesis is scored with its end of sentence here and without by CTranslate2, which
  ranks them otherwise. Beam search is compared on a trained model."""
  ct2 = ctranslate2.Translator(str(reference))
  translator = Translator.load(run, max_len_a=0.0, max_len_b=limit + 1)  # and EOS
  tok = translator.tokenizer
  text = lambda tokens: tok.decode([[tok.sp.piece_to_id(p) for p in tokens]])[0]
  for beam in beams:
    expected = ct2.translate_batch([list(lead) + p for p in pieces(src_spm, sources)],
                                   beam_size=beam, length_penalty=0.0,
                                   max_decoding_length=limit)
    ours = translator.translate(sources, beam_size=beam, alpha=0.0,
                                **({"tgt_lang": tgt_lang} if tgt_lang else {}))
    assert ours == [text(r.hypotheses[0]) for r in expected], f"beam {beam}"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
  return fm.small_marian(tmp_path_factory.mktemp("opus") / "release")


@pytest.fixture(scope="module")
def release_run(release, tmp_path_factory):
  return importing.import_model(release, tmp_path_factory.mktemp("runs") / "opus")


@pytest.fixture(scope="module")
def release_ct2(release, tmp_path_factory):
  out = tmp_path_factory.mktemp("ct2") / "opus"
  OpusMTConverter(str(release)).convert(str(out))
  return out


def test_an_opus_mt_release_scores_and_searches_as_ctranslate2(release, release_run,
                                                               release_ct2):
  assert_scores_match(release_run, release_ct2, release / "source.spm", release / "target.spm")
  assert_searches_match(release_run, release_ct2, release / "source.spm",
                        release / "target.spm", beams=(1,))
  cfg = run_files.load_config(release_run).model
  assert (cfg.activation, cfg.pre_norm, cfg.decoder_start, cfg.sinusoidal) == (
      "swish", False, "zeros", "halves")
  assert cfg.tied_embeddings and cfg.output_bias


@pytest.mark.parametrize("variant", [dict(activation="relu", pre_norm=True, tied=False),
                                     dict(activation="gelu", separate_spm=False)])
def test_marian_variants_score_as_ctranslate2(tmp_path, variant):
  release = fm.small_marian(tmp_path / "release", seed=3, **variant)
  reference = tmp_path / "ct2"
  OpusMTConverter(str(release)).convert(str(reference))
  run = importing.import_model(release, tmp_path / "run")
  assert_scores_match(run, reference, release / "source.spm", release / "target.spm")
  cfg = run_files.load_config(run).model
  assert cfg.pre_norm == variant.get("pre_norm", False)
  assert cfg.tied_embeddings == variant.get("tied", True)


def test_a_zipped_release_imports_as_its_folder(release, release_run, tmp_path):
  archive = tmp_path / "opus-2020-01-01.zip"
  with zipfile.ZipFile(archive, "w") as z:
    for f in release.iterdir():
      z.write(f, f.name)
  run = importing.import_model(archive, tmp_path / "run")
  a = checkpoint.load_params(run, "best", run_files.load_config(run).model)[0]
  b = checkpoint.load_params(release_run, "best", run_files.load_config(release_run).model)[0]
  assert all(np.array_equal(a[k][n], b[k][n]) for k in a for n in a[k])


def test_the_hugging_face_folder_of_the_same_weights_imports_the_same_model(
    release, release_run, release_ct2, tmp_path):
  folder = fm.huggingface_from_marian(release, tmp_path / "hf")
  run = importing.import_model(folder, tmp_path / "run")
  assert_scores_match(run, release_ct2, release / "source.spm", release / "target.spm")
  ours = checkpoint.load_params(run, "best", run_files.load_config(run).model)[0]
  theirs = checkpoint.load_params(release_run, "best",
                                  run_files.load_config(release_run).model)[0]
  assert all(np.array_equal(ours[k][n], theirs[k][n]) for k in ours for n in ours[k])


@pytest.mark.parametrize("source_eos", [False, True])
def test_an_opennmt_style_ctranslate2_model_scores_as_itself(tmp_path, source_eos):
  model = fm.opennmt_ctranslate2(tmp_path / "onmt", source_eos=source_eos)
  run = importing.import_model(model, tmp_path / "run", src_lang="en", tgt_lang="de")
  joint = tmp_path / "onmt" / "sentencepiece.model"
  assert_scores_match(run, model, joint, joint)
  assert_searches_match(run, model, joint, joint, beams=(1,))
  cfg = run_files.load_config(run).model
  assert (cfg.pre_norm, cfg.decoder_start, cfg.layer_norm_epsilon, cfg.sinusoidal) == (
      True, "bos", 1e-6, "halves")
  assert run_files.load_tokenizer(run).source_eos == source_eos
  # exported back, CTranslate2 reads its sources as the original does
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  back = export_ctranslate2(run, tmp_path / "back")
  assert json.loads((back / "config.json").read_text())["add_source_eos"] == source_eos
  assert_scores_match(run, back, joint, joint)


def test_an_int8_model_is_dequantized(tmp_path):
  model = fm.opennmt_ctranslate2(tmp_path / "onmt", quantization="int8")
  run = importing.import_model(model, tmp_path / "run", src_lang="en", tgt_lang="de")
  joint = tmp_path / "onmt" / "sentencepiece.model"
  ct2 = ctranslate2.Translator(str(model), compute_type="float32")  # int8 weights, dequantized
  expected = ct2.score_batch(pieces(joint, SOURCES), pieces(joint, TARGETS))
  ours = Translator.load(run).score(SOURCES, TARGETS)
  # the same weights; CTranslate2 multiplies in int8 all the same: close, not equal
  for e, o in zip(expected, ours):
    assert abs(o.logprob - sum(e.log_probs)) <= 0.05 * o.tokens


def test_an_argos_package_imports_with_its_languages(tmp_path):
  package = tmp_path / "translate-en_de-1_0"
  model = fm.opennmt_ctranslate2(package)
  (package / "metadata.json").write_text(json.dumps(
      {"package_version": "1.0", "argos_version": "1.5", "from_code": "en", "to_code": "de",
       "from_name": "English", "to_name": "German", "type": "translate"}))
  archive = tmp_path / "translate-en_de-1_0.argosmodel"
  with zipfile.ZipFile(archive, "w") as z:
    for f in package.rglob("*"):
      z.write(f, f.relative_to(tmp_path))
  run = importing.import_model(archive, tmp_path / "run")
  cfg = run_files.load_config(run)
  assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "de")
  joint = package / "sentencepiece.model"
  assert_scores_match(run, model, joint, joint)
  record = json.loads((run / importing.IMPORTED_FILE).read_text())
  assert record["format"] == "argos" and record["package_version"] == "1.0"


REAL_MODELS = {
    # folder: (its ids of </s>, the directions, the test pairs, the target token to lead with)
    "opus-mt-tc-big-en-pt": (44670, {("en", "pt"), ("en", "pob")},
                             (["The meeting has been moved to Thursday.",
                               "A dog runs through the park."],
                              ["A reunião foi transferida para quinta-feira.",
                               "Um cão corre pelo parque."]), ("pt", ">>por<<")),
    "opus-mt-tc-big-fr-en": (43311, {("fr", "en")},
                             (["La réunion a été déplacée à jeudi.",
                               "Un chien court dans le parc."],
                              ["The meeting has been moved to Thursday.",
                               "A dog runs through the park."]), None),
}


@pytest.mark.parametrize("name", sorted(REAL_MODELS))
def test_the_real_tc_big_files_with_random_weights(name, tmp_path):
  """Real configuration, tokenizers and id vocabulary (</s> not 0, <pad> last, target
  tokens), one layer each side, random weights in the Hub's names; the reference is
  CTranslate2's MarianConverter on the same weights as a Marian release."""
  real = fm.SHARED_MODELS / name
  if not real.is_dir():
    pytest.skip(f"{real} is not here (../shared/models holds the real OPUS-MT folders)")
  eos, directions, (sources, targets), lead = REAL_MODELS[name]
  config = json.loads((real / "config.json").read_text())
  vocab = json.loads((real / "vocab.json").read_text())
  tokens = sorted(vocab, key=vocab.get)[:-1]  # <pad> is Hugging Face's
  assert vocab["</s>"] == eos == config["eos_token_id"]
  d, ffn = config["d_model"], config["encoder_ffn_dim"]
  rng = np.random.default_rng(5)
  weights = fm.marian_weights(rng, len(tokens), d, ffn, 1, 1)
  marian_cfg = fm.marian_config(d, config["encoder_attention_heads"], ffn, 1, 1,
                                config["activation_function"])
  release = fm.write_marian(tmp_path / "release", weights, marian_cfg, tokens,
                            (real / "source.spm").read_bytes(),
                            (real / "target.spm").read_bytes())
  hf = fm.huggingface_from_marian(release, tmp_path / "hf")
  hf_config = json.loads((hf / "config.json").read_text())
  hf_config.update({k: config[k] for k in ("eos_token_id", "pad_token_id",
                                           "decoder_start_token_id", "vocab_size")})
  (hf / "config.json").write_text(json.dumps(hf_config))
  for file in ("vocab.json", "tokenizer_config.json"):
    shutil.copy(real / file, hf / file)
  if (real / "README.upstream.md").is_file():
    shutil.copy(real / "README.upstream.md", hf / "README.md")
  reference = tmp_path / "ct2"
  OpusMTConverter(str(release)).convert(str(reference))
  run = importing.import_model(hf, tmp_path / "run")
  cfg = run_files.load_config(run)
  assert set(cfg.data.direction_pairs()) == directions
  translator = Translator.load(run)
  assert set(translator.directions) == directions
  ct2 = ctranslate2.Translator(str(reference))
  token = [lead[1]] if lead else []
  expected = ct2.score_batch([token + p for p in pieces(real / "source.spm", sources)],
                             pieces(real / "target.spm", targets))
  engine = translator.for_direction(tgt=lead[0]) if lead else translator
  for e, o in zip(expected, engine.score(sources, targets), strict=True):
    assert o.tokens == len(e.log_probs)
    assert abs(o.logprob - sum(e.log_probs)) <= TOLERANCE * o.tokens
  record = json.loads((run / importing.IMPORTED_FILE).read_text())
  if name == "opus-mt-tc-big-fr-en":  # its card: license and the reported scores
    assert record["license"].lower().startswith("cc-by-4.0")
    assert any("multi30k" in row.lower() for row in record["scores"])


# -------------------------------------------------------------- real weights, round trips


def params_of(run):
  return checkpoint.load_params(run, "best", run_files.load_config(run).model)[0]


def test_a_trained_run_exported_float32_imports_back_to_the_same_parameters(trained_run,
                                                                           tmp_path):
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  export = export_ctranslate2(trained_run, tmp_path / "ct2", "best", "float32")
  run = importing.import_model(export, tmp_path / "run")
  original, imported = params_of(trained_run), params_of(run)
  assert original.keys() == imported.keys()
  for k in original:
    for n in original[k]:
      assert np.array_equal(np.asarray(original[k][n]), np.asarray(imported[k][n])), (k, n)
  imported, source = run_files.load_config(run), run_files.load_config(trained_run)
  assert (imported.model, imported.decode) == (source.model, source.decode)
  sources = fm.sample_lines("en", 400)[300:330]
  assert (Translator.load(run).translate(sources, beam_size=4)
          == Translator.load(trained_run).translate(sources, beam_size=4))
  joint = export / "spm.model"
  assert_searches_match(run, export, joint, joint, sources=sources, limit=60)


def test_an_import_takes_glossaries_and_documents_as_its_source_run(trained_run, tmp_path):
  """The float32 export of a trained run, imported: the same parameters, so glossary
  translations and a translated HTML document equal the run's own, byte for byte."""
  from seq2seq.documents import translate_bytes
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  run = importing.import_model(export_ctranslate2(trained_run, tmp_path / "ct2"),
                               tmp_path / "run")
  ours, theirs = Translator.load(run), Translator.load(trained_run)
  sources = fm.sample_lines("en", 400)[300:306]
  glossary = {"dog": "Köter", "man": "Herr"}
  assert (ours.translate(sources, glossary=glossary)
          == theirs.translate(sources, glossary=glossary))
  html = ("<html><body><p>" + "</p><p>".join(sources[:3]) + "</p></body></html>").encode()
  assert (translate_bytes(ours, html, "html", progress=False)
          == translate_bytes(theirs, html, "html", progress=False))


def test_an_argos_package_of_a_trained_run_imports_close_to_its_int8_model(argos_package,
                                                                          tmp_path):
  run = importing.import_model(argos_package, tmp_path / "run")
  with zipfile.ZipFile(argos_package) as z:
    z.extractall(tmp_path / "package")
  package = next((tmp_path / "package").iterdir())
  ct2 = ctranslate2.Translator(str(package / "model"))
  sources, targets = fm.sample_lines("en", 400)[300:330], fm.sample_lines("de", 400)[300:330]
  joint = package / "sentencepiece.model"
  expected = ct2.score_batch(pieces(joint, sources), pieces(joint, targets))
  ours = Translator.load(run).score(sources, targets)
  per_token = [abs(o.logprob - sum(e.log_probs)) / o.tokens for e, o in zip(expected, ours)]
  assert max(per_token) < 0.05, per_token  # int8 products there, float32 here


# --------------------------------------------------------------------------- fine-tuning


def test_the_fine_tuning_plan_keeps_the_source_architecture(release_run):
  from seq2seq.training import auto_recipe
  source = run_files.load_config(release_run).model
  m = auto_recipe.Measurements(pairs=29_000, mean_target_chars=60.0, minutes=10.0,
                               update_seconds=0.1)
  choices, reasons = auto_recipe.plan_fine_tune(m, run_files.load_config(release_run))
  for field in ("d_model", "vocab_size", "activation", "decoder_start", "sinusoidal",
                "output_bias", "tied_embeddings", "pre_norm"):
    assert choices[f"model.{field}"] == getattr(source, field), field
  assert choices["train.learning_rate"] <= 1e-4 * (512 / source.d_model) ** 0.5 + 1e-9
  assert choices["train.dropout_ramp_steps"] == 0 and choices["data.sampling_alpha"] == 0.0
  assert set(choices) == set(reasons)


@pytest.mark.slow
def test_an_imported_model_fine_tunes_with_the_automatic_recipe(release_run, tmp_path):
  from conftest import run_cli
  from helpers import SAMPLE
  out = tmp_path / "ft"
  run_cli("train.py", "--config", "auto", "--workdir", out,
          f"--config.train.init_from={release_run}", f"--config.data.dir={SAMPLE}",
          "--config.train.max_steps=12", "--config.train.eval_every=6",
          "--config.train.checkpoint_every=6", "--config.train.eval_max_sentences=20")
  cfg, source = run_files.load_config(out), run_files.load_config(release_run)
  assert dataclasses_equal_architecture(cfg.model, source.model)
  tok = run_files.load_tokenizer(out)
  assert tok.separate and tok.fingerprint() == run_files.load_tokenizer(release_run).fingerprint()
  before, after = params_of(release_run), params_of(out)
  assert any(not np.array_equal(before[k][n], after[k][n]) for k in before for n in before[k])
  bias = after["transformer"]["output_bias"]
  assert np.all(bias[:4][[0, 2]] <= -1e8), "the closed rows stay closed"
  assert Translator.load(out).translate(SOURCES[:2])  # it translates


def dataclasses_equal_architecture(a, b) -> bool:
  return all(getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(a)
             if f.name not in NOT_ARCHITECTURE)


def test_a_published_import_keeps_its_source_s_license_and_names_its_base(release_run,
                                                                          tmp_path):
  from seq2seq.rundir import hub
  files, card = hub.push(release_run, "your-name/opus-small", "best", dry_run=True)
  assert "imported.json" in files and "spm.target.model" in files
  assert "license: cc-by-4.0" in card.lower()
  record = json.loads((release_run / importing.IMPORTED_FILE).read_text())
  record["source"] = "Helsinki-NLP/opus-mt-en-de"  # as `seq2seq-import ORG/NAME` writes it
  (release_run / importing.IMPORTED_FILE).write_text(json.dumps(record))
  assert hub.base_model(str(release_run)) == "Helsinki-NLP/opus-mt-en-de"


def test_a_rotary_run_exported_imports_back(trained_run, tmp_path):
  """The Multi30k recipe's models rotate queries and keys (model.positional="rotary"):
  the tiny run's parameters under that option, exported and imported back."""
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  rotary = tmp_path / "rotary"
  shutil.copytree(trained_run, rotary)
  config = json.loads((rotary / "config.json").read_text())
  config["model"]["positional"] = "rotary"
  (rotary / "config.json").write_text(json.dumps(config))
  export = export_ctranslate2(rotary, tmp_path / "ct2", "best", "float32")
  run = importing.import_model(export, tmp_path / "run")
  assert run_files.load_config(run).model == run_files.load_config(rotary).model
  sources = fm.sample_lines("en", 400)[300:320]
  assert Translator.load(run).translate(sources) == Translator.load(rotary).translate(sources)
