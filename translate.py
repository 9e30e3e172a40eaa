"""Translate text: python translate.py --workdir RUN_DIR [--beam 5] < input.en > output.de

One output line per input line; logs go to stderr. The logic lives in
seq2seq/cli/translate.py and seq2seq/decoding/translator.py.
"""

from seq2seq.cli.translate import main

if __name__ == "__main__":
  main()
