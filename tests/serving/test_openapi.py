"""The OpenAPI document (seq2seq/serving/openapi.py): both dialects' routes, with the
server's limits and the document formats of the registry."""

import json

from seq2seq.documents.formats import EXTENSIONS
from seq2seq.serving.http_api import Limits
from seq2seq.serving.openapi import openapi

LIMITS = Limits(max_texts=3, max_chars=20, max_beam=4)


def test_openapi_describes_the_translate_body_with_the_limits():
  doc = openapi(LIMITS, "jax", "0.0", {"source": "en", "target": "de"})
  assert doc["openapi"].startswith("3.")
  text = json.dumps(doc)
  for route in ("/translate", "/languages", "/health", "/translate_file"):
    assert route in doc["paths"], route
  body = doc["paths"]["/translate"]["post"]["requestBody"]["content"]["application/json"]
  fields = body["schema"]["properties"]
  assert fields["texts"]["maxItems"] == 3 and fields["beam_size"]["maximum"] == 4
  assert fields["sampling"]["additionalProperties"] is False and "Translation from en" in text


def test_the_file_route_names_every_format_of_the_registry():
  doc = openapi(LIMITS, "jax", "0.0")
  summary = doc["paths"]["/translate_file"]["post"]["summary"]
  assert all(extension in summary for extension in EXTENSIONS)
