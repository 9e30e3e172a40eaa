"""A trained run as an Argos Translate package, which Argos Translate and LibreTranslate
install: the CTranslate2 model (rundir/ctranslate2_model.py), the SentencePiece model, the
sentence splitter (minisbd_splitter.py), `metadata.json` and the model card, zipped.

    seq2seq-export --workdir RUN --format argos --output en_de.argosmodel
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

from seq2seq.config import Config
from seq2seq.data.tokenizer import MODEL_FILE
from seq2seq.rundir import minisbd_splitter, model_card, run_files
from seq2seq.rundir.ctranslate2_model import (
  EXPORT_FILE,
  ExportError,
  export_ctranslate2,
  one_direction,
)
from seq2seq.rundir.languages import language_name
from seq2seq.version import __version__

log = logging.getLogger(__name__)


ARGOS_SUFFIX = ".argosmodel"


def export_argos(workdir: str | Path, output: str | Path, checkpoint_name: str = "best",
                 quantization: str = "int8", force: bool = False,
                 direction: tuple[str, str] | None = None) -> Path:
  """Writes an Argos Translate package (`output`, ending in .argosmodel): a zip holding one
  folder with `metadata.json` (the languages, and the model card's facts under
  "seq2seq"), the CTranslate2 model in `model/`, `sentencepiece.model`, the sentence
  splitter in `minisbd/` (minisbd_splitter.py) and the card as `README.md`.
  argostranslate's `package.install_from_path(FILE)` installs it; LibreTranslate reads
  it unzipped in its packages folder. A package translates one direction: a run of
  several exports the `direction` asked for (its token added by CTranslate2)."""
  output = Path(output)
  if output.suffix != ARGOS_SUFFIX:
    raise ExportError(f"{output}: an Argos package's name ends in {ARGOS_SUFFIX}")
  if output.exists() and not force:
    raise ExportError(f"{output} exists (add --force to replace it)")
  cfg: Config = run_files.load_config(workdir)
  if cfg.data.multilingual and direction is None:
    raise ExportError(f"{workdir} translates {', '.join(f'{s}-{t}' for s, t in cfg.data.direction_pairs())}"
                      ": an Argos package holds one direction; choose it with --src-lang and "
                      "--tgt-lang")
  cfg = one_direction(cfg, direction, workdir)[0]
  src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
  for code in (src, tgt):  # they name a folder inside the package
    if not LANGUAGE_CODE.fullmatch(code or ""):
      raise ExportError(f"{workdir}: language code {code!r} is not one: expected 2-3 "
                        "letters with an optional region or script (e.g. en, pt-BR, zh_Hant)")
  partial = output.with_name(output.name + ".partial")
  try:
    _write_argos(workdir, output, partial, cfg, src, tgt, checkpoint_name, quantization,
                 direction)
  finally:
    partial.unlink(missing_ok=True)  # a failed zip leaves nothing behind
  log.info("wrote the Argos Translate package %s (%s → %s, %s checkpoint, %s)", output, src,
           tgt, checkpoint_name, quantization)
  return output




# A language code as Argos and LibreTranslate take it, and nothing a path could use.
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}([-_][A-Za-z0-9]{2,8})?")


def _write_argos(workdir, output: Path, partial: Path, cfg: Config, src: str, tgt: str,
                 checkpoint_name: str, quantization: str,
                 direction: tuple[str, str] | None) -> None:
  with tempfile.TemporaryDirectory(prefix="seq2seq-argos-") as tmp:
    folder = Path(tmp) / f"translate-{src}_{tgt}"
    export_ctranslate2(workdir, folder / "model", checkpoint_name, quantization,
                       direction=direction)
    info = json.loads((folder / "model" / EXPORT_FILE).read_text())
    shutil.move(folder / "model" / MODEL_FILE, folder / "sentencepiece.model")
    (folder / "model" / EXPORT_FILE).unlink()
    # the sentence splitter Argos and LibreTranslate would otherwise download
    minisbd_splitter.write(folder / "minisbd" / f"{src}.onnx", src)
    metadata = {
        # the export's date as a version: above the 1.x of the official packages, so
        # that LibreTranslate's --update-models does not replace it with theirs
        "package_version": time.strftime("%Y.%m.%d"), "argos_version": "1.0",
        "type": "translate",
        "from_code": src, "from_name": language_name(src),
        "to_code": tgt, "to_name": language_name(tgt),
        "source_languages": [{"code": src, "name": language_name(src)}],
        "target_languages": [{"code": tgt, "name": language_name(tgt)}],
        "links": [], "dependencies": [],
        "seq2seq": {"version": __version__, "checkpoint": checkpoint_name,
                    "step": info["step"], "quantization": quantization,
                    "model": cfg.to_dict()["model"],
                    "data": cfg.data.hub or cfg.data.dir or cfg.data.train_path,
                    "evaluations": [{k: e[k] for k in ("data", "checkpoint", "beam", "bleu",
                                                       "bleu_signature", "chrf") if k in e}
                                    for e in model_card.evaluations(workdir)
                                    if e.get("checkpoint") == checkpoint_name
                                    and e.get("direction", f"{src}-{tgt}") == f"{src}-{tgt}"
                                    and not e.get("pivot")]},
    }
    (folder / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    card = Path(workdir) / model_card.CARD_FILE
    if card.exists():
      shutil.copyfile(card, folder / "README.md")
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
      for path in sorted(folder.rglob("*")):
        if path.is_file():
          z.write(path, path.relative_to(tmp).as_posix())
    partial.replace(output)  # never a half-written package under the final name
