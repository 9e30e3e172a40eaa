"""seq2seq: English-German Transformer translation in JAX and Haiku.

Public API:
  Translator   load a trained run directory and translate text (`Translator.load(RUN_DIR)`).
  load_engine  the JAX engine of a run, or the CTranslate2 engine of an export
               (`load_engine(EXPORT_DIR, "ctranslate2")`): the same `Engine` contract.
  train        train (or resume) a run: `seq2seq.train("tiny", "runs/tiny")`, as train.py.
  import_model a model trained elsewhere (OPUS-MT, Hugging Face Marian, CTranslate2, Argos)
               as a run directory: `seq2seq.import_model("opus-mt-en-de", "runs/opus")`.
  Config       typed configuration (model, data, train, decode).

Shape glossary (tensor names end in these letters, einsums use them too):
  B batch, S source length, T target length, D model width, H heads,
  K head width, F feed-forward width, V vocabulary, W beam width, L cache length.
"""

from seq2seq.config import Config, ModelConfig
from seq2seq.version import __version__

__all__ = ["Config", "ModelConfig", "Translator", "__version__", "import_model", "load_engine",
           "train"]


def __getattr__(name):
  # Imported lazily so that `import seq2seq` stays cheap for the config-only users.
  if name == "Translator":
    from seq2seq.decoding.translator import Translator
    return Translator
  if name == "load_engine":
    from seq2seq.decoding.engines import load_engine
    return load_engine
  if name == "import_model":
    from seq2seq.rundir.importing import import_model
    return import_model
  if name == "train":  # training code, loaded only by those who train
    from seq2seq.training.trainer import train
    return train
  raise AttributeError(name)
