"""Models from elsewhere, imported (seq2seq-import): round trips on real weights, a
fine-tuning of an import, and a model of OPUS-MT's shape to time decoding with.

  python bench/import_models.py [--results FILE] round-trip --workdir RUN \
      [--checkpoint averaged] [--fine-tune-minutes 10] [--sentences 1000]
  python bench/import_models.py [--results FILE] opus-shape --output RUN [--layers 6]

round-trip: the run's checkpoint exported as an Argos package (int8, as Argos ships) and
as a CTranslate2 model (float32), each imported (seq2seq-import) and scored on
test_2016_flickr: the float32 import's translations against the run's own (identical
lines), the Argos import's BLEU against seq2seq's CTranslate2 engine on the package's
int8 model, beam 5 with the run's length penalty on every side (an Argos package does not
carry it). With --fine-tune-minutes, the float32
import is fine-tuned on the run's corpus with `--config auto` (a fine-tuning plan) and
its validation BLEU (greedy) compared with the run's checkpoint's, computed alike.

opus-shape: a Hugging Face Marian folder of OPUS-MT en-de's shape (6+6 layers, d 512,
8 heads, FFN 2048, swish, post-norm, tied; random weights, so its outputs run to the
length limit) with opus-mt-tc-big-en-pt's real tokenizers and id vocabulary (54,776;
../shared/models), imported into RUN. Time its decoding against CTranslate2 with
`python bench/decode_speed.py --workdir RUN --compare-ctranslate2`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import MULTI30K, ROOT, add_results_flag, machine, peak_rss_mib, report

REAL = ROOT.parent / "shared" / "models" / "opus-mt-tc-big-en-pt"


def lines(path: Path, limit: int) -> list[str]:
  """The first `limit` lines of `path`, or of `path` without `.gz` where only that is here."""
  if not path.exists() and path.suffix == ".gz":
    path = path.with_suffix("")
  opener = gzip.open if path.suffix == ".gz" else open
  with opener(path, "rt", encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f][:limit]


def bleu(hyps: list[str], refs: list[str]) -> float:
  import sacrebleu
  return round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)


def package_engine(package: Path, run: Path, checkpoint_name: str, folder: Path):
  """(seq2seq's CTranslate2 engine on the package's int8 model, whether the package holds
  that model.bin byte for byte): the run exported int8 as the package was."""
  import zipfile

  from seq2seq import load_engine
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  export = export_ctranslate2(run, folder / "int8", checkpoint_name, "int8")
  with zipfile.ZipFile(package) as z:
    inside = next(n for n in z.namelist() if n.endswith("/model/model.bin"))
    same = z.read(inside) == (export / "model.bin").read_bytes()
  return load_engine(export, "ctranslate2"), same


def round_trip(args) -> dict:
  from seq2seq import Translator
  from seq2seq.rundir import run_files
  from seq2seq.rundir.argos_package import export_argos
  from seq2seq.rundir.ctranslate2_model import export_ctranslate2
  from seq2seq.rundir.importing import import_model
  run = Path(args.workdir)
  cfg = run_files.load_config(run)
  data = Path(cfg.data.dir or MULTI30K)
  src = lines(data / f"{cfg.data.test_split}.{cfg.data.src_lang}.gz", args.sentences)
  ref = lines(data / f"{cfg.data.test_split}.{cfg.data.tgt_lang}.gz", args.sentences)
  out = {"run": str(run), "checkpoint": args.checkpoint, "sentences": len(src)}
  with tempfile.TemporaryDirectory(prefix="import-bench-") as tmp:
    tmp = Path(tmp)
    started = time.perf_counter()
    float32 = export_ctranslate2(run, tmp / "ct2", args.checkpoint, "float32")
    package = export_argos(run, tmp / "en_de.argosmodel", args.checkpoint, "int8")
    out["export_seconds"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    imported32 = import_model(float32, tmp / "imported-float32")
    imported8 = import_model(package, tmp / "imported-argos")
    out["import_seconds"] = round((time.perf_counter() - started) / 2, 1)
    search = dict(beam_size=5, alpha=cfg.decode.alpha)  # the run's, on every side
    original = Translator.load(run, args.checkpoint).translate(src, **search)
    from_float32 = Translator.load(imported32).translate(src, **search)
    from_argos = Translator.load(imported8).translate(src, **search)
    engine, same = package_engine(package, run, args.checkpoint, tmp)
    by_ct2 = engine.translate(src, **search)
    from seq2seq import load_engine
    by_ct2_float32 = load_engine(float32, "ctranslate2").translate(src, **search)
    out["package_model_bin_is_the_int8_export"] = same
    out |= {"bleu_run": bleu(original, ref), "bleu_float32_import": bleu(from_float32, ref),
            "float32_identical_lines": sum(a == b for a, b in zip(original, from_float32)),
            "float32_import_identical_to_ctranslate2_engine": sum(
                a == b for a, b in zip(from_float32, by_ct2_float32)),
            "bleu_argos_int8_ctranslate2_engine": bleu(by_ct2, ref),
            "bleu_argos_int8_import": bleu(from_argos, ref)}
    out["argos_bleu_difference"] = round(out["bleu_argos_int8_import"]
                                         - out["bleu_argos_int8_ctranslate2_engine"], 2)
    if args.fine_tune_minutes:
      out |= fine_tune(args, run, imported32, cfg, data, tmp)
  out["peak_rss_mib"] = peak_rss_mib()
  return out


def fine_tune(args, run: Path, imported: Path, cfg, data: Path, tmp: Path) -> dict:
  from seq2seq import Translator
  tuned = tmp / "fine-tuned"
  started = time.perf_counter()
  subprocess.run([sys.executable, str(ROOT / "train.py"), "--config", "auto", "--workdir",
                  str(tuned), f"--config.train.init_from={imported}",
                  f"--config.data.dir={data}", f"--config.data.src_lang={cfg.data.src_lang}",
                  f"--config.data.tgt_lang={cfg.data.tgt_lang}",
                  f"--config.data.val_split={cfg.data.val_split}",
                  f"--config.train.max_minutes={args.fine_tune_minutes}",
                  *args.fine_tune_override], check=True, cwd=ROOT)
  seconds = time.perf_counter() - started
  val_src = lines(data / f"{cfg.data.val_split}.{cfg.data.src_lang}.gz", args.sentences)
  val_ref = lines(data / f"{cfg.data.val_split}.{cfg.data.tgt_lang}.gz", args.sentences)
  before = Translator.load(run, args.checkpoint).translate(val_src)
  after = Translator.load(tuned).translate(val_src)
  averaged = (Translator.load(tuned, "averaged").translate(val_src)
              if (tuned / "checkpoints" / "averaged").is_dir() else None)
  training = json.loads((tuned / "training.json").read_text())
  plan = json.loads((tuned / "recipe.json").read_text())["choices"]
  return {"fine_tune_minutes": args.fine_tune_minutes,
          "fine_tune_wall_minutes": round(seconds / 60, 1),
          "fine_tune_updates": training["step"],
          "fine_tune_learning_rate": plan["train.learning_rate"],
          "val_bleu_greedy_run": bleu(before, val_ref),
          "val_bleu_greedy_fine_tuned": bleu(after, val_ref),
          **({"val_bleu_greedy_fine_tuned_averaged": bleu(averaged, val_ref)}
             if averaged else {})}


def opus_shape(args) -> dict:
  sys.path.insert(0, str(ROOT / "tests"))
  import foreign_models as fm
  import numpy as np

  from seq2seq.rundir.importing import import_model
  if not REAL.is_dir():
    raise FileNotFoundError(f"{REAL} is not here: its tokenizers and vocabulary are used")
  vocab = json.loads((REAL / "vocab.json").read_text())
  tokens = [t for t in sorted(vocab, key=vocab.get) if t != "<pad>"]
  tokens = [t for t in tokens if not t.startswith(">>")]  # one direction, as opus-mt-en-de
  d, heads, ffn = args.d_model, args.heads, args.d_ff
  weights = fm.marian_weights(np.random.default_rng(0), len(tokens), d, ffn, args.layers,
                              args.layers)
  with tempfile.TemporaryDirectory(prefix="opus-shape-") as tmp:
    release = fm.write_marian(Path(tmp) / "release", weights,
                              fm.marian_config(d, heads, ffn, args.layers, args.layers, "swish"),
                              tokens, (REAL / "source.spm").read_bytes(),
                              (REAL / "target.spm").read_bytes())
    hf = fm.huggingface_from_marian(release, Path(tmp) / "hf")
    started = time.perf_counter()
    run = import_model(hf, args.output, src_lang="en", tgt_lang="pt", force=args.force)
    seconds = time.perf_counter() - started
  from seq2seq.rundir import run_files
  m = run_files.load_config(run).model
  return {"run": str(run), "import_seconds": round(seconds, 1), "vocab_size": m.vocab_size,
          "d_model": m.d_model, "layers": m.encoder_layers, "activation": m.activation,
          "peak_rss_mib": peak_rss_mib()}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  sub = p.add_subparsers(dest="what", required=True)
  rt = sub.add_parser("round-trip", help="export, import, compare; fine-tune the import")
  rt.add_argument("--workdir", required=True)
  rt.add_argument("--checkpoint", default="best")
  rt.add_argument("--sentences", type=int, default=1000)
  rt.add_argument("--fine-tune-minutes", type=float, default=0.0)
  rt.add_argument("--fine-tune-override", action="append", default=[],
                  help="a train.py override for the fine-tuning (repeatable)")
  shape = sub.add_parser("opus-shape", help="a model of OPUS-MT en-de's shape, imported")
  shape.add_argument("--output", required=True)
  shape.add_argument("--layers", type=int, default=6)
  shape.add_argument("--d-model", type=int, default=512)
  shape.add_argument("--heads", type=int, default=8)
  shape.add_argument("--d-ff", type=int, default=2048)
  shape.add_argument("--force", action="store_true")
  add_results_flag(p)
  args = p.parse_args()
  result = round_trip(args) if args.what == "round-trip" else opus_shape(args)
  report(args.results, {**machine(), "what": args.what, **result})


if __name__ == "__main__":
  main()
