"""Every route of the OpenAPI description fuzzed with schemathesis against seq2seq-serve
on the tiny run: valid and invalid bodies, parameters and headers of each operation; no
answer is a 5xx, and each is one the description declares (status, content type and
schema)."""

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi import checks as openapi_checks

from seq2seq import __version__
from seq2seq.serving.http_api import Limits
from seq2seq.serving.openapi import openapi

from serve_helpers import start_server, stop_server

# The server's limits, as its flags set them: small, so that fuzzing reaches them.
LIMITS = Limits(max_texts=4, max_chars=200, max_body=4000, max_beam=4, read_timeout_s=5.0)
SCHEMA = schemathesis.openapi.from_dict(openapi(LIMITS, "jax", __version__,
                                                {"source": "en", "target": "de"}))
CHECKS = [schemathesis.checks.not_a_server_error, openapi_checks.status_code_conformance,
          openapi_checks.content_type_conformance, openapi_checks.response_schema_conformance]


@pytest.fixture(scope="module")
def url(trained_run):
  proc, url = start_server("--workdir", trained_run, "--max-texts", "4", "--max-chars", "200",
                           "--max-body", "4000", "--max-beam", "4", "--read-timeout-s", "5",
                           "--beam", "2")
  yield url
  stop_server(proc)


def test_the_description_names_every_route_the_server_serves(trained_run):
  from seq2seq.serving.http_server import create_app
  app = create_app(None, LIMITS, {}, load=lambda: None)
  served = {route.path for route in app.routes}
  assert served == set(SCHEMA.raw_schema["paths"])


@SCHEMA.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_every_route_answers_as_described_and_never_with_a_5xx(case, url):
  case.call_and_validate(base_url=url, checks=CHECKS, timeout=120)
