"""A recipe chosen for your corpus, your minutes and this machine.

  python train.py --config auto --workdir runs/mine --config.data.train_path=corpus.tsv \
      --config.train.max_minutes=180

After the overrides are applied, `complete` measures the training pairs (after
cleaning), their length and this machine's speed, and picks the model, vocabulary,
batch, regularisation, schedule and checkpoint averaging by the rules of docs/recipe.md
("The automatic recipe"). A field given on the command line is kept; the plan and its
reasons go to the log and to WORKDIR/recipe.json, which a resumed run reuses.
"""

from seq2seq.config import default_config
from seq2seq.training import auto_recipe


def get_config():
  return default_config("compact")


def complete(cfg, given, workdir):
  auto_recipe.complete(cfg, given, workdir)
