"""Average the last K checkpoints of a run: python -m seq2seq.average --workdir RUN --last 5

Writes RUN/checkpoints/averaged/STEP, which evaluate.py and translate.py load with
--checkpoint averaged.
"""

import argparse
import sys

from seq2seq import checkpoint
from seq2seq.runtime import setup_cli_logging


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  parser.add_argument("--workdir", required=True, help="run directory written by train.py")
  parser.add_argument("--last", type=int, default=5,
                      help="how many of the latest checkpoints to average (into 'averaged')")
  args = parser.parse_args(argv)
  setup_cli_logging()
  try:
    cfg = checkpoint.load_config(args.workdir)
    path = checkpoint.average(args.workdir, args.last, cfg.model)
  except checkpoint.CheckpointError as e:
    sys.exit(f"error: {e}")
  print(path)


if __name__ == "__main__":
  main()
