"""A model of several directions (data.directions): each direction asked for by its
target language's token, from one engine, with the features of a bilingual one."""

import logging

import numpy as np
import pytest
import sacrebleu

from seq2seq import Translator
from seq2seq.data.textfiles import read_lines
from seq2seq.decoding.engine_io import Sampling
from seq2seq.decoding.glossary import Glossary

from helpers import SAMPLE

EN, DE, FR = (read_lines(SAMPLE / f"test.{lang}")[:12] for lang in ("en", "de", "fr"))
REFS = {"en": EN, "de": DE, "fr": FR}


@pytest.fixture(scope="module")
def engine(trained_multilingual):
  return Translator.load(trained_multilingual)


def chrf(hyps, refs) -> float:
  return sacrebleu.corpus_chrf(hyps, [refs]).score


def test_each_direction_translates_into_the_language_its_token_asks_for(engine):
  assert engine.directions == (("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en"))
  for src, tgt in engine.directions:
    out = engine.translate(REFS[src], src_lang=src, tgt_lang=tgt)
    other = next(lang for lang in REFS if lang not in (src, tgt))
    # closer to the target's references than to the third language's, by far
    assert chrf(out, REFS[tgt]) > chrf(out, REFS[other]) + 20, (src, tgt, out[:2])
  assert engine.translate(EN, tgt_lang="de") != engine.translate(EN, tgt_lang="fr")


def test_tgt_lang_is_the_direction_s_view_and_the_token_before_the_ids(engine):
  view = engine.for_direction("en", "fr")
  assert view.languages == ("en", "fr") and engine.languages == ("en", "de")
  assert engine.translate(EN, tgt_lang="fr") == view.translate(EN)
  assert engine.for_direction(tgt="fr").languages == ("en", "fr")  # the trained source
  token = engine.tokenizer.language_token("fr")
  ids = [np.concatenate([[token], x]).astype(np.int32) for x in engine.encode(EN)]
  by_ids = [engine.detokenize(h[0][0]) for h in engine.translate_ids(ids)]
  assert by_ids == view.translate(EN, split_sentences=False)


def test_a_direction_s_translations_do_not_depend_on_the_batch(engine):
  view = engine.for_direction("de", "en")
  together = view.translate(DE, beam_size=3)
  assert [view.translate(x, beam_size=3) for x in DE] == together
  assert view.translate(DE, beam_size=3, batch_size=5) == together


def test_prefixes_nbest_sampling_and_scores_work_per_direction(engine):
  view = engine.for_direction("en", "fr")
  forced = view.translate(EN[:2], prefixes=["Trois", ""], beam_size=2)
  assert forced[0].startswith("Trois") and forced[1] == view.translate(EN[1], beam_size=2)
  nbest = view.translate(EN[:2], beam_size=3, nbest=3)
  assert [h[0].text for h in nbest] == view.translate(EN[:2], beam_size=3)
  drawn = view.translate(EN[:2], sampling=Sampling(temperature=1.0, seed=1))
  assert drawn == view.translate(EN[:2], sampling=Sampling(temperature=1.0, seed=1))
  # French references are likelier asked for in French than in German
  as_fr = view.score(EN, FR)
  as_de = engine.for_direction("en", "de").score(EN, FR)
  assert sum(s.logprob for s in as_fr) > sum(s.logprob for s in as_de)


def test_attention_leaves_out_the_language_token(engine):
  view = engine.for_direction("en", "fr")
  hyp = view.translate(EN[:1], nbest=1)[0][0]
  [alignment] = view.align(EN[:1], [hyp.ids])
  pieces = len(engine.tokenizer.encode(EN[:1])[0])
  assert alignment.weights.shape == (len(hyp.ids) + 1, pieces + 1)
  assert len(alignment.source_pieces) == pieces + 1
  assert "<2fr>" not in alignment.source_pieces


def test_an_untrained_pair_is_zero_shot_and_an_unknown_language_is_refused(engine, caplog):
  with caplog.at_level(logging.INFO):
    view = engine.for_direction("de", "fr")
  assert view.zero_shot and view.describe()["zero_shot"]
  assert any("de-fr was not trained (zero-shot)" in m for m in caplog.messages)
  assert len(view.translate(DE[:2])) == 2
  with pytest.raises(ValueError, match="does not translate en-cs: it was trained on en-de, "
                     r"de-en, en-fr, fr-en \(any two of en, de, fr zero-shot\)"):
    engine.translate(EN[0], tgt_lang="cs")
  with pytest.raises(ValueError, match="does not translate en-en"):
    engine.for_direction("en", "en")


def test_a_zero_shot_search_writes_only_its_target_language_s_pieces(trained_multilingual,
                                                                     engine):
  import json
  french = set(json.loads((trained_multilingual / "language_pieces.json").read_text())["fr"])
  german = read_lines(SAMPLE / "test.de")
  restricted = engine.for_direction("de", "fr").translate(german, nbest=1, beam_size=2)
  assert all(set(h[0].ids) <= french for h in restricted)
  free = Translator.load(trained_multilingual, zero_shot_pieces=False).for_direction("de", "fr")
  unrestricted = free.translate(german, nbest=1, beam_size=2)
  # off target without it: pieces of English (never in French training text) come out
  assert any(set(h[0].ids) - french for h in unrestricted)
  # a trained direction is searched as it always is
  trained = engine.for_direction("en", "fr")
  assert trained.vocab_bias() is None and free.for_direction("en", "fr").translate(EN) == \
      trained.translate(EN)


def test_an_ensemble_of_runs_with_the_same_directions_translates_each(trained_multilingual,
                                                                      engine):
  both = Translator.load([trained_multilingual, trained_multilingual])
  assert both.directions == engine.directions
  # the same parameters twice: the mean of equal log-probabilities, the same search
  assert both.translate(EN[:4], tgt_lang="fr") == engine.translate(EN[:4], tgt_lang="fr")


def test_an_ensemble_of_runs_of_other_directions_is_refused(trained_multilingual, tmp_path):
  import json
  import shutil

  from seq2seq.rundir.checkpoint import CheckpointError
  other = tmp_path / "three"
  shutil.copytree(trained_multilingual, other)
  config = json.loads((other / "config.json").read_text())
  config["data"]["directions"] = "en-de,de-en,en-fr"
  (other / "config.json").write_text(json.dumps(config))
  with pytest.raises(CheckpointError, match="translates en-de, de-en, en-fr but .* en-de, "
                                            "de-en, en-fr, fr-en: the runs of an ensemble"):
    Translator.load([trained_multilingual, other])


def test_a_glossary_places_its_terms_in_the_direction_asked_for(engine):
  view = engine.for_direction("en", "fr")
  texts = [t for t in EN if " dog" in t][:2] or EN[:2]
  term = "dog" if " dog" in texts[0] else texts[0].split()[1]
  out = view.translate(texts, beam_size=2, glossary=Glossary.of({term: "clébard"}))
  assert all("clébard" in y for y in out), out
