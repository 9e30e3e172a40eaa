"""Publishing a run to the Hugging Face Hub and loading it back by name, without network:
the upload is captured before it is sent, and the download is read from a cache laid out
as huggingface_hub lays out its own (HF_HUB_OFFLINE=1)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from seq2seq.rundir import checkpoint, hub

from conftest import run_cli
from helpers import HUB_COMMIT, ROOT, SAMPLE, lay_out_hub_cache

REPO = "someone/tiny-en-de"
SOURCES = (SAMPLE / "test.en").read_text().splitlines()[:6]


@pytest.fixture(scope="module")
def published_run(trained_run, tmp_path_factory):
  """A copy of the trained run with its averaged checkpoint scored on the test split (a
  copy: the shared run stays as trained, other tests expect no 'averaged' in it)."""
  run = tmp_path_factory.mktemp("published") / "run"
  shutil.copytree(trained_run, run)
  run_cli("-m", "seq2seq.cli.average", "--workdir", run, "--last", "2")
  run_cli("-m", "seq2seq.cli.evaluate", "--workdir", run, "--checkpoint", "averaged",
          "--split", "test")
  return run


class CapturingApi:
  """Stands in for huggingface_hub.HfApi: records what would be sent."""

  def __init__(self):
    self.calls, self.files = [], {}

  def create_repo(self, repo_id, **kwargs):
    self.calls.append(("create_repo", repo_id, kwargs))

  def update_repo_settings(self, repo_id, **kwargs):
    self.calls.append(("update_repo_settings", repo_id, kwargs))

  def create_branch(self, repo_id, **kwargs):
    self.calls.append(("create_branch", repo_id, kwargs))

  def upload_folder(self, repo_id, folder_path, **kwargs):
    self.calls.append(("upload_folder", repo_id, kwargs))
    for root, _, names in os.walk(folder_path):
      for name in names:
        path = os.path.join(root, name)
        self.files[os.path.relpath(path, folder_path)] = open(path, "rb").read()


def test_push_uploads_what_inference_needs_with_a_card_the_hub_reads(published_run):
  from huggingface_hub import ModelCard

  api = CapturingApi()
  files, text = hub.push(published_run, REPO, "averaged", license="apache-2.0", api=api)
  assert [c[:2] for c in api.calls] == [("create_repo", REPO), ("upload_folder", REPO)]
  assert sorted(api.files) == files
  step = next((published_run / "checkpoints" / "averaged").iterdir()).name
  top = {f for f in files if "/" not in f}
  assert top == {"README.md", "config.json", "spm.model", "spm.vocab", "spm.json",
                 "training.json", "evaluations.jsonl", "published.json"}
  rest = set(files) - top
  assert rest and all(f.split("/")[:3] == ["checkpoints", "averaged", step] for f in rest)
  assert not any(f.startswith(("cache/", "hyps/")) or f.endswith((".log", ".lock"))
                 for f in files)
  assert json.loads(api.files["published.json"])["checkpoint"] == "averaged"

  card = ModelCard(text)  # the Hub's own parser of the YAML header
  assert card.data.language == ["en", "de"] and card.data.license == "apache-2.0"
  assert card.data.pipeline_tag == "translation" and card.data.library_name == "seq2seq"
  evaluation = json.loads((published_run / "evaluations.jsonl").read_text().splitlines()[-1])
  bleu = [r for r in card.data.eval_results if r.metric_type == "bleu"]
  assert bleu[0].metric_value == round(evaluation["bleu"], 2)
  assert bleu[0].metric_args["signature"] == evaluation["bleu_signature"]
  assert bleu[0].dataset_split == "test" and bleu[0].task_type == "translation"
  assert f'Translator.from_pretrained("{REPO}")' in card.text
  assert f"seq2seq-translate --model {REPO}" in card.text


def test_push_refuses_a_missing_checkpoint_and_a_bad_name(published_run):
  with pytest.raises(checkpoint.CheckpointError, match="no 'ema' checkpoint"):
    hub.push(published_run, REPO, "ema", dry_run=True)
  with pytest.raises(hub.HubError, match="ORG/NAME"):
    hub.push(published_run, "no-slash", dry_run=True)


@pytest.fixture(scope="module")
def hub_cache(published_run, tmp_path_factory):
  staged = tmp_path_factory.mktemp("staged")
  hub.stage(published_run, staged, REPO, "averaged")
  cache = tmp_path_factory.mktemp("hf") / "hub"
  lay_out_hub_cache(cache, REPO, staged)
  return cache


def offline(cache):
  return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache)}


def test_a_pushed_model_loads_by_name_offline_and_translates_as_the_run(published_run,
                                                                        hub_cache):
  from seq2seq import Translator

  expected = Translator.load(published_run, "averaged").translate(SOURCES)
  code = ("import json, sys; from seq2seq import Translator; "
          f"t = Translator.from_pretrained({REPO!r}, revision=sys.argv[1] or None); "
          f"print(json.dumps(t.translate({SOURCES!r})))")
  for revision in ("", HUB_COMMIT):
    out = subprocess.run([sys.executable, "-c", code, revision], env=offline(hub_cache),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == expected
  cli = subprocess.run([sys.executable, "translate.py", "--model", REPO], cwd=ROOT,
                       env=offline(hub_cache), input="\n".join(SOURCES) + "\n",
                       capture_output=True, text=True, timeout=300)
  assert cli.returncode == 0, cli.stderr[-2000:]
  assert cli.stdout.splitlines() == expected
  assert "a published model: its 'averaged' checkpoint" in cli.stderr


def test_evaluate_a_hub_model_writes_nothing_into_the_cache(hub_cache, tmp_path):
  before = sorted(p.name for p in hub_cache.rglob("*"))
  proc = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--model", REPO,
                         "--src", str(SAMPLE / "test.en"), "--ref", str(SAMPLE / "test.de")],
                        cwd=tmp_path, env=offline(hub_cache), capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert json.loads(proc.stdout.splitlines()[-1])["bleu"] > 0
  assert sorted(p.name for p in hub_cache.rglob("*")) == before
  assert (tmp_path / "hyps").is_dir()


def test_a_model_neither_local_nor_cached_is_one_line_offline(hub_cache, tmp_path):
  proc = subprocess.run([sys.executable, "translate.py", "--model", "someone/missing"],
                        cwd=ROOT, env=offline(hub_cache), input="A dog.\n",
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].startswith("error: someone/missing is neither")
  assert "HF_HUB_OFFLINE=1" in proc.stderr


def test_push_dry_run_prints_the_files_and_the_card(published_run):
  proc = run_cli("-m", "seq2seq.cli.push", "--workdir", published_run, "--repo", REPO,
                 "--dry-run")
  out = proc.stdout.decode()
  assert "published.json" in out and "pipeline_tag: translation" in out


def test_a_local_looking_path_that_does_not_exist_is_an_error_naming_it(hub_cache, tmp_path):
  (tmp_path / "runs").mkdir()  # a folder here, as runs/ is beside a user's runs
  command = [sys.executable, str(ROOT / "translate.py"), "--model"]
  run = lambda name: subprocess.run(command + [name], cwd=tmp_path, env=offline(hub_cache),  # noqa: E731
                                    input="A dog.\n", capture_output=True, text=True,
                                    timeout=300)
  missing = run("runs/m30k-ct2")
  assert missing.returncode == 1
  assert missing.stderr.strip().splitlines()[-1].startswith(
      "error: runs/m30k-ct2: no such directory")
  hub_name = run("hf://runs/m30k-ct2")  # written as a Hub name, it is one: not cached here
  assert hub_name.returncode == 1 and "is neither a local directory" in hub_name.stderr
  cached = run(f"hf://{REPO}")
  assert cached.returncode == 0, cached.stderr[-2000:]
  assert cached.stdout.strip()


def test_a_push_uploads_no_path_of_this_machine(published_run, tmp_path):
  from seq2seq.rundir import hub
  files = hub.stage(published_run, tmp_path / "staged", REPO, "averaged")

  def absolute(value):
    if isinstance(value, dict):
      return any(absolute(v) for v in value.values())
    if isinstance(value, list):
      return any(absolute(v) for v in value)
    return isinstance(value, str) and value.startswith("/")
  for name in files:
    if name.endswith((".json", ".jsonl")):
      text = (tmp_path / "staged" / name).read_text("utf-8")
      records = [json.loads(x) for x in text.splitlines() if x.strip()] if name.endswith(
          ".jsonl") else [json.loads(text)]
      assert not any(absolute(r) for r in records), name
  assert str(published_run) not in (tmp_path / "staged" / "README.md").read_text("utf-8")


def test_a_push_replaces_the_repository_makes_its_branch_and_applies_private(published_run):
  api = CapturingApi()
  hub.push(published_run, f"hf://{REPO}", "averaged", private=True, revision="v2", api=api)
  assert [c[:2] for c in api.calls] == [("create_repo", REPO), ("update_repo_settings", REPO),
                                       ("create_branch", REPO), ("upload_folder", REPO)]
  settings, branch, upload = (c[2] for c in api.calls[1:])
  assert settings == {"private": True} and branch == {"branch": "v2", "exist_ok": True}
  assert upload["delete_patterns"] == ["*"] and upload["revision"] == "v2"


def test_a_fine_tune_of_a_hub_model_names_it_as_base_model(published_run, tmp_path):
  from seq2seq.rundir import hub
  staged = tmp_path / "hub_model"
  hub.stage(published_run, staged, REPO, "averaged")  # a Hub model's folder, as cached
  assert hub.base_model(str(staged)) == REPO
  assert hub.base_model(f"hf://{REPO}") == REPO
  assert hub.base_model(str(published_run)) is None  # a local run is no Hub model
  assert hub.base_model(None) is None


def test_a_model_of_several_directions_lists_its_languages_and_each_score_s_direction(
    trained_multilingual, tmp_path):
  from huggingface_hub import ModelCard

  run = tmp_path / "run"
  shutil.copytree(trained_multilingual, run)
  (run / "evaluations.jsonl").unlink(missing_ok=True)  # other tests' scores of the run
  for src, tgt in (("en", "fr"), ("de", "fr")):
    run_cli("-m", "seq2seq.cli.evaluate", "--workdir", run, "--split", "test",
            "--src-lang", src, "--tgt-lang", tgt, "--output", tmp_path / f"{src}-{tgt}.txt")
  _, text = hub.push(run, "someone/tiny-multilingual", "best", api=CapturingApi(),
                     dry_run=True)
  card = ModelCard(text)
  assert card.data.language == ["en", "de", "fr"]
  tasks = {r.task_name for r in card.data.eval_results}
  assert tasks == {"Translation en→fr", "Translation de→fr (zero-shot)"}
