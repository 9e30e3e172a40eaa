"""Reading what a Translator is made of: a run directory (config, tokenizer, parameters
of a checkpoint), or several of one vocabulary as an ensemble.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple, Sequence

from seq2seq.config import ENGINES, Config, ModelConfig
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.rundir import checkpoint, run_files


class Run(NamedTuple):
  config: Config
  params: Any
  tokenizer: Tokenizer
  ensemble: list[tuple[ModelConfig, Any]]  # the further members: (model config, params)


def workdir_list(workdir: str | os.PathLike | Sequence[str | os.PathLike], engine: str,
                 checkpoint_name: str) -> list:
  """The run directories of a load, checked against the engine."""
  workdirs = [workdir] if isinstance(workdir, (str, os.PathLike)) else list(workdir)
  if not workdirs:
    raise ValueError("no run directory given")
  if engine not in ENGINES:
    raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
  if engine == "ctranslate2":
    if len(workdirs) > 1:
      raise ValueError("ensembles need the JAX engine (--engine jax)")
    if checkpoint_name != "best":
      raise ValueError("an exported model holds one checkpoint, chosen at export "
                       "(seq2seq-export --checkpoint); --checkpoint is for the JAX engine")
  return workdirs


def read_run(workdirs: Sequence, checkpoint_name: str = "best") -> Run:
  """The first run's config, tokenizer and parameters, and the other runs' as ensemble
  members (all must share the first run's SentencePiece model and directions)."""
  cfg: Config = run_files.load_config(workdirs[0])
  tok = run_files.load_tokenizer(workdirs[0])
  params, _ = checkpoint.load_params(workdirs[0], checkpoint_name, cfg.model)
  ensemble = []
  for other in workdirs[1:]:
    other_tok = run_files.load_tokenizer(other)
    if other_tok.fingerprint() != tok.fingerprint():
      raise checkpoint.CheckpointError(
          f"{other} and {workdirs[0]} have different SentencePiece models (fingerprints "
          f"{other_tok.fingerprint()} and {tok.fingerprint()}): an ensemble needs one "
          "shared vocabulary (train with --config.data.spm_model=FIRST_RUN/spm.model)")
    other_cfg = run_files.load_config(other)
    if other_cfg.data.direction_pairs() != cfg.data.direction_pairs():
      listed = lambda c: ", ".join(f"{s}-{t}" for s, t in c.data.direction_pairs())
      raise checkpoint.CheckpointError(
          f"{other} translates {listed(other_cfg)} but {workdirs[0]} {listed(cfg)}: the "
          "runs of an ensemble translate the same directions")
    ensemble.append((other_cfg.model,
                     checkpoint.load_params(other, checkpoint_name, other_cfg.model)[0]))
  return Run(cfg, params, tok, ensemble)
