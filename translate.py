"""Translate text: python translate.py --workdir RUN_DIR [--beam 5] < input.en > output.de

One output line per input line; logs go to stderr. The logic lives in
seq2seq/translate_cli.py and seq2seq/translator.py.
"""

from seq2seq.translate_cli import main

if __name__ == "__main__":
  main()
