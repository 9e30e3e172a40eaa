"""`train.py` / `seq2seq-train`: train a model, or resume the run in --workdir."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from pathlib import Path

from seq2seq import recipes, runtime
from seq2seq.cli import parsing
from seq2seq.data import textfiles, tokenizer
from seq2seq.rundir import checkpoint, lock
from seq2seq.training import distributed


def parser(prog: str) -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
      usage=f"{prog} --config NAME|FILE[:ARG] --workdir DIR [--config.SECTION.FIELD=VALUE ...]",
      description="Train a translation model (re-running the same command resumes from DIR).",
      epilog=parsing.config_epilog())
  p.add_argument("--config", metavar="NAME|FILE[:ARG]",
                 help=f"a preset ({', '.join(recipes.presets())}: --list-presets says "
                 "what each is) or a .py file with "
                 "get_config(); NAME:ARG passes ARG to get_config (multi30k:FOLDER reads "
                 "Multi30k there). Then --config.SECTION.FIELD=VALUE overrides one field, "
                 "e.g. --config.train.max_steps=2000; overriding data.dir or data.hub "
                 "replaces the config's data source")
  p.add_argument("--workdir", help="run directory: config, tokenizer, checkpoints, "
                 "metrics.jsonl (created)")
  p.add_argument("--list-presets", action="store_true",
                 help="list the names --config takes, each with what it is, and exit")
  p.add_argument("--print-config", action="store_true",
                 help="print the config that --config and the overrides resolve to, as "
                 "JSON, and exit without training (--workdir not needed; --config auto "
                 "chooses its fields only when it trains)")
  cluster = p.add_argument_group(
      "several processes (one per host or GPU; docs/training.md); without these flags, "
      "SLURM / Open MPI / Cloud TPU jobs are detected by JAX itself")
  cluster.add_argument("--coordinator-address", "--coordinator_address", metavar="HOST:PORT",
                       help="process 0's address, the same for every process")
  cluster.add_argument("--num-processes", "--num_processes", type=int, metavar="N",
                       help="processes in the cluster")
  cluster.add_argument("--process-id", "--process_id", type=int, metavar="I",
                       help="this process's index in [0, N)")
  cluster.add_argument("--local-device-ids", "--local_device_ids", metavar="0,1",
                       help="the devices of this host that this process uses (default: all)")
  return p


def main(argv=None) -> None:
  argv = sys.argv if argv is None else argv
  prog = Path(argv[0]).name
  p = parser(prog)
  try:
    rest, overrides = parsing.split_overrides(argv[1:])
  except ValueError as e:
    parsing.usage_error(prog, e)
  args = p.parse_args(rest)
  if args.list_presets:
    presets = recipes.presets()
    width = max(map(len, presets))
    print("\n".join(f"{name:<{width}}  {what}" for name, what in presets.items()))
    return
  if args.print_config:
    if args.config is None:
      parsing.usage_error(prog, "--print-config needs --config")
    try:
      cfg = recipes.training_config(args.config, overrides, complete=False)
      print(json.dumps(cfg.to_dict(), indent=2))
    except (ValueError, TypeError) as e:
      parsing.usage_error(prog, e)
    return
  if args.config is None or args.workdir is None:
    parsing.usage_error(prog, "--config and --workdir are required (--help lists the options)")
  try:
    devices = ([int(i) for i in args.local_device_ids.split(",")]
               if args.local_device_ids else None)
    cfg_module, _ = recipes.load_config_module(args.config)
    if not hasattr(cfg_module, "complete"):  # checked before the cluster starts
      cfg = recipes.training_config(args.config, overrides)
  except (ValueError, TypeError) as e:
    parsing.usage_error(prog, e)
  runtime.quiet_libraries()
  try:
    distributed.initialize(args.coordinator_address, args.num_processes, args.process_id,
                           devices)
  except ValueError as e:
    parsing.usage_error(prog, e)
  from seq2seq.training.trainer import train  # JAX's backend starts only after the cluster is set

  # Held before the automatic recipe writes its plan: one writer per run directory.
  writer = (lock.training_lock(args.workdir) if distributed.is_primary()
            else contextlib.nullcontext())
  try:
    with writer:
      if hasattr(cfg_module, "complete"):  # it measures the machine: after the cluster
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
        runtime.setup_run_logging(Path(args.workdir), to_file=distributed.is_primary())
        cfg = recipes.training_config(args.config, overrides, args.workdir)
      summary = train(cfg, args.workdir)
  except lock.RunLocked as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  except (textfiles.DataError, checkpoint.CheckpointError, tokenizer.TokenizerMismatchError,
          FloatingPointError, ValueError) as e:
    logging.getLogger("seq2seq").error("%s", e)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  if distributed.is_primary():
    print(json.dumps(summary))


if __name__ == "__main__":
  main()
