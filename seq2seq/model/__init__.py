"""The Transformer in Haiku: layers, masks, the encoder-decoder, its KV cache, ensembles.

    layers.py       dense, layer norm, embedding + positions, attention, feed-forward
    masks.py        attention masks from token ids (True = may attend)
    kv_cache.py     the decoder's self-attention cache: layouts, reordering, attention
    transformer.py  `Transformer` (teacher-forced) and `Model`: the `hk.multi_transform`
    incremental.py  the decoder one token at a time, in the layouts decoding runs fast in
    ensemble.py     several models as one: the mean of their log-probabilities
    flops.py        the architecture's FLOPs

The model sees token ids, never the tokenizer, and computes its products through one
`seq2seq.numerics.Numerics`.
"""

from seq2seq.model.ensemble import Ensemble
from seq2seq.model.transformer import Model, count_params, shift_right

__all__ = ["Ensemble", "Model", "count_params", "shift_right"]
