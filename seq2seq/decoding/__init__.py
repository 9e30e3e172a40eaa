"""Decoding: searches over a `tokens_to_logits` function, the model's searches, and the
two engines that run them on text behind one contract.

    engine.py        the `Engine` contract the layers above use, and the half both share
    engines.py       `load_engine`: the JAX engine of a run or CTranslate2's of an export
    decode.py        greedy search, sampling and beam search (model-agnostic)
    glossary.py      glossaries: terms, the TSV file, which terms apply to a sentence
    term_placement.py glossary terms put in place of the model's words for their source terms
    agreement.py     the words around a placed term made to agree with it, by target language
    german.py        German's: article, contraction and adjective endings by the term's gender
    model_search.py  the searches over a `Model` or `Ensemble`, and forced decoding
    sentences.py     texts cut into sentences (and too-long ones into parts), joined back
    engine_io.py     what an engine takes (one SearchSettings) and gives (hypotheses, scores)
    mbr.py           minimum Bayes risk choice among candidates
    translator.py    `Translator`, the JAX engine: text in, detokenized text out
    loading.py       what a Translator is made of, read from run directories
    batching.py      ids sorted, padded and batched by length; batches searched on threads
    programs.py      the compiled searches of a model in this process, counted and logged
    program_store.py search programs exported once, loaded by later processes
    ct2_engine.py    the CTranslate2 engine, over a model exported to it
    attention.py     one sentence's cross-attention weights (`Engine.align`), their heatmap
"""
