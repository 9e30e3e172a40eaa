"""A run directory: its config, SentencePiece model, atomic checkpoints and model card.
Training writes it; evaluation, translation, serving and export read it.

    run_files.py          a run directory's config.json and tokenizer, read and written
    checkpoint.py         its checkpoints: saved, restored, found by kind, their params read
    atomic_checkpoints.py checkpoints written atomically (orbax), CRCs, a killed write recovered
    averaging.py          the last K checkpoints averaged into 'averaged'
    model_card.py         the run's README.md
    ctranslate2_model.py  a run as a CTranslate2 model directory: writer and reader
    argos_package.py      a run as an Argos Translate package (LibreTranslate installs it)
    minisbd_splitter.py   the sentence splitter an Argos package ships, in MiniSBD's format
    languages.py          languages' English names, as LibreTranslate and Argos show them
    hub.py                runs and exports on the Hugging Face Hub: download, upload
    lock.py               one writer at a time in a run directory
    model_formats.py      readers of other tools' models: Marian, Hugging Face, CTranslate2
    importing.py          a model trained elsewhere as a run directory (seq2seq-import)
"""
