"""Data: parallel text files and data sets, cleaning, SentencePiece, the encoded corpus,
several directions in one run, and length-bucketed batches.

    textfiles.py         lines of plain or gzipped files, pairs, their errors
    data_source.py       where a split's pairs come from (files, folders, the Hub)
    cleaning.py          the training pairs cleaned, with a report
    tokenizer.py         SentencePiece: train, load, encode, decode
    subword_sampling.py  subword regularization with the project's own random generator
    training_data.py     a run's data, of one pair or several directions: the entry point
    corpus.py            one pair's training data: cleaned, held out, encoded, cached
    multilingual.py      several directions: each direction's data, language tokens, the
                         balanced vocabulary sample, the temperature's draw
    input_pipeline.py    encoded pairs -> bucketed (or packed) batches, resumable
"""
