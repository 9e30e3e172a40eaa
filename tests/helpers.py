"""Shared test helpers: paths and small corpora written by the tests themselves."""

import dataclasses
import hashlib
import os
from pathlib import Path

from seq2seq.config import PRESETS, Config, DataConfig, DecodeConfig, TrainConfig

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
MULTI30K = Path(os.environ.get("SEQ2SEQ_MULTI30K", ROOT.parent / "shared" / "data" / "multi30k"))
# The seed of the runs whose translations tests decode (conftest.trained_run, ...): each
# CPU class trains its own model, so those tests hold for any run; another seed checks it.
TEST_SEED = int(os.environ.get("SEQ2SEQ_TEST_SEED", "0"))


def write_corpus(directory: Path, split: str, src_lines, tgt_lines, src="en", tgt="de"):
  directory.mkdir(parents=True, exist_ok=True)
  (directory / f"{split}.{src}").write_text("".join(l + "\n" for l in src_lines), "utf-8")
  (directory / f"{split}.{tgt}").write_text("".join(l + "\n" for l in tgt_lines), "utf-8")
  return directory


def tiny_config(data_dir, **train_overrides) -> Config:
  """The tiny model, one layer per stack (half the programs' size to compile), on a small
  corpus: 20 quick updates unless overridden."""
  model = dataclasses.replace(PRESETS["tiny"], vocab_size=400, max_len=64, encoder_layers=1,
                              decoder_layers=1)
  data = DataConfig(dir=str(data_dir), max_tokens=512,
                    bucket_boundaries=(24, 48), max_train_len=48, test_split="test")
  train_cfg = TrainConfig(learning_rate=3e-3, warmup_steps=20, max_steps=20, log_every=1,
                          eval_every=1000, checkpoint_every=10, eval_max_sentences=8)
  return Config(model=model, data=data, train=dataclasses.replace(train_cfg, **train_overrides),
                decode=DecodeConfig(batch_size=8))


HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def lay_out_hub_cache(cache: Path, repo_id: str, staged: Path) -> None:
  """`staged` as huggingface_hub caches a download of `repo_id` at HUB_COMMIT: blobs named
  by content hash, snapshot files linking to them, refs/main naming the commit."""
  repo = cache / f"models--{repo_id.replace('/', '--')}"
  (repo / "refs").mkdir(parents=True)
  (repo / "refs" / "main").write_text(HUB_COMMIT)
  for path in staged.rglob("*"):
    if path.is_file():
      data = path.read_bytes()
      blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
      blob.parent.mkdir(parents=True, exist_ok=True)
      blob.write_bytes(data)
      link = repo / "snapshots" / HUB_COMMIT / path.relative_to(staged)
      link.parent.mkdir(parents=True, exist_ok=True)
      link.symlink_to(os.path.relpath(blob, link.parent))


GERMAN_CASES = ("nominativ", "genitiv", "dativ", "akkusativ")
GERMAN_NOUNS = {  # gender, singular and plural forms (nominative, genitive, dative, accusative)
    "Park": ("m", "Park Parks Park Park", "Parks Parks Parks Parks"),
    "Grünanlage": ("f", "Grünanlage " * 4, "Grünanlagen " * 4),
    "Auto": ("n", "Auto Autos Auto Auto", "Autos " * 4),
    "Karre": ("f", "Karre " * 4, "Karren " * 4),
    "Fahrrad": ("n", "Fahrrad Fahrrads Fahrrad Fahrrad", "Fahrräder Fahrräder Fahrrädern Fahrräder"),
    "Esel": ("m", "Esel Esels Esel Esel", "Esel Esel Eseln Esel"),
    "Tasche": ("f", "Tasche " * 4, "Taschen " * 4),
    "Beutel": ("m", "Beutel Beutels Beutel Beutel", "Beutel Beutel Beuteln Beutel"),
    "Straße": ("f", "Straße " * 4, "Straßen " * 4),
    "Weg": ("m", "Weg Wegs Weg Weg", "Wege Wege Wegen Wege"),
    "Gelände": ("n", "Gelände Geländes Gelände Gelände", "Gelände Gelände Geländen Gelände"),
    "Hund": ("m", "Hund Hunds Hund Hund", "Hunde Hunde Hunden Hunde"),
    "Töle": ("f", "Töle " * 4, "Tölen " * 4),
    "Hut": ("m", "Hut Huts Hut Hut", "Hüte Hüte Hüten Hüte"),
    "Mütze": ("f", "Mütze " * 4, "Mützen " * 4),
    "Hemd": ("n", "Hemd Hemds Hemd Hemd", "Hemden Hemden Hemden Hemden"),
    "Mann": ("m", "Mann Manns Mann Mann", "Männer Männer Männern Männer"),
}


def german_rows():
  """A small German noun lexicon in german-nouns' CSV layout (`german.Lexicon(rows)`)."""
  header = ["lemma", "pos", "genus", "genus 1", "genus 2"] + [
      f"{case} {number}" for number in ("singular", "plural") for case in GERMAN_CASES]
  yield header
  for lemma, (genus, singular, plural) in GERMAN_NOUNS.items():
    yield [lemma, "Substantiv", genus, "", ""] + singular.split() + plural.split()
  yield ["Müller", "Nachname,Substantiv", "", "", ""] + ["Müller"] * 8  # a name: no noun
