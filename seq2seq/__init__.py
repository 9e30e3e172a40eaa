"""seq2seq: English-German Transformer translation in JAX and Haiku.

Public API:
  Translator   load a trained run directory and translate text (`Translator.load(RUN_DIR)`).
  train        train (or resume) a run: `seq2seq.train("tiny", "runs/tiny")`, as train.py.
  Config       typed configuration (model, data, train, decode).

Shape glossary (tensor names end in these letters, einsums use them too):
  B batch, S source length, T target length, D model width, H heads,
  K head width, F feed-forward width, V vocabulary, W beam width, L cache length.
"""

from seq2seq.config import Config, ModelConfig
from seq2seq.version import __version__

__all__ = ["Config", "ModelConfig", "Translator", "__version__", "train"]


def __getattr__(name):
  # Imported lazily so that `import seq2seq` stays cheap for the config-only users.
  if name == "Translator":
    from seq2seq.decoding.translator import Translator
    return Translator
  if name == "train":  # training code, loaded only by those who train
    from seq2seq.training.trainer import train
    return train
  raise AttributeError(name)
