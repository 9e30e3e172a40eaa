"""Multi30k's six English-centred directions in one model, one hour on 2 CPU cores.

  python train.py --config multi30k_multilingual --workdir runs/m30k-ml
  python evaluate.py --workdir runs/m30k-ml --split test_2016_flickr --checkpoint averaged \
      --src-lang en --tgt-lang fr

English<->German, English<->French and English<->Czech from the same 29,000 captions
(`../shared/data/multi30k`, or $SEQ2SEQ_MULTI30K: train, val and test_2016_flickr in the
four languages), each source led by its target language's token. The settings are the
bilingual recipe's (configs/multi30k.py), but for the vocabulary (four languages share
it) and validation (each direction's first 200 sentences, every 1,000 updates). The
benchmark against six bilingual runs is docs/multilingual.md's table.
"""

from seq2seq import recipes


def get_config(folder: str | None = None):
  cfg = recipes.load_config_module("multi30k")[0].get_config(folder)
  cfg.data.directions = "en-de,de-en,en-fr,fr-en,en-cs,cs-en"
  cfg.model.vocab_size = 12000  # four languages: 3,000 pieces each (8,000 for two)
  cfg.train.eval_every = 1000  # six directions' greedy BLEU: 1,200 sentences
  cfg.train.eval_max_sentences = 200  # per direction
  return cfg
