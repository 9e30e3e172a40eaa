"""Special token ids, defined once; this module imports nothing.

Padding (0) is distinct from `<unk>` (1), so no code mistakes an unknown piece for
padding. The tokenizer trains SentencePiece with these ids; the model and the masks
read them from here; the search functions take them as arguments.
"""

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
# An output bias at or below this closes its row: a token the model never predicts (an
# imported model's rows for special tokens its source had not, rundir/importing.py).
# Label smoothing spreads its mass over the open rows only (training/loss.py).
CLOSED_BIAS = -1e9


def cut_at_eos(ids) -> list[int]:
  """The ids before the first EOS (all of them without one), with PAD and BOS left out."""
  out = []
  for i in ids:
    i = int(i)
    if i == EOS_ID:
      break
    if i not in (PAD_ID, BOS_ID):
      out.append(i)
  return out


def truncate_keeping_eos(ids, max_len: int):
  """At most `max_len` ids ending in EOS: `ids` itself when it is short enough, else a
  list of its first `max_len - 1` ids and EOS."""
  if len(ids) <= max_len:
    return ids
  return [int(i) for i in ids[:max_len - 1]] + [EOS_ID]
