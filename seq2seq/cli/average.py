"""Average the last K checkpoints of a run: python -m seq2seq.cli.average --workdir RUN --last 5

`--upto STEP` averages the last K checkpoints written at or before STEP instead (what the
run would have averaged had it stopped there; keep enough with train.keep_checkpoints).

Writes RUN/checkpoints/averaged/STEP, which evaluate.py and translate.py load with
--checkpoint averaged.
"""

import argparse
import sys

from seq2seq.cli import parsing
from seq2seq.rundir import averaging, checkpoint, lock, run_files
from seq2seq.runtime import setup_cli_logging


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                   formatter_class=parsing.HelpFormatter)
  parser.add_argument("--workdir", required=True, help="run directory written by train.py")
  parser.add_argument("--last", type=int, default=5,
                      help="how many of the latest checkpoints to average (into 'averaged')")
  parser.add_argument("--upto", type=int, default=None, metavar="STEP",
                      help="average the last K checkpoints at or before this step")
  args = parser.parse_args(argv)
  setup_cli_logging()
  try:
    cfg = run_files.load_config(args.workdir)
    # a writer of the run, as the trainer is: never at the same time (RunLocked names it)
    with lock.training_lock(args.workdir):
      path = averaging.average(args.workdir, args.last, cfg.model, args.upto)
  except (checkpoint.CheckpointError, lock.RunLocked) as e:
    sys.exit(f"error: {e}")
  print(path)


if __name__ == "__main__":
  main()
