"""Train a translation model: python train.py --config tiny --workdir runs/tiny

Re-running the same command resumes. Override any field on the command line, e.g.
--config.train.max_steps=2000. The logic lives in seq2seq/cli/train.py and
seq2seq/training/trainer.py.
"""

from seq2seq.cli.train import main

if __name__ == "__main__":
  main()
