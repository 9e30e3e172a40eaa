"""Score a run: python evaluate.py --workdir RUN_DIR --src test.en --ref test.de [--beam 5]
(or --split test_2016_flickr). The logic lives in seq2seq/cli/evaluate.py.
"""

from seq2seq.cli.evaluate import main

if __name__ == "__main__":
  main()
