"""Average the last K checkpoints of a run: python -m seq2seq.average --workdir RUN --last 5

Writes RUN/checkpoints/averaged/STEP, which evaluate.py and translate.py load with
--checkpoint averaged.
"""

import argparse
import logging
import sys

from seq2seq import checkpoint


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--last", type=int, default=5, help="how many latest checkpoints")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
  from seq2seq.train_lib import quiet_libraries
  quiet_libraries()
  try:
    cfg = checkpoint.load_config(args.workdir)
    path = checkpoint.average(args.workdir, args.last, cfg.model)
  except checkpoint.CheckpointError as e:
    sys.exit(f"error: {e}")
  print(path)


if __name__ == "__main__":
  main()
