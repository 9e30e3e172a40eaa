"""Every script of bench/ runs end to end: each is started as a user starts it (its own
process, from the checkout), with the smallest arguments that reach its code paths, on the
suite's tiny run (an export of it, or Multi30k where the script reads it), and must exit
0 and append rows that bench/report.py reads (`check_row`, and every table built over
them) to a temporary results file, never the committed one.

These run behind `make bench-smoke` (`pytest -m bench_smoke`), which .ci/run calls after
the suite: together they take minutes, not seconds."""

import json
import os
import subprocess
import sys

import pytest

from helpers import MULTI30K, ROOT, SAMPLE

pytestmark = [pytest.mark.bench_smoke, pytest.mark.slow]

SHORT_TRAINING = ["--override=--config.train.max_steps=6",
                  "--override=--config.train.eval_every=6",
                  "--override=--config.train.checkpoint_every=3",
                  "--override=--config.train.average_last=2",
                  "--override=--config.train.log_every=3",
                  "--override=--config.model.encoder_layers=1",
                  "--override=--config.model.decoder_layers=1",
                  "--override=--config.model.d_model=64",
                  "--override=--config.model.d_ff=128",
                  "--override=--config.model.num_heads=2"]


def multi30k() -> None:
  if not (MULTI30K / "train.en.gz").exists():
    pytest.skip(f"Multi30k not found at {MULTI30K}: this benchmark reads it")


def run_script(name: str, *args, results, timeout: float = 900) -> list[dict]:
  """The script `name` of bench/ run from the checkout with `args` and `--results
  RESULTS`; its rows, each checked by bench/report.py, and every table of report.py built
  over the committed rows and them."""
  sys.path.insert(0, str(ROOT / "bench"))
  import report
  proc = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), "--results",
                         str(results), *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                        timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
  assert proc.returncode == 0, (f"bench/{name}.py exited {proc.returncode}:\n"
                                f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
  rows = [json.loads(line) for line in results.read_text().splitlines()] \
      if results.exists() else []
  assert rows, f"bench/{name}.py wrote no results row"
  for row in rows:
    report.check_row(row)
    assert row["cpu"] and row["commit"] and row["command"].startswith(f"python bench/{name}.py")
  for table in report.TABLES.values():
    table(report.load() + rows)
  return rows


@pytest.fixture(scope="module")
def export(trained_run, tmp_path_factory):
  pytest.importorskip("ctranslate2", reason="CTranslate2 is the optional [ctranslate2] extra")
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  return export_ctranslate2(trained_run, tmp_path_factory.mktemp("export") / "ct2", "best")


def test_decode_speed_against_ctranslate2_at_its_best(trained_run, tmp_path):
  rows = run_script("decode_speed", "--workdir", trained_run, "--src", SAMPLE / "test.en",
                    "--ref", SAMPLE / "test.de", "--beam", "2", "--passes", "1",
                    "--compare-ctranslate2", "--ct2-batches", "examples:16,tokens:256",
                    "--ct2-threads", "1x1,1x2", "--sweep-passes", "1", "--max-output", "12",
                    results=tmp_path / "r.jsonl")
  engines = {r["engine"] for r in rows}
  assert {"CTranslate2 float32", "CTranslate2 int8",
          "seq2seq CTranslate2 engine float32"} <= engines
  jax = [r for r in rows if r["engine"].startswith("JAX")]
  assert jax and all("ratio" in r and "ratio_int8" in r for r in jax)


def test_decode_speed_min_rows_and_beam_stops(trained_run, tmp_path):
  run_script("decode_speed", "--workdir", trained_run, "--src", SAMPLE / "test.en", "--ref",
             SAMPLE / "test.de", "--beam", "2", "--passes", "1", "--min-rows", "0,8",
             "--beam-stops", "exact,current", results=tmp_path / "r.jsonl")


def test_import_models_round_trip_and_fine_tuning(trained_run, tmp_path):
  pytest.importorskip("ctranslate2", reason="CTranslate2 is the optional [ctranslate2] extra")
  rows = run_script("import_models", "round-trip", "--workdir", trained_run, "--sentences",
                    "8", "--fine-tune-minutes", "0.5",
                    "--fine-tune-override=--config.train.max_steps=4",
                    "--fine-tune-override=--config.train.eval_every=2",
                    "--fine-tune-override=--config.train.checkpoint_every=2",
                    results=tmp_path / "r.jsonl")
  figures = rows[0]["figures"]
  assert figures["float32_identical_lines"] == figures["sentences"] == 8
  assert figures["fine_tune_updates"] == 4


def test_import_models_opus_shape(tmp_path):
  if not (ROOT.parent / "shared" / "models" / "opus-mt-tc-big-en-pt").is_dir():
    pytest.skip("../shared/models is not here: the OPUS-MT tokenizers are read from it")
  rows = run_script("import_models", "opus-shape", "--output", tmp_path / "run", "--layers",
                    "1", "--d-model", "32", "--heads", "2", "--d-ff", "64",
                    results=tmp_path / "r.jsonl")
  assert rows[0]["figures"]["vocab_size"] > 50_000


def test_ctranslate2_baseline(export, tmp_path):
  rows = run_script("ctranslate2_baseline", "--model", export, "--src", SAMPLE / "test.en",
                    "--beam", "2", "--threads", "1x1,1x2", "--batches", "examples:16",
                    "--sweep-passes", "1", results=tmp_path / "r.jsonl")
  best = rows[0]["figures"]["best"]
  assert set(best) == {"float32_greedy", "float32_beam2", "int8_greedy", "int8_beam2"}


@pytest.mark.parametrize("engine", ["jax", "ctranslate2"])
def test_serve_load(engine, trained_run, export, tmp_path):
  model = trained_run if engine == "jax" else export
  rows = run_script("serve_load", "--workdir", model, "--engine", engine, "--checkpoint",
                    "best", "--src", SAMPLE / "test.en", "--clients", "1,4", "--seconds", "1",
                    "--batch-size", "8", results=tmp_path / "r.jsonl")
  assert [r["clients"] for r in rows] == [1, 4] and all(r["mismatches"] == 0 for r in rows)


def test_soak(trained_run, tmp_path):
  run_script("soak", "--workdir", trained_run, "--src", SAMPLE / "test.en", "--minutes",
             "0.05", "--capacity-seconds", "1", results=tmp_path / "r.jsonl")


def test_serve_mixed(trained_run, tmp_path):
  multi30k()
  run_script("serve_mixed", "--workdir", trained_run, "--checkpoint", "best", "--clients", "4",
             "--seconds", "1", "--batch-size", "8", results=tmp_path / "r.jsonl")


def test_serve_identity(trained_multilingual, tmp_path):
  """Every answer as the script names it (an error a 4xx, the rest 200), and the same
  answers, byte for byte, from a server started again."""
  answers = []
  for name in ("a", "b"):
    answers.append(tmp_path / f"{name}.json")
    rows = run_script("serve_identity", "--workdir", trained_multilingual, "--out",
                      answers[-1], results=tmp_path / f"{name}.jsonl")
  statuses = rows[-1]["figures"]["statuses"]
  assert {n for n, s in statuses.items() if s >= 400} == {n for n in statuses
                                                           if n.startswith("error")}
  assert set(statuses.values()) - {200} <= {400, 403, 404, 405, 413, 415, 422}
  rows = run_script("serve_identity", "--compare", *answers, results=tmp_path / "c.jsonl")
  assert rows[-1]["figures"]["identical"] and rows[-1]["figures"]["same"] == len(statuses)


def test_request_walk(tmp_path):
  """The way down enters each serving module once."""
  rows = run_script("request_walk", results=tmp_path / "r.jsonl")
  for name, walk in rows[-1]["figures"].items():
    for down in walk["down"]:
      assert len(down) == len(set(down)) and down[0] == "http_server", (name, down)
      assert down[-1] == "service", (name, down)


def test_first_click(trained_run, tmp_path):
  rows = run_script("first_click", "--workdir", trained_run, "--cores", "",
                    results=tmp_path / "r.jsonl")
  figures = rows[-1]["figures"]
  assert [c["client"] for c in figures["clients"]] == ["the page", "LibreTranslate's web UI"]
  assert {w["for"] for w in figures["warm"]} == {"defaults", "the page",
                                                 "LibreTranslate's web UI"}


def test_decode_memory(trained_run, tmp_path):
  run_script("decode_memory", "--workdir", trained_run, "--src", SAMPLE / "test.en",
             "--beams", "1,2", "--batch-size", "8", results=tmp_path / "r.jsonl")


def test_first_translation(trained_run, tmp_path):
  run_script("first_translation", "--workdir", trained_run, "--beam", "2", "--lines", "5",
             "--input", SAMPLE / "test.en", "--repeats", "1", results=tmp_path / "r.jsonl")


def test_lone_sentence(trained_run, tmp_path):
  multi30k()
  run_script("lone_sentence", "--workdir", trained_run, "--checkpoint", "best", "--sentences",
             "5", "--rounds", "1", results=tmp_path / "r.jsonl")


def test_paragraphs(trained_run, tmp_path):
  multi30k()
  for flags in ([], ["--unpunctuated"]):
    run_script("paragraphs", "--workdir", trained_run, "--checkpoint", "best", "--beam", "2",
               "--passes", "1", *flags, results=tmp_path / f"r{len(flags)}.jsonl")


def test_styled_documents(trained_run, tmp_path):
  run_script("styled_documents", "--workdir", trained_run, "--checkpoint", "best", "--beam",
             "2", "--paragraphs", "4", "--rounds", "1", "--source", SAMPLE / "test.en",
             results=tmp_path / "r.jsonl")


def test_glossary(trained_run, tmp_path):
  multi30k()
  run_script("glossary", "--workdir", trained_run, "--checkpoint", "best", "--beam", "2",
             "--passes", "1", "--most", "5", results=tmp_path / "r.jsonl")


def test_glossary_agreement(trained_run, tmp_path):
  multi30k()
  pytest.importorskip("german_nouns", reason="the lexicon german-nouns is not installed "
                      "(make install installs it)")
  run_script("glossary_agreement", "--workdir", trained_run, "--checkpoint", "best",
             "--beam", "2", "--passes", "1", "--most", "5", results=tmp_path / "r.jsonl")


def test_profile_decode(trained_run, tmp_path):
  multi30k()
  run_script("profile_decode", "--workdir", trained_run, "--checkpoint", "best", "--beam", "2",
             "--lines", "8", "--top", "3", results=tmp_path / "r.jsonl")


def test_tune_decoding_and_mbr(trained_run, tmp_path):
  run_script("tune_decoding", "--workdir", trained_run, "--checkpoint", "best", "--beams", "2",
             "--alphas", "0.6", results=tmp_path / "tune.jsonl")
  run_script("tune_mbr", "--workdir", trained_run, "--checkpoint", "best", "--beams", "2",
             "--samples", "2", results=tmp_path / "mbr.jsonl")


def test_detection(tmp_path):
  multi30k()
  run_script("detection", results=tmp_path / "r.jsonl")


def test_matmul_ceiling(tmp_path):
  run_script("matmul_ceiling", "--n", "128", "--repeats", "2", "--shapes", "64x64x64",
             results=tmp_path / "r.jsonl")


def test_training_steps(tmp_path):
  run_script("profile_train_step", "--preset", "tiny", "--rows", "4", "--length", "8",
             results=tmp_path / "profile.jsonl")
  run_script("step_vs_revision", "HEAD", "4", "8", "--preset", "tiny", "--rounds", "1",
             results=tmp_path / "revision.jsonl")


def test_train_throughput(tmp_path):
  run_script("train_throughput", "--preset", "tiny", "--seconds", "1", "--data", SAMPLE,
             "--ceiling", "100", "--max-tokens", "256", "--vocab-size", "400", results=tmp_path / "r.jsonl")


def test_data_pipeline(tmp_path):
  multi30k()
  run_script("data_pipeline", "--pairs", "3000", "--workdir", tmp_path / "work",
             "--vocab-size", "500", "--spm-sentences", "3000", "--max-tokens", "512",
             "--train-steps", "1", results=tmp_path / "r.jsonl")


def test_sweep_recipe(tmp_path):
  spec = tmp_path / "spec"
  spec.write_text("base\nsmall_ff --config.model.d_ff=64\n")
  run_script("sweep_recipe", "--config", ROOT / "configs" / "tiny.py", "--spec", spec,
             "--runs-dir", tmp_path / "runs", "--parallel", "1", "--average", "2", "--beam", "2",
             "--", "--config.train.max_steps=6", "--config.train.eval_every=6",
             "--config.train.checkpoint_every=3", results=tmp_path / "r.jsonl")


def test_auto_recipe(tmp_path):
  multi30k()
  rows = run_script("auto_recipe", "--case", "en-de", "--minutes", "1", "--runs-dir",
                    tmp_path / "runs", *SHORT_TRAINING, results=tmp_path / "r.jsonl")
  assert {r["kind"] for r in rows} == {"auto", "auto_plan"}


def test_multilingual(tmp_path):
  multi30k()
  rows = run_script("multilingual", "--arms", "bilingual,multilingual,hour", "--runs-dir",
                    tmp_path / "runs", "--directions", "en-de,de-en", "--zero-shot", "",
                    "--bilingual-minutes", "1", "--multilingual-minutes", "1",
                    *SHORT_TRAINING, results=tmp_path / "r.jsonl")
  assert [r["arm"] for r in rows] == ["bilingual", "multilingual", "hour"]


def test_a_script_that_cannot_run_here_says_why_in_one_line(tmp_path):
  """Missing data (Multi30k elsewhere, a file not there), a missing optional package or a
  folder that is not a run: one line naming it and a non-zero exit, no traceback."""
  for args, says in (
      (["decode_speed", "--workdir", tmp_path], "error: "),
      (["detection", "--split", "no_such_split"], "cannot run here: "),
      (["decode_memory", "--workdir", ROOT / "runs" / "absent", "--src", tmp_path / "absent.en"],
       "")):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / f"{args[0]}.py"),
                           *map(str, args[1:])], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr, (
        proc.stderr)
    assert lines[0].startswith(f"bench/{args[0]}.py: {says}"), lines


def test_every_script_has_a_smoke_test():
  """A new script in bench/ needs its own run here."""
  text = open(__file__, encoding="utf-8").read()
  scripts = {p.stem for p in (ROOT / "bench").glob("*.py")} - {"common", "report"}
  missing = [s for s in sorted(scripts) if f'"{s}"' not in text]
  assert not missing, f"no smoke run of bench/{', bench/'.join(missing)}"
