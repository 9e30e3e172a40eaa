"""A run directory: its config, SentencePiece model, atomic checkpoints and model card.
Training writes it; evaluation, translation, serving and export read it.

    checkpoint.py         self-describing run directories, orbax checkpoints, averaging
    model_card.py         the run's README.md
    ctranslate2_model.py  a run as a CTranslate2 model directory: writer and reader
    hub.py                runs and exports on the Hugging Face Hub: download, upload
    lock.py               one writer at a time in a run directory
    model_formats.py      readers of other tools' models: Marian, Hugging Face, CTranslate2
    importing.py          a model trained elsewhere as a run directory (seq2seq-import)
"""
