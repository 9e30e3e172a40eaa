"""The translation service (seq2seq/serving/service.py) over stand-in engines, without
HTTP: routes direct and through the pivot, the settings on the last hop only, what goes
with one model only refused by its type, the server's glossary under a request's, the
engine's limits checked before a batch, detection, and what is warmed before ready."""

import asyncio

import pytest

from seq2seq.decoding.engine import EngineLimits
from seq2seq.decoding.engine_io import Hypothesis, SearchSettings
from seq2seq.decoding.glossary import Glossary
from seq2seq.serving.dynamic_batching import Metrics
from seq2seq.serving.http_api import Limits, RequestError
from seq2seq.serving.service import OneDirectionOnly, TranslationService


class Tagging:
  """Translates a text into "TARGET:text"; with nbest, that and "TARGET:text #k"; a text
  of "too long" is beyond its limits. Records each call's settings."""

  def __init__(self, source: str, target: str):
    self.directions = ((source, target),)
    self.defaults = SearchSettings(beam_size=2)
    self.limits = EngineLimits(100, 100, glossary=True, attention=True)
    self.calls, self.warmed = [], None

  def describe(self):
    return {"engine": "tagging"}

  def check(self, texts, prefixes=None):
    if "too long" in texts:
      raise ValueError("text 0 is too long for this model")

  def translate(self, texts, settings, prefixes=None, first_index=0):
    self.calls.append((list(texts), settings, prefixes))
    target = self.directions[0][1]
    if not settings.nbest:
      return [f"{target}:{t}" for t in texts]
    return [[Hypothesis(f"{target}:{t}" + (f" #{k}" if k else ""), -float(k), [])
             for k in range(settings.nbest)] for t in texts]

  def warm_up(self, max_batch, longest=64, also=()):
    self.warmed = list(also)


def serve(glossary=None):
  engines = {pair: Tagging(*pair) for pair in (("en", "de"), ("de", "en"), ("en", "fr"))}
  service = TranslationService(Limits(max_batch=8), Metrics(), workers=1, glossary=glossary)
  return service, engines


def run(service, engines, coroutine_of):
  async def main():
    service.ready([(f"{s}-{t}", e) for (s, t), e in engines.items()])
    try:
      return await coroutine_of(service)
    finally:
      await service.stop()
  return asyncio.run(main())


def test_a_direct_request_goes_to_its_model_and_a_pivot_through_english():
  service, engines = serve()

  async def ask(s):
    direct = await s.translate(["Hallo"], s.routing("de", "en", ["Hallo"]),
                               engines["de", "en"].defaults)
    routing = s.routing("de", "fr", ["Hallo"])
    pivot = await s.translate(["Hallo"], routing, routing.engine.defaults.changed(nbest=2))
    return direct, pivot, routing
  direct, pivot, routing = run(service, engines, ask)
  assert direct.translations == ["en:Hallo"] and direct.alternatives is None
  assert routing.model is None and routing.names() == ["de→en→fr"]
  assert pivot.translations == ["fr:en:Hallo"]
  assert [h.text for h in pivot.alternatives[0]] == ["fr:en:Hallo", "fr:en:Hallo #1"]
  # the n-best on the last hop only; the first searched with its own defaults
  assert engines["de", "en"].calls[-1][1].nbest == 0
  assert engines["en", "fr"].calls[-1][1].nbest == 2


def test_what_goes_with_one_model_is_refused_through_a_pivot_by_its_type():
  service, engines = serve()
  glossary = SearchSettings(beam_size=2, glossary=Glossary.of({"Hund": "chien"}))

  async def ask(s):
    routing = s.routing("de", "fr", ["Hund"])
    refused = []
    for call in (lambda: s.translate(["Hund"], routing, glossary),
                 lambda: s.translate(["Hund"], routing, routing.engine.defaults, ["Le"]),
                 lambda: s.translate_html(["<p>Hund</p>"], routing),
                 lambda: s.attention("Hund", routing, 2)):
      with pytest.raises(OneDirectionOnly) as e:
        await call()
      refused.append(e.value.what)
    return refused
  assert run(service, engines, ask) == ["a glossary goes", "prefixes and glossaries go",
                                        "format html goes", "attention goes"]
  with pytest.raises(OneDirectionOnly, match="documents go with one model's direction"):
    run(service, engines, lambda s: asyncio.sleep(0, s.document_routing("de", "fr")))


def test_the_server_s_glossary_goes_under_a_request_s_but_not_with_sampling():
  from seq2seq.decoding.engine_io import Sampling
  service, engines = serve(glossary=Glossary.of({"dog": "Hund", "cat": "Katze"}))
  own = Glossary.of({"dog": "Köter"})

  async def ask(s):
    routing = s.routing("en", "de", ["A dog."])
    await s.translate(["A dog."], routing, SearchSettings(beam_size=2, glossary=own))
    await s.translate(["A dog."], routing, SearchSettings(sampling=Sampling(seed=1)))
  run(service, engines, ask)
  (_, merged, _), (_, sampled, _) = engines["en", "de"].calls
  assert {t.source: t.targets for t in merged.glossary.terms} == {
      "dog": ("Köter",), "cat": ("Katze",)}
  assert sampled.glossary is None


def test_a_text_beyond_the_engine_s_limits_is_a_422_before_it_joins_a_batch():
  service, engines = serve()

  async def ask(s):
    with pytest.raises(RequestError) as e:
      await s.translate(["fine", "too long"], s.routing("en", "de", ["fine", "too long"]),
                        SearchSettings())
    return e.value
  error = run(service, engines, ask)
  assert error.status == 422 and "too long" in str(error)
  assert engines["en", "de"].calls == []


def test_auto_detects_each_text_and_a_pair_not_served_is_a_400_naming_it():
  service, engines = serve()
  texts = ["A man is riding a bicycle down the street.", "Ein Mann fährt mit dem Fahrrad."]

  async def ask(s):
    routing = s.routing("auto", "fr", texts)
    return routing, await s.translate(texts, routing, SearchSettings())
  routing, found = run(service, engines, ask)
  assert [code for code, _ in routing.detected] == ["en", "de"]
  assert found.translations == [f"fr:{texts[0]}", f"fr:en:{texts[1]}"]
  with pytest.raises(RequestError, match="cs is not supported"):
    run(service, engines, lambda s: asyncio.sleep(0, s.routing("en", "cs", ["a"])))


def test_warming_compiles_what_the_clients_ask_first_and_health_lists_it():
  service, engines = serve()
  named = [(f"{s}-{t}", e) for (s, t), e in engines.items()]
  service.warm_up(named, [("the page", lambda d: d.changed(beam_size=5, nbest=3)),
                          ("the same as the defaults", lambda d: d)])
  assert engines["en", "de"].warmed == [SearchSettings(beam_size=5, nbest=3)]
  assert service.health()[0] == 503
  status, body = run(service, engines, lambda s: asyncio.sleep(0, s.health()))
  assert status == 200 and body["status"] == "ready"
  page = [w for w in body["warm"] if w["for"] == "the page"]
  assert len(page) == 3 and {(w["beam_size"], w["nbest"]) for w in page} == {(5, 3)}
