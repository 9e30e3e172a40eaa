"""A run directory: its config, SentencePiece model, atomic checkpoints and model card.
Training writes it; evaluation, translation, serving and export read it.

    checkpoint.py  self-describing run directories, orbax checkpoints, averaging
    model_card.py  the run's README.md
"""
