"""The native API's bodies (seq2seq/serving/native_api.py), read and checked without a
server: the fields of /translate with their limits and the run's defaults, and the page's
first search."""

import pytest

from seq2seq.decoding.engine import EngineLimits
from seq2seq.decoding.engine_io import SearchSettings
from seq2seq.serving.http_api import Limits, RequestError
from seq2seq.serving.native_api import PAGE, page_settings, parse_request

from helpers import ROOT

LIMITS = Limits(max_texts=3, max_chars=20, max_beam=4)
DEFAULTS = SearchSettings(beam_size=2, alpha=0.6)
JAX = EngineLimits(100, 100, glossary=True, attention=True)
CT2 = EngineLimits(100, 100)


def refused(body, status, words):
  with pytest.raises(RequestError) as e:
    parse_request(body, LIMITS, DEFAULTS, JAX)
  assert e.value.status == status and words in str(e.value), str(e.value)


def test_a_request_takes_the_run_s_defaults_and_its_own_settings():
  got = parse_request({"text": "A dog."}, LIMITS, DEFAULTS, JAX)
  assert got.texts == ["A dog."] and got.single
  assert got.settings == SearchSettings(beam_size=2, alpha=0.6) and got.prefixes is None
  got = parse_request({"texts": ["a", "b"], "beam_size": 4, "alpha": 1, "nbest": 2,
                       "prefixes": ["x", ""]}, LIMITS, DEFAULTS, JAX)
  assert got.settings == SearchSettings(4, 1.0, 2) and got.prefixes == ["x", ""]


@pytest.mark.parametrize("body, status, words", [
    ([], 400, "a JSON object"),
    ({"text": "a", "colour": 1}, 422, 'unknown field(s) "colour"'),
    ({"text": "a", "texts": ["b"]}, 422, "exactly one of"),
    ({"text": 3}, 422, '"text" must be a string'),
    ({"texts": []}, 422, '"texts" is empty'),
    ({"texts": ["a"] * 4}, 413, "4 texts in one request; at most 3"),
    ({"text": "x" * 21}, 413, "20"),
    ({"text": "a", "beam_size": 5}, 422, "beam_size"),
    ({"text": "a", "beam_size": True}, 422, "beam_size"),
    ({"text": "a", "nbest": 3}, 422, "nbest"),
    ({"texts": ["a"], "prefix": "x"}, 422, 'use "prefix" with "text"'),
    ({"texts": ["a", "b"], "prefixes": ["x"]}, 422, "1 prefixes for 2 texts"),
    ({"text": "a", "attention": "yes"}, 422, "attention must be true or false"),
    ({"texts": ["a"], "attention": True}, 422, "attention needs"),
    ({"text": "a", "sampling": {"temperature": 1, "colour": 2}}, 422, "unknown sampling"),
    ({"text": "a", "sampling": 1}, 422, "sampling must be an object"),
])
def test_a_bad_request_gets_its_status_and_names_the_field(body, status, words):
  refused(body, status, words)


def test_sampling_allows_an_n_best_up_to_the_beam_limit():
  got = parse_request({"text": "a", "sampling": {"seed": 3}, "nbest": 4}, LIMITS, DEFAULTS, JAX)
  assert got.settings.sampling.seed == 3 and got.settings.nbest == 4


def test_a_glossary_field_becomes_the_request_s_glossary_or_a_4xx():
  got = parse_request({"text": "A dog.", "glossary": {"dog": "Hund|Hunde"}}, LIMITS, DEFAULTS, JAX)
  assert [(t.source, t.targets) for t in got.settings.glossary.terms] == [("dog", ("Hund", "Hunde"))]
  refused({"text": "a", "glossary": {"dog": "Hund"}, "prefix": "Ein"}, 422,
          "goes with beam search")
  with pytest.raises(RequestError) as e:
    parse_request({"text": "A dog.", "glossary": {"dog": "Hund"}}, LIMITS, DEFAULTS, CT2)
  assert e.value.status == 422 and "needs the JAX engine" in str(e.value)




def test_the_page_s_first_search_is_what_its_form_asks_and_what_parsing_makes():
  """The server warms what the page at / asks for first: PAGE is the page's default beam
  and alternatives, and page_settings is what its request is read into."""
  page = (ROOT / "seq2seq/serving/static/index.html").read_text()
  assert f'id="beam" type="number" min="1" max="16" value="{PAGE["beam_size"]}"' in page
  assert f'id="nbest" type="number" min="0" max="16" value="{PAGE["nbest"]}"' in page
  body = {"texts": ["A dog."], "beam_size": PAGE["beam_size"], "nbest": PAGE["nbest"]}
  wide = Limits(max_beam=16)
  assert page_settings(DEFAULTS) == parse_request(body, wide, DEFAULTS, JAX).settings
