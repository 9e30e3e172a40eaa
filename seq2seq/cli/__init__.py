"""The command lines (`train.py`, `seq2seq-train`, ...): argument parsing only, the work
is in the library.

    parsing.py    what every command line shares: flags, config overrides, errors
    train.py      seq2seq-train
    translate.py  seq2seq-translate
    evaluate.py   seq2seq-evaluate
    average.py    seq2seq-average
    serve.py      seq2seq-serve
    export.py     seq2seq-export
    push.py       seq2seq-push
    import_model.py  seq2seq-import
"""
