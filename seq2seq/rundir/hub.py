"""Models on the Hugging Face Hub: a run directory published as a model repository, and a
repository name (`org/name`) resolved to a local folder wherever a run directory is taken.

    resolve("org/name", revision)  the folder of a Hub model in huggingface_hub's cache
                                   (downloaded once; HF_HUB_OFFLINE=1 reads the cache only)
    stage(RUN, folder, ...)        what a push uploads, written to `folder`
    push(RUN, "org/name", ...)     stage, then create the repository and upload it

A published repository is a run directory reduced to what inference needs: config.json,
the SentencePiece model, one checkpoint (`checkpoints/KIND/STEP`), the evaluations and a
model card (README.md) whose YAML header the Hub reads: languages, license, data set,
`model-index` with the evaluations' BLEU and chrF and their sacreBLEU signatures, and the
base model of a fine-tune. `published.json` names the checkpoint, so `--checkpoint`
need not be given: 'best', the default, is the published one.

Downloads and uploads go through huggingface_hub, with its cache (`HF_HUB_CACHE`), its
token (`hf auth login` or `HF_TOKEN`), its revisions and its progress bars.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from seq2seq.data import tokenizer
from seq2seq.rundir import checkpoint, model_card, run_files
from seq2seq.version import __version__

log = logging.getLogger(__name__)

LIBRARY = "seq2seq"
# The files of a run that inference reads (the checkpoint is added by name).
INFERENCE_FILES = (run_files.CONFIG_FILE, tokenizer.MODEL_FILE, tokenizer.TARGET_MODEL_FILE,
                   tokenizer.SETTINGS_FILE,
                   "spm.vocab", tokenizer.META_FILE,
                   model_card.TRAINING_FILE, model_card.EVALUATIONS_FILE,
                   model_card.IMPORTED_FILE,
                   tokenizer.LANGUAGE_PIECES_FILE)
REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


class HubError(ValueError):
  """A Hub repository that cannot be resolved or a run that cannot be published."""


HUB_PREFIX = "hf://"  # hf://ORG/NAME names a Hub model whatever folders exist here


def is_repo_id(name: str) -> bool:
  """Whether `name` names a Hub model: `hf://ORG/NAME`, or `ORG/NAME` where neither that
  path nor a folder `ORG` exists here (so that `runs/m30k-ct2`, not yet exported, is a
  missing local folder, not a download from an account called `runs`)."""
  if name.startswith(HUB_PREFIX):
    return bool(REPO_ID.fullmatch(name[len(HUB_PREFIX):]))
  return (bool(REPO_ID.fullmatch(name)) and not Path(name).exists()
          and not Path(name.split("/", 1)[0]).is_dir())


def repo_name(name: str) -> str:
  """`ORG/NAME` of a Hub model name (without `hf://`)."""
  return name.removeprefix(HUB_PREFIX)


def resolve(name: str | os.PathLike, revision: str | None = None) -> Path:
  """A local directory as it is; `org/name` (not a local path) as the folder of that Hub
  model repository in huggingface_hub's cache, downloaded at `revision` (a branch, tag or
  commit; default main) unless the cache has it."""
  if not isinstance(name, str) or not is_repo_id(name):
    if revision:
      raise HubError(f"--revision is for Hub models; {name} is a local directory")
    if not Path(name).exists():
      raise HubError(f"{name}: no such directory (a Hub model is ORG/NAME where no folder "
                     f"ORG is here, or {HUB_PREFIX}ORG/NAME)")
    return Path(name)
  from huggingface_hub import snapshot_download
  from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
  try:
    folder = snapshot_download(repo_name(name), revision=revision, library_name=LIBRARY,
                               library_version=__version__)
  except LocalEntryNotFoundError as e:
    raise HubError(f"{name}{'@' + revision if revision else ''} is neither a local directory "
                   "nor in the Hugging Face cache, and the Hub cannot be reached "
                   f"({checkpoint.first_line(e)}); with HF_HUB_OFFLINE=1 only the cache "
                   f"({_cache_dir()}) is read") from None
  except (HFValidationError, OSError) as e:  # RepositoryNotFoundError is an OSError
    raise HubError(f"{name}: {checkpoint.first_line(e)}") from None
  log.info("Hub model %s%s: %s", name, f"@{revision}" if revision else "", folder)
  return Path(folder)


# ----------------------------------------------------------------------------- publishing


def stage(workdir: str | os.PathLike, folder: str | os.PathLike, repo_id: str,
          checkpoint_name: str = "averaged", license: str | None = None,
          datasets: list[str] | None = None) -> list[str]:
  """Writes to `folder` what `push` uploads; returns its files, relative, sorted."""
  workdir, folder = Path(workdir), Path(folder)
  if not REPO_ID.fullmatch(repo_name(repo_id)):
    raise HubError(f"--repo {repo_id!r}: expected a Hub repository name, ORG/NAME")
  repo_id = repo_name(repo_id)
  if checkpoint_name not in checkpoint.KINDS:
    raise HubError(f"--checkpoint {checkpoint_name!r}: publish one of "
                   f"{', '.join(checkpoint.KINDS)}")
  cfg = run_files.load_config(workdir)  # a CheckpointError names a non-run directory
  step_dir = checkpoint.checkpoint_path(workdir, checkpoint_name)
  if step_dir.parent.name != checkpoint_name:  # 'best' fell back to 'latest'
    raise HubError(f"{workdir} has no '{checkpoint_name}' checkpoint yet")
  folder.mkdir(parents=True, exist_ok=True)
  for name in INFERENCE_FILES:
    if (workdir / name).is_file():
      shutil.copy2(workdir / name, folder / name)
      if name.endswith((".json", ".jsonl")):  # this machine's paths stay here
        lines = (folder / name).read_text("utf-8").splitlines()
        (folder / name).write_text("".join(
            json.dumps(without_local_paths(json.loads(line)),
                       indent=None if name.endswith(".jsonl") else 2) + "\n"
            for line in ([("\n".join(lines))] if name.endswith(".json") else lines)
            if line.strip()), "utf-8")
  shutil.copytree(step_dir, folder / "checkpoints" / checkpoint_name / step_dir.name)
  (folder / checkpoint.PUBLISHED_FILE).write_text(json.dumps(
      {"checkpoint": checkpoint_name, "step": int(step_dir.name), "repo_id": repo_id,
       "seq2seq_version": __version__}, indent=2) + "\n")
  (folder / model_card.CARD_FILE).write_text(
      card(folder, cfg, repo_id, checkpoint_name, license, datasets), encoding="utf-8")
  return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def imported_from_hub(record: dict) -> str | None:
  """The Hub model an import record (model_card.imported) names as its source, if any."""
  source = record.get("source")
  return source if isinstance(source, str) and REPO_ID.fullmatch(source) else None


def base_model(init_from: str | None) -> str | None:
  """The Hub name of the model a run was fine-tuned from: its own name, or for a folder
  the repository its `published.json` names (a Hub model's folder in the cache, as
  `--model ORG/NAME` gives it to fine-tuning) or the Hub model it was imported from
  (`seq2seq-import ORG/NAME`); None for a local run."""
  if not init_from:
    return None
  if is_repo_id(init_from):
    return repo_name(init_from)
  if source := imported_from_hub(model_card.imported(init_from)):
    return source
  try:
    published = json.loads((Path(init_from) / checkpoint.PUBLISHED_FILE).read_text())
  except (OSError, ValueError):
    return None
  name = published.get("repo_id") if isinstance(published, dict) else None
  return name if isinstance(name, str) and REPO_ID.fullmatch(name) else None


def without_local_paths(value):
  """`value` (JSON) with every absolute path of this machine cut to its last part: a
  published run names its data and checkpoints, not where they lay here."""
  if isinstance(value, dict):
    return {k: without_local_paths(v) for k, v in value.items()}
  if isinstance(value, list):
    return [without_local_paths(v) for v in value]
  if isinstance(value, str) and os.path.isabs(value) and "\n" not in value:
    return Path(value).name
  return value


def card(folder: Path, cfg, repo_id: str, checkpoint_name: str, license: str | None,
         datasets: list[str] | None) -> str:
  """The model card: the Hub's YAML metadata, then the run's card for this repository."""
  from huggingface_hub import EvalResult, ModelCard, ModelCardData

  results = []
  dataset = (datasets or [cfg.data.hub or "local"])[0]
  for e in model_card.evaluations(folder):
    if e.get("checkpoint") != checkpoint_name or e.get("engine", "jax") != "jax":
      continue  # the card reports the checkpoint it ships
    src, tgt = e.get("direction", f"{cfg.data.src_lang}-{cfg.data.tgt_lang}").split("-")
    kind = " (zero-shot)" if e.get("zero_shot") else (
        f" (through {e['pivot']})" if e.get("pivot") else "")
    # the Hub groups results by task type and data set (its config and split): a
    # direction is its data set's config, as wmt's "de-en" is
    config = {"dataset_config": f"{src}-{tgt}{kind}"} if "direction" in e else {}
    common = dict(task_type="translation", task_name=f"Translation {src}→{tgt}{kind}",
                  dataset_type=dataset, dataset_name=f"{dataset} {e['data']}", **config,
                  dataset_split=e["data"])
    results.append(EvalResult(**common, metric_type="bleu", metric_value=round(e["bleu"], 2),
                              metric_name=f"sacreBLEU (beam {e['beam']})",
                              metric_args={"signature": e["bleu_signature"]}))
    results.append(EvalResult(**common, metric_type="chrf", metric_value=round(e["chrf"], 2),
                              metric_name=f"chrF (beam {e['beam']})",
                              metric_args={"signature": e.get("chrf_signature", "")}))
  base = cfg.train.init_from
  # an imported model, or a fine-tuning of one, keeps its source's license unless told
  source = model_card.imported(folder) or (model_card.imported(base) if base else {})
  data = ModelCardData(
      language=list(cfg.data.languages()), license=license or source.get("license", "unknown"),
      library_name=LIBRARY,
      pipeline_tag="translation", tags=["translation", "jax", "haiku", "seq2seq"],
      datasets=datasets or ([cfg.data.hub] if cfg.data.hub else None),
      base_model=base_model(base) or imported_from_hub(source),
      model_name=repo_id, eval_results=results or None)
  body = model_card.render(folder, name=repo_id)
  return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}").content


def push(workdir: str | os.PathLike, repo_id: str, checkpoint_name: str = "averaged",
         license: str | None = None, datasets: list[str] | None = None,
         private: bool = False, revision: str | None = None, dry_run: bool = False,
         api=None) -> tuple[list[str], str]:
  """Publishes the run's `checkpoint_name` to the Hub model repository `repo_id` (created
  if missing). Returns (the files uploaded, the model card). `dry_run`: stage and return,
  send nothing. `api`: a `huggingface_hub.HfApi` (its token: hf auth login)."""
  with tempfile.TemporaryDirectory(prefix="seq2seq-push-") as folder:
    repo_id = repo_name(repo_id)
    files = stage(workdir, folder, repo_id, checkpoint_name, license, datasets)
    text = (Path(folder) / model_card.CARD_FILE).read_text(encoding="utf-8")
    if dry_run:
      return files, text
    from huggingface_hub import HfApi
    api = api or HfApi(library_name=LIBRARY, library_version=__version__)
    api.create_repo(repo_id, private=private, exist_ok=True)
    if private:  # an existing public repository is made private too
      api.update_repo_settings(repo_id, private=True)
    if revision:  # a new branch is made from main; an existing one is kept
      api.create_branch(repo_id, branch=revision, exist_ok=True)
    # what the repository held is replaced: `best` then loads what was pushed, not an
    # earlier upload's checkpoint
    api.upload_folder(repo_id=repo_id, folder_path=folder, revision=revision,
                      delete_patterns=["*"],
                      commit_message=f"seq2seq {checkpoint_name} checkpoint of "
                      f"{Path(workdir).name}")
    log.info("pushed %d files to https://huggingface.co/%s", len(files), repo_id)
    return files, text


def _cache_dir() -> str:
  from huggingface_hub import constants
  return constants.HF_HUB_CACHE

