"""The run directory's README.md: a model card that says what the run is.

Training writes WORKDIR/training.json at its end (data files with sizes and hashes,
steps, epochs, minutes, machine, package version) and then the card; evaluate.py
appends each result to WORKDIR/evaluations.jsonl and rewrites the card. The card is
generated from those files, config.json and spm.json, so it never disagrees with them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shlex
from pathlib import Path
from typing import Any

import jax

from seq2seq.config import PRESETS, Config, DataConfig
from seq2seq.data import data_source, textfiles
from seq2seq.data.tokenizer import META_FILE, TARGET_MODEL_FILE
from seq2seq.rundir import checkpoint, run_files
from seq2seq.runtime import write_atomic
from seq2seq.version import __version__

CARD_FILE = "README.md"
TRAINING_FILE = "training.json"
EVALUATIONS_FILE = "evaluations.jsonl"
# A run imported from another tool's model (rundir/importing.py): where it came from, its
# license and the scores its source reports.
IMPORTED_FILE = "imported.json"


def file_record(path: Path) -> dict[str, Any]:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return {"file": str(path), "lines": textfiles.count_lines(path),
          "bytes": path.stat().st_size, "sha256": h.hexdigest()}


def data_records(data: DataConfig) -> list[dict[str, Any]]:
  """What the run read: each local split file (lines, bytes, sha256), or the Hub data set;
  a split the source lacks is recorded as missing (validation: held out of training).
  Several directions: each file or Hub split once."""
  records = []
  for one in (data.for_direction(s, t) for s, t in data.direction_pairs()):
    for split in (one.train_split, one.val_split, one.test_split):
      try:
        files = data_source.local_files(one, split)
      except textfiles.DataError:
        files = None
      if files is not None:
        found = [dict(file_record(p), split=split) for p in files[1]]
      elif one.hub and not data_source.split_path(one, split):
        found = [{"hub": one.hub, "config": one.hub_config, "split": one.hub_split(split)}]
      else:
        found = [{"split": split, "missing": True}]
      records += [r for r in found if r not in records]
  return records


def machine() -> str:
  kinds = sorted({d.device_kind for d in jax.devices()})
  return (f"{platform.machine()}, {os.cpu_count()} CPU cores, {len(jax.devices())} "
          f"{jax.default_backend()} device(s) ({', '.join(kinds)}), JAX {jax.__version__}")


def record_training(workdir: Path, cfg: Config, summary: dict[str, Any]) -> None:
  record = {"package_version": __version__, "machine": machine(),
            "data": data_records(cfg.data), **summary}
  write_atomic(Path(workdir) / TRAINING_FILE, json.dumps(record, indent=1))


CARD_LOCK_FILE = "card.lock"


@contextlib.contextmanager
def card_lock(workdir: str | os.PathLike):
  """Held while the card's records are read and the card written: two evaluations, or an
  evaluation and the trainer's last card, write one after the other, the later from
  everything the earlier recorded. Not the training lock: an evaluation of a run that is
  still training must not wait for it to end."""
  fd = os.open(Path(workdir) / CARD_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield
  finally:
    os.close(fd)  # closing releases the lock


def record_evaluation(workdir: Path, result: dict[str, Any]) -> None:
  """Appends `result` to the run's evaluations: one write of one line to a file opened for
  appending, so that evaluations at once each keep theirs."""
  line = (json.dumps(result) + "\n").encode("utf-8")
  fd = os.open(Path(workdir) / EVALUATIONS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try:
    os.write(fd, line)
  finally:
    os.close(fd)


def evaluations(workdir: str | os.PathLike) -> list[dict[str, Any]]:
  """The run's recorded evaluations, oldest first."""
  path = Path(workdir) / EVALUATIONS_FILE
  return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if (
      path.exists()) else []


def imported(workdir: str | os.PathLike) -> dict[str, Any]:
  """The run's IMPORTED_FILE record (where a model trained elsewhere came from), {} for a
  run trained here."""
  return _read_json(Path(workdir) / IMPORTED_FILE, {})


def _read_json(path: Path, default):
  return json.loads(path.read_text()) if path.exists() else default


def preset_name(cfg: Config) -> str:
  shape = lambda m: (m.d_model, m.num_heads, m.d_ff, m.encoder_layers, m.decoder_layers)
  names = [n for n, m in PRESETS.items() if shape(m) == shape(cfg.model)]
  return names[0] if names else "custom"


def next_commands(workdir: Path, cfg, hub_id: str | None = None) -> list[str]:
  """The commands that evaluate, translate with and serve this run: its averaged
  checkpoint where training averages, else its best; for a Hub model, `--model
  HUB_ID` (its one published checkpoint)."""
  if hub_id:
    model = f"--model {hub_id}"
  else:
    name = "averaged" if cfg.train.average_last > 1 else "best"
    model = f"--workdir {shlex.quote(str(workdir))} --checkpoint {name}"
  return [f"seq2seq-evaluate {model} --split {cfg.data.test_split}",
          f"echo 'A dog runs through the snow.' | seq2seq-translate {model}",
          f"seq2seq-serve {model}"]


def render(workdir: Path, name: str | None = None) -> str:
  """The card of the run in `workdir`; `name`: the Hub repository it is published as."""
  workdir = Path(workdir)
  cfg = run_files.load_config(workdir)
  training = _read_json(workdir / TRAINING_FILE, {})
  spm = _read_json(workdir / META_FILE, {})
  recorded = evaluations(workdir)
  source = imported(workdir)
  m, d, t = cfg.model, cfg.data, cfg.train
  params = sum(x.size for x in jax.tree_util.tree_leaves(checkpoint.abstract_params(m)))
  pairs = d.direction_pairs()
  title = ", ".join(f"{s}→{t}" for s, t in pairs)
  lines = [
      f"# {title} translation model: {name or workdir.name}", "",
      (f"A Transformer encoder-decoder trained elsewhere and imported from "
       f"`{source['source']}` ({source['format']}) into seq2seq (JAX and Haiku)"
       if source else "A Transformer encoder-decoder trained with seq2seq "
       f"{training.get('package_version', '?')} (JAX and Haiku)") + ". Load it with "
      + (f"`seq2seq.Translator.from_pretrained(\"{name}\")` or `seq2seq-translate --model "
         f"{name}` (`pip install seq2seq-haiku`)." if name else
         "`seq2seq.Translator.from_pretrained(PATH)` or `seq2seq-translate --workdir PATH`."),
      *(["", f"One model for {len(pairs)} directions: the target language is asked for "
         "with `tgt_lang` (`Translator.translate(texts, tgt_lang=\"fr\")`, `--tgt-lang fr`), "
         "given to the model as a token before the source. Any two of its languages "
         f"({', '.join(d.languages())}) can be asked for; a pair not listed here was not "
         "trained (zero-shot) and is marked so under Evaluations."] if d.multilingual else []),
      "", "## Use", "", "```bash", *next_commands(Path("PATH"), cfg, name), "```", "",
      "## Model", "",
      f"- preset: {preset_name(cfg)} (d_model {m.d_model}, {m.num_heads} heads, "
      f"{m.activation} feed-forward {m.d_ff}, "
      f"{m.encoder_layers} encoder + {m.decoder_layers} decoder layers, "
      f"{'pre' if m.pre_norm else 'post'}-norm, {m.positional} positions, "
      f"{'tied' if m.tied_embeddings else 'untied'} embeddings)",
      f"- parameters: {params:,}",
      (f"- vocabulary: {m.vocab_size:,} pieces, segmented by a source and a target "
       "SentencePiece model (`spm.model`, `spm.target.model`)"
       if (workdir / TARGET_MODEL_FILE).is_file() else
       f"- vocabulary: {m.vocab_size:,} joint SentencePiece pieces "
       f"({spm.get('model_type', '?')}, `spm.model`)"), "",
  ]
  if source:
    lines += ["## Source", "",
              f"- imported from `{source['source']}` ({source['format']}) on "
              f"{source['imported']}" + (f": {source['name']}" if source.get("name")
                                           else ""),
              f"- license: {source.get('license', 'not stated by the source; see it')}"]
    if source.get("scores"):
      lines += ["", "Scores the source reports:", "", *source["scores"]]
    lines.append("")
  lines += ["## Data", ""]
  for r in training.get("data", []):
    if "hub" in r:
      lines.append(f"- Hugging Face data set `{r['hub']}` {r['config']} split `{r['split']}`")
    elif r.get("missing"):
      lines.append(f"- {r.get('split', r.get('file'))}: not present"
                   + (" (held out of the training pairs)" if r.get("split") == cfg.data.val_split
                      else ""))
    else:
      lines.append(f"- `{r['file']}`: {r['lines']:,} lines, {r['bytes']:,} bytes, "
                   f"sha256 `{r['sha256'][:16]}…`")
  if t.init_from:
    lines.append(f"- fine-tuned from `{t.init_from}` ({t.init_checkpoint} checkpoint)")
  lines += ["", "## Training", ""]
  if training:
    lines += [
        f"- {training['step']:,} updates, {training['epoch']} epochs, "
        f"{training['elapsed_minutes']:.1f} minutes; stopped: {training['stop_reason']}",
        f"- best validation BLEU (greedy) {training['best_bleu']:.2f} at update "
        f"{training['best_step']:,}" + (" (the mean of the directions' BLEU)"
                                         if d.multilingual else ""),
        *(["- at that update, per direction: " + ", ".join(
            f"{k} {v:.2f}" for k, v in training["best_bleu_directions"].items())]
          if training.get("best_bleu_directions") else []),
        f"- machine: {training['machine']}",
    ]
  elif source:
    lines.append("- trained elsewhere (see Source); `train.init_from` fine-tunes it here")
  else:
    lines.append("- not finished (no training.json yet)")
  lines += [
      f"- batches of {d.max_tokens:,} tokens, peak learning rate {t.learning_rate:g} "
      f"({t.optimizer}, warmup {t.warmup_steps}), dropout {m.dropout}, label smoothing "
      f"{t.label_smoothing}"
      + (f", subword sampling (alpha {d.sampling_alpha:g}, n-best {d.sampling_nbest})"
         if d.sampling_alpha else "")
      + "; full settings in `config.json`", "",
      "## Evaluations", "",
  ]
  if recorded:
    lines += ["| data | checkpoint | beam | alpha | BLEU | chrF | signature |",
              "|---|---|---|---|---|---|---|"]
    for e in recorded:
      data = e["data"] + (f", {e['direction']}" if e.get("direction") else "") + (
          " (zero-shot)" if e.get("zero_shot") else "") + (
          f" (through {e['pivot']})" if e.get("pivot") else "")
      bleu = f"{e['bleu']:.2f}" + (f" ({e['bleu_lc_tok']:.2f} lowercased-tokenized)"
                                   if "bleu_lc_tok" in e else "")
      beam = f"{e['beam']}" + (f" (stop: {e['beam_stop']})"
                               if e.get("beam_stop", "exact") != "exact" else "")
      lines.append(f"| {data} | {e['checkpoint']} | {beam} | {e['alpha']} | {bleu} "
                   f"| {e['chrf']:.2f} | `{e['bleu_signature']}` |")
  else:
    lines.append("None yet: `seq2seq-evaluate --workdir PATH --split test` adds one here.")
  return "\n".join(lines) + "\n"


def write(workdir: Path) -> Path:
  """The card rendered from the run's records, written whole, under `card_lock`."""
  path = Path(workdir) / CARD_FILE
  with card_lock(workdir):
    write_atomic(path, render(workdir))
  return path

